//! Writer endpoint (`writer.bind`, default 5555; spec `zper.md` §4, fixed as issue #2 asks).
//!
//! The front thread owns the ROUTER. It parses each producer's identity once (§3), routes every
//! message of a topic to one worker (hash of the topic computed by the server, modulo
//! `writer.workers`), and encodes the frames into stored records (§6.2: short form for 0..=255
//! bytes, long form above, exactly what the original's decoder mode stores for ZMTP senders).
//! An empty first frame followed by more frames is a REQ envelope: it is not stored (as the
//! original's single mode, §4.2) and is echoed in mode-2 replies.
//!
//! Workers append, flush on the [`zper_store::FlushPolicy`] (count, timer, or at once when a
//! producer waits: group commit), then queue acks back to the front over an inproc socket:
//! mode 1 one single-frame ack per connection per flush carrying the newest covered message id,
//! mode 2 `[empty][message id]` per message (§4.5). Undeliverable acks are dropped and counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use tracing::{debug, error, warn};
use zper_store::{FlushPolicy, Store, TopicLog};
use zper_wire::{encode_record, topic_hash, AckMode, Identity};

use super::ack::FlushNotice;
use super::{try_send, POLL_MS};
use crate::metrics::Counters;
use crate::replication::{PlacementView, Role, Waker};

/// A producer connection, known by its routing id (its ZPER identity).
#[derive(Debug)]
struct Producer {
    routing_id: Vec<u8>,
    topic: Arc<str>,
    mode: AckMode,
    worker: usize,
}

/// A run of consecutive messages of one producer inside a batch.
#[derive(Debug)]
struct Append {
    producer: Arc<Producer>,
    /// End of this run in `WriteBatch::bytes`.
    bytes_end: usize,
    messages: u64,
    /// First frame of the newest message of the run.
    last_id: Vec<u8>,
}

/// Records for one worker, in arrival order.
#[derive(Debug, Default)]
struct WriteBatch {
    bytes: Vec<u8>,
    appends: Vec<Append>,
}

/// Batches are handed to a worker once they reach this size, bytes.
const BATCH_BYTES: usize = 256 * 1024;
/// Messages read from the ROUTER per wake before batches are handed over.
const DRAIN_MESSAGES: usize = 8192;
/// Producer identities cached at most (the cache is cleared past this).
const MAX_PRODUCERS: usize = 100_000;

/// Started writer endpoint threads.
pub(crate) struct Writer {
    pub(crate) front: JoinHandle<()>,
    /// Wakes a topic's worker when replication moves its high-water mark.
    pub(crate) waker: Waker,
}

/// Settings the writer needs.
pub(crate) struct WriterSettings {
    pub(crate) workers: usize,
    pub(crate) max_message: usize,
    /// `allow_empty_message`: when false, messages whose last frame is empty are dropped, since
    /// recovery would cut the log at them (spec §6.3).
    pub(crate) allow_empty_message: bool,
    pub(crate) policy: FlushPolicy,
    /// Who leads each topic (issue #4); `None`: every topic is local.
    pub(crate) view: Option<PlacementView>,
    /// `min_insync` (issue #4).
    pub(crate) min_insync: Option<u64>,
    /// Creates unknown topics through Raft on their first write (issue #4).
    pub(crate) creator: Option<crate::replication::TopicCreator>,
    /// `acks = leader`: ack at the leader's flush, not the high-water mark.
    pub(crate) acks_leader: bool,
}

/// Starts the front thread and `workers` worker threads over a bound ROUTER.
pub(crate) fn start(
    ctx: &zmq::Context,
    router: zmq::Socket,
    settings: WriterSettings,
    store: Arc<Store>,
    notices: Sender<FlushNotice>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> Result<Writer, zmq::Error> {
    let view = settings.view.clone();
    // One ack push per worker, plus one for the forwarder (issue #4).
    let (acks, mut pushes) = super::worker_replies(ctx, "writer-acks", settings.workers + 1)?;
    let forward_acks = pushes.pop();
    let mut forwarder_thread = None;
    let forward = match (&settings.view, forward_acks) {
        (Some(view), Some(push)) => {
            let (tx, rx) = crossbeam_channel::bounded(1024);
            let f = crate::replication::forward::Forwarder {
                ctx: ctx.clone(),
                view: view.clone(),
                jobs: rx,
                acks: push,
                counters: counters.clone(),
                stop: stop.clone(),
            };
            forwarder_thread = Some(
                std::thread::Builder::new()
                    .name("zper-forward".into())
                    .spawn(move || f.run())
                    .map_err(|_| zmq::Error::EMFILE)?,
            );
            Some(tx)
        }
        _ => None,
    };
    let mut senders = Vec::with_capacity(settings.workers);
    let mut workers = Vec::with_capacity(settings.workers);
    let mut wakers = Vec::with_capacity(settings.workers);
    for (i, push) in pushes.into_iter().enumerate() {
        let (tx, rx) = crossbeam_channel::bounded(16);
        let (wake_tx, wake) = crossbeam_channel::bounded(1);
        wakers.push(wake_tx);
        let worker = Worker {
            rx,
            wake,
            view: view.clone(),
            min_insync: settings.min_insync,
            creator: settings.creator.clone(),
            create_failed: HashMap::new(),
            forward: forward.clone(),
            acks_leader: settings.acks_leader,
            acks: push,
            notices: notices.clone(),
            store: store.clone(),
            policy: settings.policy,
            topics: HashMap::new(),
            counters: counters.clone(),
        };
        workers.push(
            std::thread::Builder::new()
                .name(format!("zper-writer-{i}"))
                .spawn(move || worker.run())
                .map_err(|_| zmq::Error::EMFILE)?,
        );
        senders.push(tx);
    }
    let front = Front {
        router,
        acks,
        senders,
        producers: HashMap::new(),
        max_message: settings.max_message,
        allow_empty_message: settings.allow_empty_message,
        counters,
        stop,
    };
    let mut workers = workers;
    workers.extend(forwarder_thread);
    let front = std::thread::Builder::new()
        .name("zper-writer".into())
        .spawn(move || front.run(workers))
        .map_err(|_| zmq::Error::EMFILE)?;
    Ok(Writer {
        front,
        waker: Waker::new(wakers),
    })
}

struct Front {
    router: zmq::Socket,
    acks: zmq::Socket,
    senders: Vec<Sender<WriteBatch>>,
    producers: HashMap<Vec<u8>, Option<Arc<Producer>>>,
    max_message: usize,
    allow_empty_message: bool,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
}

impl Front {
    fn run(mut self, workers: Vec<JoinHandle<()>>) {
        let mut batches: Vec<WriteBatch> =
            self.senders.iter().map(|_| WriteBatch::default()).collect();
        let mut frame = zmq::Message::new();
        while !self.stop.load(Ordering::Relaxed) {
            let mut items = [
                self.router.as_poll_item(zmq::POLLIN),
                self.acks.as_poll_item(zmq::POLLIN),
            ];
            if let Err(e) = zmq::poll(&mut items, POLL_MS) {
                error!(error = %e, "writer poll failed");
                break;
            }
            self.forward_acks();
            for _ in 0..DRAIN_MESSAGES {
                match self.read_message(&mut frame, &mut batches) {
                    Ok(Some(worker)) if batches[worker].bytes.len() >= BATCH_BYTES => {
                        self.dispatch(worker, &mut batches);
                    }
                    Ok(_) => {}
                    Err(zmq::Error::EAGAIN) => break,
                    Err(e) => {
                        warn!(error = %e, "writer receive failed");
                        break;
                    }
                }
            }
            for worker in 0..batches.len() {
                self.dispatch(worker, &mut batches);
            }
        }
        // Shutdown: workers flush what they hold and exit once their channel closes.
        self.senders.clear();
        for w in workers {
            let _ = w.join();
        }
        self.forward_acks();
        debug!("writer stopped");
    }

    fn dispatch(&self, worker: usize, batches: &mut [WriteBatch]) {
        if batches[worker].appends.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut batches[worker]);
        // Blocks when the worker is 16 batches behind: backpressure reaches the producers' TCP.
        if self.senders[worker].send(batch).is_err() {
            error!(worker, "writer worker is gone");
        }
    }

    fn forward_acks(&self) {
        while let Ok(frames) = self.acks.recv_multipart(zmq::DONTWAIT) {
            if try_send(&self.router, frames) {
                Counters::add(&self.counters.acks_sent, 1);
            } else {
                Counters::add(&self.counters.acks_dropped, 1);
            }
        }
    }

    fn producer(&mut self, routing_id: &[u8]) -> Option<Arc<Producer>> {
        if let Some(p) = self.producers.get(routing_id) {
            return p.clone();
        }
        if self.producers.len() >= MAX_PRODUCERS {
            self.producers.clear();
        }
        let parsed = Identity::parse(routing_id).ok().map(|id| {
            Arc::new(Producer {
                routing_id: routing_id.to_vec(),
                worker: usize::from(topic_hash(&id.topic)) % self.senders.len(),
                mode: id.ack_mode(),
                topic: Arc::from(id.topic.as_str()),
            })
        });
        self.producers.insert(routing_id.to_vec(), parsed.clone());
        parsed
    }

    /// Reads one whole message from the ROUTER into its worker's batch. Returns the worker, or
    /// None when the message was dropped (invalid identity, oversized frame).
    fn read_message(
        &mut self,
        frame: &mut zmq::Message,
        batches: &mut [WriteBatch],
    ) -> Result<Option<usize>, zmq::Error> {
        self.router.recv(frame, zmq::DONTWAIT)?;
        let producer = self.producer(frame);
        let Some(producer) = producer else {
            dropped(
                &self.counters.invalid_identity,
                "invalid producer identity",
                frame,
            );
            self.skip_rest(frame)?;
            return Ok(None);
        };
        let batch = &mut batches[producer.worker];
        let mark = batch.bytes.len();
        let mut at_start = true;
        let mut id_taken = false;
        let mut id: Vec<u8> = Vec::new();
        while self.router.get_rcvmore()? {
            self.router.recv(frame, 0)?;
            let more = self.router.get_rcvmore()?;
            if at_start && frame.is_empty() && more {
                at_start = false; // REQ envelope
                continue;
            }
            at_start = false;
            if frame.len() > self.max_message
                || (!more && frame.is_empty() && !self.allow_empty_message)
            {
                batch.bytes.truncate(mark);
                if frame.is_empty() {
                    let counter = &self.counters.empty_messages;
                    dropped(
                        counter,
                        "empty message while allow_empty_message = false",
                        &producer.routing_id,
                    );
                } else {
                    dropped(
                        &self.counters.oversized_frames,
                        "frame over max_message",
                        &producer.routing_id,
                    );
                }
                if more {
                    self.skip_rest(frame)?;
                }
                return Ok(None);
            }
            if !id_taken {
                id.extend_from_slice(frame);
                id_taken = true;
            }
            encode_record(frame, more, &mut batch.bytes);
        }
        if batch.bytes.len() == mark {
            return Ok(None); // a routing id with no data frames: nothing to store
        }
        let end = batch.bytes.len();
        match batch.appends.last_mut() {
            Some(last)
                if Arc::ptr_eq(&last.producer, &producer)
                    && producer.mode != AckMode::PerMessage =>
            {
                last.bytes_end = end;
                last.messages += 1;
                last.last_id = id;
            }
            _ => batch.appends.push(Append {
                producer: producer.clone(),
                bytes_end: end,
                messages: 1,
                last_id: id,
            }),
        }
        Ok(Some(producer.worker))
    }

    fn skip_rest(&self, frame: &mut zmq::Message) -> Result<(), zmq::Error> {
        while self.router.get_rcvmore()? {
            self.router.recv(frame, 0)?;
        }
        Ok(())
    }
}

/// Counts a dropped message and logs it, sampled (the 1st, 2nd, 4th, 8th, ... of each kind) so a
/// flood of bad input cannot flood the log.
fn dropped(counter: &std::sync::atomic::AtomicU64, why: &'static str, identity: &[u8]) {
    let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        warn!(reason = why, identity = ?identity, dropped_so_far = n, "writer dropped a message");
    }
}

/// A producer waiting for durability of a message ending at `end`.
#[derive(Debug)]
struct Waiter {
    end: u64,
    message_id: Vec<u8>,
}

/// A worker's view of one topic.
struct TopicWork {
    log: Arc<TopicLog>,
    /// The log's truncation count when the waiters below started waiting.
    truncations: u64,
    /// This topic's metrics.
    stats: Arc<crate::metrics::TopicCounters>,
    /// The newest message of each append, for the ack endpoint's notices (issue #13).
    notice_ids: super::ack::NoticeIds,
    /// Flushed offset last published on the ack endpoint.
    published_end: u64,
    /// Mode 1: newest waiting message per connection.
    per_flush: HashMap<Vec<u8>, Waiter>,
    /// Mode 2: every waiting message, in append order.
    per_message: Vec<(Vec<u8>, Waiter)>,
}

impl TopicWork {
    fn has_waiters(&self) -> bool {
        !self.per_flush.is_empty() || !self.per_message.is_empty()
    }
}

struct Worker {
    rx: Receiver<WriteBatch>,
    /// Wake-ups from replication: a high-water mark moved (issue #4).
    wake: Receiver<()>,
    /// Who leads each topic (issue #4): followers do not append.
    view: Option<PlacementView>,
    /// `min_insync` (issue #4).
    min_insync: Option<u64>,
    /// Creates unknown topics on their first write.
    creator: Option<crate::replication::TopicCreator>,
    /// Topics whose creation failed lately, and when (retried after a second).
    create_failed: HashMap<Arc<str>, Instant>,
    /// Hands writes for topics led elsewhere to the forwarder.
    forward: Option<Sender<crate::replication::forward::ForwardJob>>,
    /// `acks = leader`.
    acks_leader: bool,
    acks: zmq::Socket,
    notices: Sender<FlushNotice>,
    store: Arc<Store>,
    policy: FlushPolicy,
    topics: HashMap<Arc<str>, TopicWork>,
    counters: Arc<Counters>,
}

impl Worker {
    fn run(mut self) {
        loop {
            let timeout = self
                .next_deadline()
                .map_or(Duration::from_millis(500), |d| {
                    d.saturating_duration_since(Instant::now())
                });
            let received = crossbeam_channel::select! {
                recv(self.rx) -> b => b.map_err(|_| RecvTimeoutError::Disconnected),
                recv(self.wake) -> _ => Err(RecvTimeoutError::Timeout),
                default(timeout) => Err(RecvTimeoutError::Timeout),
            };
            match received {
                Ok(batch) => {
                    self.apply(batch);
                    // Group commit: take everything already queued before flushing once.
                    for _ in 0..64 {
                        match self.rx.try_recv() {
                            Ok(b) => self.apply(b),
                            Err(_) => break,
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.flush_due(true);
                    return;
                }
            }
            self.flush_due(false);
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.topics
            .values()
            .filter_map(|t| {
                t.log
                    .pending()
                    .ok()
                    .and_then(|(_, first)| self.policy.deadline(first))
            })
            .min()
    }

    fn topic(&mut self, name: &Arc<str>) -> Option<&mut TopicWork> {
        if !self.topics.contains_key(name) {
            match self.store.topic_or_create(name) {
                Ok(log) => {
                    let published_end = log.flushed_end().unwrap_or(0);
                    self.topics.insert(
                        name.clone(),
                        TopicWork {
                            truncations: log.truncations().unwrap_or(0),
                            log,
                            stats: self.counters.topic(name),
                            notice_ids: Default::default(),
                            published_end,
                            per_flush: HashMap::new(),
                            per_message: Vec::new(),
                        },
                    );
                }
                Err(e) => {
                    error!(topic = %name, error = %e, "cannot open topic");
                    return None;
                }
            }
        }
        self.topics.get_mut(name)
    }

    /// The store key of the fragment `p`'s messages go to: the topic itself unless the topic
    /// has several fragments, then the one chosen stably from its identity (issue #4).
    fn key_of(&self, p: &Producer) -> Arc<str> {
        let Some(view) = &self.view else {
            return p.topic.clone();
        };
        let n = view.fragment_count(&p.topic);
        if n <= 1 {
            return p.topic.clone();
        }
        let uuid = p.routing_id.get(3 + p.topic.len()..).unwrap_or_default();
        match crate::replication::fragment_for(uuid, n) {
            0 => p.topic.clone(),
            k => Arc::from(zper_store::log_key(&p.topic, k)),
        }
    }

    fn apply(&mut self, batch: WriteBatch) {
        // A topic this node's view does not know yet: create it (or load what was just
        // applied) before choosing fragments, so a producer's first messages go where its
        // later ones will.
        let mut seen: Vec<&Arc<str>> = Vec::new();
        for a in &batch.appends {
            let t = &a.producer.topic;
            if !seen.contains(&t) {
                seen.push(t);
                if self.view.as_ref().is_some_and(|v| v.fragment(t).is_none()) {
                    self.ensure_created(t);
                }
            }
        }
        let keys: Vec<Arc<str>> = batch
            .appends
            .iter()
            .map(|a| self.key_of(&a.producer))
            .collect();
        let mut start = 0usize;
        let mut i = 0;
        while i < batch.appends.len() {
            // One write for every consecutive run of the same fragment.
            let topic = keys[i].clone();
            let mut j = i;
            while j + 1 < batch.appends.len() && keys[j + 1] == topic {
                j += 1;
            }
            let run = &batch.appends[i..=j];
            let end = run[run.len() - 1].bytes_end;
            let messages: u64 = run.iter().map(|a| a.messages).sum();
            self.append_run(&topic, run, &batch.bytes[start..end], start, messages);
            start = end;
            i = j + 1;
        }
    }

    fn append_run(
        &mut self,
        topic: &Arc<str>,
        run: &[Append],
        bytes: &[u8],
        base: usize,
        messages: u64,
    ) {
        let counters = self.counters.clone();
        let topic_name = run
            .first()
            .map_or_else(|| topic.clone(), |a| a.producer.topic.clone());
        if !self.ensure_created(&topic_name) {
            Counters::add(&counters.append_errors, messages);
            for a in run {
                self.refuse(a, zper_wire::WRITER_UNAVAILABLE);
            }
            return;
        }
        let role = self.view.as_ref().map_or(Role::Local, |v| v.role(topic));
        if role == Role::Fenced {
            // The metadata says this node leads, but its lease is not current: it may have
            // been replaced. Neither append nor acknowledge.
            Counters::add(&counters.not_leader, messages);
            for a in run {
                self.refuse(a, zper_wire::WRITER_NOT_LEADER);
            }
            return;
        }
        if let Role::Follower { leader } = role {
            // Another node leads this topic: appending here would fork the log. Forward.
            debug!(topic = %topic, leader, messages, "forwarding to the leader");
            let mut start = base;
            for a in run {
                let slice = &bytes[start - base..a.bytes_end - base];
                start = a.bytes_end;
                let job = crate::replication::forward::ForwardJob {
                    topic: topic.clone(),
                    routing_id: a.producer.routing_id.clone(),
                    mode: a.producer.mode,
                    messages: split_messages(slice),
                };
                let sent = self
                    .forward
                    .as_ref()
                    .is_some_and(|f| f.try_send(job).is_ok());
                if !sent {
                    Counters::add(&counters.not_leader, a.messages);
                    self.refuse(a, zper_wire::WRITER_NOT_LEADER);
                }
            }
            return;
        }
        if let Role::Leader {
            epoch,
            in_sync,
            replicas,
        } = role
        {
            if in_sync < crate::replication::min_insync(self.min_insync, replicas) {
                self.refuse_acked(topic, epoch, run, bytes, base);
                return;
            }
        }
        if let Role::Leader { replicas, .. } = role {
            // A damaged copy hands the lead over before anything more is appended to it
            // (issue #13, replication/repair.rs); as the only in-sync replica it waits, since
            // the other replicas may hold what it lost.
            let damaged = replicas > 1
                && self
                    .store
                    .topic(topic)
                    .is_some_and(|l| l.damage().ok().flatten().is_some());
            if damaged {
                Counters::add(&counters.not_leader, messages);
                for a in run {
                    self.refuse(a, zper_wire::WRITER_NOT_LEADER);
                }
                return;
            }
        }
        let Some(work) = self.topic(topic) else {
            Counters::add(&counters.append_errors, messages);
            for a in run {
                self.refuse(a, zper_wire::WRITER_STORE_FAILED);
            }
            return;
        };
        if let Role::Leader { epoch, .. } = role {
            // A replicated log acknowledges at its high-water mark only: start it at 0 here if
            // the replication thread has not yet (else the first acks would mean "flushed").
            if work.log.high_water().ok().flatten().is_none() {
                let _ = work.log.set_high_water(Some(0));
            }
            if let Err(e) = crate::replication::claim_epoch(&work.log, epoch) {
                error!(topic = %topic, error = %e, "cannot record leader epoch");
                Counters::add(&counters.append_errors, messages);
                Counters::add(&counters.integrity.disk_refused, messages);
                for a in run {
                    self.refuse(a, zper_wire::WRITER_STORE_FAILED);
                }
                return;
            }
        }
        let end = match work.log.append(bytes) {
            Ok(end) => end,
            Err(e) => {
                // Issue #13: a full or failing disk. Nothing was stored (the store rolls a
                // failed write back); producers that wait are told so at once.
                error!(topic = %topic, error = %e, "append failed");
                Counters::add(&counters.append_errors, messages);
                Counters::add(&counters.integrity.disk_refused, messages);
                for a in run {
                    self.refuse(a, zper_wire::WRITER_STORE_FAILED);
                }
                return;
            }
        };
        Counters::add(&counters.messages_stored, messages);
        Counters::add(&counters.bytes_stored, bytes.len() as u64);
        Counters::add(&work.stats.messages_written, messages);
        Counters::add(&work.stats.bytes_written, bytes.len() as u64);
        let start_offset = end - bytes.len() as u64;
        for a in run {
            let waiter_end = start_offset + (a.bytes_end - base) as u64;
            match a.producer.mode {
                AckMode::None => {}
                AckMode::PerFlush => {
                    work.per_flush.insert(
                        a.producer.routing_id.clone(),
                        Waiter {
                            end: waiter_end,
                            message_id: a.last_id.clone(),
                        },
                    );
                }
                AckMode::PerMessage => work.per_message.push((
                    a.producer.routing_id.clone(),
                    Waiter {
                        end: waiter_end,
                        message_id: a.last_id.clone(),
                    },
                )),
            }
        }
        if let Some(last) = run.last() {
            work.notice_ids.appended(end, &last.last_id);
        }
    }

    /// True when `topic` is in the cluster metadata, creating it on first sight; false when it
    /// could not be created (failures are remembered for a second, so a dead quorum does not
    /// stall the worker on every batch).
    fn ensure_created(&mut self, topic: &Arc<str>) -> bool {
        let Some(creator) = &self.creator else {
            return true;
        };
        if creator.view.fragment(topic).is_some() {
            return true;
        }
        if self
            .create_failed
            .get(topic)
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return false;
        }
        match creator.ensure(topic) {
            Ok(()) => {
                self.create_failed.remove(topic);
                true
            }
            Err(e) => {
                warn!(topic = %topic, error = %e, "cannot create topic");
                self.create_failed.insert(topic.clone(), Instant::now());
                false
            }
        }
    }

    /// Answers a producer that waits for acks with `status` instead of an ack: mode 1
    /// `[message id][status]`, mode 2 `[empty][message id][status]`; mode 0 gets nothing.
    fn refuse(&self, a: &Append, status: u8) {
        let reply = match a.producer.mode {
            AckMode::None => return,
            AckMode::PerMessage => vec![
                a.producer.routing_id.clone(),
                Vec::new(),
                a.last_id.clone(),
                vec![status],
            ],
            AckMode::PerFlush => vec![
                a.producer.routing_id.clone(),
                a.last_id.clone(),
                vec![status],
            ],
        };
        let _ = self.acks.send_multipart(reply, 0);
    }

    /// Below `min_insync`: producers that wait for acks get status 103 instead and their
    /// messages are not stored; fire-and-forget (mode 0) messages are stored as usual.
    fn refuse_acked(
        &mut self,
        topic: &Arc<str>,
        epoch: u64,
        run: &[Append],
        bytes: &[u8],
        base: usize,
    ) {
        let mut kept = Vec::new();
        let mut kept_appends = Vec::new();
        let mut start = base;
        for a in run {
            let slice = &bytes[start - base..a.bytes_end - base];
            match a.producer.mode {
                AckMode::None => {
                    kept.extend_from_slice(slice);
                    kept_appends.push(Append {
                        producer: a.producer.clone(),
                        bytes_end: base + kept.len(),
                        messages: a.messages,
                        last_id: a.last_id.clone(),
                    });
                }
                _ => {
                    Counters::add(&self.counters.not_enough_replicas, a.messages);
                    self.refuse(a, zper_wire::WRITER_NOT_ENOUGH_REPLICAS);
                }
            }
            start = a.bytes_end;
        }
        if !kept.is_empty() {
            let messages = kept_appends.iter().map(|a| a.messages).sum();
            // The view still says leader with too few in sync: append as leader (no acks wait).
            let Some(work) = self.topic(topic) else {
                Counters::add(&self.counters.append_errors, messages);
                return;
            };
            let appended = crate::replication::claim_epoch(&work.log, epoch)
                .and_then(|()| work.log.append(&kept));
            match appended {
                Ok(end) => {
                    if let Some(last) = kept_appends.last() {
                        work.notice_ids.appended(end, &last.last_id);
                    }
                    Counters::add(&self.counters.messages_stored, messages);
                    Counters::add(&self.counters.bytes_stored, kept.len() as u64);
                }
                Err(e) => {
                    error!(topic = %topic, error = %e, "append failed");
                    Counters::add(&self.counters.append_errors, messages);
                }
            }
        }
    }

    /// Flushes every topic whose policy says so (all of them when `force`), then acks what is
    /// durable and publishes the flush.
    fn flush_due(&mut self, force: bool) {
        let now = Instant::now();
        for (name, work) in self.topics.iter_mut() {
            // Waiters this node can no longer satisfy: it does not lead the topic any more
            // (or is fenced), or its log was cut back under them. They get 104 now rather than
            // an ack for bytes that are not theirs, or silence.
            let role = self.view.as_ref().map_or(Role::Local, |v| v.role(name));
            let truncations = work.log.truncations().unwrap_or(0);
            if work.has_waiters()
                && (matches!(role, Role::Fenced | Role::Follower { .. })
                    || truncations != work.truncations)
            {
                refuse_waiters(&self.acks, work, zper_wire::WRITER_NOT_LEADER);
            }
            if truncations != work.truncations {
                work.notice_ids
                    .truncated(work.log.written_end().unwrap_or(0));
                work.published_end = work.published_end.min(work.log.visible_end().unwrap_or(0));
            }
            if matches!(role, Role::Follower { .. }) {
                // Another node leads: only it may publish notices for this fragment.
                work.notice_ids.clear();
            }
            work.truncations = truncations;
            let (pending, first) = work.log.pending().unwrap_or((0, None));
            if force || self.policy.due(pending, first, work.has_waiters(), now) {
                let started = Instant::now();
                match work.log.flush() {
                    Ok(outcome) if outcome.messages > 0 => {
                        Counters::add(&self.counters.flushes, 1);
                        self.counters
                            .flush_seconds
                            .observe(started.elapsed().as_secs_f64());
                    }
                    Ok(_) => {}
                    Err(e) => {
                        // A failed fdatasync leaves the page cache in an unknown state (what
                        // PostgreSQL calls fsyncgate): nothing written since the last good
                        // flush can be trusted or acknowledged. Exit non-zero so the
                        // supervisor restarts the node and recovery decides (issue #13).
                        error!(topic = %name, error = %e, "flush failed: exiting so recovery can decide what is durable");
                        std::process::exit(74);
                    }
                }
            }
            // Durable here and, for a replicated topic, on every in-sync replica (or only here
            // with `acks = leader`).
            let end = if self.acks_leader {
                work.log.flushed_end()
            } else {
                work.log.visible_end()
            };
            let Ok(flushed) = end else {
                continue;
            };
            if flushed > work.published_end {
                work.published_end = flushed;
                // A notice names the newest message ending at or before the offset it
                // announces, and only the fragment's leader (or a lone node) sends it.
                let leads = matches!(role, Role::Local | Role::Leader { .. });
                if let Some((end, message_id)) = work.notice_ids.covered(flushed) {
                    if leads {
                        let _ = self.notices.try_send(FlushNotice {
                            topic: name.clone(),
                            message_id,
                            end_offset: end,
                        });
                    }
                }
                send_acks(&self.acks, work, flushed);
            }
            // Issue #13: an ack promises the message is durable on at least `min_insync`
            // in-sync replicas. Below that the high-water mark stands still, so what is still
            // waiting cannot be promised now: those producers get status 103 instead.
            if let Role::Leader {
                in_sync, replicas, ..
            } = role
            {
                if !self.acks_leader
                    && work.has_waiters()
                    && in_sync < crate::replication::min_insync(self.min_insync, replicas)
                {
                    let waiting = (work.per_flush.len() + work.per_message.len()) as u64;
                    Counters::add(&self.counters.not_enough_replicas, waiting);
                    refuse_waiters(&self.acks, work, zper_wire::WRITER_NOT_ENOUGH_REPLICAS);
                }
            }
        }
    }
}

/// The frames of each whole message in stored records (§6.2), for forwarding.
fn split_messages(records: &[u8]) -> Vec<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut frames = Vec::new();
    for rec in zper_wire::Records::new(records) {
        frames.push(rec.payload.to_vec());
        if !rec.more {
            out.push(std::mem::take(&mut frames));
        }
    }
    out
}

/// Answers every waiting producer of `work` with `status` instead of an ack, and forgets them.
fn refuse_waiters(acks: &zmq::Socket, work: &mut TopicWork, status: u8) {
    for (routing_id, w) in work.per_flush.drain() {
        let _ = acks.send_multipart([routing_id, w.message_id, vec![status]], 0);
    }
    for (routing_id, w) in work.per_message.drain(..) {
        let _ = acks.send_multipart([routing_id, Vec::new(), w.message_id, vec![status]], 0);
    }
}

fn send_acks(acks: &zmq::Socket, work: &mut TopicWork, flushed: u64) {
    work.per_flush.retain(|routing_id, w| {
        if w.end > flushed {
            return true;
        }
        let _ = acks.send_multipart([routing_id.clone(), std::mem::take(&mut w.message_id)], 0);
        false
    });
    let done = work.per_message.partition_point(|(_, w)| w.end <= flushed);
    for (routing_id, w) in work.per_message.drain(..done) {
        let _ = acks.send_multipart([routing_id, Vec::new(), w.message_id], 0);
    }
}
