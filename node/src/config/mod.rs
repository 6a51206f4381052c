//! Node configuration: ZPER's `server.properties` keys and defaults (spec `zper.md` §7) plus the
//! seed's keys. Values are trimmed (the original keeps trailing blanks, so `decoder = true `
//! meant false); a bad value is an error naming the key; an unknown key is a warning.

mod cluster;
mod curve;
pub mod keys;
mod show;
#[cfg(test)]
mod tests;
mod values;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;
use zper_store::{FlushPolicy, StoreConfig};
use zper_wire::endpoint;

use cluster::cluster_settings;
pub use cluster::ClusterSettings;
use curve::curve_settings;
pub use curve::{CurveEndpointName, CurveSettings};
pub use show::{effective, Effective, Source};
use values::{bad, boolean, capped, millis, num, valid_endpoint, whole_hours};
pub use values::{MAX_IO_THREADS, MAX_WORKERS};

/// The embedded default configuration (`zper` with no arguments).
pub const DEFAULT_PROPERTIES: &str = include_str!("../../config/default.properties");

/// Reads properties text as ZPER's README writes it (issue #15): Java properties syntax, then
/// each value cleaned by [`clean_value`] (`base_dir = "/data/zper"   # data store base
/// directory` is `/data/zper`).
///
/// Errors: [`ConfigError::File`] naming `path` when the text is not a properties file.
pub fn read_properties(text: &str, path: &Path) -> Result<HashMap<String, String>, ConfigError> {
    let map = java_properties::read(text.as_bytes()).map_err(|e| ConfigError::File {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    Ok(map
        .into_iter()
        .map(|(k, v)| {
            let v = clean_value(&v).to_owned();
            (k, v)
        })
        .collect())
}

/// A value without a trailing comment (`#` after a blank, as in ZPER's README sample
/// `segment_size = 536870912        # segment file size 512M`), surrounding blanks, or one pair
/// of surrounding double or single quotes. A `#` not after a blank stays (`tcp://h:1#x`).
pub fn clean_value(raw: &str) -> &str {
    let mut v = raw;
    if let Some(i) = v
        .char_indices()
        .find(|&(i, c)| c == '#' && v[..i].ends_with([' ', '\t']))
        .map(|(i, _)| i)
    {
        v = &v[..i];
    }
    let v = v.trim();
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return &v[1..v.len() - 1];
        }
    }
    v
}

/// The file layer of a config: `path`'s keys (or the embedded default's when `None`), and the
/// name it is known by in messages.
///
/// Errors: [`ConfigError::File`] when the file cannot be read or is not a properties file.
fn file_layer(path: Option<&Path>) -> Result<(HashMap<String, String>, PathBuf), ConfigError> {
    let (text, name) = match path {
        Some(p) => (
            std::fs::read_to_string(p).map_err(|e| ConfigError::File {
                path: p.to_owned(),
                message: e.to_string(),
            })?,
            p.to_owned(),
        ),
        None => (
            DEFAULT_PROPERTIES.to_owned(),
            PathBuf::from("<embedded default>"),
        ),
    };
    Ok((read_properties(&text, &name)?, name))
}

/// Puts the command line's (key, value) pairs over the file's; any `controller.quorum.*`
/// override replaces every such key of the file (the voter list is given whole).
fn apply_overrides(map: &mut HashMap<String, String>, overrides: &[(String, String)]) {
    if overrides
        .iter()
        .any(|(k, _)| k.starts_with("controller.quorum."))
    {
        map.retain(|k, _| !k.starts_with("controller.quorum."));
    }
    for (k, v) in overrides {
        map.insert(k.clone(), v.clone());
    }
}

/// Configuration errors; each names the key or file.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read or is not a properties file.
    #[error("config file {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Dolly's `peers.json` (key `dolly.peers`) is unreadable or invalid (`dolly.md` §2).
    #[error(transparent)]
    DollyPeers(#[from] crate::dolly::peers::PeersError),
    /// A value that does not parse or is out of range.
    #[error("config key `{key}`: invalid value {value:?}: {expected}")]
    Value {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// What is expected.
        expected: std::borrow::Cow<'static, str>,
    },
}

/// What speaks ZMTP on the writer endpoint (`writer.engine`; issue #17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterEngine {
    /// zper's own engine (default): ZMTP/2.0 and 3.x, DEALER, REQ and PUSH producers, frames
    /// stored as received, producers held back by TCP when their acks pile up.
    Zmtp,
    /// A libzmq ROUTER (ZMTP/3 handshake: libzmq 4 PUSH producers are refused).
    Libzmq,
}

/// What speaks ZMTP on the reader endpoint (`reader.engine`; issue #17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReaderEngine {
    /// zper's own engine (default): ZMTP/2.0 and 3.x, DEALER, REQ and ROUTER clients, FETCH
    /// ranges of the open segment sent from the page cache with `sendfile`, clients held back
    /// by TCP instead of `[0xFF]` when they pipeline past 16 requests.
    Zmtp,
    /// A libzmq ROUTER with worker threads.
    Libzmq,
}

/// Everything a node needs to start (single-node broker, issue #2).
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Segment store settings (`base_dir`, `segment_size`, `flush_*`, `retain_hours`,
    /// `allow_empty_message`).
    pub store: StoreConfig,
    /// ZeroMQ I/O threads (`io_threads`).
    pub io_threads: i32,
    /// Writer ROUTER endpoint (`writer.bind`).
    pub writer_bind: String,
    /// Writer worker threads; topic hash modulo this picks one (`writer.workers`).
    pub writer_workers: usize,
    /// What speaks ZMTP on the writer endpoint (`writer.engine`, issue #17).
    pub writer_engine: WriterEngine,
    /// Reader ROUTER endpoint (`reader.bind`).
    pub reader_bind: String,
    /// Reader worker threads (`reader.workers`).
    pub reader_workers: usize,
    /// What speaks ZMTP on the reader endpoint (`reader.engine`, issue #17).
    pub reader_engine: ReaderEngine,
    /// Ack PUB endpoint (`ack.bind`).
    pub ack_bind: String,
    /// Controller ROUTER endpoint (`controller.bind`).
    pub controller_bind: String,
    /// Replication ROUTER endpoint (`replica.bind`, default `tcp://*:5560`; issue #4).
    pub replica_bind: String,
    /// Replication endpoint other nodes connect to (`replica.advertise`; default: `replica.bind`
    /// with the advertised HTTP host). Set it when replicas reach this node through a proxy,
    /// NAT or another port.
    pub replica_advertise: Option<String>,
    /// Endpoints clients are told instead of the bound ones (`writer.advertise`,
    /// `reader.advertise`, `ack.advertise`, `controller.advertise`, `relay.advertise`,
    /// `dolly.requests.advertise`, `dolly.updates.advertise`, `dolly.snapshots.advertise`;
    /// issue #15): key -> endpoint. Other nodes keep using the bound ports with the advertised
    /// HTTP host.
    pub client_advertise: std::collections::BTreeMap<String, String>,
    /// Relay ROUTER endpoint: push delivery to subscribers and the results back-channel
    /// (`relay.bind`, default `tcp://*:5559`, the README's ZPRelay; issue #7).
    pub relay_bind: String,
    /// Subscriber session lease (`subscription.lease_ms`, default 10000, at least 100): a
    /// subscriber that sends no KEEPALIVE for this long leaves its group.
    pub subscription_lease: Duration,
    /// Dolly requests ROUTER endpoint (`dolly.requests.bind`, default `tcp://*:3266`, the
    /// requests port of Dolly's fixture; issue #5).
    pub dolly_requests_bind: String,
    /// Dolly updates PUB endpoint, bound only while this node is the Raft (and so Dolly)
    /// leader (`dolly.updates.bind`, default `tcp://*:3264`; `dolly.md` §3).
    pub dolly_updates_bind: String,
    /// Dolly snapshots ROUTER endpoint, bound only while leading (`dolly.snapshots.bind`,
    /// default `tcp://*:3265`).
    pub dolly_snapshots_bind: String,
    /// How long a Dolly Put may take to commit before it is cancelled and answered with an
    /// `Error` (`dolly.put_timeout_ms`, default 2000: the Dolly client's `-t 2s`).
    pub dolly_put_timeout: Duration,
    /// A replica not caught up with its leader for this long leaves the ISR
    /// (`replica.lag_ms`, default 5000).
    pub replica_lag: Duration,
    /// Fewest in-sync replicas (leader included) for a write that needs an ack (`min_insync`;
    /// default 2 when a topic has 3 or more replicas, else 1; capped at the replica count).
    pub min_insync: Option<u64>,
    /// `acks = leader`: acks once the leader has the message durable, as a single node does
    /// (readers still stop at the high-water mark); `acks = all` (default): once every in-sync
    /// replica has it.
    pub acks_leader: bool,
    /// Whether a write to an unknown topic creates it (`auto_create_topics`, default true,
    /// as ZPER does); when false such writes get status 105 until the topic is created.
    pub auto_create_topics: bool,
    /// Largest frame accepted from a producer, bytes (`max_message`); also bounds FETCH replies.
    pub max_message: usize,
    /// Heap bytes past which the node refuses to build more large replies (`memory_budget`,
    /// default 1 GiB, at least 16 MiB; issue #13): reader FETCHes get `[0xFF]` and replica
    /// fetches are cut to 64 KiB until memory is back under it. See `crate::memory`.
    pub memory_budget: u64,
    /// Writer ROUTER receive high-water mark, messages (`receive_hwm`).
    pub receive_hwm: i32,
    /// Writer socket SO_RCVBUF, bytes (`receive_buffer`).
    pub receive_buffer: i32,
    /// Reader socket SO_SNDBUF, bytes (`send_buffer`).
    pub send_buffer: i32,
    /// How often retention runs.
    pub retention_check: Duration,
    /// Idempotent producers (issue #18): messages remembered per producer
    /// (`idempotence.window_messages`), for how long (`idempotence.window`), and how many
    /// producers per fragment (`idempotence.max_producers`).
    pub idempotence_window_messages: usize,
    /// See [`NodeConfig::idempotence_window_messages`].
    pub idempotence_window: Duration,
    /// See [`NodeConfig::idempotence_window_messages`].
    pub idempotence_max_producers: usize,
    /// Cluster (Raft metadata group) settings.
    pub cluster: ClusterSettings,
    /// CURVE on the node's ZMQ endpoints (`curve.*`, issue #19).
    pub curve: CurveSettings,
    /// Keys that were present but are unknown (reported as warnings).
    pub unknown_keys: Vec<String>,
    /// ZPER keys that were present and have no effect in zper, each with why (reported as
    /// warnings; [`keys::NO_EFFECT`]).
    pub no_effect_keys: Vec<(String, &'static str)>,
}

impl Default for NodeConfig {
    /// The original's code defaults (§7) with `base_dir = ./data` and the ack endpoint on 5557.
    fn default() -> Self {
        NodeConfig {
            store: StoreConfig::default(),
            io_threads: 1,
            writer_bind: endpoint::WRITER.default_bind(),
            writer_workers: 5,
            writer_engine: WriterEngine::Zmtp,
            reader_bind: endpoint::READER.default_bind(),
            reader_workers: 5,
            reader_engine: ReaderEngine::Zmtp,
            ack_bind: endpoint::ACK.default_bind(),
            controller_bind: endpoint::CONTROLLER.default_bind(),
            replica_bind: endpoint::REPLICA.default_bind(),
            replica_advertise: None,
            client_advertise: std::collections::BTreeMap::new(),
            relay_bind: endpoint::RELAY.default_bind(),
            subscription_lease: Duration::from_millis(10_000),
            dolly_requests_bind: endpoint::DOLLY_REQUESTS.default_bind(),
            dolly_updates_bind: endpoint::DOLLY_UPDATES.default_bind(),
            dolly_snapshots_bind: endpoint::DOLLY_SNAPSHOTS.default_bind(),
            dolly_put_timeout: Duration::from_millis(2000),
            replica_lag: Duration::from_millis(5000),
            min_insync: None,
            acks_leader: false,
            auto_create_topics: true,
            max_message: 8_388_608,
            memory_budget: 1 << 30,
            receive_hwm: 1024,
            receive_buffer: 1_048_576,
            send_buffer: 1_048_576,
            retention_check: Duration::from_secs(60),
            idempotence_window_messages: 4096,
            idempotence_window: Duration::from_secs(120),
            idempotence_max_producers: 1024,
            cluster: ClusterSettings::default(),
            curve: CurveSettings::default(),
            unknown_keys: Vec::new(),
            no_effect_keys: Vec::new(),
        }
    }
}

impl NodeConfig {
    /// The embedded default file, parsed.
    pub fn embedded() -> Result<Self, ConfigError> {
        Self::from_properties_str(DEFAULT_PROPERTIES, Path::new("<embedded default>"))
    }

    /// Reads a properties file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        Self::from_properties_str(&text, path)
    }

    /// Reads `path` (or the embedded default when `None`), then applies `overrides` (key,
    /// value) on top, as the command line's flags do. An override of any `controller.quorum.*`
    /// key replaces every such key of the file (the voter list is given whole).
    ///
    /// Errors: as [`NodeConfig::from_file`] and [`NodeConfig::from_map`].
    pub fn load(path: Option<&Path>, overrides: &[(String, String)]) -> Result<Self, ConfigError> {
        let (mut map, _) = file_layer(path)?;
        apply_overrides(&mut map, overrides);
        Self::from_map(&map)
    }

    /// Parses properties text (`path` only names it in errors).
    pub fn from_properties_str(text: &str, path: &Path) -> Result<Self, ConfigError> {
        Self::from_map(&read_properties(text, path)?)
    }

    /// Builds a config from key/value pairs over the code defaults.
    pub fn from_map(map: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let mut c = NodeConfig::default();
        let get = |k: &str| map.get(k).map(|v| v.trim().to_owned());
        if let Some(v) = get("base_dir") {
            if v.is_empty() {
                return Err(bad("base_dir", &v, "a directory path"));
            }
            c.store.base_dir = PathBuf::from(v);
        }
        c.store.segment_size = num(map, "segment_size", c.store.segment_size, 1)?;
        let flush_messages = num(map, "flush_messages", c.store.flush.flush_messages, 1)?;
        let flush_ms = millis(
            map,
            "flush_interval",
            c.store.flush.flush_interval.as_millis() as u64,
            1,
        )?;
        c.store.flush = FlushPolicy {
            flush_messages,
            flush_interval: Duration::from_millis(flush_ms),
        };
        let hours: u64 = whole_hours(map, "retain_hours", 168)?;
        c.store.retain = Duration::from_secs(hours.saturating_mul(3600));
        c.store.allow_empty_message = boolean(map, "allow_empty_message", true)?;
        // `decoder` only picks how the original buffers input; zper stores what decoder mode
        // stores (§4.2), so the key is validated and otherwise has no effect.
        boolean(map, "decoder", true)?;
        c.max_message = num(map, "max_message", c.max_message as u64, 1)? as usize;
        c.memory_budget = num(map, "memory_budget", c.memory_budget, 16 << 20)?;
        c.receive_hwm = num(map, "receive_hwm", c.receive_hwm as u64, 0)? as i32;
        c.receive_buffer = num(map, "receive_buffer", c.receive_buffer as u64, 0)? as i32;
        c.send_buffer = num(map, "send_buffer", c.send_buffer as u64, 0)? as i32;
        c.io_threads = capped(map, "io_threads", 1, MAX_IO_THREADS)? as i32;
        c.writer_workers = capped(map, "writer.workers", 5, MAX_WORKERS)? as usize;
        c.writer_engine = match get("writer.engine").as_deref().map(str::trim) {
            None => c.writer_engine,
            Some("zmtp") => WriterEngine::Zmtp,
            Some("libzmq") => WriterEngine::Libzmq,
            Some(other) => return Err(bad("writer.engine", other, "zmtp or libzmq")),
        };
        c.reader_workers = capped(map, "reader.workers", 5, MAX_WORKERS)? as usize;
        c.reader_engine = match get("reader.engine").as_deref().map(str::trim) {
            None => c.reader_engine,
            Some("zmtp") => ReaderEngine::Zmtp,
            Some("libzmq") => ReaderEngine::Libzmq,
            Some(other) => return Err(bad("reader.engine", other, "zmtp or libzmq")),
        };
        c.idempotence_window_messages = num(map, "idempotence.window_messages", 4096, 1)? as usize;
        c.idempotence_window =
            Duration::from_millis(millis(map, "idempotence.window", 120_000, 1)?);
        c.idempotence_max_producers = num(map, "idempotence.max_producers", 1024, 1)? as usize;
        c.cluster = cluster_settings(map)?;
        c.curve = curve_settings(map)?;
        // peers.json (Dolly's own config, `dolly.md` §2) gives this node's Dolly ports; the
        // dolly.*.bind keys, when present, win.
        if let Some(path) = get("dolly.peers") {
            let path = Path::new(&path);
            let peers = crate::dolly::peers::load(path)?;
            let explicit = |k: &str| map.contains_key(k);
            let me = crate::dolly::peers::local(
                path,
                &peers,
                get("dolly.name"),
                c.cluster.node_id,
                [
                    !explicit("dolly.requests.bind"),
                    !explicit("dolly.updates.bind"),
                    !explicit("dolly.snapshots.bind"),
                ],
            )?;
            c.dolly_requests_bind = format!("tcp://*:{}", me.requests);
            c.dolly_updates_bind = format!("tcp://*:{}", me.updates);
            c.dolly_snapshots_bind = format!("tcp://*:{}", me.snapshots);
        } else if let Some(name) = get("dolly.name") {
            return Err(bad("dolly.name", &name, "used only with dolly.peers"));
        }
        for (key, field) in [
            ("writer.bind", &mut c.writer_bind),
            ("reader.bind", &mut c.reader_bind),
            ("ack.bind", &mut c.ack_bind),
            ("controller.bind", &mut c.controller_bind),
            ("replica.bind", &mut c.replica_bind),
            ("relay.bind", &mut c.relay_bind),
            ("dolly.requests.bind", &mut c.dolly_requests_bind),
            ("dolly.updates.bind", &mut c.dolly_updates_bind),
            ("dolly.snapshots.bind", &mut c.dolly_snapshots_bind),
        ] {
            if let Some(v) = get(key) {
                if !valid_endpoint(&v) {
                    return Err(bad(
                        key,
                        &v,
                        "a ZeroMQ endpoint such as tcp://*:5555 (port 0-65535 or *), ipc:// or inproc://",
                    ));
                }
                *field = v;
            }
        }
        if let Some(v) = get("replica.advertise") {
            if !v.starts_with("tcp://") || !valid_endpoint(&v) || v.contains('*') {
                return Err(bad(
                    "replica.advertise",
                    &v,
                    "a tcp:// endpoint with a host and port that other nodes can connect to, such as tcp://10.0.0.5:5560",
                ));
            }
            c.replica_advertise = Some(v);
        }
        for key in keys::CLIENT_ADVERTISE {
            if let Some(v) = map.get(*key).map(|v| v.trim().to_owned()) {
                if !v.starts_with("tcp://") || !valid_endpoint(&v) || v.contains('*') {
                    return Err(bad(
                        key,
                        &v,
                        "a tcp:// endpoint with a host and port that clients can connect to, such as tcp://127.0.0.1:15555",
                    ));
                }
                c.client_advertise.insert((*key).to_owned(), v);
            }
        }
        c.replica_lag = Duration::from_millis(millis(map, "replica.lag_ms", 5000, 10)?);
        c.acks_leader = match map.get("acks").map(|v| v.trim()) {
            None | Some("all") => false,
            Some("leader") => true,
            Some(v) => return Err(bad("acks", v, "all or leader")),
        };
        c.auto_create_topics = boolean(map, "auto_create_topics", true)?;
        if map.contains_key("min_insync") {
            c.min_insync = Some(num(map, "min_insync", 1, 1)?);
        }
        c.dolly_put_timeout = Duration::from_millis(millis(map, "dolly.put_timeout_ms", 2000, 10)?);
        c.subscription_lease =
            Duration::from_millis(millis(map, "subscription.lease_ms", 10_000, 100)?);
        let mut unknown: Vec<String> = map.keys().filter(|k| !keys::is_known(k)).cloned().collect();
        unknown.sort();
        c.unknown_keys = unknown;
        let mut no_effect: Vec<(String, &'static str)> = map
            .keys()
            .filter_map(|k| keys::no_effect(k).map(|why| (k.clone(), why)))
            .collect();
        no_effect.sort();
        c.no_effect_keys = no_effect;
        Ok(c)
    }
}
