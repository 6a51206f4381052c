//! Controller endpoint (`controller.bind`, default 5558; README's ZPController, issue #3):
//! `NODES`, `TOPIC <name>`, `LEADER` answered from the applied Raft metadata with the frames of
//! `zper_wire::controller` (documented in docs/protocol.md). A REQ envelope is echoed; malformed
//! or unknown commands get `[102]`; replies that cannot be delivered are dropped and counted.
//! Requests are cheap (an in-memory read), so one thread serves them all.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::{debug, warn};
use zper_raft::ClusterNode;
use zper_wire::controller::{ControllerReply, ControllerRequest};
use zper_wire::Status;

use super::{try_send, POLL_MS};
use crate::metrics::Counters;

/// Serves the controller ROUTER until `stop` is set.
pub(crate) fn run(
    router: zmq::Socket,
    cluster: ClusterNode,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::Relaxed) {
        match router.poll(zmq::POLLIN, POLL_MS) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(e) => {
                warn!(error = %e, "controller poll failed");
                break;
            }
        }
        while let Ok(frames) = router.recv_multipart(zmq::DONTWAIT) {
            let Some(req) = super::Request::split(frames) else {
                continue;
            };
            let reply = match ControllerRequest::decode(&req.frames) {
                Ok(req) => {
                    let now = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as u64);
                    zper_raft::controller::answer(
                        &cluster.state.cluster_metadata(),
                        cluster.leader(),
                        &req,
                        now,
                    )
                }
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
