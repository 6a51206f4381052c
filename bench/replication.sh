#!/usr/bin/env bash
# zper replication benchmark (issue #4): three release nodes on loopback, then in the same run
#   - mode 1 (pipelined DEALER, acknowledged-durable only) to a topic with 1 replica (baseline)
#     and to one with 3 replicas (acks only when every in-sync replica has it durable),
#   - failover: kill -9 of the 3-replica topic's leader, then the time until a mode-2 write
#     through a survivor is acknowledged (the writer is retried on both survivors).
# Prints every summary line and the ratio. Bounded: N messages per step, 20 s per failover.
set -euo pipefail
N=${N:-500000}
PORT_BASE=27000
EXTRA_CONF="flush_messages = 1000
flush_interval = 1000"
. "$(dirname "$0")/cluster.sh"
leader_of() { python3 -c "import json,sys; print(json.load(sys.stdin)['fragments'][0]['leader'])"; }
for i in 1 2 3; do start $i; done
wait_ready
lead() { curl -sf -X POST "http://$(admin 1)/v1/topics/$1" -d "{\"replication_factor\": $2}" | leader_of; }
l1=$(lead rf1 1)
l3=$(lead rf3 3)
sleep 0.5
out=$dir/results
{
  $Z perf produce -t rf1 -w "$(writer "$l1")" -n "$N" -m 1
  $Z perf produce -t rf3 -w "$(writer "$l3")" -n "$N" -m 1
} | tee "$out"
# Failover: kill the rf3 leader, then retry a mode-2 write on the survivors until acked.
kill -9 "${pids[$l3 - 1]}"
t0=$(date +%s%N)
acked=""
while [ -z "$acked" ] && [ $(( ($(date +%s%N) - t0) / 1000000 )) -lt 20000 ]; do
  for s in 1 2 3; do
    [ "$s" = "$l3" ] && continue
    if $Z produce -t rf3 -m 2 -w "$(writer "$s")" --timeout 300 after-kill 2>/dev/null; then
      acked=$s
      break
    fi
  done
done
t1=$(date +%s%N)
echo "perf failover killed=$l3 acked_by=${acked:-none} kill_to_ack_ms=$(( (t1 - t0) / 1000000 ))" | tee -a "$out"
field() { grep "^perf $1 " "$out" | sed -n "${3:-1}p" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
awk -v r1="$(field produce msg_per_s 1)" -v r3="$(field produce msg_per_s 2)" -v f="$(field failover kill_to_ack_ms)" 'BEGIN {
  printf "mode 1 acknowledged msg/s: RF 3 %d vs RF 1 %d = %.2f (goal >= 0.50)\n", r3, r1, r3 / r1
  printf "kill -9 of the leader -> next acknowledged write: %d ms (goal < 2000)\n", f
}'
