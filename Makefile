# etcdadm for immutable hosts. `make test` is the one test command (CI runs it).
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin

.PHONY: all build components test unit lint bench demo clean

all: build

build:
	$(GO) build -trimpath -o $(BIN)/ ./cmd/...

# Real etcd (3.5, 3.6, 3.7), MinIO and versitygw, built from the Go module
# proxy into ~/.cache/etcdadm (idempotent; minutes when cold, instant when cached).
components:
	bash images/components/install.sh all

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

test: components lint build
	$(GO) test -count=1 -timeout 60m ./...

bench: components build
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x -timeout 90m ./test/bench/...

demo: components build
	bash test/demo/demo.sh

clean:
	rm -rf $(BIN)
