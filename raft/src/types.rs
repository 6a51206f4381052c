//! The openraft type configuration of the zper cluster.

use std::io::Cursor;

use crate::metadata::{Command, CommandResult};
use crate::{NodeEndpoints, NodeId};

openraft::declare_raft_types!(
    /// zper's openraft type configuration: metadata commands in, command results out.
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = NodeId,
        Node = NodeEndpoints,
);
