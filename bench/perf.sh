#!/usr/bin/env bash
# zper benchmark (issue #2): one release node on loopback ports, then in the same run
#   - raw libzmq PUSH/PULL baseline (same count and size),
#   - fdatasync latency baseline of the data disk,
#   - producer mode 0 (send rate), mode 1 (pipelined DEALER, acknowledged-durable only),
#     mode 2 (64 REQ clients, p50/p99), and the consumer.
# Prints every summary line and the ratios against the baselines. Bounded: N messages per step.
set -euo pipefail
N=${N:-1000000}
REQ_CLIENTS=${REQ_CLIENTS:-64}
PORT_BASE=25500
NODE_CONF="flush_messages = 1000
flush_interval = 1000"
. "$(dirname "$0")/node.sh"
W=$(port 55)
R=$(port 56)
out=$dir/results
{
  $Z perf raw -n "$N"
  $Z perf fsync --dir "$dir/data" -n 500
  $Z perf produce -t bench0 -w $W -n "$N" -m 0
  $Z perf produce -t bench1 -w $W -n "$N" -m 1
  $Z perf produce -t bench2 -w $W -n "$N" -m 2 -c "$REQ_CLIENTS"
  $Z perf consume -t bench1 -r $R -n "$N"
} | tee "$out"
field() { grep "^perf $1 " "$out" | sed -n "${3:-1}p" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
raw=$(field raw msg_per_s)
m0=$(field produce msg_per_s 1)
m1=$(field produce msg_per_s 2)
m2p99=$(field produce p99_ms 3)
fs99=$(field fsync p99_ms)
fs50=$(field fsync p50_ms)
cons=$(field consume msg_per_s)
awk -v raw="$raw" -v m0="$m0" -v m1="$m1" -v p99="$m2p99" -v f50="$fs50" -v f99="$fs99" -v c="$cons" 'BEGIN {
  printf "ratio mode0/raw=%.2f (goal >= 0.60)\n", m0 / raw
  printf "mode1 durable msg/s=%d (goal >= 200000)\n", m1
  printf "mode2 p99=%.3f ms = %.2f x fsync p50 (%.3f ms), %.2f x fsync p99 (%.3f ms) (goal <= 3 fsyncs)\n", p99, p99 / f50, f50, p99 / f99, f99
  printf "consumer msg/s=%d (goal >= 1000000)\n", c
}'
