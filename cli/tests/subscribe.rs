//! Pirius-style subscriptions across three `zper` processes (issue #7): the six integration
//! scenarios of `pirius.md` §15.1 on a `distribution` topic, plus deterministic assignment on
//! every node, the retrievable back-channel (§13), the controller's raw frames, and
//! `zper subscribe`.
//!
//! A record counts as received by the group when the subscriber that got it has its
//! acknowledgement confirmed (`ACKED`): that is the exactly-once contract (docs/protocol.md
//! "Subscriptions"); a member that loses a fragment may have seen records it could not
//! acknowledge, which the new owner then receives.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use zper_client::{Event, ResultsListener, Subscriber, SubscriberOptions};

const RECORDS1: [&str; 6] = ["google", "paustq", "123456", "abcdef", "qwerty", "asdfgh"];
const RECORDS2: [&str; 6] = ["zoogle", "zaustq", "z23456", "zbcdef", "zwerty", "zsdfgh"];

/// One three-process cluster at a time: eleven at once on a 2-core machine starve the nodes'
/// lease renewals, and the writers then refuse (104) while leadership settles.
static SERIAL: Mutex<()> = Mutex::new(());

struct Cluster {
    _dir: tempfile::TempDir,
    ports: Vec<u16>,
    _nodes: Vec<ChildNode>,
    // Dropped last, after the nodes are killed.
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl Cluster {
    fn start() -> Cluster {
        // A test that failed while holding the lock poisons it; the next one may still run.
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
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
                        "node.id = {}\n{quorum}node.lease_ms = 1500\nflush_interval = 20\n\
                         subscription.lease_ms = 1500\n",
                        i + 1
                    ),
                )
            })
            .collect();
        let c = Cluster {
            _dir: dir,
            ports,
            _nodes: nodes,
            _serial: serial,
        };
        assert!(
            eventually(|| (1..=3).all(|n| c
                .brokers(n)
                .iter()
                .filter(|b| b["live"] == json!(true))
                .count()
                == 3)),
            "three live brokers"
        );
        c
    }

    fn http(&self, node: usize) -> String {
        format!("127.0.0.1:{}", self.ports[node - 1])
    }

    fn brokers(&self, via: usize) -> Vec<Value> {
        match get_json(&self.http(via), "/v1/brokers") {
            Value::Array(b) => b,
            _ => Vec::new(),
        }
    }

    /// Node `n`'s advertised endpoint `name` (controller, relay, writer...).
    fn endpoint(&self, n: usize, name: &str) -> String {
        self.brokers(1)
            .iter()
            .find(|b| b["id"] == json!(n))
            .and_then(|b| b["endpoints"][name].as_str().map(str::to_owned))
            .expect("endpoint")
    }

    fn controllers(&self) -> Vec<String> {
        (1..=3).map(|n| self.endpoint(n, "controller")).collect()
    }

    /// A topic with `fragments` fragments, replicated 3 times, under `policy`.
    fn create(&self, topic: &str, fragments: u32, policy: &str) {
        let (s, body) = http(
            "POST",
            &self.http(1),
            &format!("/v1/topics/{topic}"),
            Some(&format!(
                r#"{{"fragments": {fragments}, "replication_factor": 3, "policy": "{policy}"}}"#
            )),
        )
        .expect("answer");
        assert_eq!(s, 201, "{body}");
        assert!(eventually(|| (1..=3).all(|n| {
            let v = get_json(&self.http(n), &format!("/v1/topics/{topic}"));
            v["fragments"].as_array().map_or(0, |f| f.len()) == fragments as usize
        })));
    }
}

/// A producer (mode 2 DEALER) on node `node`'s writer; `tag` picks its identity (and so its
/// fragment).
struct Producer {
    socket: zmq::Socket,
    name: String,
    _ctx: zmq::Context,
}

impl Producer {
    /// Producer `p<tag>` whose messages go to fragment `tag % fragments`.
    fn new(c: &Cluster, node: usize, topic: &str, tag: u8) -> Producer {
        Self::on_fragment(c, node, topic, tag, u32::from(tag) % 4, 4)
    }

    fn on_fragment(
        c: &Cluster,
        node: usize,
        topic: &str,
        tag: u8,
        fragment: u32,
        fragments: u32,
    ) -> Producer {
        let ctx = zmq::Context::new();
        let mut id = identity(topic, 2);
        let n = id.len();
        // Pick the uuid's last byte so the writer's FNV-1a routing lands on `fragment`.
        let salt = (0..=255u8)
            .find(|b| {
                id[n - 1] = *b;
                zper_node::replication::fragment_for(&id[n - 16..], fragments) == fragment
            })
            .expect("some byte routes there");
        id[n - 1] = salt;
        let socket = client(&ctx, zmq::DEALER, &id, &c.endpoint(node, "writer"));
        socket.set_rcvtimeo(10_000).expect("timeout");
        Producer {
            socket,
            name: format!("p{tag}"),
            _ctx: ctx,
        }
    }

    /// Sends `records` `gap` apart as `[id][record]` (id = `<name>-<seq>`) and waits for each
    /// to be acknowledged (durable on the in-sync replicas). A refusal (`[empty][id][status]`:
    /// not stored, docs/protocol.md) is retried, as a cluster client does while leadership
    /// settles.
    fn publish(&self, records: &[&str], gap: Duration) {
        for (seq, r) in records.iter().enumerate() {
            let id = format!("{}-{seq}", self.name);
            let mut tries = 0;
            loop {
                self.socket
                    .send_multipart([id.as_bytes(), r.as_bytes()], 0)
                    .expect("send");
                let ack = self.socket.recv_multipart(0).expect("ack");
                if ack == vec![Vec::new(), id.clone().into_bytes()] {
                    break;
                }
                tries += 1;
                assert!(
                    ack.len() == 3 && ack[1] == id.as_bytes() && tries < 50,
                    "{id}: neither acknowledged nor refused, or refused 50 times: {ack:?}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
            std::thread::sleep(gap);
        }
    }
}

/// What one subscriber saw: batches (fragment, [(offset, payload)]) and confirmed records.
#[derive(Default)]
struct Seen {
    batches: Vec<(u32, Vec<(u64, String)>)>,
    /// Records whose acknowledgement was confirmed: (fragment, offset, payload).
    confirmed: Vec<(u32, u64, String)>,
    results: Vec<(Vec<u8>, Vec<u8>)>,
}

/// A delivered batch not yet confirmed: its end offset and its (offset, payload) records.
type Pending = (u64, Vec<(u64, String)>);

/// How a test subscriber ends.
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// Waits for its acks, then UNSUBSCRIBE (Pirius' Stop()).
    Leave,
    /// Stops everything at once: no more acks or keep-alives (its lease lapses).
    Die,
}

struct TestSubscriber {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TestSubscriber {
    fn start(
        c: &Cluster,
        topic: &str,
        id: &str,
        batch: u32,
        flush_ms: u32,
        end: End,
        result_suffix: Option<&'static str>,
    ) -> TestSubscriber {
        let mut opts = SubscriberOptions::new(c.controllers(), topic, "group", id);
        opts.max_batch = batch;
        opts.flush_ms = flush_ms;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, stop2) = (seen.clone(), stop.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mut sub = Subscriber::subscribe(opts).expect("subscribe");
            let _ = tx.send(());
            // Batches delivered and not yet confirmed: fragment -> [(end, records)].
            let mut pending: BTreeMap<u32, Vec<Pending>> = BTreeMap::new();
            while !stop2.load(Ordering::Relaxed) {
                for ev in sub.poll(Duration::from_millis(20)).expect("poll") {
                    let mut seen = s2.lock().expect("lock");
                    match ev {
                        Event::Batch {
                            fragment,
                            messages,
                            end,
                        } => {
                            let records: Vec<(u64, String)> = messages
                                .iter()
                                .map(|m| {
                                    (m.offset, String::from_utf8_lossy(&m.frames[1]).into_owned())
                                })
                                .collect();
                            seen.batches.push((fragment, records.clone()));
                            if let Some(suffix) = result_suffix {
                                for m in &messages {
                                    let mut payload = m.frames[1].clone();
                                    payload.extend_from_slice(suffix.as_bytes());
                                    sub.send_result(fragment, m.offset, &m.frames[0], &payload)
                                        .expect("result");
                                }
                            }
                            pending.entry(fragment).or_default().push((end, records));
                            sub.ack(fragment, end).expect("ack");
                        }
                        Event::Acked { fragment, offset } => {
                            let p = pending.entry(fragment).or_default();
                            while p.first().is_some_and(|(e, _)| *e <= offset) {
                                let (_, records) = p.remove(0);
                                seen.confirmed
                                    .extend(records.into_iter().map(|(o, r)| (fragment, o, r)));
                            }
                        }
                        Event::Revoked { fragment, .. } => {
                            pending.remove(&fragment);
                        }
                        Event::Result(r) => seen.results.push((r.id, r.payload)),
                        Event::Error(reason) => panic!("the relay refused: {reason}"),
                        Event::Assigned(_) | Event::RawBatch { .. } => {}
                    }
                }
            }
            if end == End::Leave {
                // Settle outstanding acknowledgements, then leave.
                let deadline = Instant::now() + Duration::from_secs(5);
                while pending.values().any(|p| !p.is_empty()) && Instant::now() < deadline {
                    for ev in sub.poll(Duration::from_millis(20)).expect("poll") {
                        if let Event::Acked { fragment, offset } = ev {
                            let mut seen = s2.lock().expect("lock");
                            let p = pending.entry(fragment).or_default();
                            while p.first().is_some_and(|(e, _)| *e <= offset) {
                                let (_, records) = p.remove(0);
                                seen.confirmed
                                    .extend(records.into_iter().map(|(o, r)| (fragment, o, r)));
                            }
                        }
                    }
                }
                sub.unsubscribe().expect("unsubscribe");
            }
        });
        rx.recv_timeout(Duration::from_secs(15))
            .expect("subscribed");
        TestSubscriber {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn confirmed(&self) -> Vec<(u32, u64, String)> {
        self.seen.lock().expect("lock").confirmed.clone()
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("subscriber thread");
        }
    }
}

impl Drop for TestSubscriber {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Waits until the group's confirmed records number `n` (or 30 s), then returns them all.
fn wait_confirmed(subs: &[&TestSubscriber], n: usize) -> Vec<(u32, u64, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all: Vec<_> = subs.iter().flat_map(|s| s.confirmed()).collect();
        if all.len() >= n || Instant::now() > deadline {
            return all;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every expected payload exactly once, and per fragment in offset order.
fn assert_exactly_once(all: &[(u32, u64, String)], expected: &[&str]) {
    let payloads: Vec<&str> = all.iter().map(|(_, _, p)| p.as_str()).collect();
    let unique: BTreeSet<&str> = payloads.iter().copied().collect();
    assert_eq!(payloads.len(), unique.len(), "a record twice: {payloads:?}");
    let want: BTreeSet<&str> = expected.iter().copied().collect();
    assert_eq!(unique, want, "every record once");
}

fn assert_fragment_order(batches: &[(u32, Vec<(u64, String)>)]) {
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    for (f, records) in batches {
        for (o, _) in records {
            if let Some(prev) = last.get(f) {
                assert!(o > prev, "fragment {f}: offset {o} after {prev}");
            }
            last.insert(*f, *o);
        }
    }
}

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

#[test]
fn the_same_joins_and_leaves_give_the_same_assignment_on_every_node() {
    let c = Cluster::start();
    c.create("determ", 8, "distribution");
    let ctx = zmq::Context::new();
    // Raw controller frames, each request through a different node.
    let ask = |node: usize, frames: &[&[u8]]| -> Vec<Vec<u8>> {
        let s = client(&ctx, zmq::DEALER, b"", &c.endpoint(node, "controller"));
        s.set_rcvtimeo(10_000).expect("timeout");
        s.send_multipart(frames, 0).expect("send");
        s.recv_multipart(0).expect("reply")
    };
    let mut joined = Vec::new();
    for (i, who) in ["m-a", "m-b", "m-c", "m-d"].iter().enumerate() {
        let reply = ask(i % 3 + 1, &[b"SUBSCRIBE", b"determ", b"g", who.as_bytes()]);
        assert_eq!(reply[0], [100], "{who} joined");
        joined.push(*who);
    }
    let reply = ask(2, &[b"UNSUBSCRIBE", b"determ", b"g", b"m-b"]);
    assert_eq!(reply, vec![vec![100u8]]);
    let reply = ask(3, &[b"UNSUBSCRIBE", b"determ", b"g", b"m-b"]);
    assert_eq!(reply, vec![vec![101u8]], "not a member any more");
    let reply = ask(1, &[b"KEEPALIVE", b"determ", b"g", b"m-c"]);
    assert_eq!(reply[0], [100]);
    // Every node, at the same applied index, has the same groups.
    let view = |n: usize| get_json(&c.http(n), "/v1/topics/determ/subscriptions");
    assert!(eventually(|| {
        let v: Vec<Value> = (1..=3).map(view).collect();
        v[0]["applied_index"] == v[1]["applied_index"]
            && v[1]["applied_index"] == v[2]["applied_index"]
    }));
    let v: Vec<Value> = (1..=3).map(view).collect();
    assert_eq!(v[0]["groups"], v[1]["groups"]);
    assert_eq!(v[1]["groups"], v[2]["groups"]);
    // And it is the policy's: 8 fragments over m-a, m-c, m-d, one owner each, 3/3/2.
    let assignment = v[0]["groups"]["g"]["assignment"]
        .as_object()
        .expect("assignment")
        .clone();
    assert_eq!(assignment.len(), 8);
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for owners in assignment.values() {
        let owners = owners.as_array().expect("owners");
        assert_eq!(owners.len(), 1);
        *per.entry(owners[0].as_str().expect("id").to_owned())
            .or_default() += 1;
    }
    assert_eq!(
        per.keys().cloned().collect::<Vec<_>>(),
        ["m-a", "m-c", "m-d"]
    );
    let mut shares: Vec<usize> = per.values().copied().collect();
    shares.sort();
    assert_eq!(shares, [2, 3, 3]);
    // Malformed: bad names, unknown topic.
    assert_eq!(ask(1, &[b"SUBSCRIBE", b"determ", b"g"]), vec![vec![102u8]]);
    assert_eq!(
        ask(1, &[b"SUBSCRIBE", b"determ", b"g", b"a b"]),
        vec![vec![102u8]]
    );
    assert_eq!(
        ask(1, &[b"SUBSCRIBE", b"nosuch", b"g", b"x"]),
        vec![vec![101u8]]
    );
    let _ = joined;
}

#[test]
fn a_subscribers_results_reach_the_producer_registered_on_another_node() {
    let c = Cluster::start();
    c.create("retrieve", 1, "distribution");
    // The producer listens on node 3's relay; the subscriber's stream may be on any node.
    let mut listener =
        ResultsListener::register(&c.endpoint(3, "relay"), "retrieve", b"p1-").expect("register");
    assert!(listener.wait_registered(Duration::from_secs(10)));
    let mut sub = TestSubscriber::start(&c, "retrieve", "s1", 1, 0, End::Leave, Some("_processed"));
    let p = Producer::new(&c, 1, "retrieve", 1);
    p.publish(&RECORDS1[..3], Duration::ZERO);
    let mut results = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while results.len() < 3 && Instant::now() < deadline {
        if let Some(r) = listener.next(Duration::from_millis(200)).expect("next") {
            results.push((
                String::from_utf8_lossy(&r.id).into_owned(),
                String::from_utf8_lossy(&r.payload).into_owned(),
            ));
        }
    }
    sub.stop();
    assert_eq!(
        results,
        vec![
            ("p1-0".to_owned(), "google_processed".to_owned()),
            ("p1-1".to_owned(), "paustq_processed".to_owned()),
            ("p1-2".to_owned(), "123456_processed".to_owned()),
        ]
    );
}

#[test]
fn zper_subscribe_prints_the_records_and_commits_the_group_offset() {
    let c = Cluster::start();
    c.create("clisub", 1, "default");
    let p = Producer::new(&c, 1, "clisub", 1);
    p.publish(&RECORDS1, Duration::ZERO);
    let controllers = c.controllers().join(",");
    let subscribe = |n: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_zper"))
            .args([
                "subscribe",
                "-t",
                "clisub",
                "-g",
                "cli",
                "--id",
                "one",
                "-c",
                &controllers,
                "-n",
                n,
            ])
            .output()
            .expect("run zper subscribe");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let out = subscribe("4");
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        lines,
        [
            "p1-0\tgoogle",
            "p1-1\tpaustq",
            "p1-2\t123456",
            "p1-3\tabcdef"
        ]
    );
    // The same member resumes after what it acknowledged.
    let out = subscribe("2");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "p1-4\tqwerty\np1-5\tasdfgh\n"
    );
    // A bad topic name is a clear error.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_zper"))
        .args(["subscribe", "-t", "no-such", "-c", &c.controllers()[0]])
        .output()
        .expect("run zper subscribe");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("status 102"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_relay_answers_malformed_and_misdirected_requests_and_keeps_serving() {
    let c = Cluster::start();
    c.create("rawrelay", 2, "distribution");
    let ctx = zmq::Context::new();
    let relay = client(&ctx, zmq::DEALER, b"", &c.endpoint(1, "relay"));
    relay.set_rcvtimeo(10_000).expect("timeout");
    let ask = |frames: Vec<Vec<u8>>| -> Vec<Vec<u8>> {
        relay.send_multipart(frames, 0).expect("send");
        relay.recv_multipart(0).expect("reply")
    };
    let stream = |topic: &str, fragment: u32, window: u32| -> Vec<Vec<u8>> {
        vec![
            b"STREAM".to_vec(),
            topic.as_bytes().to_vec(),
            b"g".to_vec(),
            b"raw".to_vec(),
            fragment.to_be_bytes().to_vec(),
            0u64.to_be_bytes().to_vec(),
            1u32.to_be_bytes().to_vec(),
            0u32.to_be_bytes().to_vec(),
            window.to_be_bytes().to_vec(),
            0u64.to_be_bytes().to_vec(),
        ]
    };
    for bad in [
        vec![b"FETCH".to_vec()],
        vec![b"STREAM".to_vec(), b"rawrelay".to_vec()],
        stream("rawrelay", 0, 0),
        stream("raw-relay", 0, 10),
        vec![
            b"ACK".to_vec(),
            b"rawrelay".to_vec(),
            b"g".to_vec(),
            b"raw".to_vec(),
            vec![0],
            vec![1],
        ],
    ] {
        let reply = ask(bad.clone());
        assert_eq!(reply[0], b"ERROR", "{bad:?} -> {reply:?}");
        assert_eq!(reply.len(), 2);
    }
    // A fragment that does not exist, or a topic no one created: REVOKED with a reason.
    for (topic, fragment) in [("rawrelay", 7u32), ("nosuchtopic", 0)] {
        let reply = ask(stream(topic, fragment, 10));
        assert_eq!(reply[0], b"REVOKED", "{reply:?}");
        assert_eq!(reply[2], fragment.to_be_bytes());
    }
    // A stream for a member that is not in the group ends with REVOKED.
    let reply = ask(stream("rawrelay", 0, 10));
    assert_eq!(reply[0], b"REVOKED", "{reply:?}");
    // An ACK of nothing pushed on this connection is refused; no offset moves.
    let ack = |offset: u64| {
        vec![
            b"ACK".to_vec(),
            b"rawrelay".to_vec(),
            b"g".to_vec(),
            b"raw".to_vec(),
            1u32.to_be_bytes().to_vec(),
            offset.to_be_bytes().to_vec(),
        ]
    };
    assert_eq!(ask(ack(1000))[0], b"ERROR");
    let groups = get_json(&c.http(1), "/v1/topics/rawrelay/subscriptions");
    assert_eq!(groups["groups"], json!({}), "nothing committed: {groups}");
    // A member may acknowledge only message boundaries it was pushed: not inside a message,
    // not past what it got (either would make the group skip records or resume mid-message).
    let controller = client(&ctx, zmq::DEALER, b"", &c.endpoint(1, "controller"));
    controller.set_rcvtimeo(10_000).expect("timeout");
    let joined = request(&controller, &[b"SUBSCRIBE", b"rawrelay", b"g", b"raw"]);
    assert_eq!(joined[0], [100]);
    let revision = joined[2].clone();
    let relay1 = c.endpoint(
        get_json(&c.http(1), "/v1/topics/rawrelay")["fragments"][1]["leader"]
            .as_u64()
            .expect("leader") as usize,
        "relay",
    );
    let member = client(&ctx, zmq::DEALER, b"", &relay1);
    member.set_rcvtimeo(10_000).expect("timeout");
    let mut open = stream("rawrelay", 1, 10);
    open[9] = revision;
    member.send_multipart(open, 0).expect("stream");
    let p = Producer::on_fragment(&c, 2, "rawrelay", 8, 1, 2);
    p.publish(&RECORDS1[..1], Duration::ZERO);
    let batch = member.recv_multipart(0).expect("records");
    assert_eq!(batch[0], b"RECORDS", "{batch:?}");
    let end = u64::from_be_bytes(batch[4].as_slice().try_into().expect("end"));
    for bad in [3, end + 1, u64::MAX] {
        let mut a = ack(bad);
        a[4] = 1u32.to_be_bytes().to_vec();
        member.send_multipart(a, 0).expect("ack");
        let reply = member.recv_multipart(0).expect("reply");
        assert_eq!(reply[0], b"ERROR", "ACK {bad}: {reply:?}");
    }
    member.send_multipart(ack(end), 0).expect("ack");
    let reply = member.recv_multipart(0).expect("reply");
    assert_eq!(reply[0], b"ACKED", "{reply:?}");
    assert_eq!(reply[3], end.to_be_bytes());
    let reply = request(&controller, &[b"UNSUBSCRIBE", b"rawrelay", b"g", b"raw"]);
    assert_eq!(reply, vec![vec![100u8]]);
    // The node still serves a real subscriber.
    let mut sub = TestSubscriber::start(&c, "rawrelay", "real", 1, 0, End::Leave, None);
    // (Another group: it also gets the record the raw member acknowledged.)
    let p = Producer::on_fragment(&c, 2, "rawrelay", 9, 1, 2);
    p.publish(&RECORDS2[..2], Duration::ZERO);
    let all = wait_confirmed(&[&sub], 3);
    sub.stop();
    assert_exactly_once(&all, &["google", "zoogle", "zaustq"]);
}
