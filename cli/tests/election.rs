//! Fast elections (issue #16): when the Raft leader's process dies, the survivors see its Raft
//! connections close and its admin port refuse, and elect at once; a leader that is only
//! paused (its port still accepts) is left to the election timers.
//!
//! Both tests run with a long election timeout (`raft.election_timeout_ms = 2500`: timers
//! fire after 2.5-5 s and openraft's voters refuse candidates for 5 s after the leader's last
//! heartbeat), so a leader within 4 s of a kill can only come from the fast path. The margin
//! is wide (the fast path takes milliseconds on loopback); the logs name the path taken.

mod common;

use common::*;
use std::time::{Duration, Instant};

const SLOW_TIMERS: &str = "raft.election_timeout_ms = 2500\nnode.lease_ms = 8000\n";
const FAST_PATH_LOG: &str = "the leader's process is gone: electing now";

fn log_of(c: &TestCluster, n: u64) -> String {
    std::fs::read_to_string(c.data[n as usize - 1].with_extension("log")).unwrap_or_default()
}

/// Waits until a node other than `old` leads, as survivor `via` sees it; returns it and when.
fn next_leader(c: &TestCluster, via: u64, old: u64, limit: Duration) -> Option<(u64, Instant)> {
    let mut found = None;
    eventually_within(limit, || {
        found = raft_leader(&c.http(via)).filter(|l| *l != old);
        found.is_some()
    });
    found.map(|l| (l, Instant::now()))
}

/// A cluster with slow timers, its Raft leader and another node.
fn start() -> (TestCluster, u64, u64) {
    let c = TestCluster::start_with(SLOW_TIMERS);
    let mut leader = None;
    eventually_within(Duration::from_secs(20), || {
        leader = raft_leader(&c.http(1));
        leader.is_some()
    });
    let old = leader.expect("a leader");
    let survivor = (1..=3).find(|n| *n != old).expect("survivor");
    (c, old, survivor)
}

#[test]
fn a_killed_leader_is_replaced_before_any_election_timer_fires() {
    let (mut c, old, survivor) = start();
    let killed = Instant::now();
    c.node(old).kill9();
    let (new, at) = next_leader(&c, survivor, old, Duration::from_secs(4))
        .expect("a new leader within 4 s of the kill (the timers alone need at least 5 s)");
    assert_ne!(new, old);
    assert!(at.duration_since(killed) < Duration::from_secs(5));
    let logged = (1..=3)
        .filter(|n| *n != old)
        .any(|n| log_of(&c, n).contains(FAST_PATH_LOG));
    assert!(logged, "a survivor logs the fast path");
    // The cluster keeps committing: a topic is created through the survivor.
    let (s, body) =
        http("POST", &c.http(survivor), "/v1/topics/after", Some("{}")).expect("answer");
    assert_eq!(s, 201, "{body}");
    // The killed node comes back as a follower of the new leader.
    c.node(old).restart();
    assert!(eventually_within(Duration::from_secs(20), || raft_leader(
        &c.http(old)
    ) == Some(
        new
    )));
}

#[test]
fn a_paused_leader_is_left_to_the_election_timers() {
    let (mut c, old, survivor) = start();
    c.node(old).pause();
    let next = next_leader(&c, survivor, old, Duration::from_secs(40));
    c.node(old).resume();
    assert!(next.is_some(), "the timers elect a new leader");
    for n in (1..=3).filter(|n| *n != old) {
        assert!(
            !log_of(&c, n).contains(FAST_PATH_LOG),
            "node {n} took a paused leader for a dead one"
        );
    }
}
