//! Dolly across three `zper` processes configured by Dolly's own `peers.json` (issue #5): Puts
//! through random nodes survive two SIGKILLs of the Raft leader, error replies are never applied
//! later, sequences only grow, and an observer speaking Dolly's snapshot/updates protocol ends
//! with the leader's state.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const NAMES: [&str; 3] = ["alpha", "bravo", "charlie"];

/// A Dolly map as read back: key -> (sequence, value).
type State = BTreeMap<Vec<u8>, (u64, Vec<u8>)>;

/// Three nodes from the test kit's [`TestCluster`], each also a Dolly peer (`dolly.peers`).
struct Cluster {
    _dir: tempfile::TempDir,
    peers: PathBuf,
    /// Per node (index = id - 1): HTTP address and Dolly requests endpoint.
    http: Vec<String>,
    requests: Vec<String>,
    cluster: TestCluster,
}

impl Cluster {
    fn start() -> Cluster {
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
            cluster,
        };
        assert!(
            eventually(|| (0..3).all(|i| c.raft(i)["leader"].is_u64())),
            "a Raft leader"
        );
        c
    }

    /// Node index `i` (id - 1), to kill, pause or restart it.
    fn node(&mut self, i: usize) -> &mut ChildNode {
        self.cluster.node(i as u64 + 1)
    }

    fn raft(&self, i: usize) -> Value {
        get_json(&self.http[i], "/v1/raft")
    }

    /// The Raft leader's index, as a live node sees it.
    fn leader(&self) -> usize {
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
    fn dolly_leader(&self, not: Option<usize>) -> (usize, String, String) {
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
    /// Every node reports the same state hash at the same applied index. The pair is
    /// `metadata_applied` + `state_hash` (read together); Raft's `last_applied` metric may be a
    /// step apart from the state it is shown with. Lease renewals keep the log moving, so the
    /// nodes are sampled until one sample finds them at the same index (bounded: 60 s).
    fn converged(&self) -> bool {
        eventually_within(Duration::from_secs(60), || {
            let states: Vec<Value> = (0..3).map(|i| self.raft(i)).collect();
            states.iter().all(|s| s["metadata_applied"].is_u64())
                && states.windows(2).all(|w| {
                    w[0]["state_hash"] == w[1]["state_hash"]
                        && w[0]["metadata_applied"] == w[1]["metadata_applied"]
                })
        })
    }
}

fn frames(method: &[u8], seq: u64, key: &[u8], body: &[u8]) -> Vec<Vec<u8>> {
    vec![
        method.to_vec(),
        seq.to_le_bytes().to_vec(),
        key.to_vec(),
        body.to_vec(),
    ]
}

fn seq(frame: &[u8]) -> u64 {
    u64::from_le_bytes(frame.try_into().expect("8-byte sequence"))
}

fn dealer(ctx: &zmq::Context, endpoint: &str, timeout_ms: i32) -> zmq::Socket {
    let s = ctx.socket(zmq::DEALER).expect("socket");
    s.set_linger(0).expect("linger");
    s.set_rcvtimeo(timeout_ms).expect("rcvtimeo");
    s.connect(endpoint).expect("connect");
    s
}

/// Reads `keys` from `endpoint` with pipelined Gets (windows of 200): key -> (sequence, value)
/// for hits; misses are absent.
fn read_back(ctx: &zmq::Context, endpoint: &str, keys: &[Vec<u8>]) -> State {
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

/// What one client thread saw.
#[derive(Default)]
struct Outcomes {
    /// Success replies: key -> (sequence, value), in the order they were answered.
    ok: Vec<(Vec<u8>, u64, Vec<u8>)>,
    /// Error replies: key, value.
    failed: Vec<(Vec<u8>, Vec<u8>)>,
    /// No reply in time (outcome unknown): key.
    unknown: Vec<Vec<u8>>,
}

/// Puts distinct keys (one per attempt) to random nodes, one at a time, until `done` reaches
/// `target` successes overall.
fn client(
    thread: u64,
    requests: Vec<String>,
    done: Arc<AtomicU64>,
    target: u64,
    stop: Arc<AtomicBool>,
) -> Outcomes {
    let ctx = zmq::Context::new();
    let mut out = Outcomes::default();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (thread + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let mut sockets: Vec<zmq::Socket> = requests.iter().map(|e| dealer(&ctx, e, 8_000)).collect();
    let mut attempt = 0u64;
    while done.load(Ordering::Relaxed) < target && !stop.load(Ordering::Relaxed) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let node = (rng % 3) as usize;
        let key = format!("t{thread}-{attempt}").into_bytes();
        let value = format!("value-{thread}-{attempt}").into_bytes();
        attempt += 1;
        let s = &sockets[node];
        if s.send_multipart(frames(b"Put", 0, &key, &value), 0)
            .is_err()
        {
            out.unknown.push(key);
            continue;
        }
        match s.recv_multipart(0) {
            Ok(r) if r[0] == b"Put" => {
                assert_eq!((&r[2], &r[3]), (&key, &value), "the Put echoed");
                out.ok.push((key, seq(&r[1]), value));
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(r) => {
                assert_eq!(r[0], b"Error", "{r:?}");
                out.failed.push((key, value));
            }
            Err(_) => {
                // A killed node: forget the DEALER, so the request is not delivered later by
                // a reconnect (its outcome stays unknown).
                out.unknown.push(key);
                sockets[node] = dealer(&ctx, &requests[node], 8_000);
            }
        }
    }
    out
}

#[test]
fn ten_thousand_puts_through_random_nodes_survive_two_leader_kills() {
    const TARGET: u64 = 10_000;
    let mut c = Cluster::start();
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (requests, done, stop) = (c.requests.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || client(t, requests, done, TARGET, stop))
        })
        .collect();
    let started = Instant::now();
    let wait_for = |n: u64| {
        // Bounded: progress must resume within 120 s of a kill.
        let deadline = Instant::now() + Duration::from_secs(120);
        while done.load(Ordering::Relaxed) < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        done.load(Ordering::Relaxed) >= n
    };
    let mut killed = Vec::new();
    for at in [2_500, 6_000] {
        if !wait_for(at) {
            stop.store(true, Ordering::Relaxed);
        }
        assert!(
            done.load(Ordering::Relaxed) >= at,
            "{at} puts before kill (in {:?})",
            started.elapsed()
        );
        let leader = c.leader();
        killed.push(leader + 1);
        c.node(leader).kill9();
        std::thread::sleep(Duration::from_millis(800));
        c.node(leader).restart();
    }
    let finished = wait_for(TARGET);
    stop.store(true, Ordering::Relaxed);
    let outcomes: Vec<Outcomes> = threads
        .into_iter()
        .map(|t| t.join().expect("client thread"))
        .collect();
    assert!(finished, "all {TARGET} puts succeeded eventually");
    assert!(c.converged(), "every node applied the same log");

    // Sequences strictly increase per client, and are unique across clients.
    let mut all_seqs = Vec::new();
    for o in &outcomes {
        assert!(
            o.ok.windows(2).all(|w| w[0].1 < w[1].1),
            "one client's successive Puts get growing sequences"
        );
        all_seqs.extend(o.ok.iter().map(|(_, s, _)| *s));
    }
    let count = all_seqs.len();
    all_seqs.sort_unstable();
    all_seqs.dedup();
    assert_eq!(all_seqs.len(), count, "no sequence given twice");
    assert!(count as u64 >= TARGET);

    // Every acknowledged Put is on every node with its value and sequence; no Put that got
    // an Error is anywhere.
    let ctx = zmq::Context::new();
    let ok: Vec<&(Vec<u8>, u64, Vec<u8>)> = outcomes.iter().flat_map(|o| &o.ok).collect();
    let failed: Vec<&(Vec<u8>, Vec<u8>)> = outcomes.iter().flat_map(|o| &o.failed).collect();
    let ok_keys: Vec<Vec<u8>> = ok.iter().map(|(k, _, _)| k.clone()).collect();
    let failed_keys: Vec<Vec<u8>> = failed.iter().map(|(k, _)| k.clone()).collect();
    for node in 0..3 {
        let seen = read_back(&ctx, &c.requests[node], &ok_keys);
        for (k, s, v) in &ok {
            assert_eq!(
                seen.get(k),
                Some(&(*s, v.clone())),
                "node {} has acknowledged key {}",
                node + 1,
                String::from_utf8_lossy(k)
            );
        }
        let late = read_back(&ctx, &c.requests[node], &failed_keys);
        assert!(
            late.is_empty(),
            "Puts answered Error were applied: {:?}",
            late.keys()
                .map(|k| String::from_utf8_lossy(k))
                .collect::<Vec<_>>()
        );
    }
    // An unchanged Dolly client configuration (peers.json, a peer by name) reads them too.
    let (k, s, v) = ok[0];
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_zper"))
        .args(["dolly", "-p"])
        .arg(&c.peers)
        .args(["--name", "charlie", "get", &String::from_utf8_lossy(k)])
        .output()
        .expect("zper dolly");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!(
            "{} = {} (state {s})\n",
            String::from_utf8_lossy(k),
            String::from_utf8_lossy(v)
        )
    );
    let unknown: usize = outcomes.iter().map(|o| o.unknown.len()).sum();
    eprintln!(
        "dolly kill test: {count} acknowledged, {} errors, {unknown} unknown, killed nodes {killed:?}, {:?}",
        failed.len(),
        started.elapsed()
    );
}

/// An observer as an original Dolly replica: SUB to the leader's updates, then a snapshot on
/// its snapshots port, then updates with a higher sequence applied, lower ones dropped
/// (`dolly.md` §5.4). Returns the map and its sequence once `until` holds.
struct Observer {
    sub: zmq::Socket,
    map: State,
    sequence: u64,
}

impl Observer {
    fn follow(ctx: &zmq::Context, updates: &str, snapshots: &str) -> Observer {
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
        Observer { sub, map, sequence }
    }

    /// Applies queued updates (§5.4 step 5) until none arrives for 100 ms.
    fn drain(&mut self) {
        while let Ok(m) = self.sub.recv_multipart(0) {
            assert_eq!(m[0], b"Put", "updates are Put messages");
            let s = seq(&m[1]);
            if s > self.sequence {
                self.map.insert(m[2].clone(), (s, m[3].clone()));
                self.sequence = s;
            }
        }
    }
}

/// The leader's state, from a fresh snapshot.
fn leader_state(ctx: &zmq::Context, snapshots: &str) -> (State, u64) {
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
fn put_many(ctx: &zmq::Context, endpoint: &str, prefix: &str, count: usize) {
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

#[test]
fn an_observer_following_dollys_snapshot_and_updates_gets_the_leaders_state() {
    let mut c = Cluster::start();
    let ctx = zmq::Context::new();
    // Some state before the observer joins, through a follower.
    let (leader, updates, snapshots) = c.dolly_leader(None);
    let follower = (leader + 1) % 3;
    put_many(&ctx, &c.requests[follower], "before", 300);
    // The observer joins while Puts keep coming through every node.
    let writer = {
        let requests = c.requests.clone();
        std::thread::spawn(move || {
            let ctx = zmq::Context::new();
            for (i, r) in requests.iter().enumerate() {
                put_many(&ctx, r, &format!("during{i}-"), 400);
            }
        })
    };
    let mut observer = Observer::follow(&ctx, &updates, &snapshots);
    writer.join().expect("writer");
    put_many(&ctx, &c.requests[follower], "after", 200);
    let (want, want_seq) = leader_state(&ctx, &snapshots);
    assert!(
        eventually_within(std::time::Duration::from_secs(60), || {
            observer.drain();
            observer.sequence == want_seq
        }),
        "the observer reaches the leader's sequence {want_seq} (at {})",
        observer.sequence
    );
    assert_eq!(observer.map.len(), 300 + 3 * 400 + 200);
    assert_eq!(observer.map, want, "the observer's state is the leader's");

    // Leadership moves: the new leader binds its own endpoints (found through /v1/brokers)
    // and a new observer there gets the same state.
    c.node(leader).kill9();
    let (new_leader, updates, snapshots) = c.dolly_leader(Some(leader));
    assert_ne!(new_leader, leader);
    let survivor = (new_leader + 1..new_leader + 3)
        .map(|i| i % 3)
        .find(|i| *i != leader)
        .expect("a survivor");
    put_many(&ctx, &c.requests[survivor], "moved", 50);
    let mut observer = Observer::follow(&ctx, &updates, &snapshots);
    observer.drain();
    let (want, _) = leader_state(&ctx, &snapshots);
    assert_eq!(observer.map.len(), 300 + 3 * 400 + 200 + 50);
    assert_eq!(observer.map, want);
    // The same state is on the surviving follower, read with Gets.
    let keys: Vec<Vec<u8>> = want.keys().cloned().collect();
    assert_eq!(read_back(&ctx, &c.requests[survivor], &keys), want);
}

/// A Put that cannot commit before its timeout is answered `Error` only once it can never
/// apply: the leader and one follower are frozen (SIGSTOP) while the third node holds the Put
/// (its forwards to the frozen leader pile up in that leader's sockets); after the timeout one
/// follower comes back, the two elect a leader and commit the Put's cancel, the client gets
/// `Error`; then the old leader thaws with the stale forwards queued, and still the key never
/// appears anywhere.
#[test]
fn a_put_answered_error_after_its_timeout_is_never_applied_later() {
    let mut c = Cluster::start();
    let ctx = zmq::Context::new();
    let leader = c.leader();
    let (a, b) = ((leader + 1) % 3, (leader + 2) % 3);
    // Everything works before.
    put_many(&ctx, &c.requests[a], "ready", 5);
    c.node(leader).pause();
    c.node(b).pause();
    let s = dealer(&ctx, &c.requests[a], 30_000);
    s.send_multipart(frames(b"Put", 0, b"lost", b"never"), 0)
        .expect("send");
    // Past dolly.put_timeout_ms (2 s) with no quorum the outcome is unknown (the Put might
    // still be in a log), so no Error may be sent yet.
    assert_eq!(
        s.poll(zmq::POLLIN, 3_000).expect("poll"),
        0,
        "no answer while neither the Put nor its cancel can commit"
    );
    c.node(b).resume();
    let reply = s
        .recv_multipart(0)
        .expect("an answer once a quorum is back");
    assert_eq!(reply[0], b"Error", "{reply:?}");
    assert_eq!(
        (&reply[2][..], &reply[3][..9]),
        (&b"lost"[..], &b"put not a"[..])
    );
    c.node(leader).resume();
    assert!(c.converged(), "the thawed leader catches up");
    // Later Puts work, and the cancelled one is on no node.
    put_many(&ctx, &c.requests[leader], "after", 5);
    assert!(c.converged());
    for node in 0..3 {
        let got = read_back(
            &ctx,
            &c.requests[node],
            &[b"lost".to_vec(), b"after4".to_vec()],
        );
        assert!(
            !got.contains_key(b"lost".as_slice()),
            "node {} applied it",
            node + 1
        );
        assert!(
            got.contains_key(b"after4".as_slice()),
            "node {} is current",
            node + 1
        );
    }
}
