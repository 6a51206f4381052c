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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use tracing::{debug, warn, Instrument};
use zper_raft::dolly::DollyPutError;
use zper_raft::ClusterNode;
use zper_wire::dolly::{DollyError, Message, Method};

use super::{try_send, POLL_MS};
use crate::metrics::Counters;

/// The node's current Dolly sequence (for `Error` replies, §10 "node_seq").
pub(crate) fn node_sequence(cluster: &ClusterNode) -> u64 {
    cluster
        .state
        .with_metadata(|m| m.dolly_sequence)
        .unwrap_or(0)
}

/// Answers one decoded request, or hands a Put to the runtime (its reply comes back on
/// `replies`).
fn answer(
    ctx: &Shared,
    replies: &Sender<Vec<Vec<u8>>>,
    routing_id: Vec<u8>,
    msg: Message,
) -> Option<Vec<Vec<u8>>> {
    let cluster = &ctx.cluster;
    match msg.method {
        Method::Get => {
            let found = cluster
                .state
                .with_metadata(|m| m.dolly.get(&msg.key).cloned())
                .flatten();
            let reply = match found {
                Some(r) => {
                    Counters::add(&ctx.counters.dolly.get_hit, 1);
                    Message::new(Method::Put, r.sequence, &msg.key, &r.value)
                }
                None => {
                    Counters::add(&ctx.counters.dolly.get_miss, 1);
                    Message::new(
                        Method::Error,
                        node_sequence(cluster),
                        &msg.key,
                        b"key not found",
                    )
                }
            };
            Some(with_id(routing_id, &reply))
        }
        Method::Put => {
            let (cluster, replies, counters) =
                (cluster.clone(), replies.clone(), ctx.counters.clone());
            let timeout = ctx.put_timeout;
            ctx.runtime.spawn(
                async move {
                    let reply = match cluster
                        .dolly_put(msg.key.clone(), msg.body.clone(), timeout)
                        .await
                    {
                        Ok(sequence) => {
                            Counters::add(&counters.dolly.put_ok, 1);
                            Message::new(Method::Put, sequence, &msg.key, &msg.body)
                        }
                        Err(e @ DollyPutError::NotApplied { .. }) => {
                            Counters::add(&counters.dolly.put_cancelled, 1);
                            error(&cluster, &msg.key, &e.to_string())
                        }
                        Err(e @ DollyPutError::Unknown { .. }) => {
                            Counters::add(&counters.dolly.put_unsettled, 1);
                            warn!(error = %e, "dolly put left unanswered");
                            return;
                        }
                    };
                    let _ = replies.send(with_id(routing_id, &reply));
                }
                .instrument(tracing::debug_span!("dolly_put")),
            );
            None
        }
        other => {
            Counters::add(&ctx.counters.dolly.bad_request, 1);
            Some(with_id(
                routing_id,
                &error(
                    cluster,
                    &msg.key,
                    &format!(
                        "{} is not a request method",
                        String::from_utf8_lossy(other.as_bytes())
                    ),
                ),
            ))
        }
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
}

/// Serves the requests ROUTER until `stop`.
pub(crate) fn run(router: zmq::Socket, ctx: Shared, stop: Arc<AtomicBool>) {
    let (cluster, counters) = (ctx.cluster.clone(), ctx.counters.clone());
    let (tx, rx) = crossbeam_channel::unbounded::<Vec<Vec<u8>>>();
    while !stop.load(Ordering::Relaxed) {
        while let Ok(frames) = rx.try_recv() {
            if !try_send(&router, frames) {
                Counters::add(&counters.replies_dropped, 1);
            }
        }
        match router.poll(zmq::POLLIN, POLL_MS.min(10)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(e) => {
                warn!(error = %e, "dolly poll failed");
                break;
            }
        }
        let frames = match router.recv_multipart(zmq::DONTWAIT) {
            Ok(f) => f,
            Err(_) => continue,
        };
        let Some((routing_id, rest)) = frames.split_first() else {
            continue;
        };
        let reply = match Message::decode(rest) {
            Ok(msg) => answer(&ctx, &tx, routing_id.clone(), msg),
            Err(e) => {
                debug!(error = %e, "bad dolly request");
                Counters::add(&counters.dolly.bad_request, 1);
                // A REQ client's reply needs its empty delimiter back, or REQ drops it.
                let envelope = e == DollyError::ReqEnvelope;
                let body = if envelope { &rest[1..] } else { rest };
                let key = body.get(2).cloned().unwrap_or_default();
                let mut reply = vec![routing_id.clone()];
                if envelope {
                    reply.push(Vec::new());
                }
                reply.extend(error(&cluster, &key, &e.to_string()).to_frames());
                Some(reply)
            }
        };
        if let Some(frames) = reply {
            if !try_send(&router, frames) {
                Counters::add(&counters.replies_dropped, 1);
            }
        }
    }
    debug!("dolly requests endpoint stopped");
}
