# Sourced by the cluster benchmarks: builds the release binary and defines a three-node
# loopback cluster whose ports start at $PORT_BASE (node i: writer PORT_BASE+10i+1, reader +2,
# ack +3, controller +4, replica +5, Dolly requests +6, updates +7, snapshots +8; HTTP admin
# PORT_BASE+643+i). Extra config lines for every
# node come from $EXTRA_CONF. Provides: $Z (the binary), $dir (scratch, removed on exit),
# admin N, writer N, start N, pids, wait_ready; every node is killed on exit.
cd "$(dirname "$0")/.."
# The first release build compiles RocksDB's C++ (15+ minutes on 2 cores). ZPER_BIN=<binary>
# runs that one instead (no build).
if [ -n "${ZPER_BIN:-}" ]; then
  Z=$ZPER_BIN
else
  cargo build --release -q -p zper
  Z=${CARGO_TARGET_DIR:-target}/release/zper
fi
dir=$(mktemp -d)
pids=(0 0 0)
cleanup() {
  for p in "${pids[@]}"; do [ "$p" != 0 ] && kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
admin() { echo "127.0.0.1:$((PORT_BASE + 643 + $1))"; }
writer() { echo "tcp://127.0.0.1:$((PORT_BASE + 10 * $1 + 1))"; }
for i in 1 2 3; do
  b=$((PORT_BASE + 10 * i))
  cat > "$dir/n$i.properties" <<CONF
node.id = $i
base_dir = $dir/n$i
writer.bind = tcp://127.0.0.1:$((b + 1))
reader.bind = tcp://127.0.0.1:$((b + 2))
ack.bind = tcp://127.0.0.1:$((b + 3))
controller.bind = tcp://127.0.0.1:$((b + 4))
replica.bind = tcp://127.0.0.1:$((b + 5))
relay.bind = tcp://127.0.0.1:$((b + 9))
dolly.requests.bind = tcp://127.0.0.1:$((b + 6))
dolly.updates.bind = tcp://127.0.0.1:$((b + 7))
dolly.snapshots.bind = tcp://127.0.0.1:$((b + 8))
http.bind = $(admin $i)
controller.quorum.1 = $(admin 1)
controller.quorum.2 = $(admin 2)
controller.quorum.3 = $(admin 3)
${EXTRA_CONF:-}
CONF
done
start() { RUST_LOG=warn $Z --config "$dir/n$1.properties" 2>>"$dir/n$1.log" & pids[$1 - 1]=$!; }
# Waits (at most 10 s) until every node is ready and registered as live.
wait_ready() {
  for _ in $(seq 1 200); do
    local ok=1
    for i in 1 2 3; do
      curl -sf -o /dev/null "http://$(admin $i)/v1/status/ready" || ok=0
    done
    live=$(curl -sf "http://$(admin 1)/v1/brokers" \
      | python3 -c "import json,sys; print(sum(1 for b in json.load(sys.stdin) if b['live']))" 2>/dev/null || echo 0)
    [ $ok = 1 ] && [ "$live" = 3 ] && return 0
    sleep 0.05
  done
  echo "cluster not ready" >&2
  exit 1
}
