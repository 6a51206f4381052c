#!/usr/bin/env bash
# Two zper binaries side by side (a refactor, a change, a release against the last one): for
# ROUNDS interleaved rounds, each binary runs a fresh release node on loopback ports and its own
# perf tools produce N messages in mode 0, 1 and 2 (REQ_CLIENTS REQ clients) and consume them.
# Prints every summary line, then per step the median msg/s of each binary and B/A.
#   bench/compare.sh OLD_BINARY NEW_BINARY
# CONF_A / CONF_B add config lines to A's / B's node, so one binary can be compared with itself
# under two settings, e.g. the writer's engines (issue #17):
#   CONF_A="writer.engine = libzmq" CONF_B="writer.engine = zmtp" bench/compare.sh Z Z
set -euo pipefail
# shellcheck source=lib/node-config.sh
. "$(dirname "$0")/lib/node-config.sh"
A=${1:?usage: bench/compare.sh BINARY_A BINARY_B}
B=${2:?usage: bench/compare.sh BINARY_A BINARY_B}
N=${N:-500000}
ROUNDS=${ROUNDS:-3}
REQ_CLIENTS=${REQ_CLIENTS:-64}
P=${PORT_BASE:-26500}
out=$(mktemp)
run() { # label binary extra-config
  local label=$1 z=$2 extra=$3 dir pid
  dir=$(mktemp -d)
  node_config "$dir" "$P" "flush_messages = 1000
flush_interval = 1000
$extra" > "$dir/node.properties"
  RUST_LOG=warn "$z" --config "$dir/node.properties" &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((P + 44))/v1/status/ready" >/dev/null && break; sleep 0.2; done
  local w=127.0.0.1:$((P + 55)) r=127.0.0.1:$((P + 56))
  {
    "$z" perf produce -t m0 -w $w -n "$N" -m 0
    "$z" perf produce -t m1 -w $w -n "$N" -m 1
    "$z" perf produce -t m2 -w $w -n "$((N / 10))" -m 2 -c "$REQ_CLIENTS"
    "$z" perf consume -t m1 -r $r -n "$N"
  } | sed "s/^/$label /" | tee -a "$out"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
for i in $(seq "$ROUNDS"); do
  run A "$A" "${CONF_A:-}"
  run B "$B" "${CONF_B:-}"
done
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
pick() { # label tool n-th-of-round field
  grep "^$1 perf $2 " "$out" | awk -v k="$3" -v per="$5" '(NR - 1) % per == k - 1' | tr ' ' '\n' | sed -n "s/^$4=//p" | median
}
for step in "produce 1 3 mode0" "produce 2 3 mode1" "produce 3 3 mode2" "consume 1 1 consume"; do
  set -- $step
  a=$(pick A "$1" "$2" msg_per_s "$3"); b=$(pick B "$1" "$2" msg_per_s "$3")
  awk -v s="$4" -v a="$a" -v b="$b" 'BEGIN { printf "%-8s A %10.0f msg/s  B %10.0f msg/s  B/A %.2f\n", s, a, b, b / a }'
done
rm -f "$out"
