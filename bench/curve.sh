#!/usr/bin/env bash
# Issue #19's benchmark: mode-1 produce with CURVE on against off, same binary, same run. For
# ROUNDS interleaved rounds, two fresh release nodes on loopback ports (one plain, one with
# `curve.secret_key_file`) each take N messages of SIZE bytes in mode 1 from `zper perf
# produce` (libzmq with libsodium on the client side, zper's own engine on the node), the two
# taking turns going first. Prints every summary line, then the median msg/s of each and
# curve/plain (goal >= 0.7).
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
out=$(mktemp)
dir=$(mktemp -d)
trap 'rm -rf "$dir" "$out"' EXIT
"$Z" keygen "$dir/node" >/dev/null
mkdir -p "$dir/clients"
"$Z" keygen "$dir/clients/bench" >/dev/null
client_flags="--curve-server-key $dir/node.key --curve-secret-key-file $dir/clients/bench.key_secret"
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
  local pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((P + 44))/v1/status/ready" >/dev/null && break; sleep 0.2; done
  # shellcheck disable=SC2086
  "$Z" perf produce -t "${kind}r$round" -w "127.0.0.1:$((P + 55))" -n "$N" -s "$SIZE" -m 1 $flags \
    | sed "s/^/round $round: $kind /" | tee -a "$out"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then kinds="plain curve"; else kinds="curve plain"; fi
  for kind in $kinds; do run "$kind" "$round"; done
done
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
pick() { grep ": $1 " "$out" | tr ' ' '\n' | sed -n 's/^msg_per_s=//p' | median; }
echo
echo "medians of $ROUNDS rounds ($N messages of $SIZE bytes in mode 1):"
p=$(pick plain); c=$(pick curve)
awk -v p="$p" -v c="$c" 'BEGIN { printf "plain %10.0f msg/s  curve %10.0f msg/s  curve/plain %.2f\n", p, c, c / p }'
