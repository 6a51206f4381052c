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

mod commit;
mod results;
mod stream;
mod window;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};
use zper_raft::metadata::MetadataError;
use zper_raft::ClusterNode;
use zper_store::{Store, StoreError};
use zper_wire::relay::{RelayReply, RelayRequest, RESULTS_LEASE_MS};

use crate::context::NodeContext;
use crate::endpoint::POLL_MS;
use crate::error::NodeError;
use crate::mailbox::{Mailbox, Postbox};
use crate::metrics::Counters;
use window::{CommitState, Window};

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
    /// CURVE towards peers' relays, when `curve.endpoints` names the relay (issue #19).
    pub(crate) curve: crate::context::CurveEndpoints,
}

/// A stream is one connection's subscription to one fragment.
type StreamKey = (Vec<u8>, String, u32);
/// Commits are per subscriber and fragment (whatever connection acked).
type CommitKey = (String, String, String, u32);

struct Stream {
    group: String,
    subscriber: String,
    next: u64,
    /// The start offset has been checked to be a message start (the walk from the committed
    /// offset is done once the copy reaches it).
    verified: bool,
    max_batch: u32,
    flush_ms: u32,
    revision: u64,
    /// Messages pushed and not yet acknowledged, at most the subscriber's window.
    window: Window,
    /// This node's copy of the fragment, once it exists.
    log: Option<Arc<zper_store::TopicLog>>,
    /// When a partial batch was first seen (flush timer), and the visible end then.
    partial: Option<(Instant, u64)>,
    /// The window is full (counted once per stall).
    stalled: bool,
    /// Last time anything was sent on this stream (heartbeats find vanished members).
    last_sent: Instant,
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
    /// Commit outcomes from the runtime, answered as soon as they arrive.
    done_tx: Postbox<CommitDone>,
    mailbox: Mailbox<CommitDone>,
    registrations: Vec<Registration>,
    peers: HashMap<String, zmq::Socket>,
    last_check: Instant,
}

/// Creates and binds the relay ROUTER (`relay.bind`).
///
/// Errors: [`NodeError::Bind`] (address in use, bad endpoint), or a zmq option refused.
pub(crate) fn bind(
    zmq: &zmq::Context,
    config: &crate::config::NodeConfig,
    curve: &crate::context::CurveEndpoints,
) -> Result<zmq::Socket, NodeError> {
    crate::context::bind(zmq, zmq::ROUTER, &config.relay_bind, |r| {
        curve.serve(crate::config::CurveEndpointName::Relay, r)?;
        r.set_router_mandatory(true)?; // a full or vanished subscriber fails the send
        r.set_router_handover(true)?; // a reconnecting subscriber takes its identity over
        r.set_sndhwm(RELAY_HWM)?;
        // Requests are small; a result payload may be as large as a message. A peer sending
        // more is disconnected by libzmq instead of being buffered.
        r.set_maxmsgsize((config.max_message as i64).saturating_add(64 * 1024))
    })
}

/// Starts the relay thread over the bound ROUTER; `advertised` is this node's relay endpoint
/// as other nodes reach it. It ends at shutdown.
///
/// Errors: the mailbox or the thread could not be created.
pub(crate) fn spawn(
    router: zmq::Socket,
    advertised: String,
    nc: &NodeContext,
) -> Result<std::thread::JoinHandle<()>, NodeError> {
    let ctx = Shared {
        cluster: nc.cluster.clone(),
        runtime: nc.runtime.clone(),
        store: nc.store.clone(),
        counters: nc.counters.clone(),
        advertised,
        curve: nc.curve.clone(),
    };
    let (mailbox, done_tx) = nc.mailbox("relay")?;
    let zctx = nc.zmq.clone();
    crate::context::spawn("zper-relay", move || {
        run(zctx, router, ctx, mailbox, done_tx)
    })
}

/// Serves the relay ROUTER until shutdown; commit outcomes arrive in `mailbox`.
fn run(
    zctx: zmq::Context,
    router: zmq::Socket,
    ctx: Shared,
    mailbox: Mailbox<CommitDone>,
    done_tx: Postbox<CommitDone>,
) {
    let mut relay = Relay {
        ctx,
        router,
        zctx,
        streams: HashMap::new(),
        commits: HashMap::new(),
        done_tx,
        mailbox,
        registrations: Vec::new(),
        peers: HashMap::new(),
        last_check: Instant::now(),
    };
    let gate = relay
        .ctx
        .curve
        .gate(crate::config::CurveEndpointName::Relay);
    let counters = relay.ctx.counters.clone();
    let mut busy = false;
    while !relay.mailbox.stopping() {
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
        let mut items = [
            relay.router.as_poll_item(zmq::POLLIN),
            relay.mailbox.poll_item(),
        ];
        match zmq::poll(&mut items, wait) {
            Ok(_) => {}
            Err(e) => {
                warn!(error = %e, "relay poll failed");
                break;
            }
        }
        for _ in 0..1024 {
            match crate::sockets::recv_admitted(
                &relay.router,
                zmq::DONTWAIT,
                gate.as_deref(),
                &counters.curve_refused,
            ) {
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
