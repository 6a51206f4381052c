//! The produce path: the writer endpoint (`writer.bind`, default 5555; spec `zper.md` §4, fixed
//! as issue #2 asks).
//!
//! The front thread owns the ROUTER. It parses each producer's identity once (§3), routes every
//! message of a topic to one worker (hash of the topic computed by the server, modulo
//! `writer.workers`), and encodes the frames into stored records (§6.2: short form for 0..=255
//! bytes, long form above, exactly what the original's decoder mode stores for ZMTP senders).
//! An empty first frame followed by more frames is a REQ envelope: it is not stored (as the
//! original's single mode, §4.2) and is echoed in mode-2 replies.
//!
//! Workers append, flush on the [`zper_store::FlushPolicy`] (count, timer, or at once when a
//! producer waits: group commit), then queue acks back to the front over an inproc socket:
//! mode 1 one single-frame ack per connection per flush carrying the newest covered message id,
//! mode 2 `[empty][message id]` per message (§4.5). Undeliverable acks are dropped and counted.
//!
//! Modules: [`front`] (the ROUTER thread: identities, routing, encoding into batches),
//! [`worker`] (append, flush, topic creation, forwarding), [`acks`] (the pure ack book: which
//! replies are due given durable offsets, leadership and `min_insync`).

mod acks;
pub mod create;
pub mod forward;
mod front;
mod worker;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use zper_store::{FlushPolicy, Store};
use zper_wire::AckMode;

use crate::control::ack::FlushNotice;
use crate::metrics::Counters;
use crate::replication::{PlacementView, Waker};
use front::Front;
use worker::Worker;

/// A producer connection, known by its routing id (its ZPER identity).
#[derive(Debug)]
pub(crate) struct Producer {
    pub(crate) routing_id: Vec<u8>,
    pub(crate) topic: Arc<str>,
    pub(crate) mode: AckMode,
    pub(crate) worker: usize,
}

/// A run of consecutive messages of one producer inside a batch.
#[derive(Debug)]
pub(crate) struct Append {
    pub(crate) producer: Arc<Producer>,
    /// End of this run in `WriteBatch::bytes`.
    pub(crate) bytes_end: usize,
    pub(crate) messages: u64,
    /// First frame of the newest message of the run.
    pub(crate) last_id: Vec<u8>,
}

/// Records for one worker, in arrival order.
#[derive(Debug, Default)]
pub(crate) struct WriteBatch {
    pub(crate) bytes: Vec<u8>,
    pub(crate) appends: Vec<Append>,
}

/// Batches are handed to a worker once they reach this size, bytes.
pub(crate) const BATCH_BYTES: usize = 256 * 1024;
/// Messages read from the ROUTER per wake before batches are handed over.
pub(crate) const DRAIN_MESSAGES: usize = 8192;
/// Producer identities cached at most (the cache is cleared past this).
pub(crate) const MAX_PRODUCERS: usize = 100_000;

/// Started writer endpoint threads.
pub(crate) struct Writer {
    pub(crate) front: JoinHandle<()>,
    /// Wakes a topic's worker when replication moves its high-water mark.
    pub(crate) waker: Waker,
}

/// Settings the writer needs.
pub(crate) struct WriterSettings {
    pub(crate) workers: usize,
    pub(crate) max_message: usize,
    /// `allow_empty_message`: when false, messages whose last frame is empty are dropped, since
    /// recovery would cut the log at them (spec §6.3).
    pub(crate) allow_empty_message: bool,
    pub(crate) policy: FlushPolicy,
    /// Who leads each topic (issue #4); `None`: every topic is local.
    pub(crate) view: Option<PlacementView>,
    /// `min_insync` (issue #4).
    pub(crate) min_insync: Option<u64>,
    /// Creates unknown topics through Raft on their first write (issue #4).
    pub(crate) creator: Option<create::TopicCreator>,
    /// `acks = leader`: ack at the leader's flush, not the high-water mark.
    pub(crate) acks_leader: bool,
}

/// Starts the front thread and `workers` worker threads over a bound ROUTER.
pub(crate) fn start(
    ctx: &zmq::Context,
    router: zmq::Socket,
    settings: WriterSettings,
    store: Arc<Store>,
    notices: Sender<FlushNotice>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> Result<Writer, zmq::Error> {
    let view = settings.view.clone();
    // One ack push per worker, plus one for the forwarder (issue #4).
    let (acks, mut pushes) =
        crate::endpoint::worker_replies(ctx, "writer-acks", settings.workers + 1)?;
    let forward_acks = pushes.pop();
    let mut forwarder_thread = None;
    let forward = match (&settings.view, forward_acks) {
        (Some(view), Some(push)) => {
            let (tx, rx) = crossbeam_channel::bounded(1024);
            let f = forward::Forwarder {
                ctx: ctx.clone(),
                view: view.clone(),
                jobs: rx,
                acks: push,
                counters: counters.clone(),
                stop: stop.clone(),
            };
            forwarder_thread = Some(
                std::thread::Builder::new()
                    .name("zper-forward".into())
                    .spawn(move || f.run())
                    .map_err(|_| zmq::Error::EMFILE)?,
            );
            Some(tx)
        }
        _ => None,
    };
    let mut senders = Vec::with_capacity(settings.workers);
    let mut workers = Vec::with_capacity(settings.workers);
    let mut wakers = Vec::with_capacity(settings.workers);
    for (i, push) in pushes.into_iter().enumerate() {
        let (tx, rx) = crossbeam_channel::bounded(16);
        let (wake_tx, wake) = crossbeam_channel::bounded(1);
        wakers.push(wake_tx);
        let worker = Worker {
            rx,
            wake,
            view: view.clone(),
            min_insync: settings.min_insync,
            creator: settings.creator.clone(),
            create_failed: HashMap::new(),
            forward: forward.clone(),
            acks_leader: settings.acks_leader,
            acks: push,
            notices: notices.clone(),
            store: store.clone(),
            policy: settings.policy,
            topics: HashMap::new(),
            counters: counters.clone(),
        };
        workers.push(
            std::thread::Builder::new()
                .name(format!("zper-writer-{i}"))
                .spawn(move || worker.run())
                .map_err(|_| zmq::Error::EMFILE)?,
        );
        senders.push(tx);
    }
    let front = Front {
        router,
        acks,
        senders,
        producers: HashMap::new(),
        max_message: settings.max_message,
        allow_empty_message: settings.allow_empty_message,
        counters,
        stop,
    };
    let mut workers = workers;
    workers.extend(forwarder_thread);
    let front = std::thread::Builder::new()
        .name("zper-writer".into())
        .spawn(move || front.run(workers))
        .map_err(|_| zmq::Error::EMFILE)?;
    Ok(Writer {
        front,
        waker: Waker::new(wakers),
    })
}
