//! The Dolly leader's endpoints (issue #5, `dolly.md` §3, §5.1, §5.4): the updates PUB
//! (`dolly.updates.bind`, default `tcp://*:3264`) and the snapshots ROUTER
//! (`dolly.snapshots.bind`, default `tcp://*:3265`), bound only while this node is the Raft
//! leader (which records itself as the Dolly leader in the metadata). When leadership moves the
//! old leader unbinds them and the new one binds its own; observers find the leader with the
//! controller's `LEADER` request or `GET /v1/brokers` (`dolly_leader: true`).
//!
//! - Updates: every Dolly Put applied here, in log order, as `[Put, sequence, key, value]`
//!   (exactly the Put reply, §8). PUB drops for a subscriber that is too slow, as Dolly's did;
//!   an observer detects a gap by the sequence and re-snapshots.
//! - Snapshots: `[Snapshot, any, "", ""]` is answered with one `[Put, key's sequence, key,
//!   value]` per key (in key order) and `[Terminate, S, "", ""]`, S being the sequence of the
//!   newest Put in it; any other request gets an `Error` reply (the original leader exited,
//!   §5.4 step 7) and the endpoint keeps serving.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Where the leader binds its endpoints (concrete endpoints: ports resolved at start).
#[derive(Debug, Clone)]
pub(crate) struct Binds {
    pub(crate) updates: String,
    pub(crate) snapshots: String,
}

struct Bound {
    updates: zmq::Socket,
    snapshots: zmq::Socket,
    feed: tokio::sync::broadcast::Receiver<DollyUpdate>,
}

fn bind(ctx: &zmq::Context, binds: &Binds, cluster: &ClusterNode) -> Result<Bound, zmq::Error> {
    // Subscribe before anything can be served, so every Put applied after a snapshot is
    // published.
    let feed = cluster.state.dolly_updates();
    let updates = ctx.socket(zmq::PUB)?;
    updates.set_linger(0)?;
    updates.set_sndhwm(UPDATES_HWM)?;
    updates.bind(&binds.updates)?;
    let snapshots = ctx.socket(zmq::ROUTER)?;
    snapshots.set_linger(0)?;
    snapshots.set_router_mandatory(true)?;
    snapshots.set_sndtimeo(SNAPSHOT_SEND_TIMEOUT_MS)?;
    snapshots.bind(&binds.snapshots)?;
    Ok(Bound {
        updates,
        snapshots,
        feed,
    })
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

/// Runs until `stop`: binds the endpoints while this node leads, publishes applied Puts and
/// serves snapshots.
pub(crate) fn run(
    ctx: zmq::Context,
    binds: Binds,
    cluster: ClusterNode,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) {
    let mut bound: Option<Bound> = None;
    let mut last_bind_error = Instant::now() - Duration::from_secs(60);
    while !stop.load(Ordering::Relaxed) {
        // Leader in openraft's own state, not only as the last known leader: a restarted
        // former leader may still name itself until it hears the current term.
        let leading = cluster.is_leader();
        match (bound.is_some(), leading) {
            (false, true) => match bind(&ctx, &binds, &cluster) {
                Ok(b) => {
                    info!(updates = %binds.updates, snapshots = %binds.snapshots,
                          "leading: bound dolly updates PUB and snapshots ROUTER");
                    bound = Some(b);
                }
                Err(e) => {
                    // The previous socket on the port may still be closing: retry.
                    if last_bind_error.elapsed() > Duration::from_secs(5) {
                        warn!(error = %e, updates = %binds.updates,
                              snapshots = %binds.snapshots, "cannot bind dolly leader endpoints");
                        last_bind_error = Instant::now();
                    }
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            },
            (true, false) => {
                bound = None;
                info!("no longer leading: released dolly updates and snapshots endpoints");
            }
            _ => {}
        }
        let Some(b) = bound.as_mut() else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        publish(b, &counters);
        match b.snapshots.poll(zmq::POLLIN, 5) {
            Ok(n) if n > 0 => {
                if let Ok(frames) = b.snapshots.recv_multipart(zmq::DONTWAIT) {
                    // Publish what was applied before the snapshot is read: the observer drops
                    // those as already included (§5.4 step 5).
                    publish(b, &counters);
                    serve_snapshot(b, frames, &cluster, &counters);
                }
            }
            Ok(_) => {}
            Err(e) => {
                warn!(error = %e, "dolly snapshots poll failed");
                bound = None;
            }
        }
    }
}
