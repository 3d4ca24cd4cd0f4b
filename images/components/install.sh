#!/usr/bin/env bash
# Builds the real components tests and the demo run against, from the Go
# module proxy, into a cache outside the repository. Idempotent: a component
# whose binary is already cached (and reports the expected version) is not
# rebuilt. Usage: install.sh [etcd|s3|e2e|dns|kube|all]   (default all)
#
# Cache: $ETCDADM_CACHE, else $XDG_CACHE_HOME/etcdadm, else ~/.cache/etcdadm
#   etcd/vX.Y.Z/{etcd,etcdctl,etcdutl}
#   bin/minio, bin/versitygw
#   bin/coredns                  (dns: images/dns/build.sh; also Debian knot)
#   bin/ignition-apply           (e2e: images/ignition-apply/build.sh)
#   hostroot/{bookworm,sysupdate}/rootfs  (e2e: images/hostroot/build.sh;
#                                 needs root)
#   kube/vX.Y.Z/{kube-apiserver,kubectl}  (kube: images/kube/build.sh; the
#                                 real client the e2e masters run)
set -euo pipefail

# 3.6.15: the patch the sysupdate e2e scenario updates from.
ETCD_VERSIONS=${ETCD_VERSIONS:-"3.5.35 3.6.15 3.6.16 3.7.3"}
MINIO_VERSION=${MINIO_VERSION:-latest}   # the proxy resolves only @latest for minio
VERSITYGW_VERSION=${VERSITYGW_VERSION:-v1.8.0}

cache=${ETCDADM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcdadm}
images=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$cache/bin" "$cache/etcd"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { printf 'install: %s\n' "$*" >&2; }

# reports_version BIN V: BIN --version names etcd V. (No `| grep -q`: under
# pipefail grep's early exit makes the writer die of SIGPIPE at random.)
reports_version() {
  local out
  out=$("$1" --version 2>/dev/null) || return 1
  [[ $out == *"etcd Version: $2"$'\n'* || $out == *"etcd Version: $2" ]]
}

build_etcd() {
  local v=$1 dir="$cache/etcd/v$1" work
  if [ -x "$dir/etcd" ] && [ -x "$dir/etcdctl" ] && [ -x "$dir/etcdutl" ] &&
     reports_version "$dir/etcd" "$v"; then
    return 0
  fi
  log "building etcd $v (about 2-3 minutes cold) into $dir"
  work=$(mktemp -d "$cache/etcd/build-$v.XXXXXX")
  trap 'rm -rf "$work"' RETURN
  mkdir -p "$work/cmd/etcd"
  cat >"$work/go.mod" <<GOMOD
module etcdadm.local/etcdbuild

go 1.24

require (
	go.etcd.io/etcd/server/v3 v$v
	go.etcd.io/etcd/etcdctl/v3 v$v
	go.etcd.io/etcd/etcdutl/v3 v$v
)
GOMOD
  cat >"$work/cmd/etcd/main.go" <<'GO'
// Command etcd is upstream etcd, built from the module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
)
GO
  (cd "$work" && go mod tidy >/dev/null &&
    mkdir -p out &&
    go build -trimpath -ldflags "-s -w" -o out/etcd ./cmd/etcd &&
    go build -trimpath -ldflags "-s -w" -o out/etcdctl go.etcd.io/etcd/etcdctl/v3 &&
    go build -trimpath -ldflags "-s -w" -o out/etcdutl go.etcd.io/etcd/etcdutl/v3)
  reports_version "$work/out/etcd" "$v" ||
    { log "etcd $v built but reports another version"; return 1; }
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp" && mv "$work"/out/* "$dir.tmp/" &&
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
  log "etcd $v ready"
}

build_gobin() {
  local name=$1 pkg=$2 check=$3
  if [ -x "$cache/bin/$name" ] && $check "$cache/bin/$name" >/dev/null 2>&1; then
    return 0
  fi
  log "building $name from $pkg (minutes when cold)"
  GOBIN="$cache/bin" go install -trimpath -ldflags "-s -w" "$pkg"
}
minio_ok() { "$1" --version; }
versitygw_ok() { "$1" --version; }

# Debian packages the tests and the demo use directly.
need_debs() {
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${DEB_FLAGS:-} "${missing[@]}" >/dev/null
}

what=${1:-all}
[ "$what" = all ] && need_debs systemd-analyze:systemd openssl:openssl ip:iproute2
# promtool checks and tests alerts/etcdadm-alerts.yml; the package's
# recommends (node exporter, its services) are not needed.
[ "$what" = all ] && DEB_FLAGS=--no-install-recommends need_debs promtool:prometheus
# make images (images/sysext/build.sh) and its test: mksquashfs, and
# systemd-dissect to check systemd takes the images as extensions, man to
# render their man pages.
[ "$what" = all ] && need_debs mksquashfs:squashfs-tools systemd-dissect:systemd-container man:man-db
case "$what" in
  etcd|all) for v in $ETCD_VERSIONS; do build_etcd "$v"; done ;;&
  e2e|all)
    ETCDADM_CACHE=$cache bash "$images/ignition-apply/build.sh"
    ETCDADM_CACHE=$cache bash "$images/hostroot/build.sh" bookworm
    ETCDADM_CACHE=$cache bash "$images/hostroot/build.sh" sysupdate ;;&
  dns|all)
    ETCDADM_CACHE=$cache bash "$images/dns/build.sh" all ;;&
  kube|all)
    ETCDADM_CACHE=$cache bash "$images/kube/build.sh" ;;&
  s3|all)
    build_gobin minio "github.com/minio/minio@$MINIO_VERSION" minio_ok
    build_gobin versitygw "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" versitygw_ok ;;
  etcd|e2e|dns|kube) ;;
  *) log "unknown target $what (want etcd, s3, e2e, dns, kube or all)"; exit 2 ;;
esac
