#!/usr/bin/env bash
# Installs the authoritative DNS servers the etcd-dns-registrar's RFC 2136
# tests run against. Idempotent.
#   Knot DNS:  Debian packages knot + knot-dnsutils (knotd, knotc, kdig).
#   CoreDNS:   v1.15.0 from the Go module proxy, whose default plugin set
#              has dynupdate (RFC 2136) and tsig; into $cache/bin/coredns.
# Usage: build.sh [knot|coredns|all]   (default all)
set -euo pipefail

COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
cache=${ETCDADM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcdadm}
mkdir -p "$cache/bin"

log() { printf 'install dns: %s\n' "$*" >&2; }

install_knot() {
  if command -v knotd >/dev/null 2>&1 && command -v kdig >/dev/null 2>&1; then
    return 0
  fi
  log "installing Debian packages knot knot-dnsutils"
  apt-get update -qq
  # The package enables knot.service; the tests start their own knotd.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq knot knot-dnsutils >/dev/null
}

# has_dynupdate BIN: the build has the plugin. Output is captured first:
# `| grep -q` under pipefail kills the writer with SIGPIPE at random.
has_dynupdate() {
  local out
  out=$("$1" -plugins 2>/dev/null) || return 1
  grep -qx '[[:space:]]*dynupdate' <<<"$out"
}

build_coredns() {
  local bin="$cache/bin/coredns" ver
  if [ -x "$bin" ] && ver=$("$bin" -version 2>/dev/null) &&
     grep -q "CoreDNS-${COREDNS_VERSION#v}\$" <<<"$ver" && has_dynupdate "$bin"; then
    return 0
  fi
  log "building CoreDNS $COREDNS_VERSION (a few minutes cold) into $bin"
  CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$cache/bin" \
    go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
  has_dynupdate "$bin" ||
    { log "CoreDNS $COREDNS_VERSION has no dynupdate plugin"; return 1; }
}

case "${1:-all}" in
  knot) install_knot ;;
  coredns) build_coredns ;;
  all) install_knot; build_coredns ;;
  *) log "unknown target $1 (want knot, coredns or all)"; exit 2 ;;
esac
