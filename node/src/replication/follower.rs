//! The replica side of replication (issue #4): for every topic whose fragment 0 this node
//! replicates, FETCH from the leader's `replica.bind` with this log's durable end and newest
//! epoch; append what comes exactly where the leader had it (same offsets, same rotations),
//! fdatasync before the next FETCH reports the new durable end, copy the leader's epoch-history
//! entries, and follow its high-water mark. A `Diverging` answer cuts the log back first
//! (KIP-101), so a former leader drops the unacknowledged tail it wrote alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};
use zper_raft::NodeId;
use zper_store::{Store, TopicLog};
use zper_wire::replication::{FetchReply, FetchRequest};

use super::view::PlacementView;

/// Longest wait for a leader's answer (it parks a caught-up fetch for 100 ms).
pub const REPLY_TIMEOUT_MS: i64 = 1000;
/// Slice of that wait after which the placement is checked again.
const POLL_SLICE_MS: i64 = 20;

pub(crate) struct Follower {
    pub(crate) ctx: zmq::Context,
    pub(crate) store: Arc<Store>,
    pub(crate) view: PlacementView,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) max_bytes: u32,
}

/// A DEALER to one leader's replication endpoint.
struct Connection {
    endpoint: String,
    socket: zmq::Socket,
}

impl Follower {
    pub(crate) fn run(self) {
        let mut connections: HashMap<NodeId, Connection> = HashMap::new();
        while !self.stop.load(Ordering::Relaxed) {
            let followed = self.view.followed();
            if followed.is_empty() {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            for (topic, frag) in followed {
                match self.fetch_once(&topic, frag.leader, &mut connections) {
                    Ok(_) => {}
                    Err(e) => {
                        debug!(topic = %topic, leader = frag.leader, error = %e, "replica fetch failed");
                        connections.remove(&frag.leader);
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
        debug!("replica fetcher stopped");
    }

    /// One FETCH for `topic` from `leader`; true when bytes were appended or truncated.
    fn fetch_once(
        &self,
        topic: &str,
        leader: NodeId,
        connections: &mut HashMap<NodeId, Connection>,
    ) -> Result<bool, String> {
        let endpoint = self
            .view
            .endpoints(leader)
            .map(|e| e.replica)
            .filter(|e| !e.is_empty())
            .ok_or_else(|| format!("no replication endpoint known for node {leader}"))?;
        if connections
            .get(&leader)
            .is_none_or(|c| c.endpoint != endpoint)
        {
            let socket = self.ctx.socket(zmq::DEALER).map_err(|e| e.to_string())?;
            socket.set_linger(0).map_err(|e| e.to_string())?;
            socket.connect(&endpoint).map_err(|e| e.to_string())?;
            connections.insert(leader, Connection { endpoint, socket });
        }
        let conn = connections
            .get(&leader)
            .ok_or_else(|| "connection vanished".to_owned())?;
        let log = self
            .store
            .topic_or_create(topic)
            .map_err(|e| e.to_string())?;
        if log.high_water().map_err(|e| e.to_string())?.is_none() {
            log.set_high_water(Some(0)).map_err(|e| e.to_string())?;
        }
        let request = FetchRequest {
            topic: topic.to_owned(),
            fragment: 0,
            replica: self.view.me(),
            offset: log.flushed_end().map_err(|e| e.to_string())?,
            last_epoch: log.last_epoch().map_err(|e| e.to_string())?,
            max_bytes: self.max_bytes,
        };
        conn.socket
            .send_multipart(request.to_frames(), 0)
            .map_err(|e| e.to_string())?;
        // Wait in slices, giving up early when the metadata names another leader (the one
        // asked may be dead: a failover must not wait out the whole timeout).
        let mut waited = 0;
        loop {
            if conn
                .socket
                .poll(zmq::POLLIN, POLL_SLICE_MS)
                .map_err(|e| e.to_string())?
                > 0
            {
                break;
            }
            waited += POLL_SLICE_MS;
            let moved = self.view.fragment(topic).is_none_or(|f| f.leader != leader);
            if moved || waited >= REPLY_TIMEOUT_MS || self.stop.load(Ordering::Relaxed) {
                return Err(format!("no answer from node {leader} at {}", conn.endpoint));
            }
        }
        let frames = conn.socket.recv_multipart(0).map_err(|e| e.to_string())?;
        let reply = FetchReply::decode(&frames).map_err(|e| e.to_string())?;
        apply(&log, &request, reply)
    }
}

/// Applies a leader's answer to the local log; true when the log changed.
fn apply(log: &TopicLog, request: &FetchRequest, reply: FetchReply) -> Result<bool, String> {
    match reply {
        FetchReply::Ok {
            high_water,
            offset,
            rotate_after,
            epochs,
            bytes,
            ..
        } => {
            let changed = !bytes.is_empty() || rotate_after;
            if offset != request.offset {
                return Err(format!("answer at {offset}, asked {}", request.offset));
            }
            if changed {
                for (epoch, start) in epochs.iter().filter(|(_, s)| *s <= offset) {
                    log.assign_epoch(*epoch, *start)
                        .map_err(|e| e.to_string())?;
                }
                log.append_replica(offset, &bytes, rotate_after)
                    .map_err(|e| e.to_string())?;
                for (epoch, start) in epochs.iter().filter(|(_, s)| *s > offset) {
                    log.assign_epoch(*epoch, *start)
                        .map_err(|e| e.to_string())?;
                }
                // Durable before the next FETCH reports it.
                log.flush().map_err(|e| e.to_string())?;
            } else {
                for (epoch, start) in &epochs {
                    log.assign_epoch(*epoch, *start)
                        .map_err(|e| e.to_string())?;
                }
            }
            let durable = log.flushed_end().map_err(|e| e.to_string())?;
            let current = log.high_water().map_err(|e| e.to_string())?.unwrap_or(0);
            let hw = high_water.min(durable);
            if hw > current {
                log.set_high_water(Some(hw)).map_err(|e| e.to_string())?;
            }
            Ok(changed)
        }
        FetchReply::Diverging { truncate_to } => {
            let end = log.written_end().map_err(|e| e.to_string())?;
            let to = truncate_to.min(end);
            info!(topic = %log.name(), from = end, to, "truncating to the leader's history");
            log.truncate_to(to).map_err(|e| e.to_string())?;
            Ok(true)
        }
        FetchReply::NotLeader { leader_epoch } => {
            warn!(topic = %log.name(), leader_epoch, "asked a node that does not lead");
            std::thread::sleep(Duration::from_millis(20));
            Ok(false)
        }
        FetchReply::BadRequest => Err("the leader refused the fetch".into()),
    }
}
