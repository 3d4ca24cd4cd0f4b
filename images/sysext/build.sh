#!/usr/bin/env bash
# Builds systemd-sysext images for immutable hosts (Flatcar sysext-bakery
# conventions), reproducibly, into OUT (default: the component cache's
# sysext/ directory, outside the repository):
#
#   etcd-vX.Y.Z-x86-64.raw     one per supported etcd version: etcd, etcdctl
#                              and etcdutl under /usr/lib/etcdadm/etcd/vX.Y.Z,
#                              so images of several minors merge side by side
#                              and the version switcher finds every version
#                              without a download; activated as etcd-X.Y
#                              (extension-release.etcd-X.Y)
#   etcdadm-V-x86-64.raw       our binaries in /usr/bin, their man pages and
#                              bash, zsh and fish completion (generated from
#                              the binaries' own command definitions), and our
#                              units under /usr/lib/systemd/system (started by
#                              drop-ins, never by shipped .wants links)
#   SHA256SUMS                 of every image
#   sysupdate.d/               systemd-sysupdate transfer files: one per etcd
#                              minor (unattended patch updates never cross a
#                              minor) and one for etcdadm, each as NAME.transfer
#                              (systemd 257+) and NAME.conf (older); on a host
#                              each goes in its own /etc/sysupdate.NAME.d (a
#                              component: transfers in one directory share a
#                              version), as etcdadm render --binaries sysext
#                              puts them
#
# Everything is under /usr: an extension that ships /opt makes all of /opt
# read-only while merged, and the switcher keeps /opt/etcd writable.
# Binaries are static (CGO_ENABLED=0), so extension-release says ID=_any.
# The same inputs give the same bytes: fixed timestamps (SOURCE_DATE_EPOCH,
# default 0), root ownership, no xattrs, mksquashfs sorts entries itself.
#
# Usage: build.sh [OUT]   ETCD_VERSIONS, ETCDADM_VERSION (default: the git
# commit), SYSEXT_URL (where hosts download from; default a placeholder the
# operator's config replaces) override.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${ETCDADM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcdadm}
out=${1:-$cache/sysext}
ETCD_VERSIONS=${ETCD_VERSIONS:-"3.5.35 3.6.16 3.7.3"}
# The release tag (v1.2.3 -> 1.2.3, with -N-gSHA past it), else the commit.
ETCDADM_VERSION=${ETCDADM_VERSION:-$(git -C "$repo" describe --tags --match 'v[0-9]*' 2>/dev/null | sed 's/^v//' || true)}
ETCDADM_VERSION=${ETCDADM_VERSION:-0.0.0-git$(git -C "$repo" rev-parse --short=12 HEAD)}
SYSEXT_URL=${SYSEXT_URL:-https://sysext.example.invalid/etcdadm}
epoch=${SOURCE_DATE_EPOCH:-0}
arch=x86-64

log() { printf 'sysext: %s\n' "$*" >&2; }
command -v mksquashfs >/dev/null || { log "mksquashfs missing (Debian squashfs-tools; make components installs it)"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$out/sysupdate.d"

release() { # NAME ROOT: the extension-release file
  mkdir -p "$2/usr/lib/extension-release.d"
  printf 'ID=_any\nARCHITECTURE=%s\n%s' "$arch" "${3:-}" >"$2/usr/lib/extension-release.d/extension-release.$1"
}

squash() { # ROOT IMAGE: a reproducible squashfs, written whole or not at all
  find "$1" -exec touch -h -d "@$epoch" {} +
  mksquashfs "$1" "$2.partial" -all-root -noappend -no-xattrs -quiet -no-progress \
    -mkfs-time "$epoch" -all-time "$epoch" -comp zstd >/dev/null
  mv "$2.partial" "$2"
}

for v in $ETCD_VERSIONS; do
  minor=${v%.*}
  img="$out/etcd-v$v-$arch.raw"
  root="$work/etcd-$v"
  dir="$root/usr/lib/etcdadm/etcd/v$v"
  mkdir -p "$dir"
  for b in etcd etcdctl etcdutl; do
    install -m 0755 "$cache/etcd/v$v/$b" "$dir/$b"
  done
  release "etcd-$minor" "$root"
  squash "$root" "$img"
  log "built $(basename "$img")"
done

root="$work/etcdadm"
share="$root/usr/share"
mkdir -p "$root/usr/bin" "$root/usr/lib/systemd/system" "$share/man/man8" "$share/bash-completion/completions" \
  "$share/zsh/site-functions" "$share/fish/vendor_completions.d"
# Every binary says the version the image is named with (--version).
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
  -ldflags "-s -w -buildid= -X github.com/etcdadm/etcdadm-immutable/internal/cliflags.version=$ETCDADM_VERSION" \
  -o "$root/usr/bin/" ./cmd/...)
for b in "$root"/usr/bin/*; do
  n=$(basename "$b")
  "$b" --generate-man-page >"$share/man/man8/$n.8"
  "$b" --generate-completion bash >"$share/bash-completion/completions/$n"
  "$b" --generate-completion zsh >"$share/zsh/site-functions/_$n"
  "$b" --generate-completion fish >"$share/fish/vendor_completions.d/$n.fish"
done
for u in "$repo"/units/*.service "$repo"/units/*.timer; do
  # The units run our binaries from the image, not from /opt/etcdadm.
  sed 's#/opt/etcdadm/bin/#/usr/bin/#g' "$u" >"$root/usr/lib/systemd/system/$(basename "$u")"
done
release etcdadm "$root" "EXTENSION_RELOAD_MANAGER=1
"
img="$out/etcdadm-$ETCDADM_VERSION-$arch.raw"
squash "$root" "$img"
log "built $(basename "$img")"

# The transfer files come from internal/sysext: the text etcdadm render
# --binaries sysext writes on the hosts.
(cd "$repo" && go run ./images/sysext/sysupdate "$SYSEXT_URL" "$out/sysupdate.d" $ETCD_VERSIONS)
log "wrote $out/sysupdate.d"

(cd "$out" && sha256sum -- *.raw | sort -k2 >SHA256SUMS.partial && mv SHA256SUMS.partial SHA256SUMS)
log "wrote $out/SHA256SUMS"
