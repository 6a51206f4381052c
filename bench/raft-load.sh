#!/usr/bin/env bash
# The Raft group under a mixed load on a busy machine (issues #13, #16): three nodes on
# loopback, HOGS busy loops on top of them, and for LOAD_S seconds at once
#   - produce (perf produce, mode 2: acknowledged writes, replication factor 3),
#   - Dolly Puts from 64 clients over the three nodes,
#   - metadata churn (perf metadata: topic creates and deletes, 16 writers),
# each in a loop until the time is up. Before and after, every node's /metrics gives the
# counters the goal is stated in: zper_raft_leader_changes_total (goal 0), zper_raft_rpc_total
# {event="timeout_append"|"timeout_vote"|"timeout_snapshot"} (goal 0; an RPC openraft gave up
# on), {event="failed"} and the Raft term; and the Raft directory's size and RSS of each node
# after the load and after IDLE_S seconds of rest; lease renewals that lapsed (goal 0) and the
# smallest lease margin a renewal left (node.lease_ms minus the worst renewal delay).
# Prints the deltas, one line per node. Beside the nodes, a probe that is not zper writes 200
# bytes and fdatasyncs them every 10 ms on the same filesystem and prints its worst syncs: when
# the disk itself stalls longer than an AppendEntries may take (raft.heartbeat_ms, 200 ms),
# every process on it stalls, and the timeouts and lapses of that moment are the disk's.
# Bounded: LOAD_S + IDLE_S seconds plus start-up. ZPER_BIN=<binary> skips the release build.
set -euo pipefail
LOAD_S=${LOAD_S:-300}
IDLE_S=${IDLE_S:-30}
HOGS=${HOGS:-2}
PORT_BASE=27000
. "$(dirname "$0")/cluster.sh"
for i in 1 2 3; do start "$i"; done
wait_ready
dolly() { echo "tcp://127.0.0.1:$((PORT_BASE + 10 * $1 + 6))"; }
# name=value pairs of one node's Raft counters.
counters() {
  curl -sf "http://$(admin "$1")/metrics" | python3 -c '
import re, sys
want = {"zper_raft_leader_changes_total": "leader_changes", "zper_raft_term": "term",
        "zper_node_lease_margin_min_seconds": "lease_margin_min_ms"}
out = {}
for line in sys.stdin:
    m = re.match(r"(zper_raft_leader_changes_total|zper_raft_term|zper_raft_rpc_total|zper_node_lease_renewals_total|zper_node_lease_margin_min_seconds)(\{[^}]*\})? (\S+)", line)
    if not m:
        continue
    name = want.get(m.group(1)) or re.search(r"(?:event|result)=\"(\w+)\"", m.group(2) or "").group(1)
    scale = 1000 if name == "lease_margin_min_ms" else 1
    out[name] = int(float(m.group(3)) * scale)
print(" ".join(f"{k}={v}" for k, v in sorted(out.items())))'
}
# The Raft directory, RSS (anonymous and file-backed) and the allocator's heap (live and
# resident): RSS minus the resident heap is memory outside zper's allocator (RocksDB, libzmq).
usage() {
  local raft_mb rss_mb anon_mb heap
  raft_mb=$(du -sm "$dir/n$1/.raft" | cut -f1)
  rss_mb=$(( $(awk '/VmRSS/ {print $2}' "/proc/${pids[$1 - 1]}/status") / 1024 ))
  anon_mb=$(( $(awk '/RssAnon/ {print $2}' "/proc/${pids[$1 - 1]}/status") / 1024 ))
  heap=$(curl -sf "http://$(admin "$1")/metrics" | awk '
    /^zper_memory_heap_allocated_bytes / {a = int($2 / 1048576)}
    /^zper_memory_heap_resident_bytes / {r = int($2 / 1048576)}
    END {printf "heap_live_mb=%d heap_resident_mb=%d", a, r}')
  echo "raft_dir_mb=$raft_mb rss_mb=$rss_mb rss_anon_mb=$anon_mb $heap"
}
declare -A before
for i in 1 2 3; do before[$i]=$(counters "$i"); echo "node $i idle before: $(usage "$i")"; done
python3 - "$dir/probe" "$LOAD_S" > "$dir/probe.out" <<'PY' &
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
end, lat = time.time() + float(sys.argv[2]), []
while time.time() < end:
    os.write(fd, b"x" * 200)
    t = time.perf_counter()
    os.fdatasync(fd)
    lat.append((time.perf_counter() - t) * 1000)
    time.sleep(0.01)
lat.sort()
print(f"disk probe (not zper, same filesystem): {len(lat)} fdatasyncs, p50 {lat[len(lat) // 2]:.1f} ms, "
      f"p99 {lat[int(len(lat) * 0.99)]:.1f} ms, max {lat[-1]:.0f} ms, over 200 ms: {sum(x > 200 for x in lat)}, "
      f"over 1 s: {sum(x > 1000 for x in lat)}")
PY
probe=$!
hogs=()
for _ in $(seq 1 "$HOGS"); do (while :; do :; done) & hogs+=($!); done
end=$((SECONDS + LOAD_S))
loop() { while [ $SECONDS -lt $end ]; do "$@" >/dev/null 2>&1 || sleep 0.2; done; }
loop timeout $((LOAD_S + 5)) $Z perf produce -w "$(writer 1)" -t load -n 200000 -s 100 -c 2 -m 2 &
p1=$!
loop timeout $((LOAD_S + 5)) $Z perf dolly-put -e "$(dolly 1),$(dolly 2),$(dolly 3)" -n 50000 -c 64 --window 1 --keys 10000 &
p2=$!
loop timeout $((LOAD_S + 5)) $Z perf metadata --admin "$(admin 1)" -n 2000 -c 16 --prefix churn &
p3=$!
wait $p1 $p2 $p3 $probe || true
kill "${hogs[@]}" 2>/dev/null || true
for i in 1 2 3; do echo "node $i after load: $(usage "$i")"; done
sleep "$IDLE_S"
for i in 1 2 3; do
  after=$(counters "$i")
  python3 - "$i" "${before[$i]}" "$after" "$(usage "$i")" <<'PY'
import sys
node, b, a, use = sys.argv[1:5]
parse = lambda s: dict(kv.split("=") for kv in s.split())
b, a = parse(b), parse(a)
keys = ["leader_changes", "term", "timeout_append", "timeout_vote", "timeout_snapshot", "failed", "sent", "lapsed", "renewed"]
print(f"node {node}: " + " ".join(f"{k}+{int(a.get(k, 0)) - int(b.get(k, 0))}" for k in keys)
      + f" lease_margin_min_ms={a.get('lease_margin_min_ms', 'none')}; after rest: {use}")
PY
done
cat "$dir/probe.out"
