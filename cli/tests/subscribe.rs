//! Pirius-style subscriptions across three `zper` processes (issue #7): the six integration
//! scenarios of `pirius.md` §15.1 on a `distribution` topic. Deterministic assignment on every
//! node, the retrievable back-channel (§13), the controller's and relay's raw frames and
//! `zper subscribe` are in `subscription_protocol.rs`; the shared helpers in `subscription/`.
//!
//! A record counts as received by the group when the subscriber that got it has its
//! acknowledgement confirmed (`ACKED`): that is the exactly-once contract (docs/protocol.md
//! "Subscriptions"); a member that loses a fragment may have seen records it could not
//! acknowledge, which the new owner then receives.

mod common;
mod subscription;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use serde_json::json;
use subscription::*;

#[test]
fn scenario_1_a_subscriber_joining_mid_stream_gets_every_record_in_order_one_per_batch() {
    let c = Cluster::start();
    c.create("single", 1, "distribution");
    let p = Producer::new(&c, 2, "single", 1);
    let publisher = std::thread::spawn(move || p.publish(&RECORDS1, Duration::from_millis(200)));
    std::thread::sleep(Duration::from_millis(500)); // two or three records are in already
    let mut sub = TestSubscriber::start(&c, "single", "s1", 1, 0, End::Leave, None);
    publisher.join().expect("publisher");
    let all = wait_confirmed(&[&sub], 6);
    sub.stop();
    let seen = sub.seen.lock().expect("lock");
    assert_eq!(seen.batches.len(), 6, "six deliveries");
    assert!(
        seen.batches.iter().all(|(_, r)| r.len() == 1),
        "batches of 1"
    );
    let payloads: Vec<&str> = seen.batches.iter().map(|(_, r)| r[0].1.as_str()).collect();
    assert_eq!(payloads, RECORDS1, "in order, earlier records included");
    assert_exactly_once(&all, &RECORDS1);
}

#[test]
fn scenario_2_batches_fill_to_the_batch_size_within_the_flush_interval() {
    let c = Cluster::start();
    c.create("batched", 1, "distribution");
    let mut sub = TestSubscriber::start(&c, "batched", "s1", 2, 500, End::Leave, None);
    let p = Producer::new(&c, 3, "batched", 1);
    // Back to back: each waits for its ack (a few ms), far within the 500 ms flush interval.
    p.publish(&RECORDS1, Duration::ZERO);
    let all = wait_confirmed(&[&sub], 6);
    sub.stop();
    let seen = sub.seen.lock().expect("lock");
    let batches: Vec<Vec<&str>> = seen
        .batches
        .iter()
        .map(|(_, r)| r.iter().map(|(_, p)| p.as_str()).collect())
        .collect();
    assert_eq!(
        batches,
        vec![
            vec!["google", "paustq"],
            vec!["123456", "abcdef"],
            vec!["qwerty", "asdfgh"]
        ]
    );
    assert_exactly_once(&all, &RECORDS1);
}

#[test]
fn scenario_3_a_second_publisher_joining_is_received_once_by_the_group() {
    let c = Cluster::start();
    c.create("pubup", 4, "distribution");
    let p1 = Producer::new(&c, 1, "pubup", 1);
    let pub1 = std::thread::spawn(move || p1.publish(&RECORDS1, Duration::from_millis(200)));
    let mut s1 = TestSubscriber::start(&c, "pubup", "s1", 1, 0, End::Leave, None);
    let mut s2 = TestSubscriber::start(&c, "pubup", "s2", 1, 0, End::Leave, None);
    let p2 = Producer::new(&c, 2, "pubup", 2);
    p2.publish(&RECORDS2, Duration::from_millis(50));
    pub1.join().expect("publisher 1");
    let all = wait_confirmed(&[&s1, &s2], 12);
    s1.stop();
    s2.stop();
    let expected: Vec<&str> = RECORDS1.iter().chain(&RECORDS2).copied().collect();
    assert_exactly_once(&all, &expected);
    assert!(
        !s1.confirmed().is_empty() && !s2.confirmed().is_empty(),
        "work shared"
    );
    for s in [&s1, &s2] {
        let seen = s.seen.lock().expect("lock");
        assert!(seen.batches.iter().all(|(_, r)| r.len() == 1));
        assert_fragment_order(&seen.batches);
    }
}

#[test]
fn scenario_4_a_publisher_leaving_loses_nothing_it_had_stored() {
    let c = Cluster::start();
    c.create("pubdown", 4, "distribution");
    let mut s1 = TestSubscriber::start(&c, "pubdown", "s1", 1, 0, End::Leave, None);
    let mut s2 = TestSubscriber::start(&c, "pubdown", "s2", 1, 0, End::Leave, None);
    let p1 = Producer::new(&c, 1, "pubdown", 1);
    let p2 = Producer::new(&c, 3, "pubdown", 2);
    let pub1 = std::thread::spawn(move || p1.publish(&RECORDS1, Duration::from_millis(150)));
    // The second publisher stops (disconnects) after two records.
    p2.publish(&RECORDS2[..2], Duration::from_millis(150));
    drop(p2);
    pub1.join().expect("publisher 1");
    let all = wait_confirmed(&[&s1, &s2], 8);
    s1.stop();
    s2.stop();
    let expected: Vec<&str> = RECORDS1.iter().chain(&RECORDS2[..2]).copied().collect();
    assert_exactly_once(&all, &expected);
}

#[test]
fn scenario_5_a_subscriber_joining_takes_over_fragments_without_duplicates() {
    let c = Cluster::start();
    c.create("subup", 4, "distribution");
    let mut s1 = TestSubscriber::start(&c, "subup", "s1", 1, 0, End::Leave, None);
    let p1 = Producer::new(&c, 1, "subup", 1);
    let p2 = Producer::new(&c, 2, "subup", 2);
    let pub1 = std::thread::spawn(move || p1.publish(&RECORDS1, Duration::from_millis(200)));
    let pub2 = std::thread::spawn(move || p2.publish(&RECORDS2, Duration::from_millis(200)));
    std::thread::sleep(Duration::from_millis(500));
    let mut s2 = TestSubscriber::start(&c, "subup", "s2", 1, 0, End::Leave, None);
    pub1.join().expect("publisher 1");
    pub2.join().expect("publisher 2");
    let all = wait_confirmed(&[&s1, &s2], 12);
    let groups = get_json(&c.http(1), "/v1/topics/subup/subscriptions");
    assert_eq!(groups["groups"]["group"]["assignment"]["2"], json!(["s2"]));
    s1.stop();
    s2.stop();
    let expected: Vec<&str> = RECORDS1.iter().chain(&RECORDS2).copied().collect();
    assert_exactly_once(&all, &expected);
    // s2 took fragments 2 and 3 over (p2's records after it joined came to it).
    assert!(
        s2.confirmed().iter().any(|(f, _, _)| *f == 2),
        "s2 received part of the stream"
    );
    assert!(s2.confirmed().iter().all(|(f, _, _)| *f >= 2));
}

/// Scenario 6: one of two subscribers stops 500 ms after subscribing; the other ends with
/// every record the stopped one had not acknowledged, and nothing it had.
fn scale_down(end: End) {
    let c = Cluster::start();
    let topic = if end == End::Leave {
        "subdown"
    } else {
        "subdie"
    };
    c.create(topic, 4, "distribution");
    let mut s1 = TestSubscriber::start(&c, topic, "s1", 1, 0, End::Leave, None);
    let mut s2 = TestSubscriber::start(&c, topic, "s2", 1, 0, end, None);
    // s1 joined first and keeps fragments 0 and 1; s2 has 2 and 3. One publisher each.
    let p1 = Producer::new(&c, 1, topic, 1);
    let p2 = Producer::new(&c, 2, topic, 2);
    let pub1 = std::thread::spawn(move || p1.publish(&RECORDS1, Duration::from_millis(200)));
    let pub2 = std::thread::spawn(move || p2.publish(&RECORDS2, Duration::from_millis(200)));
    std::thread::sleep(Duration::from_millis(500));
    s2.stop();
    let s1_before = s1.seen.lock().expect("lock").batches.len();
    let from_s2 = s2.confirmed();
    assert!(
        !from_s2.is_empty(),
        "s2 had acknowledged records before it stopped"
    );
    assert!(
        from_s2.iter().all(|(f, _, _)| *f == 2),
        "s2 read fragment 2: {from_s2:?}"
    );
    pub1.join().expect("publisher 1");
    pub2.join().expect("publisher 2");
    let all = wait_confirmed(&[&s1, &s2], 12);
    s1.stop();
    let expected: Vec<&str> = RECORDS1.iter().chain(&RECORDS2).copied().collect();
    assert_exactly_once(&all, &expected);
    assert_eq!(
        s2.confirmed(),
        from_s2,
        "nothing confirmed after it stopped"
    );
    if end == End::Leave {
        // A clean stop settles its acknowledgements first: after the hand-over s1 is given
        // nothing s2 had seen (Pirius' "every sub1 payload is new").
        let s2_seen: BTreeSet<String> = s2
            .seen
            .lock()
            .expect("lock")
            .batches
            .iter()
            .flat_map(|(_, r)| r.iter().map(|(_, p)| p.clone()))
            .collect();
        let s1_after: BTreeSet<String> = s1.seen.lock().expect("lock").batches[s1_before..]
            .iter()
            .flat_map(|(_, r)| r.iter().map(|(_, p)| p.clone()))
            .collect();
        assert!(
            s1_after.is_disjoint(&s2_seen),
            "every record s1 got after the hand-over is new: {s1_after:?} / {s2_seen:?}"
        );
    }
}

#[test]
fn scenario_6_a_subscriber_leaving_hands_over_exactly_once() {
    scale_down(End::Leave);
}

#[test]
fn scenario_6_a_subscriber_dying_hands_over_exactly_once_after_its_lease() {
    scale_down(End::Die);
}
