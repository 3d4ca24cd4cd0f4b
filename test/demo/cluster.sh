#!/usr/bin/env bash
# make demo / make demo-down: a 3-master cluster in systemd-nspawn hosts,
# booted from one rendered Ignition config, backed up once, left running.
# Needs root (network namespaces, nspawn). Everything lives in $DEMO_DIR
# and under the e2e harness' names; demo-down removes all of it.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
dir=${DEMO_DIR:-/tmp/etcdadm-demo}

down() {
  [ -d "$dir" ] || { echo "demo: nothing to remove"; return 0; }
  rm -f "$dir/running"
  if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
    echo "demo: stopping the hosts..."
    for _ in $(seq 1 120); do kill -0 "$(cat "$dir/pid")" 2>/dev/null || break; sleep 1; done
    kill "$(cat "$dir/pid")" 2>/dev/null || true
  fi
  rm -rf "$dir"
  echo "demo: removed everything"
}

up() {
  [ "$(id -u)" = 0 ] || { echo "demo: needs root (network namespaces and systemd-nspawn)" >&2; exit 1; }
  if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
    echo "demo: already running"; cat "$dir/howto.txt"; return 0
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  echo "demo: building and booting 3 masters (log: $dir/demo.log)..."
  (cd "$top"
   # The hosts outlive this script: hand them no descriptor but the log.
   for fd in /proc/$BASHPID/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null; done
   ETCDADM_DEMO_DIR="$dir" nohup go test -tags demo -count=1 -run '^TestDemo$' -timeout 25h ./test/e2e/ >"$dir/demo.log" 2>&1 &
   echo $! >"$dir/pid")
  for _ in $(seq 1 600); do
    [ -f "$dir/ready" ] && { cat "$dir/howto.txt"; return 0; }
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
    sleep 1
  done
  echo "demo: failed; the last lines of $dir/demo.log:" >&2
  tail -40 "$dir/demo.log" >&2
  exit 1
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 [up|down]" >&2; exit 2 ;;
esac
