#!/usr/bin/env bash
# Builds the real ignition-apply (Ignition's "apply a config to a root
# directory" mode) from the Go module proxy into the component cache. The e2e
# harness runs it against each test host's root before the host boots.
#
# Ignition has one main package, github.com/coreos/ignition/v2/internal, that
# picks its mode from argv[0]: the binary is built as bin/ignition-vX.Y.Z
# and bin/ignition-apply links to it. It uses cgo for libblkid, so Debian's
# libblkid-dev is installed with apt-get when missing.
#
# Idempotent: nothing is built when bin/ignition-apply already reports the
# pinned version. Usage: build.sh   (IGNITION_VERSION overrides the pin)
#
# Notes for callers (measured): ignition-apply refuses to run unless
# $container is set or /.dockerenv exists; use --root DIR --offline
# --ignore-unsupported; it writes files, units and a preset file, so run
# `systemctl --root=DIR preset-all` afterwards; it cannot add users (use
# sysusers.d); it is not idempotent unless files say `overwrite: true`.
set -euo pipefail

IGNITION_VERSION=${IGNITION_VERSION:-v2.27.0}
cache=${ETCDADM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcdadm}
bin="$cache/bin"
mkdir -p "$bin"

log() { printf 'ignition-apply: %s\n' "$*" >&2; }

if [ -x "$bin/ignition-apply" ] &&
   [ "$("$bin/ignition-apply" --version 2>/dev/null)" = "Ignition $IGNITION_VERSION" ]; then
  exit 0
fi

# cgo against libblkid (Ignition's blkid.go includes <blkid/blkid.h>).
if ! [ -f /usr/include/blkid/blkid.h ]; then
  command -v apt-get >/dev/null ||
    { log "libblkid-dev is missing and there is no apt-get: install libblkid headers"; exit 1; }
  log "installing Debian libblkid-dev (cgo headers for Ignition) with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends libblkid-dev >/dev/null 2>&1 ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends libblkid-dev >/dev/null; }
fi

log "building Ignition $IGNITION_VERSION (about a minute cold) into $bin"
work=$(mktemp -d "$bin/.ignition-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
# go install pkg@version builds the main package in its own module, with
# ignition's own go.mod/go.sum (it has no replace directives).
GOBIN="$work" CGO_ENABLED=1 GOFLAGS=-buildvcs=false go install -trimpath \
  -ldflags "-s -w -X github.com/coreos/ignition/v2/internal/version.Raw=$IGNITION_VERSION" \
  "github.com/coreos/ignition/v2/internal@$IGNITION_VERSION"
got=$("$work/internal" --version 2>&1 || true)
# argv[0] decides the mode; as "internal" it is plain ignition and prints
# the same version string.
[ "$got" = "Ignition $IGNITION_VERSION" ] ||
  { log "built binary reports '$got', want 'Ignition $IGNITION_VERSION'"; exit 1; }
mv -f "$work/internal" "$bin/ignition-$IGNITION_VERSION"
ln -sfn "ignition-$IGNITION_VERSION" "$bin/.ignition-apply.tmp"
mv -Tf "$bin/.ignition-apply.tmp" "$bin/ignition-apply"
"$bin/ignition-apply" --version >&2
log "ready: $bin/ignition-apply"
