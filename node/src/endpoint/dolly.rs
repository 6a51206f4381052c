//! Dolly's requests endpoint (`dolly.requests.bind`, default `tcp://*:3266` as in Dolly's
//! fixture; issue #5): the 4-frame messages of `dolly.md` §4 behind a routing identity.
//!
//! - `Get` is answered from this node's applied metadata: a hit is `[Put, key's sequence, key,
//!   value]`, a miss `[Error, node's sequence, key, "key not found"]` (§10).
//! - `Put` is committed through Raft from any node (forwarded to the leader) and answered
//!   `[Put, sequence, key, value]` once applied, the sequence being the Raft index; a Put that
//!   cannot commit in time gets `[Error, node's sequence, key, reason]`.
//! - Anything malformed gets an `Error` reply when there is a routing identity to send it to;
//!   the endpoint never stops (the original panicked or exited, §4, §5.7).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use tracing::{debug, warn};
use zper_raft::metadata::{Applied, Command};
use zper_raft::ClusterNode;
use zper_wire::dolly::{Message, Method};

use super::{try_send, POLL_MS};
use crate::metrics::Counters;

/// Longest a Put waits to commit before it is answered with an `Error`.
pub const PUT_TIMEOUT: Duration = Duration::from_secs(5);

/// The node's current Dolly sequence (for `Error` replies, §10 "node_seq").
fn node_sequence(cluster: &ClusterNode) -> u64 {
    cluster
        .state
        .with_metadata(|m| m.dolly_sequence)
        .unwrap_or(0)
}

/// Answers one decoded request, or hands a Put to the runtime (its reply comes back on
/// `replies`).
fn answer(
    cluster: &ClusterNode,
    runtime: &tokio::runtime::Handle,
    replies: &Sender<Vec<Vec<u8>>>,
    routing_id: Vec<u8>,
    msg: Message,
) -> Option<Vec<Vec<u8>>> {
    match msg.method {
        Method::Get => {
            let found = cluster
                .state
                .with_metadata(|m| m.dolly.get(&msg.key).cloned())
                .flatten();
            let reply = match found {
                Some(r) => Message::new(Method::Put, r.sequence, &msg.key, &r.value),
                None => Message::new(
                    Method::Error,
                    node_sequence(cluster),
                    &msg.key,
                    b"key not found",
                ),
            };
            Some(with_id(routing_id, &reply))
        }
        Method::Put => {
            let (cluster, replies) = (cluster.clone(), replies.clone());
            runtime.spawn(async move {
                let command = Command::DollyPut {
                    key: msg.key.clone(),
                    value: msg.body.clone(),
                };
                let reply = match tokio::time::timeout(PUT_TIMEOUT, cluster.propose(command)).await
                {
                    Ok(Ok(Ok(Applied::DollyPut { sequence }))) => {
                        Message::new(Method::Put, sequence, &msg.key, &msg.body)
                    }
                    Ok(Ok(other)) => error(&cluster, &msg.key, &format!("{other:?}")),
                    Ok(Err(e)) => error(&cluster, &msg.key, &e.to_string()),
                    Err(_) => error(&cluster, &msg.key, "put not committed in time"),
                };
                let _ = replies.send(with_id(routing_id, &reply));
            });
            None
        }
        other => Some(with_id(
            routing_id,
            &error(
                cluster,
                &msg.key,
                &format!(
                    "{} is not a request method",
                    String::from_utf8_lossy(other.as_bytes())
                ),
            ),
        )),
    }
}

fn error(cluster: &ClusterNode, key: &[u8], reason: &str) -> Message {
    Message::new(
        Method::Error,
        node_sequence(cluster),
        key,
        reason.as_bytes(),
    )
}

fn with_id(routing_id: Vec<u8>, msg: &Message) -> Vec<Vec<u8>> {
    let mut out = vec![routing_id];
    out.extend(msg.to_frames());
    out
}

/// Serves the requests ROUTER until `stop`.
pub(crate) fn run(
    router: zmq::Socket,
    cluster: ClusterNode,
    runtime: tokio::runtime::Handle,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) {
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
            Ok(msg) => answer(&cluster, &runtime, &tx, routing_id.clone(), msg),
            Err(e) => {
                debug!(error = %e, "bad dolly request");
                Counters::add(&counters.bad_requests, 1);
                let key = rest.get(2).cloned().unwrap_or_default();
                Some(with_id(
                    routing_id.clone(),
                    &error(&cluster, &key, &e.to_string()),
                ))
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
