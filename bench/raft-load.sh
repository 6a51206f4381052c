#!/usr/bin/env bash
# Raft under CPU load (issue #13): three nodes on loopback, LOAD_S seconds of CPU hogs (HOGS busy
# loops on top of the nodes) and 16 concurrent metadata writers, once with the old Raft timing
# (heartbeat 50 ms, election 300 ms) and once with the defaults (100 / 500). Prints, per
# setting, the Raft term changes (each one an election: a healthy busy cluster should have 0)
# and the replication RPC timeouts the nodes logged, then the ratio new / old.
# Bounded: LOAD_S seconds per setting. ZPER_BIN=<binary> skips the release build.
set -euo pipefail
LOAD_S=${LOAD_S:-60}
HOGS=${HOGS:-4}
run() {
  (
    PORT_BASE=27000
    EXTRA_CONF="raft.heartbeat_ms = $1
raft.election_timeout_ms = $2"
    . "$(dirname "$0")/cluster.sh"
    term() {
      for i in 1 2 3; do curl -sf "http://$(admin "$i")/v1/raft" || echo '{}'; echo; done \
        | python3 -c "import json,sys; print(max([json.loads(l).get('term',0) for l in sys.stdin if l.strip()] or [0]))"
    }
    for i in 1 2 3; do RUST_LOG=warn,openraft=warn start $i; done
    wait_ready
    before=$(term)
    hogs=()
    for _ in $(seq 1 "$HOGS"); do (while :; do :; done) & hogs+=($!); done
    timeout "$LOAD_S" $Z perf metadata --admin "$(admin 1)" -n 1000000 -c 16 --prefix load >/dev/null 2>&1 || true
    kill "${hogs[@]}" 2>/dev/null || true
    after=$(term)
    timeouts=$(cat "$dir"/n*.log | grep -ci "timeout" || true)
    echo "heartbeat $1 ms, election $2 ms: term changes $((after - before)), RPC timeouts logged $timeouts"
  )
}
old=$(run 50 300 | tail -1); echo "$old"
new=$(run 100 500 | tail -1); echo "$new"
python3 - "$old" "$new" <<'PY'
import re, sys
pat = r"term changes (-?\d+), RPC timeouts logged (\d+)"
(o_terms, o_to), (n_terms, n_to) = (re.search(pat, a).groups() for a in sys.argv[1:3])
print(f"term changes new/old: {n_terms}/{o_terms}; RPC timeouts new/old: {n_to}/{o_to}")
PY
