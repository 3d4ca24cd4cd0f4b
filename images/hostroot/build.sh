#!/usr/bin/env bash
# Builds the root filesystem the e2e test hosts boot from: a small Debian
# bookworm with systemd, made with debootstrap from the Debian mirror apt
# already uses. Hosts are systemd-nspawn containers that each mount an
# overlay on top of this tree (test/e2e/harness), so it is never written to.
#
# Cache: $ETCDADM_CACHE/hostroot/VARIANT/{rootfs/,stamp}. The stamp is the
# sha256 of this script: the tree is rebuilt only when the recipe changes.
#
# Variants: bookworm (systemd 252, every e2e host) and sysupdate: the same
# with systemd 254 from bookworm-backports, whose systemd-sysupdate (and
# systemd-pull, in systemd-container) the sysupdate e2e scenario runs;
# bookworm's systemd 252 has no systemd-sysupdate.
# The build goes to a temporary directory that is renamed into place, so a
# crashed build leaves no half tree behind. Installs debootstrap and
# systemd-container (systemd-nspawn) with apt-get when they are missing.
#
# Usage: build.sh [bookworm|sysupdate]   (needs root; about 1-2 minutes cold)
set -euo pipefail

SUITE=bookworm
VARIANT=${1:-bookworm}
case "$VARIANT" in
  bookworm|sysupdate) ;;
  *) printf 'hostroot: unknown variant %s (want bookworm or sysupdate)\n' "$VARIANT" >&2; exit 2 ;;
esac
# minbase already has util-linux (mount, losetup) and the shell tools;
# e2fsprogs formats member volumes, iputils-ping is for network checks,
# procps for ps/pgrep when debugging a host by hand.
PACKAGES=systemd,systemd-sysv,dbus,libsystemd0,iproute2,iputils-ping,e2fsprogs,procps
# Timers and units a test host does not need; they only add noise and
# work (apt/dpkg maintenance, consoles nobody attaches to).
MASK=(
  apt-daily.timer apt-daily-upgrade.timer apt-daily.service apt-daily-upgrade.service
  dpkg-db-backup.timer dpkg-db-backup.service e2scrub_all.timer e2scrub_reap.service
  fstrim.timer systemd-tmpfiles-clean.timer
  console-getty.service getty@.service container-getty@.service serial-getty@.service
  getty.target systemd-logind.service
)

cache=${ETCDADM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcdadm}
dest="$cache/hostroot/$VARIANT"
stamp=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)

log() { printf 'hostroot: %s\n' "$*" >&2; }

if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ] && [ -x "$dest/rootfs/lib/systemd/systemd" ]; then
  exit 0
fi
[ "$(id -u)" = 0 ] || { log "building the test host rootfs needs root (debootstrap)"; exit 1; }

need_pkgs=()
command -v debootstrap >/dev/null || need_pkgs+=(debootstrap)
command -v systemd-nspawn >/dev/null || need_pkgs+=(systemd-container)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "installing ${need_pkgs[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${need_pkgs[@]}" >/dev/null 2>&1 ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${need_pkgs[@]}" >/dev/null; }
fi

# The mirror apt uses for the Debian suite (deb822 .sources or one-line
# .list), not the security archive.
mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v suite="$SUITE" '
      /^$/ { if (uri != "" && ok) { print uri; exit } uri = ""; ok = 0; next }
      tolower($1) == "uris:" { uri = $2 }
      tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) ok = 1 }
      END { if (uri != "" && ok) print uri }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    # deb [opts] URI SUITE COMPONENTS...
    sed -E 's/\[[^]]*\]//' "$f" | awk -v suite="$SUITE" '$1 == "deb" && $3 == suite { print $2 }'
  done
}
url=$(mirror | grep -v -- '-security' | head -n1 || true)
url=${url:-http://deb.debian.org/debian}

mkdir -p "$cache/hostroot"
work=$(mktemp -d "$cache/hostroot/.$VARIANT-build.XXXXXX")
root="$work/rootfs"
trap 'umount "$root/proc" 2>/dev/null || true; rm -rf "$work"' EXIT
log "debootstrap $SUITE from $url into $dest (about 1-2 minutes)"
if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$url" >"$work/debootstrap.log" 2>&1; then
  tail -n 30 "$work/debootstrap.log" >&2
  [ -f "$root/debootstrap/debootstrap.log" ] && tail -n 30 "$root/debootstrap/debootstrap.log" >&2
  log "debootstrap failed"
  exit 1
fi

if [ "$VARIANT" = sysupdate ]; then
  log "systemd from $SUITE-backports (systemd-sysupdate)"
  printf 'deb %s %s-backports main\n' "$url" "$SUITE" >"$root/etc/apt/sources.list.d/backports.list"
  # No service starts inside the chroot.
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod 0755 "$root/usr/sbin/policy-rc.d"
  mount -t proc proc "$root/proc"
  if ! { chroot "$root" apt-get update &&
         DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y --no-install-recommends \
           -t "$SUITE-backports" systemd systemd-sysv systemd-container libsystemd0 libudev1; } >"$work/backports.log" 2>&1; then
    tail -n 30 "$work/backports.log" >&2
    log "installing systemd from $SUITE-backports failed"
    exit 1
  fi
  umount "$root/proc"
  rm -f "$root/usr/sbin/policy-rc.d" "$root/etc/apt/sources.list.d/backports.list"
  [ -x "$root/lib/systemd/systemd-sysupdate" ] || { log "no systemd-sysupdate after the install"; exit 1; }
fi

for u in "${MASK[@]}"; do
  ln -sfn /dev/null "$root/etc/systemd/system/$u"
done
# An empty machine-id: every host gets its own at boot (nspawn passes one).
: >"$root/etc/machine-id"
mkdir -p "$root/var/lib/dbus"
ln -sfn /etc/machine-id "$root/var/lib/dbus/machine-id"
# debootstrap copies the build machine's hostname and resolver: without
# /etc/hostname a host keeps the name nspawn gives it; hosts have no DNS
# server unless a test configures one.
rm -f "$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
printf '# e2e test host: no resolver unless a test configures one\n' >"$root/etc/resolv.conf"
# The harness gives each host its address from outside (its network
# namespace); networkd would only wait for links it does not manage. Ignition
# presets (20-ignition.preset) still win over this file.
mkdir -p "$root/etc/systemd/system-preset"
cat >"$root/etc/systemd/system-preset/80-e2e-host.preset" <<'PRESET'
disable systemd-networkd.service
disable systemd-networkd.socket
disable systemd-networkd-wait-online.service
disable systemd-network-generator.service
PRESET
# Apply the presets once here, so the harness's preset-all after
# ignition-apply only adds what the Ignition config enabled.
systemctl --root="$root" preset-all >"$work/preset.log" 2>&1 ||
  { cat "$work/preset.log" >&2; log "preset-all failed"; exit 1; }
# The journal stays in memory: hosts are thrown away, and it is faster.
mkdir -p "$root/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' >"$root/etc/systemd/journald.conf.d/e2e.conf"
# Small: no package caches, docs or manuals in the image.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
  "$root"/usr/share/locale/*
printf '%s\n' "$stamp" >"$work/stamp"

rm -rf "$dest.old"
[ -e "$dest" ] && mv -T "$dest" "$dest.old"
mv -T "$work" "$dest"
rm -rf "$dest.old"
trap - EXIT
log "ready: $dest/rootfs ($(du -sh "$dest/rootfs" | cut -f1))"
