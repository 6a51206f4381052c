#!/usr/bin/env bash
# zper against etcd, side by side (issue #16): three zper nodes and three etcd members on
# loopback, on the same machine in the same run, then interleaved and with the same client
# shape (C clients, each with one request in flight and its own connection, spread over the
# three members; 100-byte values over KEYS keys):
#   - Dolly Puts (zper perf dolly-put --window 1) against etcd v3 Puts (zper perf etcd-put,
#     gRPC over HTTP/2) at C = 64 and 256,
#   - zper metadata commits (perf metadata: topic creates/deletes through the leader's admin
#     API, 16 writers) against etcd Puts from 16 clients.
# Prints every summary line, then per step zper/etcd throughput and p99 ratios (goal: >= 2x
# the throughput with p99 <= etcd's). etcd comes from Debian (etcd-server, etcd-client),
# installed with apt-get when missing (needs root or passwordless sudo).
# Bounded: N requests per step (ROUNDS interleaved rounds). ZPER_BIN=<binary> skips the build.
set -euo pipefail
N=${N:-20000}
META_N=${META_N:-3000}
KEYS=${KEYS:-10000}
ROUNDS=${ROUNDS:-2}
CLIENTS=${CLIENTS:-"64 256"}
PORT_BASE=28500
ETCD_BASE=28900
if ! command -v etcd >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo -n"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client >/dev/null
  # Debian starts the packaged etcd as a service on 2379; this run uses its own members.
  $sudo systemctl stop etcd 2>/dev/null || $sudo pkill -x etcd 2>/dev/null || true
fi
. "$(dirname "$0")/cluster.sh"
etcd_pids=()
stop_etcd() { for p in "${etcd_pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap 'stop_etcd; cleanup' EXIT
eclient() { echo "127.0.0.1:$((ETCD_BASE + 10 * $1))"; }
epeer() { echo "http://127.0.0.1:$((ETCD_BASE + 10 * $1 + 1))"; }
initial="e1=$(epeer 1),e2=$(epeer 2),e3=$(epeer 3)"
for i in 1 2 3; do
  etcd --name "e$i" --data-dir "$dir/etcd$i" \
    --listen-client-urls "http://$(eclient "$i")" --advertise-client-urls "http://$(eclient "$i")" \
    --listen-peer-urls "$(epeer "$i")" --initial-advertise-peer-urls "$(epeer "$i")" \
    --initial-cluster "$initial" --initial-cluster-state new --initial-cluster-token zper-bench \
    --log-level error >"$dir/etcd$i.log" 2>&1 &
  etcd_pids+=($!)
done
for i in 1 2 3; do start "$i"; done
wait_ready
for _ in $(seq 1 100); do
  ETCDCTL_API=3 etcdctl --endpoints "$(eclient 1)" endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done
json_field() { python3 -c "import json,sys; v=json.load(sys.stdin).get('$1'); print('' if v is None else v)"; }
leader=$(curl -sf "http://$(admin 1)/v1/raft" | json_field leader)
dolly() { echo "tcp://127.0.0.1:$((PORT_BASE + 10 * $1 + 6))"; }
zper_all="$(dolly 1),$(dolly 2),$(dolly 3)"
etcd_all="$(eclient 1),$(eclient 2),$(eclient 3)"
out=$dir/results
{
  for r in $(seq 1 "$ROUNDS"); do
    for c in $CLIENTS; do
      $Z perf dolly-put -e "$zper_all" -n "$N" -c "$c" --window 1 --keys "$KEYS" -s 100 \
        | sed "s/^perf dolly-put/perf zper c=$c round=$r/"
      $Z perf etcd-put -e "$etcd_all" -n "$N" -c "$c" --keys "$KEYS" -s 100 \
        | sed "s/^perf etcd-put/perf etcd c=$c round=$r/"
    done
    $Z perf metadata --admin "$(admin "$leader")" -n "$META_N" -c 16 --prefix m$r \
      | sed "s/^perf metadata/perf zper-meta c=16 round=$r/"
    $Z perf etcd-put -e "$etcd_all" -n "$META_N" -c 16 --keys "$KEYS" -s 100 \
      | sed "s/^perf etcd-put/perf etcd-meta c=16 round=$r/"
  done
} | tee "$out"
python3 - "$out" <<'PY'
import re, sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"perf (\S+) c=(\d+) round=\d+ (.*)", line)
    if not m:
        continue
    f = dict(kv.split("=", 1) for kv in m.group(3).split() if "=" in kv)
    rate = float(f.get("per_second") or f.get("commits_per_s"))
    rows[(m.group(1), int(m.group(2)))].append((rate, float(f["p99_ms"])))
def mean(v): return sum(v) / len(v)
for (zper, etcd) in (("zper", "etcd"), ("zper-meta", "etcd-meta")):
    for c in sorted({c for (k, c) in rows if k == zper}):
        z, e = rows[(zper, c)], rows[(etcd, c)]
        zr, er = mean([x[0] for x in z]), mean([x[0] for x in e])
        zp, ep = mean([x[1] for x in z]), mean([x[1] for x in e])
        what = "Dolly Puts" if zper == "zper" else "metadata commits"
        print(f"{what} vs etcd Puts, {c} clients: zper {zr:.0f}/s p99 {zp:.1f} ms, etcd {er:.0f}/s p99 {ep:.1f} ms"
              f" -> throughput {zr / er:.2f}x etcd (goal >= 2), p99 {zp / ep:.2f}x etcd's (goal <= 1)")
PY
