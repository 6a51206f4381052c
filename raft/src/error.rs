//! The error of a cluster member: why its Raft could not start or a command could not commit.

use std::path::PathBuf;

use thiserror::Error;

use crate::{NodeEndpoints, NodeId};

/// Why a node's Raft could not start or a command could not commit.
#[derive(Debug, Error)]
pub enum ClusterError {
    /// Storage failed to open.
    #[error("raft storage: {0}")]
    Storage(#[from] openraft::StorageError<NodeId>),
    /// Invalid Raft timing settings.
    #[error("raft config: {0}")]
    Config(#[from] openraft::ConfigError),
    /// The Raft core stopped.
    #[error("raft stopped: {0}")]
    Fatal(#[from] openraft::error::Fatal<NodeId>),
    /// Initialization failed for another reason than "already initialized".
    #[error("initialize: {0}")]
    Initialize(String),
    /// This node is not the leader; the leader is `leader` (if known), at `endpoints`.
    #[error("not the leader; the leader is {}", leader.map_or("unknown (election in progress)".to_owned(), |l| format!("node {l}")))]
    NotLeader {
        /// Leader id, if known.
        leader: Option<NodeId>,
        /// Leader endpoints, if known.
        endpoints: Option<NodeEndpoints>,
    },
    /// The write did not commit (membership change in progress, timeout, or similar).
    #[error("write failed: {0}")]
    Write(String),
    /// The Raft data directory belongs to another node id (a changed `node.id`, or two nodes
    /// sharing a directory): starting would give this node another node's votes and log.
    #[error("raft dir {dir} belongs to node {stored}, not {configured}: keep node.id {stored}, or use another (empty) directory")]
    IdMismatch {
        /// The directory.
        dir: PathBuf,
        /// The id recorded in it.
        stored: NodeId,
        /// The configured id.
        configured: NodeId,
    },
    /// The node id file could not be read or written.
    #[error("raft dir {dir}: {source}")]
    Io {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A node to be added does not answer as the expected zper node.
    #[error("node {id} unreachable: {why}")]
    Unreachable {
        /// The node id.
        id: NodeId,
        /// What the probe found.
        why: String,
    },
}
