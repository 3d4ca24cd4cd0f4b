#!/usr/bin/env bash
# The README's quick start: a real single-node etcd with mutual TLS, some
# keys, a backup into a file:// store, verification, a restore into a fresh
# data directory, etcd started on it, and the keys read back.
# Everything lives in $DEMO_DIR (default: a new temp dir) and every process
# started here is stopped on exit.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cache=${ETCDADM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcdadm}
version=${DEMO_ETCD_VERSION:-3.6.16}
etcd_dir="$cache/etcd/v$version"
bin=${ETCDADM_BIN:-$top/bin}
demo=${DEMO_DIR:-$(mktemp -d /tmp/etcdadm-demo.XXXXXX)}
port_client=${DEMO_CLIENT_PORT:-42379}
port_peer=${DEMO_PEER_PORT:-42380}
store="file://$demo/store"

for f in "$etcd_dir/etcd" "$etcd_dir/etcdctl" "$bin/etcdadm" "$bin/etcd-snapshot-uploader"; do
  [ -x "$f" ] || { echo "demo: $f is missing: run 'make components build' first" >&2; exit 1; }
done
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

etcd_pid=
cleanup() { if [ -n "$etcd_pid" ]; then kill "$etcd_pid" 2>/dev/null || true; wait "$etcd_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT

step "PKI: a CA, a server and a client certificate (ECDSA P-256) in $demo/pki"
mkdir -p "$demo/pki" "$demo/store"
(
  cd "$demo/pki"
  umask 077
  openssl ecparam -name prime256v1 -genkey -noout -out ca.key
  openssl req -x509 -new -key ca.key -subj /CN=etcdadm-demo-ca -days 1 -out ca.crt 2>/dev/null
  for n in server client; do
    openssl ecparam -name prime256v1 -genkey -noout -out $n.key
    openssl req -new -key $n.key -subj /CN=$n -out $n.csr 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > $n.ext
    openssl x509 -req -in $n.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile $n.ext -out $n.crt 2>/dev/null
  done
)
tls=(--cacert "$demo/pki/ca.crt" --cert "$demo/pki/client.crt" --key "$demo/pki/client.key")
endpoint="https://127.0.0.1:$port_client"

start_etcd() { # data-dir
  "$etcd_dir/etcd" --name demo --data-dir "$1" \
    --listen-client-urls "$endpoint" --advertise-client-urls "$endpoint" \
    --listen-peer-urls "https://127.0.0.1:$port_peer" --initial-advertise-peer-urls "https://127.0.0.1:$port_peer" \
    --initial-cluster "demo=https://127.0.0.1:$port_peer" \
    --client-cert-auth --trusted-ca-file "$demo/pki/ca.crt" --cert-file "$demo/pki/server.crt" --key-file "$demo/pki/server.key" \
    --peer-client-cert-auth --peer-trusted-ca-file "$demo/pki/ca.crt" --peer-cert-file "$demo/pki/server.crt" --peer-key-file "$demo/pki/server.key" \
    >>"$demo/etcd.log" 2>&1 &
  etcd_pid=$!
  for _ in $(seq 1 100); do
    "$etcd_dir/etcdctl" --endpoints "$endpoint" "${tls[@]}" endpoint health >/dev/null 2>&1 && return 0
    kill -0 "$etcd_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "demo: etcd did not become healthy; see $demo/etcd.log" >&2; exit 1
}
ctl() { "$etcd_dir/etcdctl" --endpoints "$endpoint" "${tls[@]}" "$@"; }

step "start etcd $version with mutual TLS on $endpoint"
start_etcd "$demo/data"

step "write keys (one with a lease)"
for i in $(seq 1 20); do ctl put "/registry/demo/key-$i" "value-$i" >/dev/null; done
lease=$(ctl lease grant 3600 | awk '{print $2}')
run "$etcd_dir/etcdctl" --endpoints "$endpoint" "${tls[@]}" put /registry/demo/leased "kept with its lease" --lease="$lease"
before=$(ctl get /registry/demo --prefix --keys-only | grep -c .)
rev_before=$(ctl get /registry/demo/key-1 -w json | sed -n 's/.*"revision":\([0-9]*\).*/\1/p')
echo "$before keys, revision $rev_before"

step "back up: the uploader streams snapshot -> gzip -> $store (the leader uploads)"
run "$bin/etcd-snapshot-uploader" --store "$store" --endpoints "$endpoint" "${tls[@]}"
run "$bin/etcdadm" backup list --store "$store"

step "verify the backup end to end, including a test restore"
run "$bin/etcdadm" backup verify latest --restore-test --store "$store" --scratch-dir "$demo"

step "disaster: stop etcd and move its data aside (never deleted)"
kill "$etcd_pid"; wait "$etcd_pid" 2>/dev/null || true; etcd_pid=
run mv "$demo/data" "$demo/data.lost"

step "restore the latest backup into a fresh data directory"
run "$bin/etcdadm" restore-local latest --store "$store" --data-dir "$demo/data" --name demo \
  --initial-cluster "demo=https://127.0.0.1:$port_peer"

step "start etcd on the restored data and read the keys back"
start_etcd "$demo/data"
after=$(ctl get /registry/demo --prefix --keys-only | grep -c .)
rev_after=$(ctl get /registry/demo/key-1 -w json | sed -n 's/.*"revision":\([0-9]*\).*/\1/p')
run "$etcd_dir/etcdctl" --endpoints "$endpoint" "${tls[@]}" get /registry/demo/leased
echo "$after keys (before: $before), revision $rev_after (before: $rev_before)"
if [ "$after" != "$before" ] || [ "$rev_after" != "$rev_before" ]; then
  echo "demo: FAILED: the restored cluster differs" >&2; exit 1
fi
printf '\n\033[1mdemo OK\033[0m: backup, verify and restore round trip on etcd %s. Files: %s\n' "$version" "$demo"
