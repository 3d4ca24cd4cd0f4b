#!/usr/bin/env bash
# Builds kube-apiserver and kubectl (Kubernetes $KUBE_VERSION) from the Go
# module proxy: a build module requires k8s.io/kubernetes and replaces each
# staging module its go.mod points at ./staging (33 in v1.37) with the
# published v0.Y.Z of the same release. Idempotent: a cached binary that
# reports the expected version is kept. About 3 minutes cold.
#
# Output: $ETCDADM_CACHE/kube/vX.Y.Z/{kube-apiserver,kubectl}
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-1.37.2}
cache=${ETCDADM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcdadm}
dir="$cache/kube/v$KUBE_VERSION"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { printf 'kube: %s\n' "$*" >&2; }

reports() {
  local out
  out=$("$1" "${@:2}" 2>/dev/null) || return 1
  [[ $out == *"v$KUBE_VERSION"* ]]
}
if [ -x "$dir/kube-apiserver" ] && [ -x "$dir/kubectl" ] &&
   reports "$dir/kube-apiserver" --version && reports "$dir/kubectl" version --client; then
  exit 0
fi

log "building kube-apiserver and kubectl v$KUBE_VERSION (about 3 minutes cold) into $dir"
mkdir -p "$cache/kube"
work=$(mktemp -d "$cache/kube/build-$KUBE_VERSION.XXXXXX")
trap 'rm -rf "$work"' EXIT

staging_v="v0.${KUBE_VERSION#*.}"
upstream_mod=$(cd "$work" && go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" |
  sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
[ -f "$upstream_mod" ] || { log "no go.mod for k8s.io/kubernetes@v$KUBE_VERSION from the module proxy"; exit 1; }
go_line=$(grep -m1 '^go ' "$upstream_mod")
{
  printf 'module etcdadm.local/kubebuild\n\n%s\n\nrequire k8s.io/kubernetes v%s\n\n' "$go_line" "$KUBE_VERSION"
  grep -E '^[[:space:]]*k8s\.io/[a-z0-9.-]+ => \./staging/' "$upstream_mod" |
    awk -v v="$staging_v" '{ printf "replace %s => %s %s\n", $1, $1, v }'
} >"$work/go.mod"
n=$(grep -c '^replace ' "$work/go.mod")
[ "$n" -gt 0 ] || { log "found no staging replaces in k8s.io/kubernetes' go.mod"; exit 1; }
cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
major=${KUBE_VERSION%%.*}
minor=${KUBE_VERSION#*.}; minor=${minor%%.*}
ld="-s -w"
for kv in "gitVersion=v$KUBE_VERSION" "gitMajor=$major" "gitMinor=$minor" "gitTreeState=clean"; do
  ld+=" -X k8s.io/component-base/version.$kv -X k8s.io/client-go/pkg/version.$kv"
done
(cd "$work" && go mod tidy >/dev/null && mkdir -p out &&
  go build -trimpath -ldflags "$ld" -o out/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver &&
  go build -trimpath -ldflags "$ld" -o out/kubectl k8s.io/kubernetes/cmd/kubectl)
reports "$work/out/kube-apiserver" --version ||
  { log "kube-apiserver built but reports another version"; exit 1; }
rm -rf "$dir.tmp" && mkdir -p "$dir.tmp" && mv "$work"/out/* "$dir.tmp/" &&
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
log "kube-apiserver v$KUBE_VERSION ready ($n staging modules replaced by $staging_v)"
