//! Dolly's requests endpoint (`dolly.requests.bind`, default `tcp://*:3266` as in Dolly's
//! fixture; issue #5): the 4-frame messages of `dolly.md` §4 behind a routing identity.
//!
//! - `Get` is answered from this node's applied metadata: a hit is `[Put, key's sequence, key,
//!   value]`, a miss `[Error, node's sequence, key, "key not found"]` (§10).
//! - `Put` is committed through Raft from any node (forwarded to the leader) and answered
//!   `[Put, sequence, key, value]` once applied, the sequence being the Raft index. A Put that
//!   cannot commit within `dolly.put_timeout_ms` is cancelled through the log
//!   ([`zper_raft::ClusterNode::dolly_put`]) and then answered `[Error, node's sequence, key,
//!   reason]` only if it will never apply (or with its sequence if it had applied after all);
//!   when not even the cancel can commit (no quorum) it is left unanswered, as an unknown
//!   outcome must not look like a failure.
//! - Anything malformed gets an `Error` reply when there is a routing identity to send it to;
//!   the endpoint never stops (the original panicked or exited, §4, §5.7).

pub(crate) mod observers;
pub mod peers;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn, Instrument};
use zper_raft::dolly::DollyPutError;
use zper_raft::ClusterNode;
use zper_wire::dolly::{DollyError, Message, Method};

use crate::config::NodeConfig;
use crate::context::NodeContext;
use crate::endpoint::try_send;
use crate::error::NodeError;
use crate::mailbox::{Mailbox, Postbox};
use crate::metrics::Counters;

/// The node's current Dolly sequence (for `Error` replies, §10 "node_seq").
pub(crate) fn node_sequence(cluster: &ClusterNode) -> u64 {
    cluster
        .state
        .with_metadata(|m| m.dolly_sequence)
        .unwrap_or(0)
}

/// A Get answered from this node's applied state (§5.3).
fn get(ctx: &Shared, key: &[u8]) -> Message {
    let found = ctx
        .cluster
        .state
        .with_metadata(|m| m.dolly.get(key).cloned())
        .flatten();
    match found {
        Some(r) => {
            Counters::add(&ctx.counters.dolly.get_hit, 1);
            Message::new(Method::Put, r.sequence, key, &r.value)
        }
        None => {
            Counters::add(&ctx.counters.dolly.get_miss, 1);
            Message::new(
                Method::Error,
                node_sequence(&ctx.cluster),
                key,
                b"key not found",
            )
        }
    }
}

/// The reply to a method that is not a request (`Put` and `Get` are handled elsewhere).
fn not_a_request(ctx: &Shared, msg: &Message) -> Message {
    Counters::add(&ctx.counters.dolly.bad_request, 1);
    error(
        &ctx.cluster,
        &msg.key,
        &format!(
            "{} is not a request method",
            String::from_utf8_lossy(msg.method.as_bytes())
        ),
    )
}

/// A Put through Raft; `None` when its outcome is unknown (no reply may be sent).
async fn put(ctx: &Shared, msg: &Message) -> Option<Message> {
    let counters = &ctx.counters;
    match ctx
        .cluster
        .dolly_put(msg.key.clone(), msg.body.clone(), ctx.put_timeout)
        .await
    {
        Ok(sequence) => {
            Counters::add(&counters.dolly.put_ok, 1);
            Some(Message::new(Method::Put, sequence, &msg.key, &msg.body))
        }
        Err(e @ DollyPutError::TooLarge { .. }) => {
            Counters::add(&counters.dolly.bad_request, 1);
            Some(error(&ctx.cluster, &msg.key, &e.to_string()))
        }
        Err(e @ DollyPutError::NotApplied { .. }) => {
            Counters::add(&counters.dolly.put_cancelled, 1);
            Some(error(&ctx.cluster, &msg.key, &e.to_string()))
        }
        Err(e @ DollyPutError::Unknown { .. }) => {
            Counters::add(&counters.dolly.put_unsettled, 1);
            warn!(error = %e, "dolly put left unanswered");
            None
        }
    }
}

/// One client connection's requests, answered strictly in arrival order (as the original's
/// single loop did): a task takes them one at a time, so a pipelining client's Puts apply in
/// the order it sent them and a Get after a Put sees it.
struct Connection {
    queue: tokio::sync::mpsc::UnboundedSender<Message>,
    /// Requests queued or in progress.
    pending: Arc<AtomicUsize>,
}

impl Connection {
    fn start(
        ctx: &Arc<Shared>,
        routing_id: Vec<u8>,
        replies: Postbox<Vec<Vec<u8>>>,
        total: &Arc<AtomicUsize>,
    ) -> Self {
        // Unbounded in type only: `run` queues at most PENDING_PER_CONNECTION.
        let (queue, mut rx) = tokio::sync::mpsc::unbounded_channel::<Message>();
        let pending = Arc::new(AtomicUsize::new(0));
        let (ctx, left, total) = (ctx.clone(), pending.clone(), total.clone());
        ctx.runtime.clone().spawn(
            async move {
                while let Some(msg) = rx.recv().await {
                    let reply = match msg.method {
                        Method::Put => put(&ctx, &msg).await,
                        Method::Get => Some(get(&ctx, &msg.key)),
                        _ => Some(not_a_request(&ctx, &msg)),
                    };
                    if let Some(reply) = reply {
                        let _ = replies.post(with_id(routing_id.clone(), &reply));
                    }
                    // After the reply is queued: the endpoint answers this connection inline
                    // again only once everything before is on its way.
                    left.fetch_sub(1, Ordering::AcqRel);
                    total.fetch_sub(1, Ordering::AcqRel);
                }
            }
            .instrument(tracing::debug_span!("dolly_connection")),
        );
        Connection { queue, pending }
    }
}

pub(crate) fn error(cluster: &ClusterNode, key: &[u8], reason: &str) -> Message {
    Message::new(
        Method::Error,
        node_sequence(cluster),
        key,
        reason.as_bytes(),
    )
}

/// The `Error` reply to frames that are not a Dolly message (`rest`: after the routing id).
/// A REQ client's reply gets its empty delimiter back, or REQ would drop it.
pub(crate) fn malformed_reply(
    cluster: &ClusterNode,
    routing_id: &[u8],
    rest: &[Vec<u8>],
    e: &DollyError,
) -> Vec<Vec<u8>> {
    let envelope = *e == DollyError::ReqEnvelope;
    let body = if envelope { &rest[1..] } else { rest };
    let key = body.get(2).cloned().unwrap_or_default();
    let mut reply = vec![routing_id.to_vec()];
    if envelope {
        reply.push(Vec::new());
    }
    reply.extend(error(cluster, &key, &e.to_string()).to_frames());
    reply
}

pub(crate) fn with_id(routing_id: Vec<u8>, msg: &Message) -> Vec<Vec<u8>> {
    let mut out = vec![routing_id];
    out.extend(msg.to_frames());
    out
}

/// What the requests endpoint works with.
pub(crate) struct Shared {
    pub(crate) cluster: ClusterNode,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) counters: Arc<Counters>,
    /// `dolly.put_timeout_ms`.
    pub(crate) put_timeout: Duration,
    /// The node's memory budget: past it every request is answered `Error` "busy" (a Get's
    /// reply and a queued Put each hold up to a value's bytes).
    pub(crate) memory: Arc<crate::memory::MemoryBudget>,
    /// The client keys admitted when CURVE is on here: a message from a key removed since
    /// its client connected is dropped (issue #19).
    pub(crate) gate: Option<Arc<crate::zmtp::security::ClientKeys>>,
}

/// Idle connections are forgotten once there are more than this many.
const IDLE_CONNECTIONS: usize = 1024;
/// Requests one connection may have queued or in progress (issue #13: every queue has a
/// bound); past it, or past [`PENDING_TOTAL`] for the node, a request is answered `Error`
/// ("busy") at once and counted as `zper_rejected_total{reason="overloaded"}`.
pub const PENDING_PER_CONNECTION: usize = 1000;
/// Requests queued or in progress across all connections.
pub const PENDING_TOTAL: usize = 10_000;

fn flush(router: &zmq::Socket, mailbox: &Mailbox<Vec<Vec<u8>>>, c: &Counters) {
    for frames in mailbox.drain() {
        if !try_send(router, frames) {
            Counters::add(&c.replies_dropped, 1);
        }
    }
}

/// Answers a request the node has no room for with `Error` "busy: <why>, retry later" (dropped
/// if even that cannot be delivered) and counts it as overloaded.
fn refuse_busy(router: &zmq::Socket, ctx: &Shared, routing_id: &[u8], key: &[u8], why: &str) {
    Counters::add(&ctx.counters.overloaded, 1);
    let reply = error(&ctx.cluster, key, &format!("busy: {why}, retry later"));
    if !try_send(router, with_id(routing_id.to_vec(), &reply)) {
        Counters::add(&ctx.counters.replies_dropped, 1);
    }
}

/// Creates and binds the Dolly requests ROUTER (`dolly.requests.bind`, default 3266).
///
/// Errors: [`NodeError::Bind`] (address in use, bad endpoint), or a zmq option refused.
pub(crate) fn bind(
    zmq: &zmq::Context,
    config: &NodeConfig,
    curve: &crate::context::CurveEndpoints,
) -> Result<zmq::Socket, NodeError> {
    crate::context::bind(zmq, zmq::ROUTER, &config.dolly_requests_bind, |d| {
        curve.serve(crate::config::CurveEndpointName::Dolly, d)?;
        d.set_router_mandatory(true)
    })
}

/// Starts the requests thread over the bound ROUTER, and the thread serving the bound updates
/// PUB and snapshots ROUTER (`observers`) from this node's applied state. Both end at shutdown.
///
/// Errors: the mailbox or a thread could not be created.
pub(crate) fn spawn(
    router: zmq::Socket,
    observers: (zmq::Socket, zmq::Socket),
    nc: &NodeContext,
) -> Result<Vec<std::thread::JoinHandle<()>>, NodeError> {
    let ctx = Shared {
        cluster: nc.cluster.clone(),
        runtime: nc.runtime.clone(),
        counters: nc.counters.clone(),
        put_timeout: nc.config.dolly_put_timeout,
        memory: nc.memory.clone(),
        gate: nc.curve.gate(crate::config::CurveEndpointName::Dolly),
    };
    let gate = ctx.gate.clone();
    let (mailbox, postbox) = nc.mailbox("dolly")?;
    let requests = crate::context::spawn("zper-dolly", move || run(router, ctx, mailbox, postbox))?;
    let bound = observers::Bound::new(observers.0, observers.1, &nc.cluster);
    let (cluster, counters, stop) = (nc.cluster.clone(), nc.counters.clone(), nc.stop());
    let observers = crate::context::spawn("zper-dolly-feeds", move || {
        observers::run(bound, cluster, counters, stop, gate)
    })?;
    Ok(vec![requests, observers])
}

/// Serves the requests ROUTER until shutdown. A Get from a connection with nothing in progress
/// is answered at once on this thread; anything else goes to the connection's task, whose
/// replies arrive in `mailbox` (at most PENDING_TOTAL, one per request in progress).
fn run(
    router: zmq::Socket,
    ctx: Shared,
    mailbox: Mailbox<Vec<Vec<u8>>>,
    tx: Postbox<Vec<Vec<u8>>>,
) {
    let ctx = Arc::new(ctx);
    let counters = ctx.counters.clone();
    let mut connections: HashMap<Vec<u8>, Connection> = HashMap::new();
    let total = Arc::new(AtomicUsize::new(0));
    while !mailbox.stopping() {
        flush(&router, &mailbox, &counters);
        let mut items = [router.as_poll_item(zmq::POLLIN), mailbox.poll_item()];
        match zmq::poll(&mut items, -1) {
            Ok(_) if items[0].is_readable() => {}
            Ok(_) => continue,
            Err(e) => {
                warn!(error = %e, "dolly poll failed");
                break;
            }
        }
        let refused = &counters.curve_refused;
        let frames = match crate::sockets::recv_admitted(
            &router,
            zmq::DONTWAIT,
            ctx.gate.as_deref(),
            refused,
        ) {
            Ok(f) => f,
            Err(_) => continue,
        };
        let Some((routing_id, rest)) = frames.split_first() else {
            continue;
        };
        let msg = match Message::decode(rest) {
            Ok(msg) => msg,
            Err(e) => {
                debug!(error = %e, "bad dolly request");
                Counters::add(&counters.dolly.bad_request, 1);
                let reply = malformed_reply(&ctx.cluster, routing_id, rest, &e);
                if !try_send(&router, reply) {
                    Counters::add(&counters.replies_dropped, 1);
                }
                continue;
            }
        };
        if !ctx.memory.allows(msg.body.len() as u64) {
            // Issue #13 (found by an attack): pipelined Gets of a 1 MB value that are never
            // read took a node with a 128 MiB budget to 3.6 GB.
            refuse_busy(&router, &ctx, routing_id, &msg.key, "memory budget reached");
            continue;
        }
        let busy = connections
            .get(routing_id)
            .is_some_and(|c| c.pending.load(Ordering::Acquire) > 0);
        if !busy && msg.method != Method::Put {
            // Everything this connection asked before has been answered into `rx`: send
            // those first, then this.
            flush(&router, &mailbox, &counters);
            let reply = match msg.method {
                Method::Get => get(&ctx, &msg.key),
                _ => not_a_request(&ctx, &msg),
            };
            if !try_send(&router, with_id(routing_id.clone(), &reply)) {
                Counters::add(&counters.replies_dropped, 1);
            }
            continue;
        }
        if connections.len() > IDLE_CONNECTIONS {
            connections.retain(|_, c| c.pending.load(Ordering::Acquire) > 0);
        }
        let c = connections
            .entry(routing_id.clone())
            .or_insert_with(|| Connection::start(&ctx, routing_id.clone(), tx.clone(), &total));
        if c.pending.load(Ordering::Acquire) >= PENDING_PER_CONNECTION
            || total.load(Ordering::Acquire) >= PENDING_TOTAL
        {
            refuse_busy(
                &router,
                &ctx,
                routing_id,
                &msg.key,
                "too many requests in progress",
            );
            continue;
        }
        c.pending.fetch_add(1, Ordering::AcqRel);
        total.fetch_add(1, Ordering::AcqRel);
        if c.queue.send(msg).is_err() {
            c.pending.fetch_sub(1, Ordering::AcqRel);
            total.fetch_sub(1, Ordering::AcqRel);
            warn!("dolly connection task gone");
        }
    }
    debug!("dolly requests endpoint stopped");
}
