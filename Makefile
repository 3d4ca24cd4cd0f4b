# etcdadm for immutable hosts. `make test` is the one test command (CI runs it).
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin

.PHONY: all build components images test unit lint bench soak demo demo-down demo-local clean

all: build

build:
	$(GO) build -trimpath -o $(BIN)/ ./cmd/...

# Real etcd (3.5, 3.6, 3.7), MinIO and versitygw, built from the Go module
# proxy into ~/.cache/etcdadm (idempotent; minutes when cold, instant when cached).
components:
	bash images/components/install.sh all

# systemd-sysext images for immutable hosts (etcd per version, etcdadm),
# SHA256SUMS and sysupdate transfer files, reproducibly, into
# ~/.cache/etcdadm/sysext (images/sysext/build.sh says more).
images: components
	bash images/sysext/build.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

test: components lint build
	$(GO) test -count=1 -parallel 4 -timeout 60m ./...

bench: components build
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x -timeout 90m ./test/bench/...

# The chaos soak: faults drawn from a fixed seed (ETCDADM_SOAK_SEED) for
# ETCDADM_SOAK_DURATION (30m) on nspawn masters under a client load whose
# history porcupine checks (needs root); make test runs 3 minutes of it.
soak: components build
	ETCDADM_SOAK_DURATION=$${ETCDADM_SOAK_DURATION:-30m} $(GO) test -count=1 -run '^TestChaosSoak$$' -v -timeout 120m ./test/e2e/

# A 3-master cluster in systemd-nspawn hosts from one Ignition config,
# backed up, left running (needs root); it prints the next steps (upgrade,
# replace a host, resize, restore) as test/demo/cluster.sh commands that
# work as printed. make demo-down removes it.
demo: components build
	bash test/demo/cluster.sh up

demo-down:
	bash test/demo/cluster.sh down

# One etcd on loopback: backup, verify, restore round trip (no root needed).
demo-local: components build
	bash test/demo/local.sh

clean:
	rm -rf $(BIN)
