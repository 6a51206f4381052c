//! A writer worker: appends its topics' batches, flushes on the policy (group commit), creates
//! unknown topics, forwards writes for topics led elsewhere, and settles its producers' acks
//! through the [`AckBook`](super::acks::AckBook).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use tracing::{debug, error, warn};
use zper_store::{FlushPolicy, Store, TopicLog};
use zper_wire::AckMode;

use super::acks::{AckBook, Facts};
use super::create::{park_unknown, retry_due, split, CreateTopics, Created, ParkingLot};
use super::{Append, Producer, WriteBatch};
use crate::control::ack::FlushNotice;
use crate::metrics::Counters;
use crate::replication::{PlacementView, Role};

/// A worker's view of one topic.
pub(crate) struct TopicWork {
    pub(super) log: Arc<TopicLog>,
    /// The log's truncation count when the waiters below started waiting.
    truncations: u64,
    /// This topic's metrics.
    stats: Arc<crate::metrics::TopicCounters>,
    /// The newest message of each append, for the ack endpoint's notices (issue #13).
    pub(super) notice_ids: crate::control::ack::NoticeIds,
    /// Flushed offset last published on the ack endpoint.
    published_end: u64,
    /// Producers waiting for acks.
    pub(super) waiting: AckBook,
    /// Idempotent producers' window (issue #18), built on their first message.
    pub(super) window: Option<super::dedupe::FragmentWindow>,
}

pub(crate) struct Worker {
    pub(crate) rx: Receiver<WriteBatch>,
    /// Wake-ups from replication: a high-water mark moved (issue #4).
    pub(crate) wake: Receiver<()>,
    /// Who leads each topic (issue #4): followers do not append.
    pub(crate) view: Option<PlacementView>,
    /// `min_insync` (issue #4).
    pub(crate) min_insync: Option<u64>,
    /// Creates unknown topics on their first write.
    pub(crate) creator: Option<Arc<dyn CreateTopics>>,
    /// Topics whose creation failed lately, and when (retried after a second).
    pub(crate) create_failed: HashMap<Arc<str>, Instant>,
    /// Writes waiting for their topic's creation.
    pub(crate) parked: ParkingLot,
    /// The worker's mailbox for creation outcomes: the sending end handed to the creator...
    pub(crate) created_tx: Sender<Created>,
    /// ... and the receiving end, selected beside the batches.
    pub(crate) created: Receiver<Created>,
    /// Hands writes for topics led elsewhere to the forwarder.
    pub(crate) forward: Option<Sender<super::forward::ForwardJob>>,
    /// `acks = leader`.
    pub(crate) acks_leader: bool,
    pub(crate) acks: zmq::Socket,
    pub(crate) notices: Sender<FlushNotice>,
    pub(crate) store: Arc<Store>,
    pub(crate) policy: FlushPolicy,
    /// The idempotent producers' window bounds (`idempotence.*`, issue #18).
    pub(crate) idempotence: super::dedupe::Bounds,
    pub(crate) topics: HashMap<Arc<str>, TopicWork>,
    pub(crate) counters: Arc<Counters>,
}

impl Worker {
    pub(crate) fn run(mut self) {
        loop {
            let timeout = self
                .next_deadline()
                .map_or(Duration::from_millis(500), |d| {
                    d.saturating_duration_since(Instant::now())
                });
            let received = crossbeam_channel::select! {
                recv(self.rx) -> b => b.map_err(|_| RecvTimeoutError::Disconnected),
                recv(self.created) -> c => {
                    if let Ok(c) = c {
                        self.created(c);
                    }
                    Err(RecvTimeoutError::Timeout)
                }
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
                    for parked in self.parked.drain() {
                        self.refuse_all(&parked.appends, zper_wire::WRITER_UNAVAILABLE);
                    }
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

    pub(super) fn topic(&mut self, name: &Arc<str>) -> Option<&mut TopicWork> {
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
                            waiting: AckBook::default(),
                            window: None,
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
        // A topic this node's view does not know yet waits for its creation (started here,
        // answered through `created`) before fragments are chosen, so a producer's first
        // messages go where its later ones will; every other topic goes on meanwhile.
        let batch = self.park_unknown(batch);
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
                let job = super::forward::ForwardJob {
                    topic: topic.clone(),
                    routing_id: a.producer.routing_id.clone(),
                    mode: a.producer.mode,
                    idempotent: a.producer.idempotent,
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
        if run.iter().any(|a| a.producer.idempotent) {
            let epoch = match role {
                Role::Leader { epoch, .. } => epoch,
                _ => 0,
            };
            self.append_idempotent(topic, epoch, run, bytes, base);
            return;
        }
        self.store_run(topic, run, bytes, base, messages);
    }

    /// Appends `bytes` (the records of `run`, starting at batch offset `base`) to `topic`,
    /// counts them and registers the producers that wait for acks. Returns the offset where
    /// they start, or None when the append failed (the waiters were refused with 0xFF).
    pub(super) fn store_run(
        &mut self,
        topic: &Arc<str>,
        run: &[Append],
        bytes: &[u8],
        base: usize,
        messages: u64,
    ) -> Option<u64> {
        let counters = self.counters.clone();
        let Some(work) = self.topic(topic) else {
            Counters::add(&counters.append_errors, messages);
            for a in run {
                self.refuse(a, zper_wire::WRITER_STORE_FAILED);
            }
            return None;
        };
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
                return None;
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
                    work.waiting
                        .wait_per_flush(&a.producer.routing_id, waiter_end, &a.last_id);
                }
                AckMode::PerMessage => {
                    work.waiting
                        .wait_per_message(&a.producer.routing_id, waiter_end, &a.last_id);
                }
            }
        }
        if let Some(last) = run.last() {
            work.notice_ids.appended(end, &last.last_id);
        }
        Some(start_offset)
    }

    /// Parks the writes of topics being created (starting creations on first sight) and
    /// returns the rest. Within a second of a failed creation that topic's writes are refused
    /// with 105 at once; so are writes the parking lot has no room for.
    fn park_unknown(&mut self, batch: WriteBatch) -> WriteBatch {
        let Some(creator) = self.creator.clone() else {
            return batch;
        };
        let mut refused = Vec::new();
        let mut started = Vec::new();
        let failed = &self.create_failed;
        let now = park_unknown(
            batch,
            &mut self.parked,
            |t| creator.known(t),
            |t| started.push(t.clone()),
            |a, full| refused.push((a, Some(full))),
        );
        for topic in started {
            if retry_due(failed.get(&topic)) {
                creator.start(topic, self.created_tx.clone());
            } else if let Some(b) = self.parked.release(&topic) {
                refused.extend(b.appends.into_iter().map(|a| (a, None)));
            }
        }
        for (a, full) in refused {
            if let Some(full) = full {
                warn!(topic = %a.producer.topic, ?full, "no room to wait for topic creation");
            }
            self.refuse_all(std::slice::from_ref(&a), zper_wire::WRITER_UNAVAILABLE);
        }
        now
    }

    /// A creation ended: append what waited for it, or refuse it with 105.
    fn created(&mut self, c: Created) {
        let parked = self.parked.release(&c.topic);
        match c.result {
            Ok(()) => {
                self.create_failed.remove(&c.topic);
                if let Some(batch) = parked {
                    for part in split(batch, super::BATCH_BYTES) {
                        self.apply(part);
                    }
                }
            }
            Err(e) => {
                warn!(topic = %c.topic, error = %e, "cannot create topic");
                self.create_failed.insert(c.topic, Instant::now());
                if let Some(batch) = parked {
                    self.refuse_all(&batch.appends, zper_wire::WRITER_UNAVAILABLE);
                }
            }
        }
    }

    /// Flushes every topic whose policy says so (all of them when `force`), then acks what is
    /// durable and publishes the flush.
    fn flush_due(&mut self, force: bool) {
        let now = Instant::now();
        for (name, work) in self.topics.iter_mut() {
            let role = self.view.as_ref().map_or(Role::Local, |v| v.role(name));
            let truncations = work.log.truncations().unwrap_or(0);
            let truncated = truncations != work.truncations;
            if truncated {
                work.notice_ids
                    .truncated(work.log.written_end().unwrap_or(0));
                work.published_end = work.published_end.min(work.log.visible_end().unwrap_or(0));
            }
            if matches!(role, Role::Follower { .. }) {
                // Another node leads: only it may publish notices for this fragment.
                work.notice_ids.clear();
            }
            let (pending, first) = work.log.pending().unwrap_or((0, None));
            if force
                || self
                    .policy
                    .due(pending, first, work.waiting.has_waiters(), now)
            {
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
            let leads = matches!(role, Role::Local | Role::Leader { .. });
            let mut advanced_to = None;
            if let Ok(flushed) = end {
                if flushed > work.published_end {
                    work.published_end = flushed;
                    advanced_to = Some(flushed);
                    // A notice names the newest message ending at or before the offset it
                    // announces, and only the fragment's leader (or a lone node) sends it.
                    if let Some((end, message_id)) = work.notice_ids.covered(flushed) {
                        if leads {
                            let _ = self.notices.try_send(FlushNotice {
                                topic: name.clone(),
                                message_id,
                                end_offset: end,
                            });
                        }
                    }
                }
            }
            // Waiters this node can no longer satisfy (it does not lead the topic any more or
            // is fenced, or its log was cut back under them) get 104 rather than an ack for
            // bytes that are not theirs; below `min_insync` the high-water mark stands still,
            // so what waits gets 103 (issue #13). The ack book decides; this loop sends.
            let in_sync = match role {
                Role::Leader {
                    in_sync, replicas, ..
                } if !self.acks_leader => Some((
                    in_sync as u64,
                    crate::replication::min_insync(self.min_insync, replicas) as u64,
                )),
                _ => None,
            };
            let replies = work.waiting.settle(Facts {
                leads: !matches!(role, Role::Fenced | Role::Follower { .. }),
                truncated,
                advanced_to,
                in_sync,
            });
            work.truncations = truncations;
            let refused_103 = replies
                .iter()
                .filter(|r| r.status == Some(zper_wire::Status::NotEnoughReplicas))
                .count() as u64;
            Counters::add(&self.counters.not_enough_replicas, refused_103);
            for reply in replies {
                let _ = self.acks.send_multipart(reply.into_frames(), 0);
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
