//! Damaged copies across three `zper` processes (issue #13): a flipped byte on a leader loses
//! nothing and its copy repairs from the others, the only copy of a topic fences the damaged
//! append and serves every other message, and a damaged only in-sync leader lets the other
//! replica catch up and take over.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// Issue #13, defect 3: one flipped flags byte in the middle of the leader's active segment,
/// with all three nodes stopped, erased every acknowledged message after it on every node:
/// the leader's recovery took it for a torn tail, it stayed leader in the same epoch and told
/// the healthy followers to truncate. Now the damaged copy leaves the ISR, the lead moves,
/// and the copy repairs itself from the others; nothing acknowledged is lost.
#[test]
fn a_flipped_byte_on_the_leader_loses_nothing_and_its_copy_repairs_from_the_others() {
    let mut c = TestCluster::start();
    let leader = c.create("flip", 3);
    let acked = c.produce_all(leader, "flip", 0..1000);
    assert_eq!(acked.len(), 1000);
    assert!(eventually(|| {
        let a = c.segments(leader, "flip");
        (1..=3).all(|n| c.segments(n, "flip") == a)
    }));
    for n in 1..=3 {
        assert!(c.node(n).terminate().success());
    }
    // The flags byte of the first record of message 500 in the leader's active segment.
    let files = c.segments(leader, "flip");
    let (name, bytes) = files.iter().next_back().expect("a segment");
    let mut at = 0usize;
    let mut messages = 0;
    for rec in zper_wire::Records::new(bytes) {
        if messages == ids_in(bytes).len() / 2 {
            break;
        }
        at += rec.stored_len();
        if !rec.more {
            messages += 1;
        }
    }
    let path = c.data[leader as usize - 1].join("flip").join(name);
    let mut damaged = bytes.clone();
    damaged[at] ^= 0x04;
    std::fs::write(&path, &damaged).expect("flip a byte");
    for n in 1..=3 {
        c.node(n).restart();
    }
    assert!(
        eventually(|| (1..=3).all(|n| live_brokers(&c.http(n)) == 3)),
        "all three back"
    );
    let healthy = (1..=3).find(|n| *n != leader).expect("a healthy node");
    assert!(
        eventually(|| {
            let a = c.segments(healthy, "flip");
            ids_in(&concat(&a)).len() >= 1000 && (1..=3).all(|n| c.segments(n, "flip") == a)
        }),
        "copies converge, the damaged one repaired: {:?}",
        (1..=3)
            .map(|n| ids_in(&concat(&c.segments(n, "flip"))).len())
            .collect::<Vec<_>>()
    );
    for n in 1..=3 {
        let stored = ids_in(&concat(&c.segments(n, "flip")));
        for id in &acked {
            assert!(stored.contains(id), "node {n} lost acknowledged {id}");
        }
    }
    let metrics = http("GET", &c.http(leader), "/metrics", None)
        .expect("metrics")
        .1;
    assert!(
        metrics.lines().any(|l| l
            .starts_with(r#"zper_integrity_events_total{event="corruption_detected"}"#)
            && !l.ends_with(" 0")),
        "the damage is counted"
    );
    // The producer keeps working.
    let now_leader = c.fragment(healthy, "flip")["leader"]
        .as_u64()
        .expect("leader");
    assert!(eventually(|| c.produce_acked(
        now_leader,
        "flip",
        5000..5001
    ) == [5000]));
}

/// Issue #13, attack F2: the only copy of a topic (replication factor 1) with one flipped byte
/// in its newest segment erased every acknowledged message after the byte when it restarted
/// (recovery cut there and, having nothing to repair from, the copy accepted the cut). Now
/// the damaged append is fenced: `/v1/cluster/health` names the range, a FETCH in it gets
/// 0xFF, and a consumer that resumes at its end reads every other acknowledged message.
#[test]
fn the_only_copy_fences_a_flipped_byte_and_serves_every_message_after_it() {
    let mut c = TestCluster::start();
    let node = c.create("lone", 1);
    let acked = c.produce_all(node, "lone", 0..400);
    assert_eq!(acked.len(), 400);
    assert!(c.node(node).terminate().success());
    // The flags byte of the first record of message 200 in the newest segment.
    let files = c.segments(node, "lone");
    let before = concat(&files);
    let ends = message_ends(&before);
    let at = ends[&199];
    let (name, bytes) = files.iter().next_back().expect("a segment");
    let seg_start: u64 = name[..20].parse().expect("segment name");
    assert!(at > seg_start, "message 200 is in the newest segment");
    let mut damaged = bytes.clone();
    damaged[(at - seg_start) as usize] ^= 0x04;
    let path = c.data[node as usize - 1].join("lone").join(name);
    std::fs::write(&path, &damaged).expect("flip a byte");
    c.node(node).restart();

    // The range is reported, and stays: nothing can repair the only copy, and it is not cut.
    let range = || -> Option<(u64, u64)> {
        let (_, body) = http("GET", &c.http(node), "/v1/cluster/health", None)?;
        let health: Value = serde_json::from_str(&body).ok()?;
        let line = health["problems"]
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .find(|l| l.starts_with("lone"))?
            .to_owned();
        let inner = line.split("bytes [").nth(1)?.split(')').next()?;
        let (a, b) = inner.split_once(", ")?;
        Some((a.parse().ok()?, b.parse().ok()?))
    };
    assert!(eventually(|| range().is_some()), "health names the range");
    let (from, to) = range().expect("range");
    assert_eq!(from, at, "the damaged append starts at message 200");
    let reader = client(
        &c.ctx,
        zmq::DEALER,
        &identity("lone", 0),
        &c.nodes[node as usize - 1].reader,
    );
    let fetch = |offset: u64| {
        let f = fetch_frames(offset as i64, 1 << 20);
        let refs: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
        request(&reader, &refs)
    };
    assert_eq!(fetch(from), vec![vec![0xFF]], "never served");
    // A consumer reads up to the range, and on from its end.
    let mut read = Vec::new();
    for (mut offset, stop) in [(0, from), (to, u64::MAX)] {
        while offset < stop {
            let reply = fetch(offset);
            assert_eq!(reply[0], [100], "offset {offset}");
            let valid = zper_wire::valid_bytes(&reply[1]) as u64;
            if valid == 0 {
                break;
            }
            read.extend_from_slice(&reply[1][..valid as usize]);
            offset += valid;
        }
    }
    let starts: std::collections::HashMap<u32, u64> = ids_in(&before)
        .into_iter()
        .zip(std::iter::once(0).chain(ids_in(&before).iter().map(|id| ends[id])))
        .collect();
    let outside: Vec<u32> = acked
        .iter()
        .copied()
        .filter(|id| ends[id] <= from || starts[id] >= to)
        .collect();
    assert!(
        outside.len() >= 390,
        "one append is fenced, not the rest: {}",
        outside.len()
    );
    assert_eq!(
        ids_in(&read),
        outside,
        "every message outside the range is served"
    );
    // The copy keeps taking writes.
    assert!(eventually(
        || c.produce_acked(node, "lone", 1000..1001) == [1000]
    ));
    assert_eq!(range(), Some((from, to)), "still reported");
}

/// Issue #13 (second attack, F2): a damaged leader that is the only in-sync replica answered
/// every fetch "not leader", so the other replica, which holds the damaged message intact,
/// never got in sync: writes were refused forever (and its fetcher logged 44 warnings a
/// second). A replica already past the fenced range is now served the rest; it joins the ISR,
/// the lead moves to it, the damaged copy repairs from it, and nothing acknowledged is lost.
#[test]
fn a_damaged_only_in_sync_leader_lets_the_other_replica_catch_up_and_take_over() {
    let mut c = TestCluster::start();
    let leader = c.create("solo", 2);
    let frag = c.fragment(leader, "solo");
    let follower = frag["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .filter_map(Value::as_u64)
        .find(|n| *n != leader)
        .expect("a follower");
    let mut acked = c.produce_all(leader, "solo", 0..300);
    assert_eq!(acked.len(), 300);
    assert!(eventually(
        || c.segments(follower, "solo") == c.segments(leader, "solo")
    ));
    assert!(c.node(follower).terminate().success());
    assert!(
        eventually_within(Duration::from_secs(30), || c.fragment(leader, "solo")
            ["isr"]
            == json!([leader])),
        "the leader alone in sync: {}",
        c.fragment(leader, "solo")
    );
    acked.extend(c.produce_acked(leader, "solo", 300..320));
    assert!(acked.len() > 300, "acknowledged by the leader alone");
    assert!(c.node(leader).terminate().success());
    // The flags byte of message 296, which the follower also holds.
    let files = c.segments(leader, "solo");
    let ends = message_ends(&concat(&files));
    let (name, bytes) = files.iter().next_back().expect("a segment");
    let seg_start: u64 = name[..20].parse().expect("segment name");
    let at = ends[&295] - seg_start;
    let mut damaged = bytes.clone();
    damaged[at as usize] ^= 0x04;
    std::fs::write(
        c.data[leader as usize - 1].join("solo").join(name),
        &damaged,
    )
    .expect("flip a byte");
    c.node(leader).restart();
    c.node(follower).restart();

    // The follower catches up past the fenced range, the lead moves to it, writes resume.
    assert!(
        eventually_within(Duration::from_secs(60), || {
            c.fragment(follower, "solo")["leader"] == json!(follower)
                && c.produce_acked(follower, "solo", 1000..1001) == [1000]
        }),
        "the healthy copy leads and takes writes: {}",
        c.fragment(follower, "solo")
    );
    acked.push(1000);
    assert!(
        eventually_within(Duration::from_secs(60), || c.segments(leader, "solo")
            == c.segments(follower, "solo")),
        "the damaged copy repaired from the other"
    );
    let stored = ids_in(&concat(&c.segments(follower, "solo")));
    for id in &acked {
        assert!(stored.contains(id), "acknowledged {id} lost");
    }
}

/// A closed segment's file cut short on a follower (found by an attack in stop 41): every
/// read of that segment failed with 0xFF, nothing reported it and the copy stayed short. Now
/// the first read that meets the cut notes it as damage, that read is served up to the cut,
/// and the copy is cut back there and fetches the rest again from the leader.
#[test]
fn a_follower_segment_cut_short_is_found_by_a_read_and_repaired_from_the_leader() {
    let c = TestCluster::start_with("segment_size = 4096");
    let leader = c.create("cut", 3);
    let acked = c.produce_all(leader, "cut", 0..600);
    assert_eq!(acked.len(), 600);
    assert!(eventually(|| {
        let a = c.segments(leader, "cut");
        a.len() >= 3 && (1..=3).all(|n| c.segments(n, "cut") == a)
    }));
    let follower = (1..=3).find(|n| *n != leader).expect("a follower");
    let whole = c.segments(follower, "cut");
    let (name, bytes) = whole.iter().next().expect("the oldest segment, closed");
    let path = c.data[follower as usize - 1].join("cut").join(name);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    f.set_len(bytes.len() as u64 / 2).expect("cut the file");
    drop(f);
    // A consumer on the follower reads the segment: served up to the cut, never past it.
    let reader = client(
        &c.ctx,
        zmq::DEALER,
        &identity("cut", 0),
        &c.nodes[follower as usize - 1].reader,
    );
    let f = fetch_frames(0, 1 << 20);
    let refs: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
    let reply = request(&reader, &refs);
    assert_eq!(reply[0], [100]);
    assert!(
        !reply[1].is_empty() && reply[1].len() <= bytes.len() / 2,
        "{} bytes",
        reply[1].len()
    );
    assert_eq!(
        reply[1][..],
        bytes[..reply[1].len()],
        "what is served is intact"
    );
    // The copy repairs: identical to the leader's again, every acknowledged message there.
    assert!(
        eventually(|| c.segments(follower, "cut") == c.segments(leader, "cut")),
        "the follower's copy is repaired"
    );
    let stored = ids_in(&concat(&c.segments(follower, "cut")));
    for id in &acked {
        assert!(stored.contains(id), "the follower lacks acknowledged {id}");
    }
    let metrics = http("GET", &c.http(follower), "/metrics", None)
        .expect("metrics")
        .1;
    assert!(
        metrics.lines().any(|l| l
            .starts_with(r#"zper_integrity_events_total{event="corruption_detected"}"#)
            && !l.ends_with(" 0")),
        "the damage is counted"
    );
}
