//! Relay endpoint (`relay.bind`, default `tcp://*:5559`; the README's ZPRelay, issue #7): push
//! delivery of a subscription group's fragments, committed progress, and the results
//! back-channel. Frames: `zper_wire::relay` (docs/protocol.md "Subscriptions").
//!
//! - `STREAM` starts pushing one fragment of this node's copy to the subscriber from an offset,
//!   in batches of `max batch` messages (a partial batch waits up to `flush ms` for more:
//!   Pirius' `max_batch_size` / `flush_interval`, `pirius.md` §11), only up to the high-water
//!   mark.
//! - Flow control: at most `window` messages are pushed and not yet acknowledged. Nothing is
//!   buffered on the node beyond one batch being sent: a stream remembers only its next offset
//!   and reads from the segment files (the page cache) when it may send again, so a stalled
//!   subscriber costs a few bytes of state plus what libzmq queues for it (bounded by the
//!   window and `RELAY_HWM`), never a growing buffer.
//! - `ACK` refills the window and commits the group's offset through Raft
//!   ([`zper_raft::metadata::Command::CommitOffset`], `pirius.md` §16.2), at most one proposal
//!   in flight per (group, subscriber, fragment), later acks coalesced. The subscriber gets
//!   `ACKED` once committed, or `REVOKED` when the fragment is no longer its own (its
//!   unacknowledged records then go to the new owner from the committed offset: exactly-once
//!   hand-over of acknowledged records, §15.1 scenario 6).
//! - A stream whose fragment is no longer assigned to its subscriber (judged once this node
//!   has applied the revision the subscriber was given) is ended with `REVOKED`.
//! - `RESULT` (§13): delivered to producers registered here with `RESULTS` whose prefix
//!   matches the record's id, and passed on to every other node's relay (`RESULT-FWD`), so a
//!   producer may register on any node. Best effort, as in Pirius.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use tracing::{debug, warn};
use zper_raft::metadata::{Command, MetadataError};
use zper_raft::ClusterNode;
use zper_store::{log_key, Store, StoreError};
use zper_wire::relay::{
    AckRequest, RelayReply, RelayRequest, ResultMessage, StreamRequest, RESULTS_LEASE_MS,
};

use super::POLL_MS;
use crate::metrics::Counters;

/// Messages libzmq may queue per subscriber connection before a push is deferred.
pub const RELAY_HWM: i32 = 1000;
/// Bytes read from disk per batch (a single larger message is read whole).
const BATCH_BYTES: u64 = 1 << 20;
/// How often streams re-check that their fragment is still assigned, and registrations expire.
const CHECK_EVERY: Duration = Duration::from_millis(200);
/// Wait before retrying a commit that could not be proposed (no quorum, election).
const COMMIT_RETRY: Duration = Duration::from_millis(500);
/// Results queued per peer relay before further ones are dropped.
const PEER_HWM: i32 = 10_000;
/// Most RESULTS registrations a relay keeps (each lasts `RESULTS_LEASE_MS`).
const MAX_REGISTRATIONS: usize = 10_000;

/// What the relay works with.
pub(crate) struct Shared {
    pub(crate) cluster: ClusterNode,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) store: Arc<Store>,
    pub(crate) counters: Arc<Counters>,
    /// This node's own relay endpoint as advertised (not forwarded to itself).
    pub(crate) advertised: String,
}

/// A stream is one connection's subscription to one fragment.
type StreamKey = (Vec<u8>, String, u32);
/// Commits are per subscriber and fragment (whatever connection acked).
type CommitKey = (String, String, String, u32);

/// A batch pushed and not yet acknowledged.
struct Pushed {
    /// Offset after its last message.
    end: u64,
    /// Where each of its messages starts (an ACK may stop inside a batch, at a message start).
    starts: Vec<u64>,
}

struct Stream {
    group: String,
    subscriber: String,
    next: u64,
    /// The start offset has been checked to be a message start (the walk from the committed
    /// offset is done once the copy reaches it).
    verified: bool,
    /// Highest offset acknowledged on this stream (or where it started).
    acked_upto: u64,
    max_batch: u32,
    flush_ms: u32,
    window: u32,
    revision: u64,
    /// Batches pushed and not acknowledged.
    inflight: VecDeque<Pushed>,
    /// Messages in `inflight`.
    unacked: u32,
    /// This node's copy of the fragment, once it exists.
    log: Option<Arc<zper_store::TopicLog>>,
    /// When a partial batch was first seen (flush timer), and the visible end then.
    partial: Option<(Instant, u64)>,
    /// The window is full (counted once per stall).
    stalled: bool,
    /// Last time anything was sent on this stream (heartbeats find vanished members).
    last_sent: Instant,
}

impl Stream {
    fn unacked(&self) -> u32 {
        self.unacked
    }

    /// Whether `offset` is where an acknowledgement may stop: at or before what was already
    /// acknowledged, or a message start or batch end this stream pushed.
    fn ackable(&self, offset: u64) -> bool {
        offset <= self.acked_upto
            || self
                .inflight
                .iter()
                .any(|b| b.end == offset || b.starts.binary_search(&offset).is_ok())
    }

    fn acked(&mut self, offset: u64) {
        self.acked_upto = self.acked_upto.max(offset);
        while let Some(b) = self.inflight.front_mut() {
            if b.end <= offset {
                self.unacked -= b.starts.len() as u32;
                self.inflight.pop_front();
            } else {
                let before = b.starts.len();
                b.starts.retain(|s| *s >= offset);
                self.unacked -= (before - b.starts.len()) as u32;
                break;
            }
        }
    }
}

/// Whether a member reads a fragment, as far as this node has applied.
#[derive(Debug, PartialEq, Eq)]
enum Ownership {
    Owns,
    NotOwned,
    /// This node has not yet applied the revision the member was given: wait.
    NotYet,
}

/// Longest walk (bytes) from the committed offset to check that a STREAM offset is a message
/// start.
const VERIFY_WALK: u64 = 256 << 20;

/// How long a stream may go without sending before the relay checks its member is still
/// connected (a heartbeat to a vanished peer fails, and the stream is dropped).
const HEARTBEAT: Duration = Duration::from_secs(5);

#[derive(Default)]
struct CommitState {
    /// Highest offset acknowledged.
    wanted: u64,
    /// Highest offset committed.
    committed: u64,
    in_flight: bool,
    retry_at: Option<Instant>,
    /// Connection to answer.
    routing_id: Vec<u8>,
}

/// The outcome of one commit proposal.
struct CommitDone {
    key: CommitKey,
    offset: u64,
    /// Ok(Ok) committed; Ok(Err(reason)) refused (not assigned, unknown topic); Err: retry.
    result: Result<Result<(), String>, String>,
}

struct Registration {
    routing_id: Vec<u8>,
    topic: String,
    prefix: Vec<u8>,
    until: Instant,
}

struct Relay {
    ctx: Shared,
    router: zmq::Socket,
    zctx: zmq::Context,
    streams: HashMap<StreamKey, Stream>,
    commits: HashMap<CommitKey, CommitState>,
    done_tx: Sender<CommitDone>,
    done_rx: Receiver<CommitDone>,
    registrations: Vec<Registration>,
    peers: HashMap<String, zmq::Socket>,
    last_check: Instant,
}

/// Serves the relay ROUTER until `stop`.
pub(crate) fn run(zctx: zmq::Context, router: zmq::Socket, ctx: Shared, stop: Arc<AtomicBool>) {
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let mut relay = Relay {
        ctx,
        router,
        zctx,
        streams: HashMap::new(),
        commits: HashMap::new(),
        done_tx,
        done_rx,
        registrations: Vec::new(),
        peers: HashMap::new(),
        last_check: Instant::now(),
    };
    let mut busy = false;
    while !stop.load(Ordering::Relaxed) {
        relay.settle_commits();
        // Short waits while streams are pushing; idle streams re-read their visible ends every
        // 10 ms (new data reaches a waiting subscriber within that; flush times are kept to
        // that precision).
        let wait = if relay.streams.is_empty() {
            POLL_MS
        } else if busy {
            1
        } else {
            10
        };
        match relay.router.poll(zmq::POLLIN, wait) {
            Ok(_) => {}
            Err(e) => {
                warn!(error = %e, "relay poll failed");
                break;
            }
        }
        for _ in 0..1024 {
            match relay.router.recv_multipart(zmq::DONTWAIT) {
                Ok(frames) => relay.request(frames),
                Err(_) => break,
            }
        }
        busy = relay.pump_all();
        if relay.last_check.elapsed() >= CHECK_EVERY {
            relay.last_check = Instant::now();
            relay.check_assignments();
            relay.registrations.retain(|r| r.until > Instant::now());
        }
    }
    debug!("relay endpoint stopped");
}

enum Sent {
    Ok,
    /// The connection is full: try again later.
    Full,
    /// The peer is gone.
    Gone,
}

impl Relay {
    fn send(&self, routing_id: &[u8], reply: RelayReply) -> Sent {
        let mut frames = vec![routing_id.to_vec()];
        frames.extend(reply.into_frames());
        match self.router.send_multipart(frames, zmq::DONTWAIT) {
            Ok(()) => Sent::Ok,
            Err(zmq::Error::EAGAIN) => Sent::Full,
            Err(_) => Sent::Gone,
        }
    }

    fn request(&mut self, frames: Vec<Vec<u8>>) {
        let Some((routing_id, rest)) = frames.split_first() else {
            return;
        };
        let counters = self.ctx.counters.clone();
        match RelayRequest::decode(rest) {
            Ok(RelayRequest::Stream(s)) => self.stream(routing_id, s),
            Ok(RelayRequest::Ack(a)) => self.ack(routing_id, a),
            Ok(RelayRequest::Result(r)) => {
                Counters::add(&counters.relay.result_received, 1);
                self.forward(&r);
                self.deliver(&r);
            }
            Ok(RelayRequest::Forwarded(r)) => {
                Counters::add(&counters.relay.result_received, 1);
                self.deliver(&r);
            }
            Ok(RelayRequest::Results { topic, prefix }) => {
                // A renewal replaces its registration; new ones stop at the cap.
                self.registrations.retain(|r| {
                    !(r.routing_id == *routing_id && r.topic == topic && r.prefix == prefix)
                });
                if self.registrations.len() >= MAX_REGISTRATIONS {
                    Counters::add(&counters.relay.bad_request, 1);
                    let reason = format!("{MAX_REGISTRATIONS} RESULTS registrations already");
                    let _ = self.send(routing_id, RelayReply::Error(reason));
                    return;
                }
                self.registrations.push(Registration {
                    routing_id: routing_id.clone(),
                    topic: topic.clone(),
                    prefix: prefix.clone(),
                    until: Instant::now() + Duration::from_millis(RESULTS_LEASE_MS),
                });
                let _ = self.send(
                    routing_id,
                    RelayReply::Registered {
                        topic,
                        prefix,
                        lease_ms: RESULTS_LEASE_MS,
                    },
                );
            }
            Err(e) => {
                debug!(error = %e, "bad relay request");
                Counters::add(&counters.relay.bad_request, 1);
                let _ = self.send(routing_id, RelayReply::Error(e.to_string()));
            }
        }
    }

    fn stream(&mut self, routing_id: &[u8], s: StreamRequest) {
        let _span =
            tracing::debug_span!("relay_stream", topic = %s.topic, fragment = s.fragment).entered();
        // A fragment this node holds no copy of cannot be served here.
        let me = self.ctx.cluster.id;
        let held = self
            .ctx
            .cluster
            .state
            .with_metadata(|m| {
                m.topics.get(&s.topic).map(|t| {
                    t.fragments
                        .iter()
                        .any(|f| f.id == s.fragment && f.replicas.contains(&me))
                })
            })
            .flatten();
        if held != Some(true) {
            let reason = match held {
                None => "unknown topic".to_owned(),
                Some(_) => format!("node {me} holds no copy of fragment {}", s.fragment),
            };
            Counters::add(&self.ctx.counters.relay.revoked, 1);
            let _ = self.send(
                routing_id,
                RelayReply::Revoked {
                    topic: s.topic,
                    fragment: s.fragment,
                    reason,
                },
            );
            return;
        }
        // Offsets before the oldest segment (retention) start at the oldest record.
        let mut next = s.offset;
        if let Some(log) = self.ctx.store.topic(&log_key(&s.topic, s.fragment)) {
            if let Ok(starts) = log.segment_starts() {
                if let Some(first) = starts.first() {
                    next = next.max(*first);
                }
            }
        }
        // Never below what the group acknowledged (delivered once, done); the committed offset
        // is a message start, so it needs no check.
        let committed = self.committed(&s.topic, &s.group, &s.subscriber, s.fragment);
        let verified = next <= committed;
        next = next.max(committed);
        Counters::add(&self.ctx.counters.relay.stream_started, 1);
        self.streams.insert(
            (routing_id.to_vec(), s.topic.clone(), s.fragment),
            Stream {
                group: s.group,
                subscriber: s.subscriber,
                next,
                verified,
                acked_upto: next,
                max_batch: s.max_batch,
                flush_ms: s.flush_ms,
                window: s.window,
                revision: s.revision,
                inflight: VecDeque::new(),
                unacked: 0,
                log: None,
                partial: None,
                stalled: false,
                last_sent: Instant::now(),
            },
        );
    }

    fn ack(&mut self, routing_id: &[u8], a: AckRequest) {
        // Only what this connection's stream pushed can be acknowledged: an offset inside a
        // message, past the high-water mark or never delivered would make the group skip
        // records or resume mid-message.
        let refusal =
            match self
                .streams
                .get_mut(&(routing_id.to_vec(), a.topic.clone(), a.fragment))
            {
                None => Some(format!(
                    "ACK of fragment {}: no stream of it on this connection (send STREAM first)",
                    a.fragment
                )),
                Some(s) if s.group != a.group || s.subscriber != a.subscriber => Some(format!(
                    "ACK names {}/{} but the stream is {}/{}",
                    a.group, a.subscriber, s.group, s.subscriber
                )),
                Some(s) if !s.ackable(a.offset) => Some(format!(
                    "ACK offset {} is not the start or end of a message pushed on this stream",
                    a.offset
                )),
                Some(s) => {
                    s.acked(a.offset);
                    None
                }
            };
        if let Some(reason) = refusal {
            Counters::add(&self.ctx.counters.relay.bad_request, 1);
            let _ = self.send(routing_id, RelayReply::Error(reason));
            return;
        }
        let key = (a.topic, a.group, a.subscriber, a.fragment);
        let c = self.commits.entry(key.clone()).or_default();
        c.wanted = c.wanted.max(a.offset);
        c.routing_id = routing_id.to_vec();
        if c.wanted <= c.committed && !c.in_flight {
            // Already committed (a repeated ack): confirm at once.
            let offset = c.committed;
            let _ = self.send(
                routing_id,
                RelayReply::Acked {
                    topic: key.0,
                    fragment: key.3,
                    offset,
                },
            );
            return;
        }
        self.start_commit(&key);
    }

    fn start_commit(&mut self, key: &CommitKey) {
        let Some(c) = self.commits.get_mut(key) else {
            return;
        };
        if c.in_flight || c.wanted <= c.committed {
            return;
        }
        if c.retry_at.is_some_and(|t| t > Instant::now()) {
            return;
        }
        c.in_flight = true;
        c.retry_at = None;
        let offset = c.wanted;
        let (cluster, tx, key) = (self.ctx.cluster.clone(), self.done_tx.clone(), key.clone());
        let command = Command::CommitOffset {
            topic: key.0.clone(),
            group: key.1.clone(),
            subscriber: key.2.clone(),
            fragment: key.3,
            offset,
        };
        self.ctx.runtime.spawn(async move {
            let result = match cluster.propose(command).await {
                Ok(Ok(_)) => Ok(Ok(())),
                Ok(Err(e)) => Ok(Err(refusal(&e))),
                Err(e) => Err(e.to_string()),
            };
            let _ = tx.send(CommitDone {
                key,
                offset,
                result,
            });
        });
    }

    fn settle_commits(&mut self) {
        let done: Vec<CommitDone> = self.done_rx.try_iter().collect();
        for d in done {
            let Some(c) = self.commits.get_mut(&d.key) else {
                continue;
            };
            c.in_flight = false;
            let routing_id = c.routing_id.clone();
            match d.result {
                Ok(Ok(())) => {
                    c.committed = c.committed.max(d.offset);
                    Counters::add(&self.ctx.counters.relay.commit_ok, 1);
                    let _ = self.send(
                        &routing_id,
                        RelayReply::Acked {
                            topic: d.key.0.clone(),
                            fragment: d.key.3,
                            offset: d.offset,
                        },
                    );
                    self.start_commit(&d.key);
                }
                Ok(Err(reason)) => {
                    // Not this subscriber's (any more): end its stream; forget the commit.
                    self.commits.remove(&d.key);
                    let (topic, fragment) = (d.key.0.clone(), d.key.3);
                    self.streams.retain(|(_, t, f), s| {
                        !(*t == topic && *f == fragment && s.subscriber == d.key.2)
                    });
                    Counters::add(&self.ctx.counters.relay.revoked, 1);
                    let _ = self.send(
                        &routing_id,
                        RelayReply::Revoked {
                            topic,
                            fragment,
                            reason,
                        },
                    );
                }
                Err(e) => {
                    debug!(error = %e, "commit not proposed; retrying");
                    c.retry_at = Some(Instant::now() + COMMIT_RETRY);
                }
            }
        }
        // Commits waiting for a retry.
        let due: Vec<CommitKey> = self
            .commits
            .iter()
            .filter(|(_, c)| {
                !c.in_flight
                    && c.wanted > c.committed
                    && c.retry_at.is_some_and(|t| t <= Instant::now())
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            if let Some(c) = self.commits.get_mut(&key) {
                c.retry_at = None;
            }
            self.start_commit(&key);
        }
        if self.commits.len() > 100_000 {
            self.commits
                .retain(|_, c| c.in_flight || c.wanted > c.committed);
        }
    }

    /// Pushes what every stream may send; true when anything was sent (or a partial batch
    /// waits for its flush time).
    fn pump_all(&mut self) -> bool {
        // Streams paused on a full window are skipped without work (an ACK reopens them).
        let keys: Vec<StreamKey> = self
            .streams
            .iter()
            .filter(|(_, s)| !(s.stalled && s.unacked >= s.window))
            .map(|(k, _)| k.clone())
            .collect();
        let mut busy = false;
        for key in keys {
            // Several batches per turn when the subscriber keeps up.
            for _ in 0..16 {
                match self.pump(&key) {
                    Pumped::Sent => busy = true,
                    Pumped::Idle => break,
                    Pumped::Drop => {
                        self.streams.remove(&key);
                        break;
                    }
                }
            }
        }
        busy
    }

    fn pump(&mut self, key: &StreamKey) -> Pumped {
        let (routing_id, topic, fragment) = key;
        let Some(s) = self.streams.get_mut(key) else {
            return Pumped::Idle;
        };
        let unacked = s.unacked();
        if unacked >= s.window {
            if !s.stalled {
                s.stalled = true;
                Counters::add(&self.ctx.counters.relay.window_full, 1);
            }
            return Pumped::Idle;
        }
        s.stalled = false;
        if s.log.is_none() {
            s.log = self.ctx.store.topic(&log_key(topic, *fragment));
        }
        let Some(log) = s.log.clone() else {
            return Pumped::Idle; // this copy has nothing yet
        };
        let Ok(end) = log.visible_end() else {
            return Pumped::Idle;
        };
        if end <= s.next {
            s.partial = None;
            return Pumped::Idle;
        }
        if !s.verified {
            // The STREAM offset is past the committed one: walk there message by message.
            let (group, subscriber, target) = (s.group.clone(), s.subscriber.clone(), s.next);
            let from = self.committed(topic, &group, &subscriber, *fragment);
            match message_start(&log, from, target) {
                Ok(true) => {
                    if let Some(s) = self.streams.get_mut(key) {
                        s.verified = true;
                    }
                }
                Ok(false) | Err(_) => {
                    let reason = format!(
                        "STREAM offset {target} is not the start of a message of fragment {fragment} at or after the committed offset {from}"
                    );
                    Counters::add(&self.ctx.counters.relay.bad_request, 1);
                    let _ = self.send(routing_id, RelayReply::Error(reason));
                    return Pumped::Drop;
                }
            }
            return Pumped::Sent; // pump again
        }
        let room = s.max_batch.min(s.window - unacked) as usize;
        if let Some((since, seen_end)) = s.partial {
            // Waiting for a partial batch to fill: nothing new and not yet due.
            if end == seen_end && since.elapsed() < Duration::from_millis(u64::from(s.flush_ms)) {
                return Pumped::Idle;
            }
        }
        let raw = match log.raw_messages(s.next, room, BATCH_BYTES) {
            Ok(m) => m,
            Err(StoreError::InvalidOffset { .. }) => {
                let reason = format!("offset {} is not a record boundary of this copy", s.next);
                let _ = self.send(routing_id, RelayReply::Error(reason));
                return Pumped::Drop;
            }
            Err(StoreError::Corrupt { start, end, .. }) => {
                // Issue #13: damaged bytes are never served; say where intact data resumes
                // rather than retrying (and logging) every pass.
                let reason = format!(
                    "offset {} is in a damaged range [{start}, {end}) of this copy: resume at {end}",
                    s.next
                );
                let _ = self.send(routing_id, RelayReply::Error(reason));
                return Pumped::Drop;
            }
            Err(e) => {
                warn!(error = %e, "relay read failed");
                return Pumped::Idle;
            }
        };
        if raw.starts.is_empty() {
            return Pumped::Idle;
        }
        let full = raw.starts.len() >= room;
        if !full && s.flush_ms > 0 {
            match s.partial {
                None => {
                    s.partial = Some((Instant::now(), end));
                    return Pumped::Idle;
                }
                Some((since, _))
                    if since.elapsed() < Duration::from_millis(u64::from(s.flush_ms)) =>
                {
                    s.partial = Some((since, end));
                    return Pumped::Idle;
                }
                Some(_) => {}
            }
        }
        // Push only while the fragment is still this subscriber's (as far as this node has
        // applied): a member that lost it gets nothing more.
        let (group, subscriber, revision, first) =
            (s.group.clone(), s.subscriber.clone(), s.revision, s.next);
        match self.owns(topic, &group, *fragment, &subscriber, revision) {
            Ownership::Owns => {}
            Ownership::NotYet => return Pumped::Idle,
            Ownership::NotOwned => {
                self.revoke(key);
                return Pumped::Drop;
            }
        }
        let (starts, after) = (raw.starts, raw.end);
        let count = starts.len() as u32;
        let batch = RelayReply::Records {
            topic: topic.clone(),
            fragment: *fragment,
            offset: first,
            end: after,
            records: raw.bytes,
        };
        match self.send(routing_id, batch) {
            Sent::Ok => {
                let counters = self.ctx.counters.clone();
                if let Some(s) = self.streams.get_mut(key) {
                    s.next = after;
                    s.partial = None;
                    s.last_sent = Instant::now();
                    s.unacked += starts.len() as u32;
                    s.inflight.push_back(Pushed { end: after, starts });
                }
                Counters::add(&counters.relay.batch_pushed, 1);
                Counters::add(&counters.relay.message_pushed, u64::from(count));
                Pumped::Sent
            }
            Sent::Full => {
                Counters::add(&self.ctx.counters.relay.push_deferred, 1);
                Pumped::Idle
            }
            Sent::Gone => Pumped::Drop,
        }
    }

    /// Whether `subscriber` reads `fragment` in this node's applied metadata. Before this node
    /// has applied `revision` (the assignment the subscriber was given) it is taken on trust.
    fn owns(
        &self,
        topic: &str,
        group: &str,
        fragment: u32,
        subscriber: &str,
        revision: u64,
    ) -> Ownership {
        self.ctx
            .cluster
            .state
            .with_applied(|m, applied| {
                if applied < revision {
                    return Ownership::NotYet;
                }
                let owns = m
                    .subscriptions
                    .get(topic)
                    .and_then(|gs| gs.get(group))
                    .and_then(|g| g.assignment.get(&fragment))
                    .is_some_and(|owners| owners.iter().any(|o| o == subscriber));
                if owns {
                    Ownership::Owns
                } else {
                    Ownership::NotOwned
                }
            })
            .unwrap_or(Ownership::NotYet)
    }

    /// The committed offset `subscriber` resumes `fragment` from (0 when none).
    fn committed(&self, topic: &str, group: &str, subscriber: &str, fragment: u32) -> u64 {
        self.ctx
            .cluster
            .state
            .with_metadata(|m| {
                let policy = m.topics.get(topic).map(|t| t.policy).unwrap_or_default();
                m.subscriptions
                    .get(topic)
                    .and_then(|gs| gs.get(group))
                    .map_or(0, |g| g.committed(policy, subscriber, fragment))
            })
            .unwrap_or(0)
    }

    /// Ends a stream with REVOKED.
    fn revoke(&mut self, key: &StreamKey) {
        self.streams.remove(key);
        Counters::add(&self.ctx.counters.relay.revoked, 1);
        let _ = self.send(
            &key.0,
            RelayReply::Revoked {
                topic: key.1.clone(),
                fragment: key.2,
                reason: "not assigned to this subscriber".into(),
            },
        );
    }

    /// Ends idle streams whose fragment is no longer their subscriber's (streams with data
    /// are checked before every push).
    fn check_assignments(&mut self) {
        let revoked: Vec<StreamKey> = self
            .streams
            .iter()
            .filter(|(key, s)| {
                self.owns(&key.1, &s.group, key.2, &s.subscriber, s.revision) == Ownership::NotOwned
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in revoked {
            self.revoke(&key);
        }
        // Streams that sent nothing for a while: a heartbeat finds members that have gone.
        let quiet: Vec<StreamKey> = self
            .streams
            .iter()
            .filter(|(_, s)| s.last_sent.elapsed() >= HEARTBEAT)
            .map(|(key, _)| key.clone())
            .collect();
        for key in quiet {
            let beat = RelayReply::Heartbeat {
                topic: key.1.clone(),
                fragment: key.2,
            };
            match self.send(&key.0, beat) {
                Sent::Gone => {
                    self.streams.remove(&key);
                }
                Sent::Ok | Sent::Full => {
                    if let Some(s) = self.streams.get_mut(&key) {
                        s.last_sent = Instant::now();
                    }
                }
            }
        }
    }

    fn deliver(&mut self, r: &ResultMessage) {
        let now = Instant::now();
        let targets: Vec<Vec<u8>> = self
            .registrations
            .iter()
            .filter(|g| g.until > now && g.topic == r.topic && r.id.starts_with(&g.prefix))
            .map(|g| g.routing_id.clone())
            .collect();
        for t in targets {
            match self.send(&t, RelayReply::Result(r.clone())) {
                Sent::Ok => Counters::add(&self.ctx.counters.relay.result_delivered, 1),
                Sent::Full => Counters::add(&self.ctx.counters.relay.result_dropped, 1),
                Sent::Gone => {
                    Counters::add(&self.ctx.counters.relay.result_dropped, 1);
                    self.registrations.retain(|g| g.routing_id != t);
                }
            }
        }
    }

    /// Passes a subscriber's result on to every other node's relay.
    fn forward(&mut self, r: &ResultMessage) {
        let relays: Vec<String> = self
            .ctx
            .cluster
            .state
            .with_metadata(|m| {
                m.nodes
                    .values()
                    .map(|n| n.endpoints.relay.clone())
                    .filter(|e| !e.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        for relay in relays {
            if relay == self.ctx.advertised {
                continue;
            }
            if !self.peers.contains_key(&relay) {
                match self.peer(&relay) {
                    Ok(s) => {
                        self.peers.insert(relay.clone(), s);
                    }
                    Err(e) => {
                        warn!(relay = %relay, error = %e, "cannot connect to peer relay");
                        continue;
                    }
                }
            }
            if let Some(p) = self.peers.get(&relay) {
                let frames = r.frames(zper_wire::relay::RESULT_FWD);
                if p.send_multipart(frames, zmq::DONTWAIT).is_err() {
                    Counters::add(&self.ctx.counters.relay.result_dropped, 1);
                }
            }
        }
    }

    fn peer(&self, endpoint: &str) -> Result<zmq::Socket, zmq::Error> {
        let s = self.zctx.socket(zmq::DEALER)?;
        s.set_linger(0)?;
        s.set_sndhwm(PEER_HWM)?;
        s.connect(endpoint)?;
        Ok(s)
    }
}

/// Whether `target` is the start of a message, walking message by message from `from` (a
/// message start) for at most [`VERIFY_WALK`] bytes.
fn message_start(log: &zper_store::TopicLog, from: u64, target: u64) -> Result<bool, StoreError> {
    let mut at = from;
    while at < target {
        if at - from > VERIFY_WALK {
            return Ok(false);
        }
        let raw = log.raw_messages(at, 100_000, 4 << 20)?;
        if raw.starts.is_empty() {
            return Ok(false);
        }
        if raw.starts.binary_search(&target).is_ok() {
            return Ok(true);
        }
        at = raw.end;
    }
    Ok(at == target)
}

/// Why a commit was refused, for the REVOKED reply.
fn refusal(e: &MetadataError) -> String {
    match e {
        MetadataError::NotAssigned { .. } => "not assigned to this subscriber".into(),
        other => other.to_string(),
    }
}

enum Pumped {
    Sent,
    Idle,
    Drop,
}
