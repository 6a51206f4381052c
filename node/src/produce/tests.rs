//! A writer worker driven without a network (issue #14): topic creation answers through the
//! worker's mailbox, so one topic waiting for Raft does not hold up the others.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use zper_store::{FlushPolicy, Store, StoreConfig};
use zper_wire::{encode_record, AckMode};

use super::create::{CreateTopics, Created, ParkingLot};
use super::worker::Worker;
use super::{Append, Producer, WriteBatch};
use crate::metrics::Counters;

/// Knows `known`; holds every creation it is asked for until the test ends it.
#[derive(Default)]
struct HeldCreator {
    known: Mutex<HashSet<String>>,
    started: Mutex<Vec<(Arc<str>, Sender<Created>)>>,
}

impl CreateTopics for HeldCreator {
    fn known(&self, topic: &str) -> bool {
        self.known.lock().expect("lock").contains(topic)
    }
    fn start(&self, topic: Arc<str>, done: Sender<Created>) {
        self.started.lock().expect("lock").push((topic, done));
    }
}

impl HeldCreator {
    /// Ends the creation of `topic`: created (and known from now on) or failed.
    fn finish(&self, topic: &str, ok: bool) {
        let mut started = self.started.lock().expect("lock");
        let at = started
            .iter()
            .position(|(t, _)| &**t == topic)
            .expect("creation started");
        let (topic, done) = started.remove(at);
        if ok {
            self.known.lock().expect("lock").insert(topic.to_string());
        }
        let result = if ok { Ok(()) } else { Err("no quorum".into()) };
        done.send(Created { topic, result }).expect("worker alive");
    }

    fn started(&self) -> Vec<String> {
        let started = self.started.lock().expect("lock");
        started.iter().map(|(t, _)| t.to_string()).collect()
    }
}

struct Running {
    batches: Sender<WriteBatch>,
    acks: zmq::Socket,
    store: Arc<Store>,
    thread: JoinHandle<()>,
    _dir: tempfile::TempDir,
    _ctx: zmq::Context,
}

fn start(creator: Arc<HeldCreator>) -> Running {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(
        Store::open(StoreConfig {
            base_dir: dir.path().to_path_buf(),
            // Flush at once when a producer waits (the group commit).
            flush: FlushPolicy {
                flush_messages: 1,
                flush_interval: std::time::Duration::from_millis(1),
            },
            ..StoreConfig::default()
        })
        .expect("store"),
    );
    let ctx = zmq::Context::new();
    let pull = ctx.socket(zmq::PULL).expect("pull");
    pull.bind("inproc://worker-test-acks").expect("bind");
    pull.set_rcvtimeo(30_000).expect("timeout");
    let push = ctx.socket(zmq::PUSH).expect("push");
    push.connect("inproc://worker-test-acks").expect("connect");
    let (batches, rx) = crossbeam_channel::bounded(16);
    let (_wake_tx, wake) = crossbeam_channel::bounded(1);
    let (notices, _notices_rx) = crossbeam_channel::bounded(1024);
    let (created_tx, created) = crossbeam_channel::unbounded();
    let worker = Worker {
        rx,
        wake,
        view: None,
        min_insync: None,
        creator: Some(creator),
        create_failed: HashMap::new(),
        parked: ParkingLot::default(),
        created_tx,
        created,
        forward: None,
        acks_leader: false,
        acks: push,
        notices,
        store: store.clone(),
        policy: FlushPolicy {
            flush_messages: 1,
            flush_interval: std::time::Duration::from_millis(1),
        },
        idempotence: Default::default(),
        topics: HashMap::new(),
        counters: Arc::new(Counters::default()),
    };
    let thread = std::thread::spawn(move || {
        let _keep = (_wake_tx, _notices_rx);
        worker.run()
    });
    Running {
        batches,
        acks: pull,
        store,
        thread,
        _dir: dir,
        _ctx: ctx,
    }
}

/// One mode-2 message `[id][body]` from producer `who` to `topic`.
fn message(topic: &str, who: &[u8], id: &[u8], body: &[u8]) -> WriteBatch {
    let mut bytes = Vec::new();
    encode_record(id, true, &mut bytes);
    encode_record(body, false, &mut bytes);
    WriteBatch {
        appends: vec![Append {
            producer: Arc::new(Producer {
                routing_id: who.to_vec(),
                topic: Arc::from(topic),
                mode: AckMode::PerMessage,
                idempotent: false,
                worker: 0,
            }),
            bytes_end: bytes.len(),
            messages: 1,
            last_id: id.to_vec(),
        }],
        bytes,
        ..Default::default()
    }
}

#[test]
fn a_topic_waiting_for_creation_does_not_hold_up_the_others_and_keeps_its_order() {
    let creator = Arc::new(HeldCreator::default());
    creator.known.lock().expect("lock").insert("old".into());
    let w = start(creator.clone());

    w.batches
        .send(message("new", b"p1", b"n1", b"first"))
        .expect("send");
    w.batches
        .send(message("old", b"p2", b"o1", b"other"))
        .expect("send");
    // "new" is still being created (the creator holds it): "old" is acknowledged meanwhile.
    // Before issue #14 the worker blocked on the creation and this ack never came.
    let ack = w.acks.recv_multipart(0).expect("ack for the known topic");
    assert_eq!(ack, vec![b"p2".to_vec(), Vec::new(), b"o1".to_vec()]);
    assert_eq!(creator.started(), vec!["new".to_string()]);
    w.batches
        .send(message("new", b"p1", b"n2", b"second"))
        .expect("send");
    assert!(
        w.store.topic("new").is_none(),
        "nothing stored before it exists"
    );

    creator.finish("new", true);
    let first = w.acks.recv_multipart(0).expect("ack");
    let second = w.acks.recv_multipart(0).expect("ack");
    assert_eq!(first, vec![b"p1".to_vec(), Vec::new(), b"n1".to_vec()]);
    assert_eq!(second, vec![b"p1".to_vec(), Vec::new(), b"n2".to_vec()]);
    let log = w.store.topic("new").expect("created and stored");
    let raw = log.raw_messages(0, 10, 1 << 20).expect("read");
    let bodies: Vec<Vec<u8>> = zper_wire::Records::new(&raw.bytes)
        .filter(|r| !r.more)
        .map(|r| r.payload.to_vec())
        .collect();
    assert_eq!(
        bodies,
        vec![b"first".to_vec(), b"second".to_vec()],
        "arrival order"
    );

    // A creation that fails answers what waited with 105 and stores nothing.
    w.batches
        .send(message("doomed", b"p3", b"d1", b"x"))
        .expect("send");
    for _ in 0..1000 {
        if !creator.started().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    creator.finish("doomed", false);
    let refused = w.acks.recv_multipart(0).expect("refusal");
    assert_eq!(
        refused,
        vec![b"p3".to_vec(), Vec::new(), b"d1".to_vec(), vec![105]]
    );
    assert!(w.store.topic("doomed").is_none());
    // Within a second of the failure the next write is refused at once, without a new try.
    w.batches
        .send(message("doomed", b"p3", b"d2", b"y"))
        .expect("send");
    let refused = w.acks.recv_multipart(0).expect("refusal");
    assert_eq!(
        refused,
        vec![b"p3".to_vec(), Vec::new(), b"d2".to_vec(), vec![105]]
    );
    assert!(creator.started().is_empty());

    drop(w.batches);
    w.thread
        .join()
        .expect("worker ends when its channel closes");
}

#[test]
fn a_taken_batch_leaves_room_for_the_next_one() {
    let mut batch = WriteBatch::default();
    batch.bytes.extend_from_slice(&[1, 2, 3]);
    let taken = batch.take();
    assert_eq!(taken.bytes, [1, 2, 3]);
    assert!(batch.bytes.is_empty() && batch.appends.is_empty());
    assert!(batch.bytes.capacity() > super::BATCH_BYTES);
}

/// A producer of `mode` on topic "t".
fn producer(who: &[u8], mode: AckMode) -> Arc<Producer> {
    Arc::new(Producer {
        routing_id: who.to_vec(),
        topic: Arc::from("t"),
        mode,
        idempotent: false,
        worker: 0,
    })
}

/// Appends a message whose first frame is `id` and counts it as the engine does.
fn engine_append(batch: &mut WriteBatch, p: &Arc<Producer>, id: &[u8]) {
    let at = batch.bytes.len();
    batch.bytes.extend_from_slice(id);
    batch.record_at(p, at..at + id.len());
}

#[test]
fn every_run_of_a_taken_batch_names_its_newest_message_id() {
    let (a, b) = (
        producer(b"a", AckMode::None),
        producer(b"b", AckMode::PerFlush),
    );
    let two = producer(b"2", AckMode::PerMessage);
    let mut batch = WriteBatch::default();
    engine_append(&mut batch, &a, b"a1");
    engine_append(&mut batch, &a, b"a2");
    engine_append(&mut batch, &b, b"b1");
    engine_append(&mut batch, &two, b"m1");
    engine_append(&mut batch, &two, b"m2");
    batch.record(&a, b"front");
    engine_append(&mut batch, &a, b"a3");
    engine_append(&mut batch, &b, b"b2");
    engine_append(&mut batch, &b, b"b3");
    let taken = batch.take();
    let runs: Vec<(&[u8], u64, usize, &[u8])> = taken
        .appends
        .iter()
        .map(|r| {
            (
                &r.producer.routing_id[..],
                r.messages,
                r.bytes_end,
                &r.last_id[..],
            )
        })
        .collect();
    let expected: Vec<(&[u8], u64, usize, &[u8])> = vec![
        (b"a", 2, 4, b"a2"),
        (b"b", 1, 6, b"b1"),
        (b"2", 1, 8, b"m1"),
        (b"2", 1, 10, b"m2"),
        (b"a", 2, 12, b"a3"),
        (b"b", 2, 16, b"b3"),
    ];
    assert_eq!(runs, expected);
    // The batch left behind starts clean: its first run is not given an id of the old one.
    engine_append(&mut batch, &b, b"b4");
    assert_eq!(batch.take().appends[0].last_id, b"b4");
}
