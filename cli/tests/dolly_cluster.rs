//! Dolly across three `zper` processes configured by Dolly's own `peers.json` (issue #5): Puts
//! through random nodes survive two SIGKILLs of the Raft leader, error replies are never applied
//! later, sequences only grow, and an observer speaking Dolly's snapshot/updates protocol ends
//! with the leader's state.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

mod dolly_kit;

use dolly_kit::*;

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

/// Issue #16: every node serves Dolly's updates PUB and snapshots ROUTER from its own applied
/// state, so an observer (or an original Dolly replica, which follows the lowest pid of its
/// peers.json whoever leads) can follow a follower: it gets the leader's state, and updates in
/// Raft order, while Puts come through every node. (Before, only the Raft leader bound them and
/// a follower's ports refused the connection: the snapshot request got no answer.)
#[test]
fn an_observer_on_a_follower_gets_the_leaders_state_and_updates_in_raft_order() {
    let c = Cluster::start();
    let ctx = zmq::Context::new();
    let leader = c.leader();
    let follower = (leader + 1) % 3;
    put_many(&ctx, &c.requests[leader], "before", 200);
    let (updates, snapshots) = c.feeds[follower].clone();
    let mut observer = Observer::follow(&ctx, &updates, &snapshots);
    for (i, r) in c.requests.iter().enumerate() {
        put_many(&ctx, r, &format!("during{i}-"), 300);
        observer.drain();
    }
    let (want, want_seq) = leader_state(&ctx, &c.feeds[leader].1);
    assert!(
        eventually_within(std::time::Duration::from_secs(60), || {
            observer.drain();
            observer.sequence == want_seq
        }),
        "the follower's observer reaches the leader's sequence {want_seq} (at {})",
        observer.sequence
    );
    assert_eq!(observer.map.len(), 200 + 3 * 300);
    assert_eq!(observer.map, want, "the follower serves the leader's state");
    assert_eq!(observer.disorder, 0, "updates come in Raft order");
    assert!(
        observer.last_update > 0,
        "updates were published by the follower"
    );
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
