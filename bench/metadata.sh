#!/usr/bin/env bash
# zper metadata benchmark (issue #3): three release nodes on loopback, then in the same run
#   - fdatasync latency baseline of the data disk (a Raft commit needs a synced write on a
#     majority, so this is its floor),
#   - metadata commits/s and p50/p99 latency through a follower's and the leader's admin API,
#     with 1 and 16 concurrent writers (each write: a topic create or delete, one Raft entry),
#   - failover: kill -9 of the Raft leader, then the time until a write through a survivor
#     commits (ROUNDS rounds; the killed node restarts in between).
# Prints every summary line and the ratios against the baseline. Bounded: N writes per step.
set -euo pipefail
N=${N:-2000}
ROUNDS=${ROUNDS:-3}
PORT_BASE=26000
. "$(dirname "$0")/cluster.sh"
json_field() { python3 -c "import json,sys; v=json.load(sys.stdin).get('$1'); print('' if v is None else v)"; }
leader_of() { curl -sf "http://$(admin "$1")/v1/raft" | json_field leader || true; }
for i in 1 2 3; do start $i; done
wait_ready
leader=$(leader_of 1)
follower=$(( leader % 3 + 1 ))
out=$dir/results
{
  mkdir -p "$dir/n1"
  $Z perf fsync --dir "$dir/n1" -n 500
  $Z perf metadata --admin "$(admin "$follower")" -n "$N" -c 1 --prefix viafollower
  $Z perf metadata --admin "$(admin "$leader")" -n "$N" -c 1 --prefix vialeader
  $Z perf metadata --admin "$(admin "$leader")" -n "$N" -c 16 --prefix concurrent
} | tee "$out"
for r in $(seq 1 "$ROUNDS"); do
  wait_ready
  leader=$(leader_of 1)
  survivor=$(( leader % 3 + 1 ))
  kill -9 "${pids[$leader - 1]}"
  # Retry every write until it commits: first_commit_ms is kill -> first committed write
  # (plus this process's start, a few ms).
  $Z perf metadata --admin "$(admin "$survivor")" -n 1 --retry 20s --prefix failover$r \
    | sed "s/^perf metadata/perf failover round=$r killed=$leader/" | tee -a "$out"
  start "$leader"
done
field() { grep "^perf $1 " "$out" | sed -n "${3:-1}p" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
f50=$(field fsync p50_ms)
awk -v f50="$f50" \
    -v r1="$(field metadata commits_per_s 1)" -v p1="$(field metadata p99_ms 1)" \
    -v r2="$(field metadata commits_per_s 2)" -v p2="$(field metadata p99_ms 2)" \
    -v r3="$(field metadata commits_per_s 3)" -v p3="$(field metadata p99_ms 3)" 'BEGIN {
  printf "via follower, 1 writer: %d commits/s, p99 %.3f ms = %.1f x fsync p50 (%.3f ms)\n", r1, p1, p1 / f50, f50
  printf "via leader, 1 writer:   %d commits/s, p99 %.3f ms = %.1f x fsync p50\n", r2, p2, p2 / f50
  printf "via leader, 16 writers: %d commits/s, p99 %.3f ms = %.1f x fsync p50\n", r3, p3, p3 / f50
}'
grep "^perf failover" "$out" | tr ' ' '\n' | sed -n 's/^first_commit_ms=//p' \
  | awk '{ s = s sep $1; sep = ", "; if ($1 > m) m = $1 } END { printf "kill -9 of the leader -> next committed write: %s ms (worst %s ms, goal < 2000)\n", s, m }'
