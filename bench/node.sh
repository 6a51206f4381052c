# Sourced by the single-node benchmarks: builds the release binary, writes a node config with
# every endpoint on 127.0.0.1:$PORT_BASE+N (writer 55, reader 56, ack 57, controller 58, relay
# 59, replica 60, Dolly 64-66, HTTP 44) and $NODE_CONF's extra lines, starts the node and waits
# until it is ready. Sets Z (the binary), dir (scratch, removed on exit) and pid.
cd "$(dirname "$0")/.."
# The first release build compiles RocksDB's C++ (15+ minutes on 2 cores).
cargo build --release -q -p zper
Z=${CARGO_TARGET_DIR:-target}/release/zper
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
port() { echo "127.0.0.1:$((PORT_BASE + $1))"; }
cat > "$dir/bench.properties" <<CONF
base_dir = $dir/data
writer.bind = tcp://$(port 55)
reader.bind = tcp://$(port 56)
ack.bind = tcp://$(port 57)
controller.bind = tcp://$(port 58)
relay.bind = tcp://$(port 59)
replica.bind = tcp://$(port 60)
dolly.requests.bind = tcp://$(port 66)
dolly.updates.bind = tcp://$(port 64)
dolly.snapshots.bind = tcp://$(port 65)
http.bind = $(port 44)
${NODE_CONF:-}
CONF
mkdir -p "$dir/data"
RUST_LOG=warn $Z --config "$dir/bench.properties" &
pid=$!
for _ in $(seq 100); do curl -sf "http://$(port 44)/v1/status/ready" >/dev/null && break; sleep 0.2; done
