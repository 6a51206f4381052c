//! The replica side of replication (issue #4): for every topic whose fragment 0 this node
//! replicates, FETCH from the leader's `replica.bind` with this log's durable end and newest
//! epoch; append what comes exactly where the leader had it (same offsets, same rotations),
//! fdatasync before the next FETCH reports the new durable end, copy the leader's epoch-history
//! entries, and follow its high-water mark. A `Diverging` answer cuts the log back first
//! (KIP-101), so a former leader drops the unacknowledged tail it wrote alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info};
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
    /// CURVE towards leaders' replication endpoints (issue #19): the cluster's key pair.
    pub(crate) curve: crate::context::CurveEndpoints,
}

/// One followed topic's link to its leader: a DEALER of its own (so answers need no topic) and
/// the fetch in flight, if any.
struct Link {
    leader: NodeId,
    endpoint: String,
    socket: zmq::Socket,
    /// The request in flight and when it was sent.
    in_flight: Option<(FetchRequest, Instant)>,
}

impl Follower {
    /// Keeps one fetch in flight per followed topic, all at once: a leader parks a caught-up
    /// fetch for up to 100 ms, so asking topic after topic would delay every other topic's
    /// copy (and its acks) by that much.
    pub(crate) fn run(self) {
        let mut links: HashMap<String, Link> = HashMap::new();
        while !self.stop.load(Ordering::Relaxed) {
            let followed = self.view.followed();
            // Drop links to topics no longer followed here, or whose leader changed.
            links.retain(|topic, link| {
                followed
                    .iter()
                    .any(|(t, f)| t == topic && f.leader == link.leader)
            });
            if followed.is_empty() {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            for (topic, frag) in &followed {
                if links.get(topic).is_some_and(|l| l.in_flight.is_some()) {
                    continue;
                }
                if let Err(e) = self.send_fetch(topic, frag.leader, &mut links) {
                    debug!(topic = %topic, leader = frag.leader, error = %e, "replica fetch not sent");
                    links.remove(topic);
                }
            }
            let topics: Vec<String> = links.keys().cloned().collect();
            let mut items: Vec<zmq::PollItem> = topics
                .iter()
                .filter_map(|t| links.get(t).map(|l| l.socket.as_poll_item(zmq::POLLIN)))
                .collect();
            if zmq::poll(&mut items, POLL_SLICE_MS).is_err() {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            let ready: Vec<bool> = items.iter().map(|i| i.is_readable()).collect();
            drop(items);
            for (topic, readable) in topics.iter().zip(ready) {
                let outcome = if readable {
                    self.receive(topic, &mut links)
                } else {
                    let late = links
                        .get(topic)
                        .and_then(|l| l.in_flight.as_ref())
                        .is_some_and(|(_, sent)| {
                            sent.elapsed() > Duration::from_millis(REPLY_TIMEOUT_MS as u64)
                        });
                    if late {
                        Err("no answer in time".to_owned())
                    } else {
                        Ok(())
                    }
                };
                if let Err(e) = outcome {
                    debug!(topic = %topic, error = %e, "replica fetch failed");
                    links.remove(topic);
                }
            }
        }
        debug!("replica fetcher stopped");
    }

    /// Sends the next FETCH for `topic` (connecting first if needed).
    fn send_fetch(
        &self,
        topic: &str,
        leader: NodeId,
        links: &mut HashMap<String, Link>,
    ) -> Result<(), String> {
        let endpoint = self
            .view
            .endpoints(leader)
            .map(|e| e.replica)
            .filter(|e| !e.is_empty())
            .ok_or_else(|| format!("no replication endpoint known for node {leader}"))?;
        if links
            .get(topic)
            .is_none_or(|l| l.endpoint != endpoint || l.leader != leader)
        {
            let socket = self.ctx.socket(zmq::DEALER).map_err(|e| e.to_string())?;
            socket.set_linger(0).map_err(|e| e.to_string())?;
            self.curve
                .connect_to_peer(crate::config::CurveEndpointName::Replication, &socket)
                .map_err(|e| e.to_string())?;
            socket.connect(&endpoint).map_err(|e| e.to_string())?;
            links.insert(
                topic.to_owned(),
                Link {
                    leader,
                    endpoint,
                    socket,
                    in_flight: None,
                },
            );
        }
        let link = links.get_mut(topic).ok_or("link vanished")?;
        let log = self
            .store
            .topic_or_create(topic)
            .map_err(|e| e.to_string())?;
        if log.high_water().map_err(|e| e.to_string())?.is_none() {
            log.set_high_water(Some(0)).map_err(|e| e.to_string())?;
        }
        if log.damage().map_err(|e| e.to_string())?.is_some() {
            // Issue #13: a damaged copy neither fetches nor reports a position until
            // repair.rs has cut it back. A fetch at its uncut end would count it as caught
            // up and bring it back into the ISR, from where it could lead with a log cut
            // below the high-water mark and make the healthy copies truncate.
            return Ok(());
        }
        let frag = self
            .view
            .fragment(topic)
            .ok_or_else(|| format!("{topic} is no longer placed"))?;
        let request = FetchRequest {
            topic: frag.topic.clone(),
            fragment: frag.id,
            replica: self.view.me(),
            offset: log.flushed_end().map_err(|e| e.to_string())?,
            last_epoch: log.last_epoch().map_err(|e| e.to_string())?,
            max_bytes: self.max_bytes,
            last_epoch_start: log
                .epochs()
                .map_err(|e| e.to_string())?
                .last()
                .map(|(_, start)| *start),
        };
        link.socket
            .send_multipart(request.to_frames(), zmq::DONTWAIT)
            .map_err(|e| e.to_string())?;
        link.in_flight = Some((request, Instant::now()));
        Ok(())
    }

    /// Takes `topic`'s answer and applies it.
    fn receive(&self, topic: &str, links: &mut HashMap<String, Link>) -> Result<(), String> {
        let link = links.get_mut(topic).ok_or("link vanished")?;
        let frames = link
            .socket
            .recv_multipart(zmq::DONTWAIT)
            .map_err(|e| e.to_string())?;
        let Some((request, _)) = link.in_flight.take() else {
            return Ok(()); // a stale answer
        };
        let reply = FetchReply::decode(&frames).map_err(|e| e.to_string())?;
        let log = self
            .store
            .topic_or_create(topic)
            .map_err(|e| e.to_string())?;
        apply(&log, &request, reply).map(|_| ())
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
            // Retried every 20 ms until the view names the new leader: not worth a warning
            // each time (a damaged leader answers this way for as long as it is damaged).
            debug!(topic = %log.name(), leader_epoch, "asked a node that does not lead");
            std::thread::sleep(Duration::from_millis(20));
            Ok(false)
        }
        FetchReply::BadRequest => Err("the leader refused the fetch".into()),
    }
}
