//! The leader side of replication (issue #4): the `replica.bind` ROUTER. Each FETCH reports a
//! replica's durable offset and asks for what follows; the leader answers from its log (written
//! bytes, flushed or not, so replicas write in parallel with its own fdatasync), parks a fetch
//! that is caught up for at most [`PARK`], and moves the high-water mark to the lowest durable
//! offset over the in-sync replicas (its own flushed offset included). When the mark moves the
//! writer is woken to send the acks it now allows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};
use zper_raft::NodeId;
use zper_store::{Store, StoreError, TopicLog};
use zper_wire::replication::{FetchReply, FetchRequest};

use super::high_water::{next_high_water, replica_limit, Progress};
use super::view::{FragmentView, PlacementView};
use super::Waker;
use crate::metrics::Counters;
use crate::sockets::try_send;

/// Longest a caught-up fetch waits for new data before an empty answer (which still carries
/// the high-water mark).
pub const PARK: Duration = Duration::from_millis(100);
/// Loop period while fetches are parked (the latency new data waits at most before it ships).
const TICK_MS: i64 = 1;

struct Parked {
    routing_id: Vec<u8>,
    request: FetchRequest,
    until: Instant,
}

pub(crate) struct Leader {
    pub(crate) router: zmq::Socket,
    pub(crate) store: Arc<Store>,
    pub(crate) view: PlacementView,
    pub(crate) waker: Waker,
    pub(crate) counters: Arc<Counters>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) max_bytes: u32,
    pub(crate) cluster: zper_raft::ClusterNode,
    pub(crate) runtime: tokio::runtime::Handle,
    /// `replica.lag_ms`: a replica not caught up for this long leaves the ISR.
    pub(crate) lag: Duration,
    /// `min_insync`: the mark moves only while at least this many replicas are in sync.
    pub(crate) min_insync: Option<u64>,
    /// `acks = leader`: the operator chose durability on the leader alone, so the mark
    /// follows the in-sync replicas whatever their number.
    pub(crate) acks_leader: bool,
    /// The node's memory budget (issue #13).
    pub(crate) memory: Arc<crate::memory::MemoryBudget>,
}

/// Most bytes of one replica fetch reply while the node is past its memory budget: replication
/// goes on, in small steps, rather than stopping.
pub(crate) const LEAN_FETCH_BYTES: u32 = 64 * 1024;
/// Fetches parked (caught-up replicas waiting for new data) at most; past it a fetch is
/// answered at once, empty, as when its wait ends.
const MAX_PARKED: usize = 4096;

/// How often the ISR of each led fragment is reviewed.
const ISR_REVIEW: Duration = Duration::from_millis(50);
/// How long a proposed ISR change is given to show up before it is proposed again.
const ISR_PENDING: Duration = Duration::from_secs(2);

/// The leader's bookkeeping for ISR changes (Kafka's `lastCaughtUpTime`).
#[derive(Default)]
struct IsrState {
    /// When each (topic, replica) last caught up: fetched at or past the leader's log end as it
    /// was at the replica's previous fetch.
    caught_up: HashMap<(String, NodeId), Instant>,
    /// The leader's log end at each (topic, replica)'s previous fetch.
    end_at_fetch: HashMap<(String, NodeId), u64>,
    /// Since when this node leads each topic, in which epoch.
    leading: HashMap<String, (u64, Instant)>,
    /// Proposed and not yet applied ISR changes.
    pending: HashMap<String, Instant>,
    /// Replicas proposed for an ISR and not yet shown by the view: the mark waits for them.
    expansions: super::isr::Expansions,
    last_review: Option<Instant>,
}

impl Leader {
    pub(crate) fn run(self) {
        let mut parked: Vec<Parked> = Vec::new();
        let mut progress: HashMap<String, Progress> = HashMap::new();
        let mut isr = IsrState::default();
        let mut repairs = super::repair::Repairs::default();
        while !self.stop.load(Ordering::Relaxed) {
            repairs.review(
                &self.store,
                &self.view,
                &self.cluster,
                &self.runtime,
                &self.counters,
            );
            let timeout = if parked.is_empty() { 20 } else { TICK_MS };
            match self.router.poll(zmq::POLLIN, timeout) {
                Ok(_) => {}
                Err(e) => {
                    warn!(error = %e, "replication poll failed");
                    break;
                }
            }
            for _ in 0..1024 {
                let frames = match self.router.recv_multipart(zmq::DONTWAIT) {
                    Ok(f) => f,
                    Err(zmq::Error::EAGAIN) => break,
                    Err(e) => {
                        warn!(error = %e, "replication receive failed");
                        break;
                    }
                };
                let Some((routing_id, rest)) = frames.split_first() else {
                    continue;
                };
                match FetchRequest::decode(rest) {
                    Ok(req) => {
                        if let Some(reply) = self.fetch(&req, &mut progress, &mut isr) {
                            self.send(routing_id, reply);
                        } else if parked.len() >= MAX_PARKED {
                            Counters::add(&self.counters.overloaded, 1);
                            let reply = self.answer(&req, true);
                            self.send(routing_id, reply);
                        } else {
                            parked.push(Parked {
                                routing_id: routing_id.clone(),
                                request: req,
                                until: Instant::now() + PARK,
                            });
                        }
                    }
                    Err(e) => {
                        debug!(error = %e, "bad replication request");
                        Counters::add(&self.counters.bad_requests, 1);
                        self.send(routing_id, FetchReply::BadRequest);
                    }
                }
            }
            self.advance_high_water(&progress, &mut isr.expansions);
            self.review_isr(&progress, &mut isr);
            let now = Instant::now();
            let mut still = Vec::with_capacity(parked.len());
            for p in parked.drain(..) {
                let has_data = self
                    .store
                    .topic(&zper_store::log_key(&p.request.topic, p.request.fragment))
                    .and_then(|l| l.written_end().ok())
                    .is_some_and(|end| end > p.request.offset);
                if has_data || now >= p.until {
                    let reply = self.answer(&p.request, true);
                    self.send(&p.routing_id, reply);
                } else {
                    still.push(p);
                }
            }
            parked = still;
        }
        debug!("replication leader stopped");
    }

    fn send(&self, routing_id: &[u8], reply: FetchReply) {
        let mut frames = vec![routing_id.to_vec()];
        frames.extend(reply.to_frames());
        if !try_send(&self.router, frames) {
            Counters::add(&self.counters.replies_dropped, 1);
        }
    }

    /// Records the fetch as progress and answers it, or `None` to park it (caught up).
    fn fetch(
        &self,
        req: &FetchRequest,
        progress: &mut HashMap<String, Progress>,
        isr: &mut IsrState,
    ) -> Option<FetchReply> {
        let log_key = zper_store::log_key(&req.topic, req.fragment);
        let Some(frag) = self.view.fragment(&log_key) else {
            return Some(FetchReply::BadRequest);
        };
        if !frag.replicas.contains(&req.replica) {
            return Some(FetchReply::BadRequest);
        }
        if frag.leader != self.view.me() || !self.view.lease_current() {
            return Some(FetchReply::NotLeader {
                leader_epoch: frag.epoch,
            });
        }
        let log = match self.led_log(&log_key, &frag) {
            Ok(l) => l,
            Err(e) => {
                warn!(topic = %req.topic, error = %e, "replication: cannot open log");
                return Some(FetchReply::BadRequest);
            }
        };
        if let Some(damage) = log.damage().ok().flatten() {
            // A damaged copy must not make anyone truncate to it nor ship damaged bytes
            // (issue #13): it hands the lead over (repair.rs) and answers as a node that does
            // not lead meanwhile. A replica that already holds everything up to the end of
            // the fenced ranges is served the rest (the log was not cut, so its end is
            // genuine): that is how another copy gets in sync when the damaged one is the
            // only in-sync replica, so the lead can move and the damaged copy repair from it.
            let fenced_end = log
                .damaged_ranges()
                .ok()
                .and_then(|r| r.last().map(|&(_, end)| end));
            let servable = !damage.cut && fenced_end.is_some_and(|end| req.offset >= end);
            if !servable {
                return Some(FetchReply::NotLeader {
                    leader_epoch: frag.epoch,
                });
            }
        }
        // KIP-101 / KIP-279: a replica whose log runs past what this history allows must cut
        // back.
        let written = log.written_end().unwrap_or(0);
        let limit = replica_limit(
            &log.epochs().unwrap_or_default(),
            written,
            req.last_epoch,
            req.last_epoch_start,
        );
        if req.offset > limit {
            info!(topic = %req.topic, replica = req.replica, from = req.offset, to = limit,
                  "replica diverged: truncate");
            return Some(FetchReply::Diverging { truncate_to: limit });
        }
        progress
            .entry(log_key.clone())
            .or_default()
            .of_epoch(frag.epoch)
            .insert(req.replica, req.offset);
        self.counters
            .replica_lag
            .record(&log_key, req.replica, req.offset);
        let key = (log_key, req.replica);
        if req.offset == written
            || isr
                .end_at_fetch
                .get(&key)
                .is_some_and(|end| req.offset >= *end)
        {
            isr.caught_up.insert(key.clone(), Instant::now());
        }
        isr.end_at_fetch.insert(key, written);
        if req.offset == written {
            return None;
        }
        Some(self.answer(req, false))
    }

    /// Shrinks the ISR of led fragments by replicas not caught up for `lag`, and grows it by
    /// replicas that caught up (durable at or past the high-water mark and fetching from the
    /// log end), through a Raft `SetIsr` in the current epoch.
    fn review_isr(&self, progress: &HashMap<String, Progress>, st: &mut IsrState) {
        let now = Instant::now();
        if st.last_review.is_some_and(|t| now - t < ISR_REVIEW) {
            return;
        }
        st.last_review = Some(now);
        for (topic, frag) in self.view.led() {
            let since = match st.leading.get(&topic) {
                Some((epoch, since)) if *epoch == frag.epoch => *since,
                _ => {
                    // A new epoch here: catch-ups seen while leading an earlier one say
                    // nothing about the replicas' logs now.
                    st.caught_up.retain(|(t, _), _| t != &topic);
                    st.end_at_fetch.retain(|(t, _), _| t != &topic);
                    st.leading.insert(topic.clone(), (frag.epoch, now));
                    now
                }
            };
            if st
                .pending
                .get(&topic)
                .is_some_and(|t| now - *t < ISR_PENDING)
            {
                continue;
            }
            let Some(log) = self.store.topic(&topic) else {
                continue;
            };
            let hw = log.high_water().ok().flatten().unwrap_or(0);
            let me = self.view.me();
            let recent = |r: NodeId| {
                let last = st
                    .caught_up
                    .get(&(topic.clone(), r))
                    .copied()
                    .unwrap_or(since)
                    .max(since);
                now - last <= self.lag
            };
            let mut next: Vec<NodeId> = frag
                .isr
                .iter()
                .copied()
                .filter(|r| *r == me || recent(*r))
                .collect();
            for r in &frag.replicas {
                let durable = progress
                    .get(&topic)
                    .and_then(|p| p.durable_in(frag.epoch, *r));
                let caught_up = st.caught_up.contains_key(&(topic.clone(), *r));
                if !next.contains(r) && caught_up && recent(*r) && durable.is_some_and(|d| d >= hw)
                {
                    next.push(*r);
                }
            }
            let mut a = next.clone();
            let mut b = frag.isr.clone();
            a.sort_unstable();
            b.sort_unstable();
            if a == b {
                st.pending.remove(&topic);
                continue;
            }
            info!(topic = %topic, from = ?frag.isr, to = ?next, "proposing ISR change");
            st.pending.insert(topic.clone(), now);
            // From now on the mark also waits for the replicas being added: Raft may apply
            // the change (and elect one of them) before this node's view shows it.
            let slot = st.expansions.proposed(&topic, frag.epoch, &frag.isr, &next);
            let node = self.cluster.clone();
            let command = zper_raft::metadata::Command::SetIsr {
                topic: frag.topic.clone(),
                fragment: frag.id,
                leader_epoch: frag.epoch,
                isr: next,
            };
            self.runtime.spawn(async move {
                use super::isr::{report, Outcome};
                match node.propose(command).await {
                    Ok(Ok(_)) => report(&slot, Outcome::Committed),
                    Ok(Err(e)) => {
                        debug!(error = %e, "ISR change refused");
                        report(&slot, Outcome::Refused);
                    }
                    Err(e) => {
                        debug!(error = %e, "ISR change not committed");
                        report(&slot, Outcome::Unknown);
                    }
                }
            });
        }
    }

    /// The log of a topic this node leads, with its epoch recorded (before any append in it).
    fn led_log(&self, topic: &str, frag: &FragmentView) -> Result<Arc<TopicLog>, StoreError> {
        let log = self.store.topic_or_create(topic)?;
        super::claim_epoch(&log, frag.epoch)?;
        if log.high_water()?.is_none() {
            // Readers of a replicated log see nothing unconfirmed: start from 0 until every
            // in-sync replica has reported.
            log.set_high_water(Some(0))?;
        }
        Ok(log)
    }

    fn answer(&self, req: &FetchRequest, parked: bool) -> FetchReply {
        let log_key = zper_store::log_key(&req.topic, req.fragment);
        let Some(frag) = self.view.fragment(&log_key) else {
            return FetchReply::BadRequest;
        };
        if frag.leader != self.view.me() {
            return FetchReply::NotLeader {
                leader_epoch: frag.epoch,
            };
        }
        let Some(log) = self.store.topic(&log_key) else {
            return FetchReply::BadRequest;
        };
        let high_water = log.high_water().ok().flatten().unwrap_or(0);
        let mut max = req.max_bytes.min(self.max_bytes).max(1);
        if !self.memory.allows(u64::from(max)) {
            Counters::add(&self.counters.overloaded, 1);
            max = max.min(LEAN_FETCH_BYTES);
        }
        match log.read_for_replica(req.offset, u64::from(max)) {
            Ok(chunk) => {
                let end = chunk.offset + chunk.bytes.len() as u64;
                let epochs = log
                    .epochs()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(_, s)| *s >= chunk.offset && *s <= end)
                    .collect();
                FetchReply::Ok {
                    leader_epoch: frag.epoch,
                    high_water,
                    offset: chunk.offset,
                    rotate_after: chunk.rotate_after,
                    epochs,
                    bytes: chunk.bytes,
                }
            }
            Err(StoreError::Corrupt { .. }) => {
                // Never ship damaged bytes, nor a truncation point derived from them.
                FetchReply::NotLeader {
                    leader_epoch: frag.epoch,
                }
            }
            Err(e) => {
                if !parked {
                    debug!(topic = %req.topic, error = %e, "replica fetch refused");
                }
                FetchReply::Diverging {
                    truncate_to: log.written_end().unwrap_or(0).min(high_water),
                }
            }
        }
    }

    /// Moves each led topic's high-water mark to the lowest durable offset over its in-sync
    /// replicas (this node's flushed offset for itself), counting replicas proposed for the
    /// ISR that the view does not show yet ([`super::isr`]); never backwards within an epoch.
    ///
    /// The mark stands still while fewer than `min_insync` replicas are in sync (issue #13):
    /// what only the leader holds could vanish with it, so readers must not see it and no
    /// producer may be told it is safe. The writer answers such producers with status 103.
    fn advance_high_water(
        &self,
        progress: &HashMap<String, Progress>,
        expansions: &mut super::isr::Expansions,
    ) {
        let now = Instant::now();
        for (topic, frag) in self.view.led() {
            let Ok(log) = self.led_log(&topic, &frag) else {
                continue;
            };
            let needed = if self.acks_leader {
                1
            } else {
                super::min_insync(self.min_insync, frag.replicas.len())
            };
            let own = log.flushed_end().unwrap_or(0);
            let p = progress.get(&topic);
            let durable = |r: NodeId| {
                if r == self.view.me() {
                    Some(own)
                } else {
                    p.and_then(|p| p.durable_in(frag.epoch, r))
                }
            };
            let current = log.high_water().ok().flatten();
            let counted = expansions.counted(&topic, frag.epoch, &frag.isr, now);
            if frag.isr.len() < needed {
                // Replicas still being added do not count towards `min_insync`.
                continue;
            }
            if let Some(next) = next_high_water(&counted, durable, needed, current) {
                if log.set_high_water(Some(next)).is_ok() {
                    self.waker.wake(&topic);
                }
            } else if counted.len() > frag.isr.len()
                && next_high_water(&frag.isr, durable, needed, current).is_some()
                && expansions.report_hold(&topic, now)
            {
                let adding: Vec<(NodeId, Option<u64>)> = counted
                    .iter()
                    .filter(|r| !frag.isr.contains(r))
                    .map(|r| (*r, durable(*r)))
                    .collect();
                info!(topic = %topic, epoch = frag.epoch, isr = ?frag.isr, ?adding, mark = ?current,
                      "high-water mark waits for replicas being added to the ISR");
            }
        }
    }
}
