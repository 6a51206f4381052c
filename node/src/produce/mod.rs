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
//! replies are due given durable offsets, leadership and `min_insync`), [`engine`] (the same
//! front on zper's own ZMTP engine) and [`credit`] (its bound on unanswered mode-2 messages).

mod acks;
pub mod create;
mod credit;
mod dedupe;
pub(crate) mod engine;
pub mod forward;
mod front;
mod idempotent;
mod refuse;
mod worker;

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use zper_wire::AckMode;

use crate::config::{NodeConfig, WriterEngine};
use crate::context::{spawn as spawn_thread, NodeContext};
use crate::control::ack::FlushNotice;
use crate::error::NodeError;
use crate::replication::Waker;
use create::{CreateTopics, ParkingLot};
use front::Front;
pub(crate) use idempotent::produced;
use worker::Worker;

/// A producer connection, known by its routing id (its ZPER identity).
#[derive(Debug)]
pub(crate) struct Producer {
    pub(crate) routing_id: Vec<u8>,
    pub(crate) topic: Arc<str>,
    pub(crate) mode: AckMode,
    /// Mode byte 0x41 or 0x42 (issue #18): every message id is `[producer id:16][sequence:8]`
    /// and the fragment leader stores each (producer, sequence) once.
    pub(crate) idempotent: bool,
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
    /// The runs; the newest run's `last_id` is filled in by [`WriteBatch::take`] (or when a
    /// later run starts) while `newest_id` holds it.
    pub(crate) appends: Vec<Append>,
    /// Where the newest run's newest message id is in `bytes`, not yet copied into its
    /// `last_id`: a run of mode-0/1 messages copies only its last id, not every message's
    /// (each copy was another memmove of the whole first frame per message on the writer's
    /// engine thread).
    newest_id: Option<std::ops::Range<usize>>,
}

impl WriteBatch {
    /// Takes the filled batch, every run's `last_id` set, leaving an empty one with room for
    /// [`BATCH_BYTES`] and a message more (64 KiB), so the next batch is not grown by
    /// doubling: growth copied every batch's bytes once more (7% of the writer's CPU in a
    /// profile of issue #17's produce benchmark).
    pub(crate) fn take(&mut self) -> WriteBatch {
        self.settle_newest_id();
        let room = WriteBatch {
            bytes: Vec::with_capacity(BATCH_BYTES + (64 << 10)),
            appends: Vec::with_capacity(self.appends.len()),
            newest_id: None,
        };
        std::mem::replace(self, room)
    }

    /// Counts the message just appended (its records end at `bytes.len()`, `id` is its first
    /// frame): it joins the producer's run at the end of the batch unless the producer wants
    /// an ack per message (an idempotent producer's run is admitted message by message).
    pub(crate) fn record(&mut self, producer: &Arc<Producer>, id: &[u8]) {
        self.settle_newest_id();
        let end = self.bytes.len();
        if !joins(&mut self.appends, producer) {
            self.appends.push(run(producer, end));
        }
        if let Some(last) = self.appends.last_mut() {
            last.bytes_end = end;
            last.last_id.clear();
            last.last_id.extend_from_slice(id);
        }
    }

    /// As [`WriteBatch::record`], the message id being `bytes[id]`: it is copied only when
    /// the run ends (a new run starts or the batch is taken), not per message.
    pub(crate) fn record_at(&mut self, producer: &Arc<Producer>, id: std::ops::Range<usize>) {
        let end = self.bytes.len();
        if !joins(&mut self.appends, producer) {
            self.settle_newest_id();
            self.appends.push(run(producer, end));
        }
        if let Some(last) = self.appends.last_mut() {
            last.bytes_end = end;
            self.newest_id = Some(id);
        }
    }

    /// Copies the newest run's pending message id into its `last_id`.
    fn settle_newest_id(&mut self) {
        if let Some(last) = self.appends.last_mut() {
            copy_id(&self.bytes, self.newest_id.take(), &mut last.last_id);
        }
    }
}

/// Copies the message id at `id` in `bytes` (if any) into `to`.
pub(crate) fn copy_id(bytes: &[u8], id: Option<std::ops::Range<usize>>, to: &mut Vec<u8>) {
    if let Some(id) = id.and_then(|r| bytes.get(r)) {
        to.clear();
        to.extend_from_slice(id);
    }
}

/// Whether a message of `producer` joins the run at the end of `appends` (counting it), rather
/// than starting a new one: the same producer, not one acked per message.
fn joins(appends: &mut [Append], producer: &Arc<Producer>) -> bool {
    match appends.last_mut() {
        Some(last)
            if Arc::ptr_eq(&last.producer, producer) && producer.mode != AckMode::PerMessage =>
        {
            last.messages += 1;
            true
        }
        _ => false,
    }
}

/// A new run of one message of `producer` ending at `end`.
fn run(producer: &Arc<Producer>, end: usize) -> Append {
    Append {
        producer: producer.clone(),
        bytes_end: end,
        messages: 1,
        last_id: Vec::new(),
    }
}

/// Producer identities (§3) parsed once, as the front threads meet them.
#[derive(Debug, Default)]
pub(crate) struct Producers(HashMap<Vec<u8>, Option<Arc<Producer>>>);

impl Producers {
    /// The producer presenting `routing_id`, routed to one of `workers`; None for an identity
    /// that is not a valid topic identity. At most [`MAX_PRODUCERS`] are cached.
    pub(crate) fn get(&mut self, routing_id: &[u8], workers: usize) -> Option<Arc<Producer>> {
        if let Some(p) = self.0.get(routing_id) {
            return p.clone();
        }
        if self.0.len() >= MAX_PRODUCERS {
            self.0.clear();
        }
        let parsed = zper_wire::Identity::parse(routing_id).ok().map(|id| {
            Arc::new(Producer {
                routing_id: routing_id.to_vec(),
                worker: usize::from(zper_wire::topic_hash(&id.topic)) % workers.max(1),
                mode: id.ack_mode(),
                idempotent: zper_wire::is_idempotent(id.mode),
                topic: Arc::from(id.topic.as_str()),
            })
        });
        self.0.insert(routing_id.to_vec(), parsed.clone());
        parsed
    }
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

/// Unread acks queued per producer connection before further acks to it are dropped.
pub const WRITER_ACK_HWM: i32 = 100_000;

/// The bound writer endpoint: a libzmq ROUTER or zper's own engine's listener (issue #17).
pub(crate) enum WriterSocket {
    /// `writer.engine = libzmq`.
    Router(zmq::Socket),
    /// `writer.engine = zmtp`: the listener and its bound endpoint (`tcp://IP:PORT`).
    Engine(mio::net::TcpListener, String),
}

impl WriterSocket {
    /// The bound endpoint (`*` and port 0 resolved).
    ///
    /// Errors: zmq cannot tell (the socket is closed).
    pub(crate) fn address(&self) -> Result<String, NodeError> {
        match self {
            WriterSocket::Router(s) => crate::context::bound_address(s),
            WriterSocket::Engine(_, bound) => Ok(bound.clone()),
        }
    }
}

/// Binds the writer endpoint (`writer.bind`) with the engine `writer.engine` names.
///
/// Errors: [`NodeError::Bind`] / [`NodeError::Listen`] (address in use, bad endpoint), or a
/// zmq option refused.
pub(crate) fn bind(
    zmq: &zmq::Context,
    config: &NodeConfig,
    curve: &crate::context::CurveEndpoints,
) -> Result<WriterSocket, NodeError> {
    match config.writer_engine {
        WriterEngine::Zmtp => {
            let (listener, bound) = crate::zmtp::listener::bind(&config.writer_bind)?;
            Ok(WriterSocket::Engine(listener, bound))
        }
        WriterEngine::Libzmq => bind_router(zmq, config, curve).map(WriterSocket::Router),
    }
}

/// Creates and binds the writer ROUTER (`writer.bind`) with the options the produce path
/// relies on.
///
/// Errors: [`NodeError::Bind`] (address in use, bad endpoint), or a zmq option refused.
fn bind_router(
    zmq: &zmq::Context,
    config: &NodeConfig,
    curve: &crate::context::CurveEndpoints,
) -> Result<zmq::Socket, NodeError> {
    crate::context::bind(zmq, zmq::ROUTER, &config.writer_bind, |w| {
        curve.serve(crate::config::CurveEndpointName::Writer, w)?;
        w.set_router_handover(true)?; // §2: a new connection takes an identity over
        w.set_router_mandatory(true)?; // undeliverable acks fail and are counted
                                       // Acks are small; a pipelining mode-2 DEALER may fall this far behind before acks drop.
        w.set_sndhwm(WRITER_ACK_HWM)?;
        w.set_rcvhwm(config.receive_hwm)?;
        w.set_rcvbuf(config.receive_buffer)?;
        // Frames over max_message are dropped and counted by the front; libzmq itself cuts a
        // connection only past 8 x max_message (the original's ring buffer), to bound memory.
        w.set_maxmsgsize((config.max_message as i64).saturating_mul(8))
    })
}

/// Starts the front thread, `writer.workers` worker threads and the forwarder over the bound
/// writer ROUTER; flush notices go to `notices` (the ack PUB). Every thread ends at shutdown,
/// workers after appending and flushing what they hold.
///
/// Errors: an inproc socket or a thread could not be created.
pub(crate) fn spawn(
    socket: WriterSocket,
    nc: &NodeContext,
    notices: Sender<FlushNotice>,
) -> Result<Writer, NodeError> {
    let config = &nc.config;
    let creator: Arc<dyn CreateTopics> = Arc::new(create::TopicCreator {
        cluster: nc.cluster.clone(),
        runtime: nc.runtime.clone(),
        view: nc.view.clone(),
        retain_hours: Some(
            config
                .store
                .retain
                .as_secs()
                .div_ceil(3600)
                .clamp(1, u64::from(u32::MAX)) as u32,
        ),
        auto_create: config.auto_create_topics,
    });
    let workers = config.writer_workers;
    // One ack push per worker, plus one for the forwarder (issue #4).
    let (acks, mut pushes) = crate::endpoint::worker_replies(&nc.zmq, "writer-acks", workers + 1)?;
    let mut threads = Vec::with_capacity(workers + 1);
    let (forward_tx, forward_rx) = crossbeam_channel::bounded(1024);
    if let Some(push) = pushes.pop() {
        let f = forward::Forwarder {
            ctx: nc.zmq.clone(),
            view: nc.view.clone(),
            jobs: forward_rx,
            acks: push,
            counters: nc.counters.clone(),
            stop: nc.stop(),
            curve: nc.curve.writer(),
        };
        threads.push(spawn_thread("zper-forward", move || f.run())?);
    }
    let mut senders = Vec::with_capacity(workers);
    let mut wakers = Vec::with_capacity(workers);
    for (i, push) in pushes.into_iter().enumerate() {
        let (tx, rx) = crossbeam_channel::bounded(16);
        let (wake_tx, wake) = crossbeam_channel::bounded(1);
        // One creation per topic being created, at most PARKED_TOPICS.
        let (created_tx, created) = crossbeam_channel::unbounded();
        wakers.push(wake_tx);
        let worker = Worker {
            rx,
            wake,
            view: Some(nc.view.clone()),
            min_insync: config.min_insync,
            creator: Some(creator.clone()),
            create_failed: HashMap::new(),
            parked: ParkingLot::default(),
            created_tx,
            created,
            forward: Some(forward_tx.clone()),
            acks_leader: config.acks_leader,
            acks: push,
            notices: notices.clone(),
            store: nc.store.clone(),
            policy: config.store.flush,
            idempotence: dedupe::Bounds {
                per_producer: config.idempotence_window_messages,
                max_age: config.idempotence_window,
                max_producers: config.idempotence_max_producers,
            },
            topics: HashMap::new(),
            counters: nc.counters.clone(),
        };
        threads.push(spawn_thread(&format!("zper-writer-{i}"), move || {
            worker.run()
        })?);
        senders.push(tx);
    }
    let front = match socket {
        WriterSocket::Router(router) => {
            let front = Front {
                router,
                acks,
                senders,
                producers: Producers::default(),
                max_message: config.max_message,
                allow_empty_message: config.store.allow_empty_message,
                counters: nc.counters.clone(),
                stop: nc.stop(),
            };
            spawn_thread("zper-writer", move || front.run(threads))?
        }
        WriterSocket::Engine(listener, _) => {
            let max_message = config.max_message as u64;
            let front = engine::EngineFront {
                listener,
                acks,
                senders,
                producers: Producers::default(),
                limits: zper_wire::zmtp::Limits {
                    max_message,
                    max_buffered: max_message.saturating_mul(2).max(max_message + 9),
                    allow_empty_message: config.store.allow_empty_message,
                },
                counters: nc.counters.clone(),
                stop: nc.stop(),
                max_connections: engine::MAX_CONNECTIONS,
                idle_eviction: engine::IDLE_EVICTION,
                curve: nc.curve.writer(),
            };
            spawn_thread("zper-writer", move || front.run(threads))?
        }
    };
    Ok(Writer {
        front,
        waker: Waker::new(wakers),
    })
}

#[cfg(test)]
mod tests;
