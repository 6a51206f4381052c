//! A running zper node: the store, the Raft member and every endpoint (writer, reader, ack,
//! controller, relay, replication, Dolly), started in order and stopped in reverse.
//!
//! Start-up is two steps per endpoint (issue #14): every endpoint module's `bind` creates and
//! binds its socket with the options it owns, so a node that cannot bind fails before Raft
//! starts; then, once Raft runs, its `spawn` starts its threads with the shared
//! [`NodeContext`](crate::context::NodeContext). Shutdown sets one flag and rings every loop's
//! mailbox.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use tracing::{error, info, warn};
use zper_store::Store;

use crate::config::NodeConfig;
use crate::context::{bound_address, NodeContext};
use crate::control::ack;
pub use crate::endpoint::Endpoints;
pub use crate::error::NodeError;
use crate::mailbox::Shutdown;
use crate::metrics::Counters;
use crate::{control, dolly, fetch, produce, relay, replication};

/// A started node. Dropping it without [`Node::shutdown`] leaves its threads running.
pub struct Node {
    endpoints: Endpoints,
    store: Arc<Store>,
    counters: Arc<Counters>,
    shutdown: Shutdown,
    threads: Vec<JoinHandle<()>>,
    /// The ZAP handler's stop flag and thread: stopped after every endpoint thread has ended,
    /// since libzmq admits any CURVE key while no handler is bound.
    zap: Option<(Arc<std::sync::atomic::AtomicBool>, JoinHandle<()>)>,
    member: Option<crate::membership::Member>,
    _ctx: zmq::Context,
}

/// The sockets every endpoint bound, before anything runs.
struct Bound {
    writer: produce::WriterSocket,
    reader: fetch::ReaderSocket,
    ack: zmq::Socket,
    controller: zmq::Socket,
    replica: zmq::Socket,
    relay: zmq::Socket,
    dolly: zmq::Socket,
    dolly_updates: zmq::Socket,
    dolly_snapshots: zmq::Socket,
}

impl Bound {
    /// Binds every endpoint of `config`, as a CURVE server where `curve` requires it.
    fn bind(
        zmq: &zmq::Context,
        config: &NodeConfig,
        curve: &crate::context::CurveEndpoints,
    ) -> Result<(Bound, Endpoints), NodeError> {
        use crate::config::CurveEndpointName::Dolly;
        let bound = Bound {
            writer: produce::bind(zmq, config, curve)?,
            reader: fetch::bind(zmq, config, curve)?,
            ack: ack::bind(zmq, config, curve)?,
            controller: control::controller::bind(zmq, config, curve)?,
            replica: replication::bind(zmq, config, curve)?,
            relay: relay::bind(zmq, config, curve)?,
            dolly: dolly::bind(zmq, config, curve)?,
            // Served by every node from its applied state (issue #16).
            dolly_updates: crate::context::bind(zmq, zmq::PUB, &config.dolly_updates_bind, |s| {
                curve.serve(Dolly, s)?;
                dolly::observers::updates_options(s)
            })?,
            dolly_snapshots: crate::context::bind(
                zmq,
                zmq::ROUTER,
                &config.dolly_snapshots_bind,
                |s| {
                    curve.serve(Dolly, s)?;
                    dolly::observers::snapshots_options(s)
                },
            )?,
        };
        let endpoints = Endpoints {
            writer: bound.writer.address()?,
            reader: bound.reader.address()?,
            ack: bound_address(&bound.ack)?,
            controller: bound_address(&bound.controller)?,
            replica: bound_address(&bound.replica)?,
            relay: bound_address(&bound.relay)?,
            dolly_requests: bound_address(&bound.dolly)?,
            dolly_updates: bound_address(&bound.dolly_updates)?,
            dolly_snapshots: bound_address(&bound.dolly_snapshots)?,
            http: String::new(),
        };
        Ok((bound, endpoints))
    }
}

impl Node {
    /// Opens the store, binds every endpoint, starts the Raft member and then the endpoints.
    ///
    /// Errors: the store can't be opened (for example `base_dir` is a file); an endpoint can't
    /// be bound; Raft can't start; a thread can't be started.
    pub fn start(config: &NodeConfig) -> Result<Node, NodeError> {
        for key in &config.unknown_keys {
            match crate::config::keys::suggest(key) {
                Some(like) => warn!(key = %key, "unknown config key ignored; did you mean {like}?"),
                None => {
                    warn!(key = %key, "unknown config key ignored (the README's Configuration table lists the keys)")
                }
            }
        }
        for (key, why) in &config.no_effect_keys {
            warn!(key = %key, "config key has no effect in zper: {why}");
        }
        let curve = crate::context::CurveEndpoints::load(&config.curve)?;
        let store = Arc::new(Store::open(config.store.clone())?);
        let zmq = zmq::Context::new();
        zmq.set_io_threads(config.io_threads)?;
        let counters = Arc::new(Counters::default());
        let shutdown = Shutdown::default();
        // The ZAP handler first, and it stops last: libzmq admits any key while none is bound
        // (RFC 27). If the start fails, the context's end (ETERM) stops it.
        let zap = match curve.zap_policy() {
            Some(policy) => {
                let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let thread = crate::zmtp::zap::spawn(
                    crate::zmtp::zap::bind(&zmq)?,
                    policy,
                    counters.clone(),
                    stop.clone(),
                )?;
                Some((stop, thread))
            }
            None => None,
        };
        let (bound, mut endpoints) = Bound::bind(&zmq, config, &curve)?;
        let member =
            crate::membership::Member::start(config, &endpoints, counters.clone(), store.clone())?;
        endpoints.http = member.http.clone();
        let view = replication::PlacementView::new(config.cluster.node_id);
        view.refresh(&member.node());
        let nc = NodeContext {
            zmq: zmq.clone(),
            config: Arc::new(config.clone()),
            store: store.clone(),
            counters: counters.clone(),
            memory: Arc::new(crate::memory::MemoryBudget::new(config.memory_budget)),
            view: view.clone(),
            cluster: member.node(),
            runtime: member.handle(),
            shutdown: shutdown.clone(),
            curve,
        };
        let mut threads = Vec::new();
        threads.push(
            view.spawn_refresher(member.node(), nc.stop())
                .map_err(|source| NodeError::Thread {
                    name: "zper-placement".into(),
                    source,
                })?,
        );
        // Sockets in crate::metrics::ENDPOINTS order.
        // zper's own writer and reader engines count their connections themselves.
        let writer_router = match &bound.writer {
            produce::WriterSocket::Router(router) => Some(router),
            produce::WriterSocket::Engine(..) => None,
        };
        for (index, socket) in [
            writer_router,
            bound.reader.router(),
            Some(&bound.ack),
            Some(&bound.controller),
        ]
        .into_iter()
        .enumerate()
        .filter_map(|(i, s)| Some((i, s?)))
        {
            match control::monitor::watch(&zmq, socket, index, counters.clone(), nc.stop()) {
                Ok(t) => threads.push(t),
                Err(e) => warn!(endpoint = index, error = %e, "no connection monitor"),
            }
        }
        let (notices, ack_thread) = ack::spawn(bound.ack, counters.clone())?;
        threads.push(ack_thread);
        let writer = produce::spawn(bound.writer, &nc, notices)?;
        threads.push(writer.front);
        threads.extend(replication::spawn(bound.replica, writer.waker, &nc)?);
        threads.push(fetch::spawn(bound.reader, &nc)?.front);
        threads.push(control::controller::spawn(bound.controller, &nc)?);
        threads.push(relay::spawn(bound.relay, member.relay.clone(), &nc)?);
        threads.extend(dolly::spawn(
            bound.dolly,
            (bound.dolly_updates, bound.dolly_snapshots),
            &nc,
        )?);
        let (rstore, rstop, every) = (store.clone(), nc.stop(), config.retention_check);
        threads.push(crate::context::spawn("zper-retention", move || {
            retention(rstore, rstop, every, view)
        })?);
        // Every endpoint as bound (`*` and port 0 resolved; issue #15), and the advertised
        // HTTP address other nodes and clients use.
        info!(
            base_dir = %config.store.base_dir.display(),
            writer = %endpoints.writer,
            reader = %endpoints.reader,
            ack = %endpoints.ack,
            controller = %endpoints.controller,
            relay = %endpoints.relay,
            replication = %endpoints.replica,
            dolly_requests = %endpoints.dolly_requests,
            dolly_updates = %endpoints.dolly_updates,
            dolly_snapshots = %endpoints.dolly_snapshots,
            http = %member.http_bound,
            http_advertised = %endpoints.http,
            "zper node started"
        );
        Ok(Node {
            endpoints,
            store,
            counters,
            shutdown,
            threads,
            zap,
            member: Some(member),
            _ctx: zmq,
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
        self.shutdown.trigger();
        for t in self.threads {
            if t.join().is_err() {
                error!("an endpoint thread panicked");
            }
        }
        // Every endpoint socket is closed now: the ZAP handler can go.
        if let Some((stop, thread)) = self.zap.take() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            if thread.join().is_err() {
                error!("the ZAP handler panicked");
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
    stop: Arc<std::sync::atomic::AtomicBool>,
    every: Duration,
    view: crate::replication::PlacementView,
) {
    let mut next = Instant::now() + every;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if Instant::now() >= next {
            next = Instant::now() + every;
            if let Err(e) = store.apply_retention_with(SystemTime::now(), |k| view.retention(k)) {
                error!(error = %e, "retention failed");
            }
        }
    }
}
