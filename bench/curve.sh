#!/usr/bin/env bash
# Issue #19's benchmark: mode-1 produce with CURVE on against off, same binary, same run. For
# ROUNDS interleaved rounds, two fresh release nodes on loopback ports (one plain, one with
# `curve.secret_key_file`) each take N messages of SIZE bytes in mode 1 from `zper perf
# produce` (libzmq with libsodium on the client side, zper's own engine on the node), the two
# taking turns going first. Each line also gets the CPU time the node and the producer spent,
# in microseconds per message (user + system, from /proc and the shell's `time`): on a small
# machine both ends share the cores, so the ratio is bounded by what encryption costs on both.
#
# For scale, the same rounds run libzmq against itself (`zper perf raw`: PUSH -> PULL of the
# same two-frame messages, in clear and with CURVE): libzmq's own curve/plain on this machine.
#
# Prints every summary line, then the medians: msg/s and CPU per message of each, curve/plain
# for zper (goal >= 0.7) and for libzmq.
#   bench/curve.sh ZPER_BINARY
# Env: N (500000), SIZE (100), ROUNDS (3), PORT_BASE (28600).
set -euo pipefail
# shellcheck source=lib/node-config.sh
. "$(dirname "$0")/lib/node-config.sh"
Z=${1:?usage: bench/curve.sh ZPER_BINARY}
N=${N:-500000}
SIZE=${SIZE:-100}
ROUNDS=${ROUNDS:-3}
P=${PORT_BASE:-28600}
HZ=$(getconf CLK_TCK)
out=$(mktemp)
dir=$(mktemp -d)
trap 'rm -rf "$dir" "$out"' EXIT
"$Z" keygen "$dir/node" >/dev/null
mkdir -p "$dir/clients"
"$Z" keygen "$dir/clients/bench" >/dev/null
client_flags="--curve-server-key $dir/node.key --curve-secret-key-file $dir/clients/bench.key_secret"
TIMEFORMAT='%U %S'

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# us_per_msg SECONDS: microseconds per message.
us_per_msg() { awk -v s="$1" -v n="$N" 'BEGIN { printf "%.2f", s * 1e6 / n }'; }
# timed LABEL CMD...: runs CMD, prints its summary line prefixed with LABEL and followed by
# client_us_per_msg (and node_us_per_msg when NODE_PID is set), and records it.
timed() {
  local label=$1 before=0 after node=""
  shift
  [ -n "${NODE_PID:-}" ] && before=$(ticks "$NODE_PID")
  { time "$@" >"$dir/line" 2>"$dir/err"; } 2>"$dir/time" || { cat "$dir/err" >&2; return 1; }
  if [ -n "${NODE_PID:-}" ]; then
    after=$(ticks "$NODE_PID")
    node=" node_us_per_msg=$(us_per_msg "$(awk -v t=$((after - before)) -v hz="$HZ" 'BEGIN { print t / hz }')")"
  fi
  local client
  client=$(us_per_msg "$(awk '{ print $1 + $2 }' "$dir/time")")
  echo "$label $(cat "$dir/line") client_us_per_msg=$client$node" | tee -a "$out"
}

run() { # KIND ROUND
  local kind=$1 round=$2 extra="" flags=""
  rm -rf "$dir/data"
  if [ "$kind" = curve ]; then
    extra="curve.secret_key_file = $dir/node.key_secret
curve.clients = $dir/clients"
    flags=$client_flags
  fi
  node_config "$dir" "$P" "flush_messages = 1000
flush_interval = 1000
$extra" > "$dir/node.properties"
  RUST_LOG=warn "$Z" --config "$dir/node.properties" &
  NODE_PID=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((P + 44))/v1/status/ready" >/dev/null && break; sleep 0.2; done
  # shellcheck disable=SC2086
  timed "round $round: $kind" "$Z" perf produce -t "${kind}r$round" -w "127.0.0.1:$((P + 55))" \
    -n "$N" -s "$SIZE" -m 1 $flags
  kill "$NODE_PID"; wait "$NODE_PID" 2>/dev/null || true
  NODE_PID=""
}

for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then kinds="plain curve"; else kinds="curve plain"; fi
  for kind in $kinds; do run "$kind" "$round"; done
  timed "round $round: libzmq-plain" "$Z" perf raw -n "$N" -s "$SIZE"
  timed "round $round: libzmq-curve" "$Z" perf raw -n "$N" -s "$SIZE" --curve
done

median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
pick() { grep ": $1 " "$out" | tr ' ' '\n' | sed -n "s/^$2=//p" | median; }
echo
echo "medians of $ROUNDS rounds ($N messages of $SIZE bytes; CPU in us per message, user + system):"
for kind in plain curve; do
  printf "zper %-6s %10.0f msg/s  node %5.2f us  producer %5.2f us\n" "$kind" \
    "$(pick "$kind" msg_per_s)" "$(pick "$kind" node_us_per_msg)" "$(pick "$kind" client_us_per_msg)"
done
for kind in plain curve; do
  printf "libzmq %-6s %8.0f msg/s  both ends %5.2f us\n" "$kind" \
    "$(pick "libzmq-$kind" msg_per_s)" "$(pick "libzmq-$kind" client_us_per_msg)"
done
awk -v p="$(pick plain msg_per_s)" -v c="$(pick curve msg_per_s)" \
  -v lp="$(pick libzmq-plain msg_per_s)" -v lc="$(pick libzmq-curve msg_per_s)" \
  'BEGIN { printf "curve/plain: zper %.2f (goal >= 0.7), libzmq against itself %.2f\n", c / p, lc / lp }'
# When the producer and the node share every core, throughput can be no better than the
# inverse ratio of the CPU both ends spend per message.
awk -v pn="$(pick plain node_us_per_msg)" -v pc="$(pick plain client_us_per_msg)" \
  -v cn="$(pick curve node_us_per_msg)" -v cc="$(pick curve client_us_per_msg)" \
  'BEGIN { printf "CPU per message (node + producer) plain/curve: %.2f (what curve/plain comes to when both runs are CPU-bound on shared cores)\n", (pn + pc) / (cn + cc) }'
