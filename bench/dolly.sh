#!/usr/bin/env bash
# zper Dolly benchmark (issue #5): three release nodes on loopback, then in the same run
#   - baselines: fdatasync latency of the data disk (a Put needs a synced Raft write on a
#     majority) and one Raft metadata commit through the admin API (perf metadata, 1 writer),
#   - Dolly Puts/s and p50/p99 latency, pipelined from many DEALERs spread over all three
#     nodes (Puts on followers are forwarded to the leader), and from DEALERs on the leader only,
#   - Dolly Gets/s and latency on one node (of the keys just written), against a raw libzmq
#     PUSH/PULL baseline of the same count.
# Prints every summary line and the ratios. Bounded: N Puts, GETS Gets per step.
set -euo pipefail
N=${N:-20000}
GETS=${GETS:-200000}
DEALERS=${DEALERS:-64}
WINDOW=${WINDOW:-4}
PORT_BASE=28000
. "$(dirname "$0")/cluster.sh"
dolly() { echo "tcp://127.0.0.1:$((PORT_BASE + 10 * $1 + 6))"; }
json_field() { python3 -c "import json,sys; v=json.load(sys.stdin).get('$1'); print('' if v is None else v)"; }
for i in 1 2 3; do start $i; done
wait_ready
leader=$(curl -sf "http://$(admin 1)/v1/raft" | json_field leader)
out=$dir/results
{
  mkdir -p "$dir/n1"
  $Z perf fsync --dir "$dir/n1" -n 500
  $Z perf metadata --admin "$(admin "$leader")" -n 1000 -c 1 --prefix base
  $Z perf dolly-put -e "$(dolly 1),$(dolly 2),$(dolly 3)" -n "$N" -c "$DEALERS" --window "$WINDOW" --keys 10000
  $Z perf dolly-put -e "$(dolly "$leader")" -n "$N" -c "$DEALERS" --window "$WINDOW" --keys 10000
  $Z perf dolly-get -e "$(dolly "$leader")" -n "$GETS" -c "$DEALERS" --window "$WINDOW" --keys 10000
  $Z perf raw -n "$GETS" -s 100
} | tee "$out"
field() { grep "^perf $1 " "$out" | sed -n "${3:-1}p" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
awk -v fs="$(field fsync p50_ms)" -v meta="$(field metadata commits_per_s)" \
    -v pa="$(field dolly-put per_second 1)" -v p99a="$(field dolly-put p99_ms 1)" \
    -v pl="$(field dolly-put per_second 2)" -v p99l="$(field dolly-put p99_ms 2)" \
    -v g="$(field dolly-get per_second)" -v g99="$(field dolly-get p99_ms)" \
    -v raw="$(field raw msg_per_s)" 'BEGIN {
  printf "Dolly Puts via all 3 nodes: %d/s, p99 %.2f ms = %.1f x one metadata commit/s (%d/s), p99 = %.1f x fsync p50\n", pa, p99a, pa / meta, meta, p99a / fs
  printf "Dolly Puts via the leader:  %d/s, p99 %.2f ms = %.1f x one metadata commit/s\n", pl, p99l, pl / meta
  printf "Dolly Gets on one node:     %d/s, p99 %.2f ms = %.2f x raw PUSH/PULL msg/s (%d)\n", g, g99, g / raw, raw
}'
