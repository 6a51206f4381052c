#!/usr/bin/env bash
# zper subscription benchmark (issue #7): one release node on loopback ports; a topic of N
# 100-byte messages written once (mode 1, acknowledged), then in the same run, for K = 1, 4, 16
# readers that each read all N messages:
#   - push: K subscribers of one default-policy group on the relay (batches of up to 10000
#     messages or 1 MiB, window 100000, acknowledging every batch, commits through Raft),
#   - FETCH polling: K reader connections FETCHing 1 MiB at a time (the baseline);
# both readers walk the stored records in place (no per-message allocation),
# and prints the aggregate messages/s of each and the push/FETCH ratio per K.
# Bounded: N messages, 3 x 2 runs.
set -euo pipefail
N=${N:-5000000}
PORT_BASE=26500
NODE_CONF="flush_messages = 1000
flush_interval = 100"
. "$(dirname "$0")/node.sh"
W=$(port 55) R=$(port 56) C=$(port 58)
out=$dir/results
{
  $Z perf produce -t push -w $W -n "$N" -m 1
  for k in 1 4 16; do
    $Z perf subscribe -t push -C $C -k "$k" -n "$N"
    $Z perf subscribe -t push -r $R --fetch -k "$k" -n "$N"
  done
} | tee "$out"
field() { grep "^perf $1 " "$out" | sed -n "${3:-1}p" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
for i in 1 2 3; do
  k=$(field subscribe readers "$i")
  p=$(field subscribe msg_per_s "$i")
  f=$(field fetch-readers msg_per_s "$i")
  awk -v k="$k" -v p="$p" -v f="$f" 'BEGIN {
    printf "K=%-2d push %9d msg/s  FETCH %9d msg/s  push/FETCH = %.2f\n", k, p, f, p / f }'
done
