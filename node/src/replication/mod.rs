//! Replication of topic fragments between nodes (issue #4): the placement the Raft metadata
//! assigns ([`view`]), the leader's replication endpoint ([`leader`]) and the replica's fetcher
//! ([`follower`]). Message data never goes through Raft; each fragment is one byte-identical log
//! on its leader and replicas, and acks and readers stop at the high-water mark.

pub mod follower;
pub mod leader;
pub mod view;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use zper_store::{Store, StoreError, TopicLog};
use zper_wire::topic_hash;

use crate::metrics::Counters;
pub use view::{PlacementView, Role};

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

    /// Wakes `topic`'s worker (never blocks: a worker that already has a wake-up pending
    /// needs no second one).
    pub fn wake(&self, topic: &str) {
        if self.workers.is_empty() {
            return;
        }
        let i = usize::from(topic_hash(topic)) % self.workers.len();
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

/// What the replication threads share with the rest of the node.
pub(crate) struct Context {
    pub(crate) store: Arc<Store>,
    pub(crate) view: PlacementView,
    pub(crate) waker: Waker,
    pub(crate) counters: Arc<Counters>,
    pub(crate) stop: Arc<AtomicBool>,
    /// To propose ISR changes.
    pub(crate) cluster: zper_raft::ClusterNode,
    pub(crate) runtime: tokio::runtime::Handle,
    /// `replica.lag_ms`.
    pub(crate) lag: std::time::Duration,
}

/// Starts the replication endpoint and the fetcher threads.
///
/// Errors: a thread could not be spawned.
pub(crate) fn start(
    ctx: &zmq::Context,
    router: zmq::Socket,
    shared: Context,
) -> Result<Vec<JoinHandle<()>>, zmq::Error> {
    let Context {
        store,
        view,
        waker,
        counters,
        stop,
        cluster,
        runtime,
        lag,
    } = shared;
    let leader = leader::Leader {
        router,
        store: store.clone(),
        view: view.clone(),
        waker,
        counters,
        stop: stop.clone(),
        max_bytes: FETCH_MAX_BYTES,
        cluster,
        runtime,
        lag,
    };
    let follower = follower::Follower {
        ctx: ctx.clone(),
        store,
        view,
        stop,
        max_bytes: FETCH_MAX_BYTES,
    };
    Ok(vec![
        std::thread::Builder::new()
            .name("zper-replica-leader".into())
            .spawn(move || leader.run())
            .map_err(|_| zmq::Error::EMFILE)?,
        std::thread::Builder::new()
            .name("zper-replica-fetch".into())
            .spawn(move || follower.run())
            .map_err(|_| zmq::Error::EMFILE)?,
    ])
}
