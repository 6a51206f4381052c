//! Controller endpoint (`controller.bind`, default 5558; README's ZPController, issue #3):
//! `NODES`, `TOPIC <name>`, `LEADER` answered from the applied Raft metadata with the frames of
//! `zper_wire::controller` (documented in docs/protocol.md). A REQ envelope is echoed; malformed
//! or unknown commands get `[102]`; replies that cannot be delivered are dropped and counted.
//! Information requests are cheap (an in-memory read) and answered on this thread.
//!
//! `SUBSCRIBE`, `KEEPALIVE` and `UNSUBSCRIBE` (issue #7, `pirius.md` §16.2) are Raft proposals:
//! each runs as a task on the node's runtime and its reply comes back through the loop's
//! [`Mailbox`](crate::mailbox::Mailbox), so a slow commit never holds up other clients and a
//! committed one is answered at once (not at the next poll timeout). The reply to SUBSCRIBE/KEEPALIVE lists the
//! subscriber's fragments with the group's committed offsets and the relays that hold them.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::{debug, warn, Instrument};
use zper_raft::metadata::{Applied, Command, MetadataError};
use zper_raft::ClusterNode;
use zper_wire::controller::{ControllerReply, ControllerRequest, Member};
use zper_wire::Status;

use crate::config::NodeConfig;
use crate::context::NodeContext;
use crate::endpoint::{try_send, Request};
use crate::error::NodeError;
use crate::mailbox::{Mailbox, Postbox};
use crate::metrics::Counters;

/// What the controller endpoint works with.
pub(crate) struct Shared {
    pub(crate) cluster: ClusterNode,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) counters: Arc<Counters>,
    /// Subscriber session lease (`subscription.lease_ms`).
    pub(crate) lease: Duration,
    /// The client keys admitted when CURVE is on here: a message from a key removed since
    /// its client connected is dropped (issue #19).
    pub(crate) gate: Option<Arc<crate::zmtp::security::ClientKeys>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Commits a subscription request through Raft and builds its reply.
async fn subscription(
    cluster: &ClusterNode,
    request: ControllerRequest,
    lease: Duration,
) -> ControllerReply {
    let lease_ms = lease.as_millis() as u64;
    let (member, command): (&Member, Command) = match &request {
        ControllerRequest::Subscribe(m) | ControllerRequest::KeepAlive(m) => (
            m,
            Command::Subscribe {
                topic: m.topic.clone(),
                group: m.group.clone(),
                subscriber: m.subscriber.clone(),
                now_ms: now_ms(),
                lease_ms,
            },
        ),
        ControllerRequest::Unsubscribe(m) => (
            m,
            Command::Unsubscribe {
                topic: m.topic.clone(),
                group: m.group.clone(),
                subscriber: m.subscriber.clone(),
                now_ms: now_ms(),
            },
        ),
        _ => return ControllerReply::Status(Status::InvalidCommand),
    };
    match cluster.propose(command).await {
        Ok(Ok(Applied::Subscription {
            fragments,
            revision,
        })) => {
            let meta = cluster.state.cluster_metadata();
            ControllerReply::Subscription(zper_raft::controller::subscription_info(
                &meta,
                &member.topic,
                &fragments,
                lease_ms,
                revision,
            ))
        }
        Ok(Ok(_)) => ControllerReply::Status(Status::Ok),
        Ok(Err(MetadataError::UnknownTopic(_) | MetadataError::NotAssigned { .. })) => {
            ControllerReply::Status(Status::InvalidOffset)
        }
        Ok(Err(e)) => {
            debug!(error = %e, "subscription refused");
            ControllerReply::Status(Status::InvalidCommand)
        }
        Err(e) => {
            warn!(error = %e, "subscription not committed");
            ControllerReply::Status(Status::InternalError)
        }
    }
}

/// Subscription requests (SUBSCRIBE, KEEPALIVE, UNSUBSCRIBE: each a Raft command) in progress at
/// most; past it a request gets `[0xFF]` at once (issue #13: every queue has a bound). The
/// reply channel holds at most this many replies, so it needs no bound of its own.
pub const SUBSCRIPTIONS_IN_PROGRESS: usize = 1024;

/// Creates and binds the controller ROUTER (`controller.bind`).
///
/// Errors: [`NodeError::Bind`] (address in use, bad endpoint), or a zmq option refused.
pub(crate) fn bind(
    zmq: &zmq::Context,
    config: &NodeConfig,
    curve: &crate::context::CurveEndpoints,
) -> Result<zmq::Socket, NodeError> {
    crate::context::bind(zmq, zmq::ROUTER, &config.controller_bind, |c| {
        curve.serve(crate::config::CurveEndpointName::Controller, c)?;
        c.set_router_mandatory(true)
    })
}

/// Starts the controller thread over the bound ROUTER; it ends at shutdown.
///
/// Errors: the mailbox or the thread could not be created.
pub(crate) fn spawn(
    router: zmq::Socket,
    nc: &NodeContext,
) -> Result<std::thread::JoinHandle<()>, NodeError> {
    let ctx = Shared {
        cluster: nc.cluster.clone(),
        runtime: nc.runtime.clone(),
        counters: nc.counters.clone(),
        lease: nc.config.subscription_lease,
        gate: nc.curve.gate(crate::config::CurveEndpointName::Controller),
    };
    let (mailbox, postbox) = nc.mailbox("controller")?;
    crate::context::spawn("zper-controller", move || {
        run(router, ctx, mailbox, postbox)
    })
}

/// Serves the controller ROUTER until shutdown; subscription replies arrive in `mailbox`.
fn run(
    router: zmq::Socket,
    ctx: Shared,
    mailbox: Mailbox<Vec<Vec<u8>>>,
    tx: Postbox<Vec<Vec<u8>>>,
) {
    let counters = ctx.counters.clone();
    let in_progress = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    while !mailbox.stopping() {
        let mut items = [router.as_poll_item(zmq::POLLIN), mailbox.poll_item()];
        if let Err(e) = zmq::poll(&mut items, -1) {
            warn!(error = %e, "controller poll failed");
            break;
        }
        for out in mailbox.drain() {
            if !try_send(&router, out) {
                Counters::add(&counters.replies_dropped, 1);
            }
        }
        let gate = ctx.gate.as_deref();
        while let Ok(frames) =
            crate::sockets::recv_admitted(&router, zmq::DONTWAIT, gate, &counters.curve_refused)
        {
            let Some(req) = Request::split(frames) else {
                continue;
            };
            let reply = match ControllerRequest::decode(&req.frames) {
                Ok(
                    ControllerRequest::Subscribe(_)
                    | ControllerRequest::KeepAlive(_)
                    | ControllerRequest::Unsubscribe(_),
                ) if in_progress.load(Ordering::Acquire) >= SUBSCRIPTIONS_IN_PROGRESS => {
                    Counters::add(&counters.overloaded, 1);
                    ControllerReply::Status(Status::InternalError)
                }
                Ok(
                    r @ (ControllerRequest::Subscribe(_)
                    | ControllerRequest::KeepAlive(_)
                    | ControllerRequest::Unsubscribe(_)),
                ) => {
                    let (cluster, tx, lease) = (ctx.cluster.clone(), tx.clone(), ctx.lease);
                    let left = in_progress.clone();
                    left.fetch_add(1, Ordering::AcqRel);
                    ctx.runtime.spawn(
                        async move {
                            let reply = subscription(&cluster, r, lease).await;
                            let _ = tx.post(req.reply(reply.into_frames()));
                            left.fetch_sub(1, Ordering::AcqRel);
                        }
                        .instrument(tracing::debug_span!("controller_subscription")),
                    );
                    continue;
                }
                Ok(req) => zper_raft::controller::answer(
                    &ctx.cluster.state.cluster_metadata(),
                    ctx.cluster.leader(),
                    &req,
                    now_ms(),
                ),
                Err(e) => {
                    debug!(error = %e, "bad controller request");
                    Counters::add(&counters.bad_requests, 1);
                    ControllerReply::Status(Status::InvalidCommand)
                }
            };
            let out = req.reply(reply.into_frames());
            if !try_send(&router, out) {
                Counters::add(&counters.replies_dropped, 1);
            }
        }
    }
}
