//! Replication of topic fragments between nodes (issue #4): the placement the Raft metadata
//! assigns ([`view`]), the leader's replication endpoint ([`leader`]) and the replica's fetcher
//! ([`follower`]). Message data never goes through Raft; each fragment is one byte-identical log
//! on its leader and replicas, and acks and readers stop at the high-water mark.

pub mod follower;
pub(crate) mod high_water;
pub(crate) mod isr;
pub mod leader;
pub(crate) mod repair;
pub mod view;

use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use zper_store::{StoreError, TopicLog};
use zper_wire::topic_hash;

use crate::context::NodeContext;
use crate::error::NodeError;
pub use view::{PlacementView, Role};

/// The fragment a producer's messages go to, stable per producer identity (issue #4): FNV-1a of
/// the identity's bytes after the topic (its uuid) modulo the topic's fragment count.
pub fn fragment_for(uuid: &[u8], fragments: u32) -> u32 {
    if fragments <= 1 {
        return 0;
    }
    let mut h = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut h, uuid);
    (std::hash::Hasher::finish(&h) % u64::from(fragments)) as u32
}

/// The topic of a store key (`<topic>.<k>` or the topic itself).
pub fn topic_of_key(key: &str) -> &str {
    key.split_once('.').map_or(key, |(t, _)| t)
}

/// Largest chunk a replica asks for, bytes.
pub const FETCH_MAX_BYTES: u32 = 1 << 20;

/// Wakes the writer worker of a topic (the same worker the front routes it to) so it sends the
/// acks a moved high-water mark allows.
#[derive(Clone, Default)]
pub struct Waker {
    workers: Vec<Sender<()>>,
}

impl Waker {
    /// A waker over the writer workers' wake channels, in worker order.
    pub fn new(workers: Vec<Sender<()>>) -> Self {
        Waker { workers }
    }

    /// Wakes the worker of the topic stored under `key` (never blocks: a worker that already has a wake-up pending
    /// needs no second one).
    pub fn wake(&self, key: &str) {
        if self.workers.is_empty() {
            return;
        }
        // The writer front routes every fragment of a topic to the topic's worker.
        let i = usize::from(topic_hash(topic_of_key(key))) % self.workers.len();
        let _ = self.workers[i].try_send(());
    }
}

/// Records `epoch` in `log`'s epoch history at its written end if it is new: called before
/// this node appends (or serves replicas) as leader in that epoch (KIP-101).
///
/// Errors: I/O writing the history.
pub fn claim_epoch(log: &TopicLog, epoch: u64) -> Result<(), StoreError> {
    if log.last_epoch()?.is_some_and(|e| e >= epoch) {
        return Ok(());
    }
    log.assign_epoch(epoch, log.written_end()?)
}

/// The fewest in-sync replicas a write that needs an ack requires: `configured` capped at the
/// replica count, or by default 2 with 3 or more replicas, else 1 (issue #4).
pub fn min_insync(configured: Option<u64>, replicas: usize) -> usize {
    match configured {
        Some(m) => (m as usize).clamp(1, replicas.max(1)),
        None if replicas >= 3 => 2,
        None => 1,
    }
}

/// Replica fetch replies libzmq queues per replica connection before dropping (and counting)
/// further ones: a follower has one fetch in flight per topic it follows.
pub const REPLICA_REPLY_HWM: i32 = 64;

/// Creates and binds the replication ROUTER (`replication.bind`, default 5560).
///
/// Errors: [`NodeError::Bind`] (address in use, bad endpoint), or a zmq option refused.
pub(crate) fn bind(
    zmq: &zmq::Context,
    config: &crate::config::NodeConfig,
    curve: &crate::context::CurveEndpoints,
) -> Result<zmq::Socket, NodeError> {
    crate::context::bind(zmq, zmq::ROUTER, &config.replica_bind, |rep| {
        curve.serve(crate::config::CurveEndpointName::Replication, rep)?;
        rep.set_router_mandatory(true)?;
        // Replica fetch replies (up to 1 MiB each) queued for a peer that does not read them.
        rep.set_sndhwm(REPLICA_REPLY_HWM)
    })
}

/// Starts the replication endpoint (the leader side, serving followers' fetches over the bound
/// ROUTER) and the fetcher thread (the follower side); `waker` wakes a topic's writer worker
/// when its high-water mark moves. Both end at shutdown.
///
/// Errors: a thread could not be spawned.
pub(crate) fn spawn(
    router: zmq::Socket,
    waker: Waker,
    nc: &NodeContext,
) -> Result<Vec<JoinHandle<()>>, NodeError> {
    let leader = leader::Leader {
        router,
        store: nc.store.clone(),
        view: nc.view.clone(),
        waker,
        counters: nc.counters.clone(),
        stop: nc.stop(),
        max_bytes: FETCH_MAX_BYTES,
        cluster: nc.cluster.clone(),
        runtime: nc.runtime.clone(),
        lag: nc.config.replica_lag,
        min_insync: nc.config.min_insync,
        acks_leader: nc.config.acks_leader,
        memory: nc.memory.clone(),
    };
    let follower = follower::Follower {
        ctx: nc.zmq.clone(),
        store: nc.store.clone(),
        view: nc.view.clone(),
        stop: nc.stop(),
        max_bytes: FETCH_MAX_BYTES,
        curve: nc.curve.clone(),
    };
    Ok(vec![
        crate::context::spawn("zper-replica-leader", move || leader.run())?,
        crate::context::spawn("zper-replica-fetch", move || follower.run())?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragment_routing_is_fnv1a_of_the_uuid_and_stays_put() {
        // FNV-1a 64 of bytes 0..16 is 0x7c84dc9477851775: fragment choice must never change
        // across versions, or a producer's messages would change fragment (and order).
        let uuid: Vec<u8> = (0u8..16).collect();
        assert_eq!(fragment_for(&uuid, 3), 2);
        assert_eq!(fragment_for(&uuid, 7), 0);
        assert_eq!(fragment_for(&uuid, 1), 0);
        assert_eq!(fragment_for(&[], 5), 2, "offset basis mod 5");
        for f in 1..=16 {
            assert!(fragment_for(&uuid, f) < f);
        }
    }

    #[test]
    fn min_insync_defaults_to_two_with_three_replicas_and_is_capped() {
        assert_eq!(min_insync(None, 1), 1);
        assert_eq!(min_insync(None, 2), 1);
        assert_eq!(min_insync(None, 3), 2);
        assert_eq!(min_insync(None, 5), 2);
        assert_eq!(min_insync(Some(3), 2), 2, "never more than the replicas");
        assert_eq!(min_insync(Some(0), 3), 1, "at least the leader");
        assert_eq!(min_insync(Some(3), 3), 3);
    }

    #[test]
    fn a_wake_up_reaches_the_topics_worker_and_never_blocks() {
        let (tx0, rx0) = crossbeam_channel::bounded(1);
        let (tx1, rx1) = crossbeam_channel::bounded(1);
        let waker = Waker::new(vec![tx0, tx1]);
        let i = usize::from(topic_hash("orders")) % 2;
        for _ in 0..3 {
            waker.wake("orders"); // the second and third find the channel full: no block
        }
        let (mine, other) = if i == 0 { (&rx0, &rx1) } else { (&rx1, &rx0) };
        assert!(mine.try_recv().is_ok());
        assert!(mine.try_recv().is_err());
        assert!(other.try_recv().is_err());
        Waker::default().wake("orders"); // no workers: nothing to do
    }
}
