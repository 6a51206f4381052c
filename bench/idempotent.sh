#!/usr/bin/env bash
# Issue #18's benchmark: idempotent producers against plain ones on one node, same binary, same
# run. For ROUNDS interleaved rounds, a fresh release node on loopback ports takes, each on a
# fresh topic: N messages in mode 1 (plain and --idempotent, taking turns going first), and N/10
# in mode 2 with REQ_CLIENTS senders (the same). Prints every summary line, then per step the
# median msg/s of each and idempotent/plain (goal >= 0.9 in mode 1).
#   bench/idempotent.sh ZPER_BINARY
# Env: N (500000), SIZE (100), ROUNDS (3), REQ_CLIENTS (16), PORT_BASE (28500).
set -euo pipefail
# shellcheck source=lib/node-config.sh
. "$(dirname "$0")/lib/node-config.sh"
Z=${1:?usage: bench/idempotent.sh ZPER_BINARY}
N=${N:-500000}
SIZE=${SIZE:-100}
ROUNDS=${ROUNDS:-3}
REQ_CLIENTS=${REQ_CLIENTS:-16}
P=${PORT_BASE:-28500}
out=$(mktemp)
dir=$(mktemp -d)
trap 'rm -rf "$dir" "$out"' EXIT
for round in $(seq "$ROUNDS"); do
  rm -rf "$dir/data"
  node_config "$dir" "$P" "flush_messages = 1000
flush_interval = 1000" > "$dir/node.properties"
  RUST_LOG=warn "$Z" --config "$dir/node.properties" &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((P + 44))/v1/status/ready" >/dev/null && break; sleep 0.2; done
  w=127.0.0.1:$((P + 55))
  # Plain and idempotent take turns going first, so neither always meets a warmer node.
  if [ $((round % 2)) -eq 1 ]; then kinds="plain idempotent"; else kinds="idempotent plain"; fi
  {
    for mode in 1 2; do
      n=$N clients=1
      [ "$mode" = 1 ] || n=$((N / 10)) clients=$REQ_CLIENTS
      for kind in $kinds; do
        flag=
        [ "$kind" = plain ] || flag=--idempotent
        "$Z" perf produce -t "${kind:0:1}${mode}r$round" -w $w -n "$n" -s "$SIZE" -m "$mode" \
          -c "$clients" $flag | sed "s/^/$kind /"
      done
    done
  } | sed "s/^/round $round: /" | tee -a "$out"
  kill "$pid"; wait "$pid" 2>/dev/null || true
done
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
pick() { grep ": $1 " "$out" | grep " mode=$2 " | tr ' ' '\n' | sed -n 's/^msg_per_s=//p' | median; }
echo
echo "medians of $ROUNDS rounds ($N messages of $SIZE bytes in mode 1, $((N / 10)) with $REQ_CLIENTS senders in mode 2):"
for mode in 1 2; do
  p=$(pick plain $mode); i=$(pick idempotent $mode)
  awk -v m="$mode" -v p="$p" -v i="$i" 'BEGIN { printf "mode %s  plain %10.0f msg/s  idempotent %10.0f msg/s  idempotent/plain %.2f\n", m, p, i, i / p }'
done
