//! A running zper node: the store, the Raft member and every endpoint (writer, reader, ack,
//! controller, relay, replication, Dolly), started in order and stopped in reverse.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use tracing::{error, info, warn};
use zper_store::Store;

use crate::config::NodeConfig;
use crate::control::ack;
pub use crate::endpoint::Endpoints;
pub use crate::error::NodeError;
use crate::fetch;
use crate::metrics::Counters;
use crate::produce;

/// Unread acks queued per producer connection before further acks to it are dropped.
pub const WRITER_ACK_HWM: i32 = 100_000;
/// Unread replies queued per reader connection before further replies to it are dropped.
pub const READER_REPLY_HWM: i32 = 16;
/// Replica fetch replies libzmq queues per replica connection before dropping (and counting)
/// further ones: a follower has one fetch in flight per topic it follows.
pub const REPLICA_REPLY_HWM: i32 = 64;

/// Flush notices queued between the writer workers and the ack PUB thread, at most.
pub const NOTICE_QUEUE: usize = 10_000;

/// A started node. Dropping it without [`Node::shutdown`] leaves its threads running.
pub struct Node {
    endpoints: Endpoints,
    store: Arc<Store>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    member: Option<crate::membership::Member>,
    _ctx: zmq::Context,
}

fn bind(
    ctx: &zmq::Context,
    kind: zmq::SocketType,
    endpoint: &str,
) -> Result<zmq::Socket, NodeError> {
    let s = ctx.socket(kind)?;
    s.set_linger(0)?;
    s.bind(endpoint).map_err(|source| NodeError::Bind {
        endpoint: endpoint.to_owned(),
        source,
    })?;
    Ok(s)
}

fn last_endpoint(s: &zmq::Socket) -> Result<String, NodeError> {
    Ok(s.get_last_endpoint()?.unwrap_or_default())
}

impl Node {
    /// Opens the store and binds every endpoint.
    ///
    /// Errors: the store can't be opened (for example `base_dir` is a file); an endpoint can't
    /// be bound.
    pub fn start(config: &NodeConfig) -> Result<Node, NodeError> {
        for key in &config.unknown_keys {
            warn!(key = %key, "unknown config key ignored");
        }
        let store = Arc::new(Store::open(config.store.clone())?);
        let ctx = zmq::Context::new();
        ctx.set_io_threads(config.io_threads)?;
        let counters = Arc::new(Counters::default());
        let memory = Arc::new(crate::memory::MemoryBudget::new(config.memory_budget));
        let stop = Arc::new(AtomicBool::new(false));

        let w = ctx.socket(zmq::ROUTER)?;
        w.set_router_handover(true)?; // §2: a new connection takes an identity over
        w.set_router_mandatory(true)?; // undeliverable acks fail and are counted
                                       // Acks are small; a pipelining mode-2 DEALER may fall this far behind before acks drop.
        w.set_sndhwm(WRITER_ACK_HWM)?;
        w.set_rcvhwm(config.receive_hwm)?;
        w.set_rcvbuf(config.receive_buffer)?;
        // Frames over max_message are dropped and counted by the front; libzmq itself cuts a
        // connection only past 8 x max_message (the original's ring buffer), to bound memory.
        w.set_maxmsgsize((config.max_message as i64).saturating_mul(8))?;
        w.set_linger(0)?;
        w.bind(&config.writer_bind)
            .map_err(|source| NodeError::Bind {
                endpoint: config.writer_bind.clone(),
                source,
            })?;
        let r = ctx.socket(zmq::ROUTER)?;
        r.set_router_mandatory(true)?;
        // A reconnecting consumer takes its identity over instead of hanging behind a half-open
        // connection (the original reader had no handover, spec §2).
        r.set_router_handover(true)?;
        // Replies a client has not read yet, per connection: bounds memory at this many FETCH
        // replies of at most max_message + 9 bytes; further replies are dropped and counted.
        r.set_sndhwm(READER_REPLY_HWM)?;
        r.set_sndbuf(config.send_buffer)?;
        r.set_linger(0)?;
        r.bind(&config.reader_bind)
            .map_err(|source| NodeError::Bind {
                endpoint: config.reader_bind.clone(),
                source,
            })?;
        let p = bind(&ctx, zmq::PUB, &config.ack_bind)?;
        let c = bind(&ctx, zmq::ROUTER, &config.controller_bind)?;
        c.set_router_mandatory(true)?;
        let rep = bind(&ctx, zmq::ROUTER, &config.replica_bind)?;
        rep.set_router_mandatory(true)?;
        // Replica fetch replies (up to 1 MiB each) queued for a peer that does not read them.
        rep.set_sndhwm(REPLICA_REPLY_HWM)?;
        let relay = ctx.socket(zmq::ROUTER)?;
        relay.set_router_mandatory(true)?; // a full or vanished subscriber fails the send
        relay.set_router_handover(true)?; // a reconnecting subscriber takes its identity over
        relay.set_sndhwm(crate::relay::RELAY_HWM)?;
        // Requests are small; a result payload may be as large as a message. A peer sending
        // more is disconnected by libzmq instead of being buffered.
        relay.set_maxmsgsize((config.max_message as i64).saturating_add(64 * 1024))?;
        relay.set_linger(0)?;
        relay
            .bind(&config.relay_bind)
            .map_err(|source| NodeError::Bind {
                endpoint: config.relay_bind.clone(),
                source,
            })?;
        let dolly = bind(&ctx, zmq::ROUTER, &config.dolly_requests_bind)?;
        dolly.set_router_mandatory(true)?;
        // The leader-only endpoints: bound once here to check them and resolve `*`/0 ports,
        // then released until this node leads.
        let dolly_updates = last_endpoint(&bind(&ctx, zmq::PUB, &config.dolly_updates_bind)?)?;
        let dolly_snapshots =
            last_endpoint(&bind(&ctx, zmq::ROUTER, &config.dolly_snapshots_bind)?)?;
        let mut endpoints = Endpoints {
            writer: last_endpoint(&w)?,
            reader: last_endpoint(&r)?,
            ack: last_endpoint(&p)?,
            controller: last_endpoint(&c)?,
            replica: last_endpoint(&rep)?,
            relay: last_endpoint(&relay)?,
            dolly_requests: last_endpoint(&dolly)?,
            dolly_updates,
            dolly_snapshots,
            http: String::new(),
        };
        let member =
            crate::membership::Member::start(config, &endpoints, counters.clone(), store.clone())?;
        endpoints.http = member.http.clone();
        let view = crate::replication::PlacementView::new(config.cluster.node_id);
        view.refresh(&member.node());
        let mut threads = vec![view
            .spawn_refresher(member.node(), stop.clone())
            .map_err(|_| zmq::Error::EMFILE)?];

        let mut monitors = Vec::new();
        // Sockets in crate::metrics::ENDPOINTS order.
        for (index, socket) in [&w, &r, &p, &c].into_iter().enumerate() {
            match crate::control::monitor::watch(
                &ctx,
                socket,
                index,
                counters.clone(),
                stop.clone(),
            ) {
                Ok(t) => monitors.push(t),
                Err(e) => warn!(endpoint = index, error = %e, "no connection monitor"),
            }
        }
        // Bounded (issue #13): a notice that finds the queue full is dropped; the next one
        // covers its range, as a PUB subscriber past its HWM would see anyway.
        let (notice_tx, notice_rx) = crossbeam_channel::bounded(NOTICE_QUEUE);
        let ack_counters = counters.clone();
        threads.extend(monitors);
        threads.push(
            std::thread::Builder::new()
                .name("zper-ack".into())
                .spawn(move || ack::run(p, notice_rx, ack_counters))
                .map_err(|_| zmq::Error::EMFILE)?,
        );
        let writer = produce::start(
            &ctx,
            w,
            produce::WriterSettings {
                workers: config.writer_workers,
                max_message: config.max_message,
                allow_empty_message: config.store.allow_empty_message,
                policy: config.store.flush,
                view: Some(view.clone()),
                min_insync: config.min_insync,
                acks_leader: config.acks_leader,
                creator: Some(crate::produce::create::TopicCreator {
                    cluster: member.node(),
                    runtime: member.handle(),
                    view: view.clone(),
                    retain_hours: Some(
                        config
                            .store
                            .retain
                            .as_secs()
                            .div_ceil(3600)
                            .clamp(1, u64::from(u32::MAX)) as u32,
                    ),
                }),
            },
            store.clone(),
            notice_tx,
            counters.clone(),
            stop.clone(),
        )?;
        threads.push(writer.front);
        threads.extend(crate::replication::start(
            &ctx,
            rep,
            crate::replication::Context {
                store: store.clone(),
                view: view.clone(),
                waker: writer.waker.clone(),
                counters: counters.clone(),
                stop: stop.clone(),
                cluster: member.node(),
                runtime: member.handle(),
                lag: config.replica_lag,
                min_insync: config.min_insync,
                acks_leader: config.acks_leader,
                memory: memory.clone(),
            },
        )?);
        let cap = config.max_message as u64 + 9;
        let reader = fetch::start(
            &ctx,
            r,
            config.reader_workers,
            cap,
            store.clone(),
            counters.clone(),
            stop.clone(),
            Some(view.clone()),
            memory.clone(),
        )?;
        threads.push(reader.front);
        let controller_ctx = crate::control::controller::Shared {
            cluster: member.node(),
            runtime: member.handle(),
            counters: counters.clone(),
            lease: config.subscription_lease,
        };
        let cstop = stop.clone();
        threads.push(
            std::thread::Builder::new()
                .name("zper-controller".into())
                .spawn(move || crate::control::controller::run(c, controller_ctx, cstop))
                .map_err(|_| zmq::Error::EMFILE)?,
        );
        let relay_ctx = crate::relay::Shared {
            cluster: member.node(),
            runtime: member.handle(),
            store: store.clone(),
            counters: counters.clone(),
            advertised: member.relay.clone(),
        };
        let (rctx, rstop) = (ctx.clone(), stop.clone());
        threads.push(
            std::thread::Builder::new()
                .name("zper-relay".into())
                .spawn(move || crate::relay::run(rctx, relay, relay_ctx, rstop))
                .map_err(|_| zmq::Error::EMFILE)?,
        );
        let (dnode, dhandle, dcounters, dstop) = (
            member.node(),
            member.handle(),
            counters.clone(),
            stop.clone(),
        );
        let dolly_ctx = crate::dolly::Shared {
            cluster: dnode,
            runtime: dhandle,
            counters: dcounters,
            put_timeout: config.dolly_put_timeout,
            memory: memory.clone(),
        };
        threads.push(
            std::thread::Builder::new()
                .name("zper-dolly".into())
                .spawn(move || crate::dolly::run(dolly, dolly_ctx, dstop))
                .map_err(|_| zmq::Error::EMFILE)?,
        );
        let binds = crate::dolly::leader::Binds {
            updates: endpoints.dolly_updates.clone(),
            snapshots: endpoints.dolly_snapshots.clone(),
        };
        let (lctx, lnode, lcounters, lstop) =
            (ctx.clone(), member.node(), counters.clone(), stop.clone());
        threads.push(
            std::thread::Builder::new()
                .name("zper-dolly-leader".into())
                .spawn(move || crate::dolly::leader::run(lctx, binds, lnode, lcounters, lstop))
                .map_err(|_| zmq::Error::EMFILE)?,
        );
        let (rstore, rstop, every) = (store.clone(), stop.clone(), config.retention_check);
        let rview = view.clone();
        threads.push(
            std::thread::Builder::new()
                .name("zper-retention".into())
                .spawn(move || retention(rstore, rstop, every, rview))
                .map_err(|_| zmq::Error::EMFILE)?,
        );
        info!(
            base_dir = %config.store.base_dir.display(),
            writer = %endpoints.writer,
            reader = %endpoints.reader,
            ack = %endpoints.ack,
            http = %endpoints.http,
            "zper node started"
        );
        Ok(Node {
            endpoints,
            store,
            counters,
            stop,
            threads,
            member: Some(member),
            _ctx: ctx,
        })
    }

    /// The bound endpoints.
    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// The node's counters.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// The node's store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The node's Raft member (metadata, leader, proposal stats).
    ///
    /// Panics: never while the node runs (the member is taken only by [`Node::shutdown`],
    /// which consumes the node).
    pub fn cluster(&self) -> zper_raft::ClusterNode {
        #[allow(clippy::expect_used)] // invariant: present until shutdown consumes self
        self.member
            .as_ref()
            .map(|m| m.node())
            .expect("member runs until shutdown")
    }

    /// Stops every endpoint, lets the writer workers append and flush what they hold, and
    /// flushes every topic.
    pub fn shutdown(mut self) -> Result<(), NodeError> {
        if let Some(m) = self.member.take() {
            m.shutdown();
        }
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            if t.join().is_err() {
                error!("an endpoint thread panicked");
            }
        }
        self.store.flush_all()?;
        info!("zper node stopped; all topics flushed");
        Ok(())
    }
}

/// Deletes expired closed segments every `every`; a topic in the metadata keeps its own
/// `retain_hours` (issue #13), others the node's.
fn retention(
    store: Arc<Store>,
    stop: Arc<AtomicBool>,
    every: Duration,
    view: crate::replication::PlacementView,
) {
    let mut next = Instant::now() + every;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if Instant::now() >= next {
            next = Instant::now() + every;
            if let Err(e) = store.apply_retention_with(SystemTime::now(), |k| view.retention(k)) {
                error!(error = %e, "retention failed");
            }
        }
    }
}
