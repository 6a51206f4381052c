//! Dolly's endpoints for observers and original Dolly replicas (issue #5, `dolly.md` §3, §5.1,
//! §5.4): the updates PUB (`dolly.updates.bind`, default `tcp://*:3264`) and the snapshots
//! ROUTER (`dolly.snapshots.bind`, default `tcp://*:3265`), served by **every** node from its
//! own applied state (issue #16), so an original replica follows whichever peer it picks (the
//! lowest pid of its peers.json) and an observer can follow any node. A follower's state and
//! updates trail the leader's by its replication lag; both come in Raft order.
//!
//! - Updates: every Dolly Put applied here, in log order, as `[Put, sequence, key, value]`
//!   (exactly the Put reply, §8). PUB drops for a subscriber that is too slow, as Dolly's did;
//!   an observer detects a gap by the sequence and re-snapshots. A node that installs a Raft
//!   snapshot (it was far behind) skips the Puts inside it: also a gap, also a re-snapshot.
//! - Snapshots: `[Snapshot, any, "", ""]` is answered with one `[Put, key's sequence, key,
//!   value]` per key (in key order) and `[Terminate, S, "", ""]`, S being the sequence of the
//!   newest Put in it; any other request gets an `Error` reply (the original leader exited,
//!   §5.4 step 7) and the endpoint keeps serving.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::TryRecvError;
use tracing::{debug, info, warn};
use zper_raft::{ClusterNode, DollyUpdate};
use zper_wire::dolly::{Message, Method};

use super::{error, malformed_reply, with_id};
use crate::metrics::Counters;

/// Updates queued per subscriber before PUB drops (libzmq's default is 1,000).
pub const UPDATES_HWM: i32 = 100_000;
/// Longest a snapshot send may block on one observer, ms.
const SNAPSHOT_SEND_TIMEOUT_MS: i32 = 1_000;

/// The bound updates PUB and snapshots ROUTER, and the feed of applied Puts.
pub(crate) struct Bound {
    updates: zmq::Socket,
    snapshots: zmq::Socket,
    feed: tokio::sync::broadcast::Receiver<DollyUpdate>,
}

/// Options of the updates PUB, set before it binds.
///
/// Errors: an option refused.
pub(crate) fn updates_options(s: &zmq::Socket) -> Result<(), zmq::Error> {
    s.set_sndhwm(UPDATES_HWM)
}

/// Options of the snapshots ROUTER, set before it binds.
///
/// Errors: an option refused.
pub(crate) fn snapshots_options(s: &zmq::Socket) -> Result<(), zmq::Error> {
    s.set_router_mandatory(true)?;
    s.set_sndtimeo(SNAPSHOT_SEND_TIMEOUT_MS)
}

impl Bound {
    /// Takes the bound sockets (`updates` PUB, `snapshots` ROUTER, bound with
    /// [`updates_options`] and [`snapshots_options`]) and subscribes to the applied Puts
    /// before anything can be served, so every Put applied after a snapshot is published.
    pub(crate) fn new(
        updates: zmq::Socket,
        snapshots: zmq::Socket,
        cluster: &ClusterNode,
    ) -> Bound {
        Bound {
            updates,
            snapshots,
            feed: cluster.state.dolly_updates(),
        }
    }
}

fn publish(b: &mut Bound, counters: &Counters) {
    loop {
        match b.feed.try_recv() {
            Ok(u) => {
                let frames = Message::new(Method::Put, u.sequence, &u.key, &u.value).to_frames();
                if b.updates.send_multipart(frames, zmq::DONTWAIT).is_ok() {
                    Counters::add(&counters.dolly.update_published, 1);
                }
            }
            Err(TryRecvError::Lagged(n)) => {
                warn!(
                    missed = n,
                    "dolly updates publisher fell behind; observers must re-snapshot"
                );
                Counters::add(&counters.dolly.update_lagged, n);
            }
            Err(TryRecvError::Empty | TryRecvError::Closed) => return,
        }
    }
}

/// Answers one message of the snapshots ROUTER.
fn serve_snapshot(b: &Bound, frames: Vec<Vec<u8>>, cluster: &ClusterNode, counters: &Counters) {
    let Some((id, rest)) = frames.split_first() else {
        return;
    };
    let request = match Message::decode(rest) {
        Ok(m) if m.method == Method::Snapshot => m,
        Ok(m) => {
            Counters::add(&counters.dolly.bad_request, 1);
            let why = format!(
                "{} is not a snapshot request",
                String::from_utf8_lossy(m.method.as_bytes())
            );
            let _ = b.snapshots.send_multipart(
                with_id(id.clone(), &error(cluster, &m.key, &why)),
                zmq::DONTWAIT,
            );
            return;
        }
        Err(e) => {
            Counters::add(&counters.dolly.bad_request, 1);
            let reply = malformed_reply(cluster, id, rest, &e);
            let _ = b.snapshots.send_multipart(reply, zmq::DONTWAIT);
            return;
        }
    };
    let (records, sequence) = cluster.state.dolly_snapshot();
    let count = records.len();
    for r in records {
        let msg = Message::new(Method::Put, r.sequence, &r.key, &r.value);
        if let Err(e) = b.snapshots.send_multipart(with_id(id.clone(), &msg), 0) {
            debug!(error = %e, "snapshot observer gone or stalled");
            return;
        }
    }
    let end = Message::new(Method::Terminate, sequence, b"", b"");
    if b.snapshots
        .send_multipart(with_id(id.clone(), &end), 0)
        .is_ok()
    {
        Counters::add(&counters.dolly.snapshot_served, 1);
        info!(
            keys = count,
            snapshot = sequence,
            asked_at = request.sequence,
            "sent dolly state snapshot"
        );
    }
}

/// Runs until `stop`: publishes applied Puts and serves snapshots.
pub(crate) fn run(
    mut b: Bound,
    cluster: ClusterNode,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    gate: Option<Arc<crate::zmtp::security::ClientKeys>>,
) {
    while !stop.load(Ordering::Relaxed) {
        publish(&mut b, &counters);
        match b.snapshots.poll(zmq::POLLIN, 5) {
            Ok(n) if n > 0 => {
                if let Ok(frames) = crate::sockets::recv_admitted(
                    &b.snapshots,
                    zmq::DONTWAIT,
                    gate.as_deref(),
                    &counters.curve_refused,
                ) {
                    // Publish what was applied before the snapshot is read: the observer drops
                    // those as already included (§5.4 step 5).
                    publish(&mut b, &counters);
                    serve_snapshot(&b, frames, &cluster, &counters);
                }
            }
            Ok(_) => {}
            Err(e) => {
                warn!(error = %e, "dolly snapshots poll failed");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}
