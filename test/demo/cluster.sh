#!/usr/bin/env bash
# make demo / make demo-down: a 3-master cluster in systemd-nspawn hosts,
# booted from one rendered Ignition config, backed up once, left running.
# Needs root (network namespaces, nspawn). Everything lives in $DEMO_DIR
# and under the e2e harness' names; demo-down removes all of it.
#
# While it runs (make demo prints the next steps with these):
#   cluster.sh on HOST CMD...   run CMD on a master, as root, with etcdadm,
#                               etcd's tools and kubectl on PATH, etcdctl
#                               pointed at the local member, kubectl at the
#                               local apiserver
#   cluster.sh each CMD...      the same on every running master
#   cluster.sh boot             one more master from the same Ignition config
#   cluster.sh crash HOST       cut a master's power (as a dead instance)
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

running() {
  [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null && [ -f "$dir/ready" ] ||
    { echo "demo: not running: make demo first" >&2; exit 1; }
}

on() {
  running
  local host=${1:?usage: $0 on HOST CMD...}; shift
  [ $# -gt 0 ] || { echo "usage: $0 on HOST CMD..." >&2; exit 2; }
  [ -f "$dir/hosts/$host" ] ||
    { echo "demo: no running host $host (running: $(ls "$dir/hosts" | tr '\n' ' '))" >&2; exit 1; }
  nsenter -t "$(cat "$dir/hosts/$host")" -a env \
    PATH=/opt/etcdadm/bin:/opt/etcd/current:/opt/kubernetes/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ETCDCTL_ENDPOINTS=https://127.0.0.1:2379 ETCDCTL_CACERT=/etc/etcd/pki/ca.crt \
    ETCDCTL_CERT=/etc/etcd/pki/client.crt ETCDCTL_KEY=/etc/etcd/pki/client.key \
    KUBECONFIG=/etc/kubernetes/admin.conf "$@"
}

each() {
  running
  local rc=0 h
  for h in $(ls "$dir/hosts"); do
    echo "demo: on $h: $*"
    on "$h" "$@" || rc=1
  done
  return $rc
}

# request WORDS...: ask the demo's test process (it owns the hosts) to do
# something, and print its answer.
request() {
  running
  local id req
  id=$(date +%s%N) req="$dir/requests/$id"
  printf '%s\n' "$*" >"$req.tmp" && mv "$req.tmp" "$req.req"
  for _ in $(seq 1 600); do
    if [ -f "$req.done" ]; then
      cat "$req.out"
      return "$(cat "$req.done")"
    fi
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
    sleep 0.5
  done
  echo "demo: no answer to '$*'; the last lines of $dir/demo.log:" >&2
  tail -20 "$dir/demo.log" >&2
  exit 1
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  on) shift; on "$@" ;;
  each) shift; each "$@" ;;
  boot) request boot ;;
  crash) [ $# -eq 2 ] || { echo "usage: $0 crash HOST" >&2; exit 2; }; request crash "$2" ;;
  *) echo "usage: $0 [up|down|on HOST CMD...|each CMD...|boot|crash HOST]" >&2; exit 2 ;;
esac
