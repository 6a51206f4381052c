//! What every endpoint of a running node shares (issue #14): one [`NodeContext`] handed to each
//! endpoint's `spawn`, instead of a dozen clones passed one by one.
//!
//! Every endpoint module has the same two steps: `bind(zmq, config)` creates its socket with
//! the options it owns (HWMs, handover, mandatory routing, size limits) and binds it, so a
//! node that cannot bind fails before Raft starts; `spawn(socket, &NodeContext)` starts its
//! threads, which run until [`NodeContext::shutdown`] is triggered.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;

use zper_store::Store;

use crate::config::NodeConfig;
use crate::error::NodeError;
use crate::mailbox::{Mailbox, Postbox, Shutdown};
use crate::memory::MemoryBudget;
use crate::metrics::Counters;
use crate::replication::view::PlacementView;

/// The running node as its endpoints see it.
#[derive(Clone)]
pub(crate) struct NodeContext {
    /// The zmq context every socket of the node belongs to (inproc needs one context).
    pub(crate) zmq: zmq::Context,
    /// The node's configuration as loaded.
    pub(crate) config: Arc<NodeConfig>,
    /// The segment store.
    pub(crate) store: Arc<Store>,
    /// Counters behind `/metrics`.
    pub(crate) counters: Arc<Counters>,
    /// The memory budget for replies (issue #13).
    pub(crate) memory: Arc<MemoryBudget>,
    /// Who leads and follows each fragment, refreshed from the applied metadata.
    pub(crate) view: PlacementView,
    /// The Raft member.
    pub(crate) cluster: zper_raft::ClusterNode,
    /// The runtime Raft and the async tasks run on.
    pub(crate) runtime: tokio::runtime::Handle,
    /// Set (and every mailbox rung) when the node stops.
    pub(crate) shutdown: Shutdown,
    /// CURVE on the writer and on the reader, when required (issue #19).
    pub(crate) curve: CurveEndpoints,
}

/// The CURVE setting of each endpoint of zper's own ZMTP engine.
#[derive(Clone, Debug, Default)]
pub(crate) struct CurveEndpoints {
    /// The writer's.
    pub(crate) writer: Option<crate::zmtp::security::CurveEndpoint>,
    /// The reader's.
    pub(crate) reader: Option<crate::zmtp::security::CurveEndpoint>,
}

impl CurveEndpoints {
    /// Reads the keys `settings` name (once; the client keys are read again while the node
    /// runs).
    ///
    /// Errors: the secret key or the client keys cannot be read.
    pub(crate) fn load(
        settings: &crate::config::CurveSettings,
    ) -> Result<Self, crate::zmtp::security::SecurityError> {
        use crate::config::CurveEndpointName as E;
        use crate::zmtp::security::{read_secret_key, ClientKeys, CurveEndpoint};
        let Some(path) = &settings.secret_key_file else {
            return Ok(CurveEndpoints::default());
        };
        let keys = Arc::new(read_secret_key(path)?);
        let own = Some(keys.public());
        let endpoint = CurveEndpoint {
            keys,
            clients: Arc::new(ClientKeys::load(settings.clients.as_deref(), own)?),
        };
        tracing::info!(
            public_key = %zper_wire::zmtp::curve::encode_key(&endpoint.keys.public()),
            clients = endpoint.clients.len(),
            endpoints = ?settings.endpoints,
            "CURVE on"
        );
        Ok(CurveEndpoints {
            writer: settings.on(E::Writer).then(|| endpoint.clone()),
            reader: settings.on(E::Reader).then_some(endpoint),
        })
    }
}

impl NodeContext {
    /// The shutdown flag, for loops that check it at their poll period.
    pub(crate) fn stop(&self) -> Arc<AtomicBool> {
        self.shutdown.flag()
    }

    /// A mailbox for the loop `name`, rung by its posts and by shutdown.
    ///
    /// Errors: the inproc sockets cannot be created.
    pub(crate) fn mailbox<T>(&self, name: &str) -> Result<(Mailbox<T>, Postbox<T>), NodeError> {
        Ok(Mailbox::new(&self.zmq, name, &self.shutdown)?)
    }
}

/// Starts a named thread.
///
/// Errors: the OS refused a thread ([`NodeError::Thread`]).
pub(crate) fn spawn(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>, NodeError> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(f)
        .map_err(|source| NodeError::Thread {
            name: name.to_owned(),
            source,
        })
}

/// Creates a socket of `kind` with linger 0 and binds it to `endpoint`.
///
/// Errors: [`NodeError::Bind`] naming the endpoint (address in use, bad endpoint).
pub(crate) fn bind(
    zmq: &zmq::Context,
    kind: zmq::SocketType,
    endpoint: &str,
    options: impl FnOnce(&zmq::Socket) -> Result<(), zmq::Error>,
) -> Result<zmq::Socket, NodeError> {
    let s = zmq.socket(kind)?;
    s.set_linger(0)?;
    options(&s)?;
    s.bind(endpoint).map_err(|source| NodeError::Bind {
        endpoint: endpoint.to_owned(),
        source,
    })?;
    Ok(s)
}

/// The address a socket is bound to (`*` and port 0 resolved).
///
/// Errors: zmq cannot tell (the socket is closed).
pub(crate) fn bound_address(s: &zmq::Socket) -> Result<String, NodeError> {
    Ok(s.get_last_endpoint()?.unwrap_or_default())
}
