//! What the subscription tests share (`subscribe.rs`, `subscription_protocol.rs`): a
//! three-node [`Cluster`] with subscription leases, producers routed to a chosen fragment, and
//! test subscribers that record what they see and what the group confirmed.
//!
//! A record counts as received by the group when the subscriber that got it has its
//! acknowledgement confirmed (`ACKED`): that is the exactly-once contract (docs/protocol.md
//! "Subscriptions"); a member that loses a fragment may have seen records it could not
//! acknowledge, which the new owner then receives.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use zper_client::{Event, Subscriber, SubscriberOptions};

use crate::common::*;

pub const RECORDS1: [&str; 6] = ["google", "paustq", "123456", "abcdef", "qwerty", "asdfgh"];
pub const RECORDS2: [&str; 6] = ["zoogle", "zaustq", "z23456", "zbcdef", "zwerty", "zsdfgh"];

/// One three-process cluster at a time: eleven at once on a 2-core machine starve the nodes'
/// lease renewals, and the writers then refuse (104) while leadership settles.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// A [`TestCluster`] for subscriptions (`subscription.lease_ms = 1500`, `flush_interval = 20`),
/// one at a time per test binary ([`SERIAL`]); nodes are numbered from 1.
pub struct Cluster {
    inner: TestCluster,
    // Dropped last, after the nodes are killed.
    _serial: MutexGuard<'static, ()>,
}

impl Cluster {
    /// Three nodes, once no other cluster of this test binary runs.
    pub fn start() -> Cluster {
        // A test that failed while holding the lock poisons it; the next one may still run.
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        Cluster {
            inner: TestCluster::start_with("flush_interval = 20\nsubscription.lease_ms = 1500\n"),
            _serial: serial,
        }
    }

    /// Node `node`'s HTTP admin address.
    pub fn http(&self, node: usize) -> String {
        self.inner.http(node as u64)
    }

    /// `/v1/brokers` as node `via` sees it.
    pub fn brokers(&self, via: usize) -> Vec<Value> {
        match get_json(&self.http(via), "/v1/brokers") {
            Value::Array(b) => b,
            _ => Vec::new(),
        }
    }

    /// Node `n`'s advertised endpoint `name` (controller, relay, writer...).
    pub fn endpoint(&self, n: usize, name: &str) -> String {
        self.brokers(1)
            .iter()
            .find(|b| b["id"] == json!(n))
            .and_then(|b| b["endpoints"][name].as_str().map(str::to_owned))
            .expect("endpoint")
    }

    /// The three nodes' controller endpoints, for [`SubscriberOptions`].
    pub fn controllers(&self) -> Vec<String> {
        (1..=3).map(|n| self.endpoint(n, "controller")).collect()
    }

    /// A topic with `fragments` fragments, replicated 3 times, under `policy`.
    pub fn create(&self, topic: &str, fragments: u32, policy: &str) {
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
pub struct Producer {
    socket: zmq::Socket,
    name: String,
    _ctx: zmq::Context,
}

impl Producer {
    /// Producer `p<tag>` whose messages go to fragment `tag % fragments`.
    pub fn new(c: &Cluster, node: usize, topic: &str, tag: u8) -> Producer {
        Self::on_fragment(c, node, topic, tag, u32::from(tag) % 4, 4)
    }

    pub fn on_fragment(
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
    pub fn publish(&self, records: &[&str], gap: Duration) {
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
pub struct Seen {
    pub batches: Vec<(u32, Vec<(u64, String)>)>,
    /// Records whose acknowledgement was confirmed: (fragment, offset, payload).
    pub confirmed: Vec<(u32, u64, String)>,
    pub results: Vec<(Vec<u8>, Vec<u8>)>,
}

/// A delivered batch not yet confirmed: its end offset and its (offset, payload) records.
pub type Pending = (u64, Vec<(u64, String)>);

/// How a test subscriber ends.
#[derive(Clone, Copy, PartialEq)]
pub enum End {
    /// Waits for its acks, then UNSUBSCRIBE (Pirius' Stop()).
    Leave,
    /// Stops everything at once: no more acks or keep-alives (its lease lapses).
    Die,
}

/// A [`Subscriber`] on a thread of its own that acknowledges every batch and records what it
/// saw; stopped by [`TestSubscriber::stop`] (or, without waiting, on drop).
pub struct TestSubscriber {
    pub seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TestSubscriber {
    pub fn start(
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

    pub fn confirmed(&self) -> Vec<(u32, u64, String)> {
        self.seen.lock().expect("lock").confirmed.clone()
    }

    pub fn stop(&mut self) {
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
pub fn wait_confirmed(subs: &[&TestSubscriber], n: usize) -> Vec<(u32, u64, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all: Vec<_> = subs.iter().flat_map(|s| s.confirmed()).collect();
        if all.len() >= n || Instant::now() > deadline {
            return all;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every expected payload exactly once.
pub fn assert_exactly_once(all: &[(u32, u64, String)], expected: &[&str]) {
    let payloads: Vec<&str> = all.iter().map(|(_, _, p)| p.as_str()).collect();
    let unique: BTreeSet<&str> = payloads.iter().copied().collect();
    assert_eq!(payloads.len(), unique.len(), "a record twice: {payloads:?}");
    let want: BTreeSet<&str> = expected.iter().copied().collect();
    assert_eq!(unique, want, "every record once");
}

/// Per fragment, every batch's records in increasing offset order.
pub fn assert_fragment_order(batches: &[(u32, Vec<(u64, String)>)]) {
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
