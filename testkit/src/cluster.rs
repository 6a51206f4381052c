//! Three `zper` child processes forming one cluster ([`TestCluster`]), and helpers that read
//! what a topic's copies hold on disk (segment files, message ids, message ends).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::{client, eventually, free_port, get_json, http, identity, ChildNode, CutProxy};

use zper_store::EPOCHS_FILE;

/// Three `zper` nodes (ids 1 to 3, one Raft group, a 1.5 s lease, replication between them) as
/// child processes in a temporary directory, killed on drop. Nodes are numbered from 1 in
/// every method. Its helpers produce in mode 0 or 2, create topics through the admin API, wait
/// for a new leader, and read a topic's segment files on each node.
pub struct TestCluster {
    _dir: tempfile::TempDir,
    /// Node n's data directory (`base_dir`) is `data[n - 1]`; its config and log lie beside it
    /// (`<data>.properties`, `<data>.log`).
    pub data: Vec<PathBuf>,
    /// Node n's HTTP admin port (also its Raft address) is `ports[n - 1]`.
    pub ports: Vec<u16>,
    /// Node n is `nodes[n - 1]`.
    pub nodes: Vec<ChildNode>,
    /// The context of every client socket the helpers open.
    pub ctx: zmq::Context,
}

impl TestCluster {
    /// Three nodes with the default test configuration (see [`TestCluster::start_each`]).
    pub fn start() -> TestCluster {
        Self::start_with("")
    }

    /// Three nodes with `extra` config lines each.
    pub fn start_with(extra: &str) -> TestCluster {
        Self::start_each(|_| extra.to_owned())
    }

    /// Three nodes whose replication is reached through a [`CutProxy`] each (node n's is
    /// `proxies[n - 1]`), so a test can block one node's replication port alone.
    pub fn start_proxied(extra: &str) -> (TestCluster, Vec<CutProxy>) {
        let real: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let proxies: Vec<CutProxy> = real
            .iter()
            .map(|r| CutProxy::start(free_port(), *r))
            .collect();
        let ports: Vec<(u16, u16)> = real
            .iter()
            .zip(&proxies)
            .map(|(r, p)| (*r, p.port))
            .collect();
        let c = Self::start_each(|i| {
            format!(
                "replica.bind = tcp://127.0.0.1:{}\nreplica.advertise = tcp://127.0.0.1:{}\n{extra}",
                ports[i].0, ports[i].1
            )
        });
        (c, proxies)
    }

    /// Three nodes, node i + 1 with `extra(i)` config lines after the defaults (`node.id`, the
    /// three-voter `controller.quorum.*`, `node.lease_ms = 1500`, `flush_interval = 50`; a
    /// later line overrides an earlier one). Returns once every node sees three live brokers.
    pub fn start_each(extra: impl Fn(usize) -> String) -> TestCluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let quorum: String = (0..3)
            .map(|i| format!("controller.quorum.{} = 127.0.0.1:{}\n", i + 1, ports[i]))
            .collect();
        let data: Vec<PathBuf> = (0..3)
            .map(|i| dir.path().join(format!("n{}", i + 1)))
            .collect();
        let nodes = (0..3)
            .map(|i| {
                ChildNode::start_on(
                    &data[i],
                    ports[i],
                    &format!(
                        "node.id = {}\n{quorum}node.lease_ms = 1500\nflush_interval = 50\n{}",
                        i + 1,
                        extra(i)
                    ),
                )
            })
            .collect();
        let c = TestCluster {
            _dir: dir,
            data,
            ports,
            nodes,
            ctx: zmq::Context::new(),
        };
        assert!(
            eventually(|| (1..=3).all(|n| live_brokers(&c.http(n)) == 3)),
            "three live brokers"
        );
        c
    }

    /// Node `node`'s HTTP admin address (`127.0.0.1:port`), for [`http`] and [`get_json`].
    pub fn http(&self, node: u64) -> String {
        format!("127.0.0.1:{}", self.ports[node as usize - 1])
    }

    /// Node `node` (1-based), to kill, pause or restart it.
    pub fn node(&mut self, node: u64) -> &mut ChildNode {
        &mut self.nodes[node as usize - 1]
    }

    /// Creates `topic` with `rf` replicas through node 1's admin API and waits until every
    /// node knows its leader, which it returns.
    pub fn create(&self, topic: &str, rf: u32) -> u64 {
        let (s, body) = http(
            "POST",
            &self.http(1),
            &format!("/v1/topics/{topic}"),
            Some(&format!(r#"{{"replication_factor": {rf}}}"#)),
        )
        .expect("answer");
        assert_eq!(s, 201, "{body}");
        let created: Value = serde_json::from_str(&body).expect("json");
        let leader = created["fragments"][0]["leader"].as_u64().expect("leader");
        assert!(eventually(
            || (1..=3).all(|n| self.fragment(n, topic)["leader"] == json!(leader))
        ));
        // A leader whose lease is not current (right after the cluster started, or a Raft
        // election) refuses writes, silently for mode 0: wait until it may append.
        assert!(
            eventually(|| self.lease_current(leader)),
            "node {leader}'s lease is current"
        );
        leader
    }

    /// True when node `n`'s lease, as `n` itself sees it, is current.
    pub fn lease_current(&self, n: u64) -> bool {
        let brokers = get_json(&self.http(n), "/v1/brokers");
        brokers
            .as_array()
            .into_iter()
            .flatten()
            .any(|b| b["id"] == json!(n) && b["live"] == json!(true))
    }

    /// Waits until a node other than `old` leads `topic` in `survivor`'s view and in the new
    /// leader's own view, and returns it.
    pub fn new_leader(&self, survivor: u64, topic: &str, old: u64) -> u64 {
        assert!(
            eventually(|| {
                let f = self.fragment(survivor, topic);
                f["leader"] != json!(old) && f["leader"].is_u64()
            }),
            "a new leader for {topic}"
        );
        let new = self.fragment(survivor, topic)["leader"]
            .as_u64()
            .expect("leader");
        assert!(eventually(
            || self.fragment(new, topic)["leader"] == json!(new)
        ));
        new
    }

    /// The fragment stored under `key` (`topic` or `topic.k`) as node `via` sees it.
    pub fn fragment_by_key(&self, via: u64, key: &str) -> Option<Value> {
        let (topic, k) = key
            .split_once('.')
            .map_or((key, 0usize), |(t, k)| (t, k.parse().unwrap_or(0)));
        let f = get_json(&self.http(via), &format!("/v1/topics/{topic}"))["fragments"][k].clone();
        f["leader"].is_u64().then_some(f)
    }

    /// Fragment 0 of `topic` as node `via` sees it.
    pub fn fragment(&self, via: u64, topic: &str) -> Value {
        get_json(&self.http(via), &format!("/v1/topics/{topic}"))["fragments"][0].clone()
    }

    /// Sends `ids` in mode 2 (one REQ per message, a fresh one after a timeout) to `node`'s
    /// writer; returns the ids acknowledged.
    pub fn produce_acked(
        &self,
        node: u64,
        topic: &str,
        ids: impl Iterator<Item = u32>,
    ) -> Vec<u32> {
        self.produce(node, topic, ids, false)
    }

    /// As [`TestCluster::produce_acked`], for set-up steps that need every message: a message
    /// refused with 104 (the leader's lease lapsed for a moment on a busy machine) is sent
    /// again once the lease is back, for up to 10 s, unless it was stored before the refusal
    /// (then it counts: the node still leads and holds it).
    pub fn produce_all(&self, node: u64, topic: &str, ids: impl Iterator<Item = u32>) -> Vec<u32> {
        self.produce(node, topic, ids, true)
    }

    /// Sends `ids` in mode 0 (no ack) to `node`'s writer, bodies `message <id>` as in
    /// mode 2 (the socket lingers 1 s after, so they go out).
    pub fn produce_unacked(&self, node: u64, topic: &str, ids: impl Iterator<Item = u32>) {
        let endpoint = &self.nodes[node as usize - 1].writer;
        let dealer = client(&self.ctx, zmq::DEALER, &identity(topic, 0), endpoint);
        for id in ids {
            let body = format!("message {id}");
            dealer
                .send_multipart([&id.to_be_bytes()[..], body.as_bytes()], 0)
                .expect("send");
        }
    }

    /// Mode 2 (one REQ per message) to `node`'s writer; `again`: see
    /// [`TestCluster::produce_all`].
    fn produce(
        &self,
        node: u64,
        topic: &str,
        ids: impl Iterator<Item = u32>,
        again: bool,
    ) -> Vec<u32> {
        let endpoint = self.nodes[node as usize - 1].writer.clone();
        let mut s = client(&self.ctx, zmq::REQ, &identity(topic, 2), &endpoint);
        let mut acked = Vec::new();
        for id in ids {
            let key = id.to_be_bytes();
            let body = format!("message {id}");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                if s.send_multipart([&key[..], body.as_bytes()], 0).is_err() {
                    s = client(&self.ctx, zmq::REQ, &identity(topic, 2), &endpoint);
                    break;
                }
                match s.recv_multipart(0) {
                    Ok(reply) if reply == [key.to_vec()] => acked.push(id),
                    Ok(reply)
                        if again
                            && reply.len() == 2
                            && reply[0] == key
                            && reply[1] == [zper_wire::WRITER_NOT_LEADER]
                            && std::time::Instant::now() < deadline =>
                    {
                        // 104 after the append (the lease lapsed while it waited) leaves it
                        // stored: once this node may write again, send it only if it is not.
                        let _ = eventually(|| self.lease_current(node));
                        if ids_in(&concat(&self.segments(node, topic))).contains(&id) {
                            acked.push(id);
                            break;
                        }
                        continue;
                    }
                    // Refused (below min_insync, or not the leader): not stored, not
                    // acknowledged.
                    Ok(reply)
                        if reply.len() == 2
                            && reply[0] == key
                            && (reply[1] == [zper_wire::WRITER_NOT_ENOUGH_REPLICAS]
                                || reply[1] == [zper_wire::WRITER_NOT_LEADER]) => {}
                    Ok(other) => panic!("unexpected ack {other:?}"),
                    Err(_) => s = client(&self.ctx, zmq::REQ, &identity(topic, 2), &endpoint),
                }
                break;
            }
        }
        acked
    }

    /// Every file of `topic`'s directory on `node`, segments only.
    pub fn segments(&self, node: u64, topic: &str) -> BTreeMap<String, Vec<u8>> {
        segment_files(&self.data[node as usize - 1].join(topic))
    }
}

/// On a panic (a failed assertion), prints each node's newest log lines and its topics'
/// leader-epoch files to stderr.
impl Drop for TestCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (i, d) in self.data.iter().enumerate() {
                let log = std::fs::read_to_string(d.with_extension("log")).unwrap_or_default();
                let tail: Vec<&str> = log
                    .lines()
                    .rev()
                    .filter(|l| !l.contains("openraft"))
                    .take(40)
                    .collect();
                eprintln!("--- node {} log (newest first) ---", i + 1);
                if let Ok(dirs) = std::fs::read_dir(d) {
                    for e in dirs.filter_map(Result::ok) {
                        let epochs = std::fs::read_to_string(e.path().join(EPOCHS_FILE));
                        if let Ok(text) = epochs {
                            eprintln!("{:?} epochs: {:?}", e.file_name(), text);
                        }
                    }
                }
                for l in tail {
                    eprintln!("{l}");
                }
            }
        }
    }
}

/// The Raft leader's id as the node at `http_addr` sees it.
pub fn raft_leader(http_addr: &str) -> Option<u64> {
    get_json(http_addr, "/v1/raft")["leader"].as_u64()
}

/// How many brokers the node at `http_addr` sees live (`/v1/brokers`).
pub fn live_brokers(http_addr: &str) -> usize {
    match get_json(http_addr, "/v1/brokers") {
        Value::Array(b) => b.iter().filter(|n| n["live"] == json!(true)).count(),
        _ => 0,
    }
}

/// Every segment file (`*.dat`) of a topic directory, by name; empty if there is none.
pub fn segment_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".dat"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap_or_default(),
            )
        })
        .collect()
}

/// The message ids (first frames, 4-byte big-endian) stored in a log's bytes, in order.
pub fn ids_in(log: &[u8]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut first = true;
    for rec in zper_wire::Records::new(log) {
        if first {
            let mut b = [0u8; 4];
            if rec.payload.len() == 4 {
                b.copy_from_slice(rec.payload);
                out.push(u32::from_be_bytes(b));
            }
        }
        first = !rec.more;
    }
    out
}

/// A topic's segment files, concatenated in name (offset) order: its log's bytes.
pub fn concat(files: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    files.values().flatten().copied().collect()
}

/// The end offset of each message in a log's bytes, by its 4-byte id.
pub fn message_ends(log: &[u8]) -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    let (mut pos, mut id, mut first) = (0u64, None, true);
    for rec in zper_wire::Records::new(log) {
        pos += rec.stored_len() as u64;
        if first && rec.payload.len() == 4 {
            id = Some(u32::from_be_bytes(rec.payload.try_into().expect("4 bytes")));
        }
        first = !rec.more;
        if !rec.more {
            if let Some(id) = id.take() {
                out.insert(id, pos);
            }
        }
    }
    out
}
