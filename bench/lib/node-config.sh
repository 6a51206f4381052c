# Sourced by the single-node benchmarks. node_config DIR PORT_BASE [EXTRA]: prints a node config
# with data under DIR/data and every endpoint on 127.0.0.1:PORT_BASE+N (writer 55, reader 56,
# ack 57, controller 58, relay 59, replica 60, Dolly 64-66, HTTP 44), then EXTRA's lines.
node_config() {
  local dir=$1 p=$2
  cat <<CONF
base_dir = $dir/data
writer.bind = tcp://127.0.0.1:$((p + 55))
reader.bind = tcp://127.0.0.1:$((p + 56))
ack.bind = tcp://127.0.0.1:$((p + 57))
controller.bind = tcp://127.0.0.1:$((p + 58))
relay.bind = tcp://127.0.0.1:$((p + 59))
replica.bind = tcp://127.0.0.1:$((p + 60))
dolly.requests.bind = tcp://127.0.0.1:$((p + 66))
dolly.updates.bind = tcp://127.0.0.1:$((p + 64))
dolly.snapshots.bind = tcp://127.0.0.1:$((p + 65))
http.bind = 127.0.0.1:$((p + 44))
${3:-}
CONF
}
