//! The openraft type configuration and node identity of the zper cluster.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

use crate::metadata::{Command, CommandResult};

/// A node's id in the cluster (`node.id`; the Raft node id).
pub type NodeId = u64;

/// What every node advertises (the openraft `Node` of the membership): its ZPER, Dolly, HTTP
/// and Raft addresses. Strings are ZeroMQ endpoints (`tcp://host:port`) or `host:port` for HTTP
/// and Raft.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeEndpoints {
    /// Human name of the node.
    pub name: String,
    /// Writer ROUTER.
    pub writer: String,
    /// Reader ROUTER.
    pub reader: String,
    /// Ack PUB.
    pub ack: String,
    /// Controller ROUTER.
    pub controller: String,
    /// Dolly requests ROUTER.
    pub dolly_requests: String,
    /// Dolly updates PUB.
    pub dolly_updates: String,
    /// Dolly snapshots ROUTER.
    pub dolly_snapshots: String,
    /// HTTP admin `host:port` (also carries the Raft RPCs).
    pub http: String,
}

openraft::declare_raft_types!(
    /// zper's openraft type configuration: metadata commands in, command results out.
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = NodeId,
        Node = NodeEndpoints,
);
