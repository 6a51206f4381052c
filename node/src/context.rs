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

/// CURVE on the node's endpoints (issue #19): the node's key pair and client keys when CURVE
/// is on, and the endpoints that require it.
#[derive(Clone, Debug, Default)]
pub(crate) struct CurveEndpoints {
    /// The keys; `None` when CURVE is off.
    keys: Option<crate::zmtp::security::CurveEndpoint>,
    /// The endpoints that require CURVE (`curve.endpoints`).
    on: Vec<crate::config::CurveEndpointName>,
}

impl CurveEndpoints {
    /// Reads the keys `settings` name (once; the client keys are read again while the node
    /// runs).
    ///
    /// Errors: the secret key or the client keys cannot be read.
    pub(crate) fn load(
        settings: &crate::config::CurveSettings,
    ) -> Result<Self, crate::zmtp::security::SecurityError> {
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
        if let (Some(path), 0) = (&settings.clients, endpoint.clients.len()) {
            tracing::warn!(
                clients = %path.display(),
                "no client public keys found: only the cluster's own key is admitted until some are added"
            );
        }
        tracing::info!(
            public_key = %zper_wire::zmtp::curve::encode_key(&endpoint.keys.public()),
            clients = endpoint.clients.len(),
            endpoints = ?settings.endpoints,
            "CURVE on"
        );
        Ok(CurveEndpoints {
            keys: Some(endpoint),
            on: settings.endpoints.clone(),
        })
    }

    /// The keys of `endpoint` when it requires CURVE.
    pub(crate) fn get(
        &self,
        endpoint: crate::config::CurveEndpointName,
    ) -> Option<&crate::zmtp::security::CurveEndpoint> {
        self.keys.as_ref().filter(|_| self.on.contains(&endpoint))
    }

    /// The client keys `endpoint` admits when it requires CURVE: what a libzmq endpoint checks
    /// each message's key against ([`crate::sockets::recv_admitted`]).
    pub(crate) fn gate(
        &self,
        endpoint: crate::config::CurveEndpointName,
    ) -> Option<Arc<crate::zmtp::security::ClientKeys>> {
        self.get(endpoint).map(|k| k.clients.clone())
    }

    /// The writer's keys (zper's own engine), when it requires CURVE.
    pub(crate) fn writer(&self) -> Option<crate::zmtp::security::CurveEndpoint> {
        self.get(crate::config::CurveEndpointName::Writer).cloned()
    }

    /// The reader's keys (zper's own engine), when it requires CURVE.
    pub(crate) fn reader(&self) -> Option<crate::zmtp::security::CurveEndpoint> {
        self.get(crate::config::CurveEndpointName::Reader).cloned()
    }

    /// The ZAP policy (any CURVE endpoint on libzmq asks it), when CURVE is on.
    pub(crate) fn zap_policy(&self) -> Option<crate::zmtp::zap::ZapPolicy> {
        self.keys.as_ref().map(|k| crate::zmtp::zap::ZapPolicy {
            clients: k.clients.clone(),
            cluster: k.keys.public(),
        })
    }

    /// Makes the libzmq `socket`, before it binds, a CURVE server of `endpoint` when that
    /// endpoint requires CURVE: the node's secret key, and the ZAP domain that authorises its
    /// clients (replication: the cluster's key only; the others: `curve.clients` too).
    ///
    /// Errors: libzmq refused an option (a libzmq built without CURVE).
    pub(crate) fn serve(
        &self,
        endpoint: crate::config::CurveEndpointName,
        socket: &zmq::Socket,
    ) -> Result<(), zmq::Error> {
        use crate::zmtp::zap::{CLIENTS_DOMAIN, CLUSTER_DOMAIN};
        let Some(k) = self.get(endpoint) else {
            return Ok(());
        };
        socket.set_curve_server(true)?;
        socket.set_curve_secretkey(&k.keys.secret())?;
        socket.set_zap_domain(match endpoint {
            crate::config::CurveEndpointName::Replication => CLUSTER_DOMAIN,
            _ => CLIENTS_DOMAIN,
        })
    }

    /// Makes the libzmq `socket`, before it connects to a peer node's `endpoint`, that
    /// endpoint's CURVE client (with the cluster's key pair) when it requires CURVE.
    ///
    /// Errors: libzmq refused an option.
    pub(crate) fn connect_to_peer(
        &self,
        endpoint: crate::config::CurveEndpointName,
        socket: &zmq::Socket,
    ) -> Result<(), zmq::Error> {
        match self.get(endpoint) {
            Some(k) => k.apply_to_peer_link(socket),
            None => Ok(()),
        }
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
