//! What the Dolly cluster tests share: a three-node [`Cluster`] that is also a Dolly peer set
//! (`peers.json`), Dolly frames, read-back, and an [`Observer`] following a node's snapshots
//! and updates.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::common::*;
use serde_json::Value;

pub const NAMES: [&str; 3] = ["alpha", "bravo", "charlie"];

/// A Dolly map as read back: key -> (sequence, value).
pub type State = BTreeMap<Vec<u8>, (u64, Vec<u8>)>;

/// Three nodes from the test kit's [`TestCluster`], each also a Dolly peer (`dolly.peers`).
pub struct Cluster {
    _dir: tempfile::TempDir,
    pub peers: PathBuf,
    /// Per node (index = id - 1): HTTP address and Dolly requests endpoint.
    pub http: Vec<String>,
    pub requests: Vec<String>,
    /// Per node: Dolly updates PUB and snapshots ROUTER endpoints (served by every node).
    pub feeds: Vec<(String, String)>,
    pub cluster: TestCluster,
}

impl Cluster {
    pub fn start() -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let ports: Vec<[u16; 3]> = (0..3)
            .map(|_| [free_port(), free_port(), free_port()])
            .collect();
        let peers = dir.path().join("peers.json");
        let entries: Vec<String> = (0..3)
            .map(|i| {
                format!(
                    r#"{{"pid": {}, "name": "{}", "address": "127.0.0.1", "host": "h{i}",
                        "updates": {}, "snapshots": {}, "requests": {}}}"#,
                    i + 1,
                    NAMES[i],
                    ports[i][0],
                    ports[i][1],
                    ports[i][2]
                )
            })
            .collect();
        std::fs::write(&peers, format!("[{}]", entries.join(",\n"))).expect("peers.json");
        let cluster = TestCluster::start_each(|i| {
            format!(
                "dolly.peers = {}\ndolly.name = {}\n",
                peers.display(),
                NAMES[i]
            )
        });
        let c = Cluster {
            _dir: dir,
            peers,
            http: (1..=3).map(|n| cluster.http(n)).collect(),
            requests: ports
                .iter()
                .map(|p| format!("tcp://127.0.0.1:{}", p[2]))
                .collect(),
            feeds: ports
                .iter()
                .map(|p| {
                    (
                        format!("tcp://127.0.0.1:{}", p[0]),
                        format!("tcp://127.0.0.1:{}", p[1]),
                    )
                })
                .collect(),
            cluster,
        };
        assert!(
            eventually(|| (0..3).all(|i| c.raft(i)["leader"].is_u64())),
            "a Raft leader"
        );
        c
    }

    /// Node index `i` (id - 1), to kill, pause or restart it.
    pub fn node(&mut self, i: usize) -> &mut ChildNode {
        self.cluster.node(i as u64 + 1)
    }

    pub fn raft(&self, i: usize) -> Value {
        get_json(&self.http[i], "/v1/raft")
    }

    /// The Raft leader's index, as a live node sees it.
    pub fn leader(&self) -> usize {
        let mut leader = None;
        assert!(
            eventually(|| {
                leader = (0..3)
                    .filter_map(|i| self.raft(i)["leader"].as_u64())
                    .next();
                leader.is_some_and(|l| self.raft(l as usize - 1)["state"] == "Leader")
            }),
            "a leader"
        );
        leader.expect("leader") as usize - 1
    }

    /// The Dolly leader's updates and snapshots endpoints from `/v1/brokers`, once it names a
    /// leader other than `not`.
    pub fn dolly_leader(&self, not: Option<usize>) -> (usize, String, String) {
        let mut found = None;
        assert!(
            eventually(|| {
                found = (0..3).find_map(|i| {
                    let brokers = get_json(&self.http[i], "/v1/brokers");
                    brokers.as_array()?.iter().find_map(|b| {
                        let id = b["id"].as_u64()? as usize - 1;
                        if b["dolly_leader"] != true || Some(id) == not || b["live"] != true {
                            return None;
                        }
                        Some((
                            id,
                            b["endpoints"]["dolly_updates"].as_str()?.to_owned(),
                            b["endpoints"]["dolly_snapshots"].as_str()?.to_owned(),
                        ))
                    })
                });
                found.is_some()
            }),
            "a Dolly leader in /v1/brokers"
        );
        found.expect("dolly leader")
    }

    /// Waits until every node applied the same Raft index with the same state hash.
    /// The pair is `metadata_applied` + `state_hash` (read together); Raft's `last_applied`
    /// metric may be a step apart from the state it is shown with. Lease renewals keep the
    /// log moving, and three nodes read one after another under load rarely sit at one index
    /// at the same moment, so every node's samples are kept: converged once all three were
    /// seen at one index with one hash; false at once if two hashes differ at one index (a
    /// divergence), or after 60 s without a common index.
    pub fn converged(&self) -> bool {
        let mut seen: Vec<std::collections::HashMap<u64, Value>> = vec![Default::default(); 3];
        let mut diverged = false;
        eventually_within(Duration::from_secs(60), || {
            for (i, node) in seen.iter_mut().enumerate() {
                let s = self.raft(i);
                if let Some(at) = s["metadata_applied"].as_u64() {
                    node.insert(at, s["state_hash"].clone());
                }
            }
            let common = seen[0].iter().find_map(|(at, hash)| {
                let others: Vec<&Value> = seen[1..].iter().filter_map(|n| n.get(at)).collect();
                diverged |= others.iter().any(|h| *h != hash);
                (others.len() == 2 && !diverged).then_some(*at)
            });
            diverged |= seen[1]
                .iter()
                .any(|(at, h)| seen[2].get(at).is_some_and(|h2| h2 != h));
            diverged || common.is_some()
        }) && !diverged
    }
}

pub fn frames(method: &[u8], seq: u64, key: &[u8], body: &[u8]) -> Vec<Vec<u8>> {
    vec![
        method.to_vec(),
        seq.to_le_bytes().to_vec(),
        key.to_vec(),
        body.to_vec(),
    ]
}

pub fn seq(frame: &[u8]) -> u64 {
    u64::from_le_bytes(frame.try_into().expect("8-byte sequence"))
}

pub fn dealer(ctx: &zmq::Context, endpoint: &str, timeout_ms: i32) -> zmq::Socket {
    let s = ctx.socket(zmq::DEALER).expect("socket");
    s.set_linger(0).expect("linger");
    s.set_rcvtimeo(timeout_ms).expect("rcvtimeo");
    s.connect(endpoint).expect("connect");
    s
}

/// Reads `keys` from `endpoint` with pipelined Gets (windows of 200): key -> (sequence, value)
/// for hits; misses are absent.
pub fn read_back(ctx: &zmq::Context, endpoint: &str, keys: &[Vec<u8>]) -> State {
    let s = dealer(ctx, endpoint, 10_000);
    let mut out = BTreeMap::new();
    for chunk in keys.chunks(200) {
        for k in chunk {
            s.send_multipart(frames(b"Get", 0, k, b""), 0)
                .expect("send");
        }
        for k in chunk {
            let r = s.recv_multipart(0).expect("a Get reply");
            assert_eq!(&r[2], k, "Get replies come in order");
            if r[0] == b"Put" {
                out.insert(k.clone(), (seq(&r[1]), r[3].clone()));
            }
        }
    }
    out
}

/// An observer as an original Dolly replica: SUB to the leader's updates, then a snapshot on
/// its snapshots port, then updates with a higher sequence applied, lower ones dropped
/// (`dolly.md` §5.4).
pub struct Observer {
    pub sub: zmq::Socket,
    pub map: State,
    pub sequence: u64,
    /// Sequence of the last update received (applied or not).
    pub last_update: u64,
    /// Updates whose sequence was not above the one before (out of Raft order).
    pub disorder: usize,
}

impl Observer {
    pub fn follow(ctx: &zmq::Context, updates: &str, snapshots: &str) -> Observer {
        let sub = ctx.socket(zmq::SUB).expect("sub");
        sub.set_linger(0).expect("linger");
        sub.set_subscribe(b"").expect("subscribe");
        sub.set_rcvtimeo(100).expect("rcvtimeo");
        sub.connect(updates).expect("connect");
        // Let the subscription reach the PUB before the snapshot is taken (§9 W6).
        std::thread::sleep(Duration::from_millis(300));
        let snap = dealer(ctx, snapshots, 10_000);
        snap.send_multipart(frames(b"Snapshot", 0, b"", b""), 0)
            .expect("snapshot request");
        let mut map = BTreeMap::new();
        let sequence = loop {
            let m = snap.recv_multipart(0).expect("snapshot message");
            if m[0] == b"Terminate" {
                break seq(&m[1]);
            }
            map.insert(m[2].clone(), (seq(&m[1]), m[3].clone()));
        };
        Observer {
            sub,
            map,
            sequence,
            last_update: 0,
            disorder: 0,
        }
    }

    /// Applies queued updates (§5.4 step 5) until none arrives for 100 ms.
    pub fn drain(&mut self) {
        while let Ok(m) = self.sub.recv_multipart(0) {
            assert_eq!(m[0], b"Put", "updates are Put messages");
            let s = seq(&m[1]);
            if s <= self.last_update {
                self.disorder += 1;
            }
            self.last_update = s;
            if s > self.sequence {
                self.map.insert(m[2].clone(), (s, m[3].clone()));
                self.sequence = s;
            }
        }
    }
}

/// The leader's state, from a fresh snapshot.
pub fn leader_state(ctx: &zmq::Context, snapshots: &str) -> (State, u64) {
    let snap = dealer(ctx, snapshots, 10_000);
    snap.send_multipart(frames(b"Snapshot", 0, b"", b""), 0)
        .expect("send");
    let mut map = BTreeMap::new();
    loop {
        let m = snap.recv_multipart(0).expect("snapshot");
        if m[0] == b"Terminate" {
            return (map, seq(&m[1]));
        }
        map.insert(m[2].clone(), (seq(&m[1]), m[3].clone()));
    }
}

/// Pipelined Puts of `count` keys `prefix<i>` through node `via` (windows of 100).
pub fn put_many(ctx: &zmq::Context, endpoint: &str, prefix: &str, count: usize) {
    let s = dealer(ctx, endpoint, 20_000);
    let keys: Vec<Vec<u8>> = (0..count)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .collect();
    for chunk in keys.chunks(100) {
        for k in chunk {
            s.send_multipart(frames(b"Put", 0, k, k), 0).expect("send");
        }
        for _ in chunk {
            let r = s.recv_multipart(0).expect("a Put reply");
            assert_eq!(r[0], b"Put", "{r:?}");
        }
    }
}
