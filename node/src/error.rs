//! Why a node could not start or stop cleanly.

use thiserror::Error;
use zper_store::StoreError;

/// Why a node could not start or stop cleanly.
#[derive(Debug, Error)]
pub enum NodeError {
    /// The store could not be opened or flushed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A socket could not be bound (address in use, bad endpoint).
    #[error("cannot bind {endpoint}: {source}")]
    Bind {
        /// The endpoint.
        endpoint: String,
        /// The zmq error.
        source: zmq::Error,
    },
    /// A TCP endpoint of zper's own ZMTP engine could not be bound (issue #17).
    #[error("cannot bind {endpoint}: {source}")]
    Listen {
        /// The endpoint.
        endpoint: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Any other zmq failure while setting up.
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    /// The HTTP admin address could not be bound (or the runtime could not start).
    #[error("cannot bind http {endpoint}: {source}")]
    Http {
        /// The address.
        endpoint: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The admin port's TLS files (`http.tls_cert`, `http.tls_key`, `http.tls_ca`) are
    /// unreadable or do not fit together.
    #[error("admin port TLS: {0}")]
    Tls(#[from] zper_raft::tls::TlsError),
    /// The CURVE keys cannot be read (issue #19).
    #[error("{0}")]
    Curve(#[from] crate::zmtp::security::SecurityError),
    /// The configuration contradicts itself (message names the keys).
    #[error("config: {0}")]
    Config(String),
    /// The OS refused to start an endpoint thread.
    #[error("cannot start thread {name}: {source}")]
    Thread {
        /// The thread's name.
        name: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Raft could not start (boxed: openraft's errors are large).
    #[error("raft: {0}")]
    Cluster(Box<zper_raft::ClusterError>),
}

impl From<zper_raft::ClusterError> for NodeError {
    fn from(e: zper_raft::ClusterError) -> Self {
        NodeError::Cluster(Box::new(e))
    }
}
