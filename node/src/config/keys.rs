//! Every configuration key in one table: its name, code default, accepted range and meaning.
//! The unknown-key warning ([`is_known`]), the README's key table ([`markdown`], pinned by a
//! test against README.md) and the defaults' agreement with the parser (a test parses every
//! listed default and expects the code defaults) all come from it.

/// One configuration key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigKey {
    /// The key as written in a properties file (`controller.quorum.N`: one per voter).
    pub name: &'static str,
    /// The code default as a properties value; empty when there is none or it is computed
    /// (the meaning says how).
    pub default: &'static str,
    /// What is accepted.
    pub range: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

const fn key(
    name: &'static str,
    default: &'static str,
    range: &'static str,
    meaning: &'static str,
) -> ConfigKey {
    ConfigKey {
        name,
        default,
        range,
        meaning,
    }
}

/// Every key zper reads (spec `zper.md` §7 for ZPER's, issues #3-#13 for the cluster's).
pub const KEYS: &[ConfigKey] = &[
    key("base_dir", "./data", "a directory path", "data root: `<base_dir>/<topic>/<20-digit start offset>.dat`"),
    key("segment_size", "536870912", "bytes, >= 1", "a segment is closed, and the next one created, after the message that makes it exceed this many bytes"),
    key("flush_messages", "10000", ">= 1", "fdatasync once this many messages are pending (the embedded default file says 1000) ..."),
    key("flush_interval", "10000", "ms or a duration (`2s`), >= 1 ms", "... or this many ms after the first unflushed append (embedded default: 1000)"),
    key("retain_hours", "168", "hours or a duration in hours (`7days`), >= 1", "closed segments older than this are deleted (checked every minute)"),
    key("allow_empty_message", "true", "true or false", "whether an empty final frame counts as a message when recovering"),
    key("decoder", "true", "true or false", "accepted for compatibility; zper always stores what ZPER's decoder mode stores"),
    key("max_message", "8388608", "bytes, >= 1", "largest producer frame (messages with a larger frame are dropped and counted); one FETCH reply is at most this + 9 bytes, so every frame can be fetched"),
    key("memory_budget", "1073741824", "bytes, >= 16777216", "heap bytes past which FETCHes get `[0xFF]` and replica fetches shrink to 64 KiB, so clients that never read their replies cannot grow the node (docs/operations.md, Limits)"),
    key("receive_hwm", "1024", "0-2147483647", "writer RCVHWM (`writer.engine = libzmq`; zper's engine holds at most 2 x `max_message` per connection and lets TCP hold producers back)"),
    key("receive_buffer", "1048576", "bytes, 0-2147483647", "writer SO_RCVBUF (`writer.engine = libzmq`; zper's engine keeps the system default)"),
    key("send_buffer", "1048576", "bytes, 0-2147483647", "reader SO_SNDBUF (`reader.engine = libzmq`; zper's engine keeps the system default)"),
    key("io_threads", "1", "1-64", "ZeroMQ I/O threads"),
    key("writer.bind", "tcp://*:5555", "ZeroMQ endpoint", "writer endpoint (zper's ZMTP engine takes `tcp://HOST:PORT` only)"),
    key("writer.engine", "zmtp", "zmtp or libzmq", "what speaks ZMTP on the writer: zper's own engine (ZMTP/2.0 and 3.x, DEALER, REQ and PUSH producers, frames stored as received, producers held back by TCP when their acks pile up, docs/protocol.md) or a libzmq ROUTER (refuses libzmq 4 PUSH producers)"),
    key("writer.workers", "5", "1-256", "writer threads; a topic always goes to the same one (order = arrival order)"),
    key("reader.bind", "tcp://*:5556", "ZeroMQ endpoint", "reader endpoint (zper's ZMTP engine takes `tcp://HOST:PORT` only)"),
    key("reader.workers", "5", "1-256", "reader threads"),
    key("reader.engine", "zmtp", "zmtp or libzmq", "what speaks ZMTP on the reader: zper's own engine (FETCH ranges of the open segment sent with sendfile, clients held back by TCP past 16 requests in progress instead of answered `[0xFF]`, docs/protocol.md) or a libzmq ROUTER"),
    key("ack.bind", "tcp://*:5557", "ZeroMQ endpoint", "ack PUB (flush notices)"),
    key("controller.bind", "tcp://*:5558", "ZeroMQ endpoint", "controller ROUTER (cluster information, subscriptions)"),
    key("replica.bind", "tcp://*:5560", "ZeroMQ endpoint", "replication endpoint (advertised like the others)"),
    key("replica.advertise", "", "tcp://host:port", "the replication endpoint other nodes connect to (behind NAT or a proxy); default: `replica.bind` with the advertised host"),
    key("writer.advertise", "", "tcp://host:port", "the writer endpoint clients are told (controller `NODES`/`TOPIC`, `/v1/brokers`) when they reach the node at another address than other nodes do (compose or NAT published ports); other nodes keep `writer.bind` with the advertised HTTP host"),
    key("reader.advertise", "", "tcp://host:port", "as `writer.advertise`, for the reader"),
    key("ack.advertise", "", "tcp://host:port", "as `writer.advertise`, for the ack PUB"),
    key("controller.advertise", "", "tcp://host:port", "as `writer.advertise`, for the controller"),
    key("relay.advertise", "", "tcp://host:port", "as `writer.advertise`, for the relay (what `SUBSCRIBE` tells subscribers)"),
    key("dolly.requests.advertise", "", "tcp://host:port", "as `writer.advertise`, for Dolly requests"),
    key("dolly.updates.advertise", "", "tcp://host:port", "as `writer.advertise`, for Dolly updates"),
    key("dolly.snapshots.advertise", "", "tcp://host:port", "as `writer.advertise`, for Dolly snapshots"),
    key("replica.lag_ms", "5000", "ms or a duration (`2s`), >= 10 ms", "a replica not caught up with its leader for this long leaves the ISR; it rejoins once caught up"),
    key("relay.bind", "tcp://*:5559", "ZeroMQ endpoint", "relay endpoint: push delivery to subscribers (advertised like the others)"),
    key("subscription.lease_ms", "10000", "ms or a duration (`2s`), >= 100 ms", "a subscriber that sends no `KEEPALIVE` for this long leaves its group"),
    key("min_insync", "", ">= 1", "fewest in-sync replicas (leader included) for a write that waits for an ack; below it such writes get status 103 (docs/protocol.md) and are not stored; default 2 with 3+ replicas, else 1"),
    key("auto_create_topics", "true", "true or false", "whether a write to a topic that does not exist creates it with the defaults; `false`: such writes are refused with status 105 (mode 1 and 2 get it) until `zper topics create` made the topic"),
    key("idempotence.window_messages", "4096", ">= 1", "idempotent producers (mode 0x41/0x42, docs/protocol.md): the newest messages of each producer a fragment leader remembers, so their retries are stored once"),
    key("idempotence.window", "120000", "ms or a duration (`2m`), >= 1 ms", "... and for how long"),
    key("idempotence.max_producers", "1024", ">= 1", "... and how many producers per fragment (when full, the eighth unused the longest is pushed out, each summed up in about 40 bytes until max_producers to 2 * max_producers others were pushed out after it)"),
    key("acks", "all", "all or leader", "`all`: an ack means durable on every in-sync replica; `leader`: durable on the leader (the single-node behaviour; readers still stop at the high-water mark)"),
    key("node.id", "1", ">= 1", "this node's id in the Raft group"),
    key("node.name", "", "text", "human name; default `node<id>`"),
    key("node.lease_ms", "1000", "ms or a duration (`2s`), >= 100 ms", "liveness lease, renewed every quarter of it and at once under a new Raft leader; a node silent this long loses its fragment leaderships (a new Raft leader first waits half a lease); `zper_node_lease_margin_min_seconds` shows how much of it renewals used"),
    key("controller.quorum.N", "", "host:port or tcp://host:port", "voter N's HTTP (Raft) address, not its ZeroMQ controller port; the initial voters (default: this node alone). Every node of a cluster lists all of them; each fresh voter proposes the same initial membership and Raft keeps exactly one. A node whose `node.id` is not among them waits for `zper cluster add-node`"),
    key("http.bind", "0.0.0.0:9644", "host:port", "HTTP admin and Raft address"),
    key("http.advertise", "", "host:port", "the address other nodes and clients use (default: `http.bind` with 127.0.0.1 for an unspecified host); must equal the node's `controller.quorum.N` entry"),
    key("http.admin_token", "", "printable ASCII", "when set, every mutating HTTP request (admin writes, and the Raft RPCs between nodes) needs `Authorization: Bearer <token>`; give every node the same token. The CLI sends it from `--token`, `$ZPER_ADMIN_TOKEN` or `--config`"),
    key("http.admin_token_file", "", "a file path", "as `http.admin_token`, read from this file at start (its text without the line end; for a mounted Secret); set one of the two"),
    key("http.tls_cert", "", "a file path (PEM)", "the admin port's certificate chain, leaf first; with `http.tls_key` and `http.tls_ca` the admin API, the Raft stream and forwarded proposals speak TLS only (HTTP/1.1). The certificate must name the host of `http.advertise` (a DNS name or IP address as a subject alternative name)"),
    key("http.tls_key", "", "a file path (PEM)", "its private key (PKCS#8, PKCS#1 or SEC1)"),
    key("http.tls_ca", "", "a file path (PEM)", "the CA certificates that signed every node's `http.tls_cert`: what this node trusts when it speaks to peers (only these; the system's roots are not used). The CLI uses it from `--config`, or `--tls-ca`"),
    key("curve.secret_key_file", "", "a file path", "turns CurveZMQ (RFC 26) on: the server's key pair, as `zper keygen` writes it (czmq's certificate with `secret-key = \"...\"`, or a bare 40-character Z85 secret key). Clients then need the matching public key; clients without CURVE (JeroMQ 0.3, ZMTP/2.0) cannot connect to a CURVE endpoint"),
    key("curve.clients", "", "a directory, a file, or *", "the authorised client public keys: a directory of key files (czmq `*.key` or bare Z85; `*_secret` and hidden files skipped) or one file with a key per line; read again at most once a second while the node runs, so adding or removing a file takes effect without a restart. `*` admits any client key (encryption only). Required with `curve.secret_key_file`"),
    key("curve.endpoints", "", "writer, reader, ack, controller, relay, replication, dolly (comma-separated)", "the endpoints that require CURVE when it is on (default: all). Replication admits only the cluster's own key pair (every node shares `curve.secret_key_file`); the others admit `curve.clients` and the cluster's key"),
    key("raft.dir", "", "a directory path", "Raft log, vote and snapshots (RocksDB); default `<base_dir>/.raft`"),
    key("raft.heartbeat_ms", "200", "ms or a duration (`2s`), >= 10 ms", "Raft leader heartbeat, which is also how long one replication RPC may take (openraft abandons an AppendEntries after it: keep it above a busy follower's fsync time)"),
    key("raft.election_timeout_ms", "1000", "ms or a duration (`2s`), >= 50 ms, > heartbeat", "election timeout from this to twice this, also how long a follower trusts a silent leader, so a silent (paused, cut off) leader is replaced in about 2-4 s; a leader whose process died (its admin port refuses connections) is replaced at once; keep it several heartbeats long"),
    key("dolly.requests.bind", "tcp://*:3266", "ZeroMQ endpoint", "Dolly requests ROUTER"),
    key("dolly.updates.bind", "tcp://*:3264", "ZeroMQ endpoint", "Dolly updates PUB (every node: its applied Puts in Raft order)"),
    key("dolly.snapshots.bind", "tcp://*:3265", "ZeroMQ endpoint", "Dolly snapshots ROUTER (every node: its applied state)"),
    key("dolly.peers", "", "a file path", "Dolly's `peers.json`: this node's Dolly ports come from its entry (named `dolly.name`, else the one whose `pid` is `node.id`); explicit `dolly.*.bind` keys win"),
    key("dolly.name", "", "a peer name", "this node's entry in `dolly.peers`"),
    key("dolly.put_timeout_ms", "2000", "ms or a duration (`2s`), >= 10 ms", "a Dolly Put not committed by then is cancelled through the log; the `Error` reply comes once the cancel committed, so it never applies later"),
];

/// The `*.advertise` keys that change only what clients are told (issue #15).
pub const CLIENT_ADVERTISE: &[&str] = &[
    "writer.advertise",
    "reader.advertise",
    "ack.advertise",
    "controller.advertise",
    "relay.advertise",
    "dolly.requests.advertise",
    "dolly.updates.advertise",
    "dolly.snapshots.advertise",
];

/// Keys of ZPER's README or shipped file that zper accepts without effect (spec `zper.md` §7:
/// "present in the shipped file but read by nothing"), each with why, for the start-up warning
/// (issue #15). A key ending in `.` is a prefix (`writer.replica.N`).
pub const NO_EFFECT: &[(&str, &str)] = &[
    ("writer.io_threads", "ZeroMQ I/O threads are `io_threads`"),
    ("retention_hours", "retention is `retain_hours`"),
    (
        "relay.poll",
        "the relay pushes messages as they are appended; it does not poll",
    ),
    (
        "writer.replica.",
        "zper places replicas itself: give a topic its copies with `zper topics create --replication-factor N` and list the nodes with `controller.quorum.N`",
    ),
];

/// Why `name` has no effect, for a key of [`NO_EFFECT`].
pub fn no_effect(name: &str) -> Option<&'static str> {
    NO_EFFECT
        .iter()
        .find(|(k, _)| {
            if k.ends_with('.') {
                name.starts_with(k)
            } else {
                name == *k
            }
        })
        .map(|(_, why)| *why)
}

/// True for a key zper reads or accepts (anything else gets the unknown-key warning).
pub fn is_known(name: &str) -> bool {
    name.starts_with("controller.quorum.")
        || KEYS.iter().any(|k| k.name == name)
        || no_effect(name).is_some()
}

/// The known key most like `name` (Jaro-Winkler similarity at least 0.85, as clap suggests
/// flags), for "did you mean" after an unknown key; None when nothing is close.
pub fn suggest(name: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|k| (strsim::jaro_winkler(name, k.name), k.name))
        .filter(|(score, _)| *score >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, key)| key)
}

/// The key table as Markdown (README.md "Configuration" between the `config-keys` markers).
pub fn markdown() -> String {
    let mut out = String::from("| key | default | accepted | meaning |\n|---|---|---|---|\n");
    for k in KEYS {
        let default = if k.default.is_empty() {
            "-".to_owned()
        } else {
            format!("`{}`", k.default)
        };
        out.push_str(&format!(
            "| `{}` | {default} | {} | {} |\n",
            k.name, k.range, k.meaning
        ));
    }
    out
}
