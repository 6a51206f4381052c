//! The load run during a fault, and the checks after it heals.
//!
//! Workers (each bounded by a stop flag the test sets, and by a deadline):
//! - a mode-2 producer (REQ; one reply per durable message) and a mode-1 producer (DEALER;
//!   acks carry the id of the newest durable message) writing 8-byte ids to one topic through
//!   every node in turn, recording every acknowledged id;
//! - an idempotent mode-2 producer (issue #18) sending through every node in turn, each
//!   message sent again until durable, recording every acknowledged (sequence, payload);
//! - an idempotent mode-1 producer (issue #18): windows of 20 through every node in turn,
//!   each flushed (sent again until acknowledged), recording the payloads of every window
//!   whose flush succeeded;
//! - a Dolly client putting one new key per request through every node in turn, recording
//!   every success;
//! - an admin client creating topics through every node in turn, recording every 201;
//! - a watcher sampling every node's view of the topic's leader and leader epoch.
//!
//! [`check`] then verifies on every node: each acknowledged message exactly once at the same
//! offset, byte-identical logs, each successful Put readable with its value, each created
//! topic known, and no leader epoch with two leaders.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zper_client::admin::CreateTopicRequest;
use zper_client::dolly::DollyReply;
use zper_client::{
    AckMode, AdminClient, DollyClient, IdempotentOptions, IdempotentProducer, PlainProducer,
    ProducerOptions, ReaderClient,
};
use zper_wire::Identity;

use crate::cluster::Cluster;
use crate::logs::messages;
use crate::security::Security;

/// Topic the producers write.
pub const TOPIC: &str = "chaos";
/// Ports inside the containers.
const WRITER: u16 = 5555;
pub(crate) const READER: u16 = 5556;
pub(crate) const DOLLY: u16 = 3266;

/// What the workload saw acknowledged.
#[derive(Debug, Default)]
pub struct Acked {
    /// Message ids acknowledged (mode 1 or 2).
    pub messages: BTreeSet<u64>,
    /// Those acknowledged in mode 1, with the node index they were sent to.
    pub mode1: BTreeMap<u64, usize>,
    /// The idempotent producer's acknowledged messages: (producer id, sequence) -> payload id.
    pub idempotent: BTreeMap<([u8; 16], u64), u64>,
    /// The idempotent mode-1 producer's acknowledged payload ids (its ids may change when it
    /// goes on under a new producer id, so the payload is what is checked).
    pub idempotent_mode1: BTreeSet<u64>,
    /// Dolly Puts answered with a sequence: key -> value.
    pub puts: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Topics whose creation was answered 201.
    pub topics: BTreeSet<String>,
    /// (leader epoch -> leaders seen with it) from every node's view.
    pub epochs: BTreeMap<u64, BTreeSet<u64>>,
    /// (Raft term -> nodes that said they lead in it): two in one term would mean a vote was
    /// forgotten (e.g. lost in a power loss).
    pub terms: BTreeMap<u64, BTreeSet<u64>>,
    /// Message ids a consumer read, woken by the ack PUB, with the offset it read each at
    /// (readers only see what is below the high-water mark, so each must be in the final log
    /// at that offset; issue #13's dirty-read check).
    pub consumed: BTreeMap<u64, usize>,
}

/// The longest a workload runs: its workers stop then even without [`Workload::finish`] (a
/// safety bound for a test that panicked). A scenario's faults must end well before it: the
/// randomized nemesis is clamped to [`LIMIT`] minus 5 minutes.
pub const LIMIT: Duration = Duration::from_secs(20 * 60);

/// A running workload against `endpoints` (the nodes' addresses; updated by the test after an
/// address changes).
pub struct Workload {
    stop: Arc<AtomicBool>,
    deadline: Instant,
    acked: Arc<Mutex<Acked>>,
    /// The nodes' current IPs and the clients' keys, shared with the workers.
    ips: Arc<Targets>,
    workers: Vec<JoinHandle<()>>,
}

/// Where the workers connect and what they present there.
struct Targets {
    /// The nodes' current IPs, index = id - 1.
    ips: Mutex<Vec<String>>,
    /// CURVE keys and admin token, when the cluster is secured.
    security: Security,
}

fn identity(mode: u8, n: u64) -> Vec<u8> {
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&(std::process::id() as u64).to_be_bytes());
    uuid[8..].copy_from_slice(&n.to_be_bytes());
    Identity::new(TOPIC, mode, &uuid)
        .map(|i| i.to_bytes())
        .unwrap_or_default()
}

/// A producer for [`TOPIC`] with a known identity (`n` in its UUID) connected to `at`:
/// 3 s for a reply, 1 s to queue a message, nothing kept after a close.
fn producer(
    ctx: &zmq::Context,
    t: &Targets,
    mode: AckMode,
    n: u64,
    at: &str,
) -> Option<PlainProducer> {
    let mut opts = ProducerOptions::new(TOPIC, mode)
        .timeout(Duration::from_secs(3))
        .curve(t.security.curve.clone());
    opts.identity = Some(identity(mode.to_byte(), n));
    let p = PlainProducer::connect(ctx, &[at.to_owned()], &opts).ok()?;
    p.socket().set_linger(0).ok()?;
    p.socket().set_sndtimeo(1000).ok()?;
    Some(p)
}

impl Workload {
    /// Starts every worker; they run until [`Workload::finish`] (or [`LIMIT`] at most).
    pub fn start(cluster: &Cluster) -> Workload {
        let ips = Arc::new(Targets {
            ips: Mutex::new(cluster.nodes.iter().map(|n| n.ip.clone()).collect()),
            security: cluster.security.clone(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Acked::default()));
        let ids = Arc::new(AtomicU64::new(1));
        let deadline = Instant::now() + LIMIT;
        let mut workers = Vec::new();
        let run = |f: Box<dyn FnOnce() + Send>| std::thread::spawn(f);
        {
            let (ips, stop, acked, ids) = (ips.clone(), stop.clone(), acked.clone(), ids.clone());
            workers.push(run(Box::new(move || {
                mode2(&ips, &stop, &acked, &ids, deadline)
            })));
        }
        {
            let (ips, stop, acked, ids) = (ips.clone(), stop.clone(), acked.clone(), ids.clone());
            workers.push(run(Box::new(move || {
                mode1(&ips, &stop, &acked, &ids, deadline)
            })));
        }
        {
            let (ips, stop, acked, ids) = (ips.clone(), stop.clone(), acked.clone(), ids.clone());
            workers.push(run(Box::new(move || {
                idempotent(&ips, &stop, &acked, &ids, deadline)
            })));
        }
        {
            let (ips, stop, acked, ids) = (ips.clone(), stop.clone(), acked.clone(), ids.clone());
            workers.push(run(Box::new(move || {
                idempotent_mode1(&ips, &stop, &acked, &ids, deadline)
            })));
        }
        {
            let (ips, stop, acked) = (ips.clone(), stop.clone(), acked.clone());
            workers.push(run(Box::new(move || dolly(&ips, &stop, &acked, deadline))));
        }
        {
            let (ips, stop, acked) = (ips.clone(), stop.clone(), acked.clone());
            workers.push(run(Box::new(move || topics(&ips, &stop, &acked, deadline))));
        }
        {
            let (ips, stop, acked) = (ips.clone(), stop.clone(), acked.clone());
            workers.push(run(Box::new(move || {
                consumer(&ips, &stop, &acked, deadline)
            })));
        }
        Workload {
            stop,
            deadline,
            acked,
            ips,
            workers,
        }
    }

    /// Updates node `i`'s address for the workers.
    pub fn set_ip(&self, i: usize, ip: &str) {
        if let Ok(mut ips) = self.ips.ips.lock() {
            ips[i] = ip.to_owned();
        }
    }

    /// True once the workers have stopped at [`LIMIT`]: no more acknowledgements will come.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Messages acknowledged so far.
    pub fn acked_messages(&self) -> usize {
        self.acked.lock().map_or(0, |a| a.messages.len())
    }

    /// Stops the workers and returns what they recorded.
    pub fn finish(self) -> Acked {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            let _ = w.join();
        }
        Arc::try_unwrap(self.acked)
            .ok()
            .and_then(|m| m.into_inner().ok())
            .unwrap_or_default()
    }
}

fn ip(ips: &Targets, n: u64) -> String {
    ips.ips
        .lock()
        .map(|v| v[(n % v.len() as u64) as usize].clone())
        .unwrap_or_default()
}

fn running(stop: &AtomicBool, deadline: Instant) -> bool {
    !stop.load(Ordering::Relaxed) && Instant::now() < deadline
}

/// REQ producer: one message, one reply; a timeout abandons the socket (outcome unknown).
fn mode2(
    ips: &Targets,
    stop: &AtomicBool,
    acked: &Mutex<Acked>,
    ids: &AtomicU64,
    deadline: Instant,
) {
    let ctx = zmq::Context::new();
    let mut turn = 0u64;
    let mut p = None;
    while running(stop, deadline) {
        if p.is_none() {
            turn += 1;
            let at = format!("tcp://{}:{WRITER}", ip(ips, turn));
            p = producer(&ctx, ips, AckMode::PerMessage, 1_000_000 + turn, &at);
        }
        let Some(producer) = &p else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let id = ids.fetch_add(1, Ordering::Relaxed);
        // `Ok` is the ack of this id; a refusal (docs/protocol.md) or a timeout is not.
        match producer.send(&[&id.to_be_bytes()[..], b"mode2"]) {
            Ok(()) => {
                if let Ok(mut a) = acked.lock() {
                    a.messages.insert(id);
                }
                // Spread over the nodes: a new connection every 50 messages.
                if id.is_multiple_of(50) {
                    p = None;
                }
            }
            Err(_) => p = None,
        }
    }
}

/// An idempotent mode-2 producer (issue #18): one identity for the whole run, a new
/// connection (to the next node, with the nodes' current addresses) every 20 messages, each
/// message sent again until durable or 10 s passed; payloads are unique ids.
fn idempotent(
    ips: &Targets,
    stop: &AtomicBool,
    acked: &Mutex<Acked>,
    ids: &AtomicU64,
    deadline: Instant,
) {
    let ctx = zmq::Context::new();
    let identity = identity(zper_wire::IDEMPOTENT_PER_MESSAGE, 3_000_000);
    // Where the last connection left off: producer id and sequence together (it may have gone
    // on under a new producer id after a gap).
    let mut next = None;
    let mut turn = 0u64;
    while running(stop, deadline) {
        turn += 1;
        let (writers, mut opts) = idempotent_setup(ips, turn, AckMode::PerMessage);
        opts.identity = Some(identity.clone());
        opts.resume = next;
        let Ok(mut p) = IdempotentProducer::connect(&ctx, &writers, opts) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        for _ in 0..20 {
            if !running(stop, deadline) {
                break;
            }
            let payload = ids.fetch_add(1, Ordering::Relaxed);
            let sent = p.send(&[&payload.to_be_bytes()[..]]);
            if let (Ok(id), Ok(mut a)) = (sent, acked.lock()) {
                a.idempotent.insert((id.producer, id.sequence), payload);
            }
        }
        next = Some(p.next_id());
    }
}

/// An idempotent mode-1 producer (issue #18): per window a fresh producer (its first
/// sequence 0), 20 messages, then a flush that sends again whatever is not acknowledged
/// (following the nodes' current addresses) for up to 10 s. Only a window whose flush
/// returned counts as acknowledged: acks name sequences, and a sequence is stored only after
/// every earlier one, so no ack can cover a message lost in flight.
fn idempotent_mode1(
    ips: &Targets,
    stop: &AtomicBool,
    acked: &Mutex<Acked>,
    ids: &AtomicU64,
    deadline: Instant,
) {
    let ctx = zmq::Context::new();
    let mut turn = 0u64;
    while running(stop, deadline) {
        turn += 1;
        let (writers, opts) = idempotent_setup(ips, turn, AckMode::PerFlush);
        let Ok(mut p) = IdempotentProducer::connect(&ctx, &writers, opts) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let window: Vec<u64> = (0..20)
            .map(|_| ids.fetch_add(1, Ordering::Relaxed))
            .collect();
        let sent = window
            .iter()
            .all(|payload| p.send(&[&payload.to_be_bytes()[..]]).is_ok());
        if sent && p.flush().is_ok() {
            if let Ok(mut a) = acked.lock() {
                a.idempotent_mode1.extend(window);
            }
        }
    }
}

/// Every node's writer, starting at the `turn`-th, and an idempotent producer's options for
/// `mode`: 1 s per attempt, 10 s per message (or flush) in all.
fn idempotent_setup(ips: &Targets, turn: u64, mode: AckMode) -> (Vec<String>, IdempotentOptions) {
    let writers = (0..3)
        .map(|k| format!("tcp://{}:{WRITER}", ip(ips, turn + k)))
        .collect();
    let mut opts = IdempotentOptions::new(TOPIC, mode);
    opts.curve = ips.security.curve.clone();
    opts.timeout = Duration::from_secs(1);
    opts.deadline = Duration::from_secs(10);
    (writers, opts)
}

/// DEALER producer in mode 1: sends a window of messages, then waits for acks; an ack covers
/// every message this connection sent up to the id it carries.
fn mode1(
    ips: &Targets,
    stop: &AtomicBool,
    acked: &Mutex<Acked>,
    ids: &AtomicU64,
    deadline: Instant,
) {
    let ctx = zmq::Context::new();
    let mut turn = 0u64;
    while running(stop, deadline) {
        turn += 1;
        let at = format!("tcp://{}:{WRITER}", ip(ips, turn));
        let Some(p) = producer(&ctx, ips, AckMode::PerFlush, 2_000_000 + turn, &at) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let s = p.socket();
        // ZeroMQ reconnects silently and drops what was in flight on the broken connection
        // (a node restarted or lost power), so an ack received after a reconnect vouches for
        // its own id only, not for the earlier ones of the window (docs/protocol.md). The
        // monitor tells when the connection broke.
        let Some(monitor) = disconnect_monitor(&ctx, s) else {
            continue;
        };
        // A few windows per connection, then the next node.
        'conn: for _ in 0..5 {
            let window: Vec<u64> = (0..20)
                .map(|_| ids.fetch_add(1, Ordering::Relaxed))
                .collect();
            for id in &window {
                if p.send(&[&id.to_be_bytes()[..], b"mode1"]).is_err() {
                    break 'conn;
                }
            }
            let last = *window.last().unwrap_or(&0);
            loop {
                // A refusal `[id][status]` (103, 104, 105; docs/protocol.md) is an error.
                match p.next_ack(true) {
                    Ok(None) => break 'conn,
                    Ok(Some(ack)) => {
                        let Ok(bytes) = <[u8; 8]>::try_from(ack.as_slice()) else {
                            break 'conn;
                        };
                        let upto = u64::from_be_bytes(bytes);
                        let broke = disconnected(&monitor);
                        // After a reconnect the ack vouches for its own id only.
                        let covered = |i: &&u64| **i == upto || (!broke && **i <= upto);
                        if let Ok(mut a) = acked.lock() {
                            a.messages.extend(window.iter().filter(covered));
                            let via = (turn % 3) as usize;
                            a.mode1
                                .extend(window.iter().filter(covered).map(|i| (*i, via)));
                        }
                        if broke {
                            break 'conn;
                        }
                        if upto == last {
                            break;
                        }
                    }
                    Err(_) => break 'conn,
                }
            }
            if !running(stop, deadline) {
                break;
            }
        }
    }
}

/// A PAIR socket that receives `s`'s disconnect events (zmq_socket_monitor).
fn disconnect_monitor(ctx: &zmq::Context, s: &zmq::Socket) -> Option<zmq::Socket> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let at = format!(
        "inproc://mode1-monitor-{}",
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    s.monitor(&at, zmq::SocketEvent::DISCONNECTED as i32).ok()?;
    let m = ctx.socket(zmq::PAIR).ok()?;
    m.set_linger(0).ok()?;
    m.connect(&at).ok()?;
    Some(m)
}

/// True when the monitored socket's connection broke since the last call.
fn disconnected(monitor: &zmq::Socket) -> bool {
    let mut broke = false;
    while monitor.recv_multipart(zmq::DONTWAIT).is_ok() {
        broke = true;
    }
    broke
}

/// Dolly Puts, one new key each, through every node in turn.
fn dolly(ips: &Targets, stop: &AtomicBool, acked: &Mutex<Acked>, deadline: Instant) {
    let ctx = zmq::Context::new();
    let mut n = 0u64;
    while running(stop, deadline) {
        n += 1;
        let at = format!("tcp://{}:{DOLLY}", ip(ips, n));
        let Ok(client) = DollyClient::connect_with(&ctx, &at, ips.security.curve.as_ref()) else {
            continue;
        };
        for _ in 0..20 {
            n += 1;
            let key = format!("key{n}").into_bytes();
            let value = format!("value{n}").into_bytes();
            match client.put(&key, &value, Duration::from_secs(3)) {
                Ok(DollyReply::Value { .. }) => {
                    if let Ok(mut a) = acked.lock() {
                        a.puts.insert(key, value);
                    }
                }
                Ok(DollyReply::Error(_)) => {}
                Err(_) => break,
            }
            if !running(stop, deadline) {
                break;
            }
        }
    }
}

/// A consumer following the ack PUBs of every node: on each flush notice for [`TOPIC`] it
/// FETCHes from its offset on the node that published it and records the ids it read. Its
/// offset is per node (every node holds the same log, so a reconnect continues there).
fn consumer(ips: &Targets, stop: &AtomicBool, acked: &Mutex<Acked>, deadline: Instant) {
    const ACK: u16 = 5557;
    let ctx = zmq::Context::new();
    let mut offsets = [0usize; 3];
    let mut subs: Vec<(String, Option<zmq::Socket>)> =
        (0..3).map(|_| (String::new(), None)).collect();
    while running(stop, deadline) {
        for (i, offset) in offsets.iter_mut().enumerate() {
            let ip = ip(ips, i as u64);
            if subs[i].0 != ip || subs[i].1.is_none() {
                let sub = ctx.socket(zmq::SUB).ok();
                if let Some(s) = &sub {
                    let _ = s.set_linger(0);
                    let _ = s.set_subscribe(TOPIC.as_bytes());
                    ips.security.apply(s);
                    let _ = s.connect(&format!("tcp://{ip}:{ACK}"));
                }
                subs[i] = (ip.clone(), sub);
            }
            let Some(sub) = &subs[i].1 else { continue };
            let mut woken = false;
            while let Ok(notice) = sub.recv_multipart(zmq::DONTWAIT) {
                woken |= notice.first().map(Vec::as_slice) == Some(TOPIC.as_bytes());
            }
            if !woken {
                continue;
            }
            let at = format!("tcp://{ip}:{READER}");
            let curve = ips.security.curve.as_ref();
            let Ok(r) =
                ReaderClient::connect_with(&ctx, &at, TOPIC, 0, Duration::from_secs(3), curve)
            else {
                continue;
            };
            if let Ok(Some(data)) = r.fetch(*offset as u64, 1 << 20) {
                let whole = zper_wire::whole_message_len(&data);
                let base = *offset;
                let read: Vec<(u64, usize)> = messages(&data[..whole])
                    .into_iter()
                    .map(|(id, at)| (id, base + at))
                    .collect();
                *offset += whole;
                if let Ok(mut a) = acked.lock() {
                    a.consumed.extend(read);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Metadata writes: topic creations through every node in turn; also samples every node's
/// view of [`TOPIC`]'s leader and epoch.
fn topics(ips: &Targets, stop: &AtomicBool, acked: &Mutex<Acked>, deadline: Instant) {
    let admin = |n: u64| {
        AdminClient::new(
            &format!("{}:9644", ip(ips, n)),
            ips.security.token.clone(),
            Duration::from_secs(3),
        )
    };
    let mut n = 0u64;
    while running(stop, deadline) {
        n += 1;
        let name = format!("meta{n}");
        let spec = CreateTopicRequest {
            replication_factor: Some(1),
            ..CreateTopicRequest::default()
        };
        if admin(n).is_ok_and(|c| c.create_topic(&name, &spec).is_ok()) {
            if let Ok(mut a) = acked.lock() {
                a.topics.insert(name);
            }
        }
        for i in 0..3 {
            let Ok(client) = admin(i) else { continue };
            if let Ok(v) = client.raft() {
                if v.state == "Leader" {
                    if let Ok(mut a) = acked.lock() {
                        a.terms.entry(v.term).or_default().insert(v.id);
                    }
                }
            }
            if let Ok(v) = client.topic(TOPIC) {
                if let Some(f) = v.fragments.first() {
                    if let Ok(mut a) = acked.lock() {
                        a.epochs.entry(f.leader_epoch).or_default().insert(f.leader);
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
