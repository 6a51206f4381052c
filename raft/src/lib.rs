//! zper-raft: the cluster's metadata, replicated by one Raft group (openraft 0.9) in place of
//! ZooKeeper, as Kafka's KRaft does (KIP-500/595): message data never goes through Raft.
//!
//! This crate owns the openraft type configuration ([`TypeConfig`]), the RocksDB log and vote
//! store ([`LogStore`]: every vote and appended entry is fsynced before openraft is told), the
//! replicated metadata ([`metadata`]: nodes, topics, fragment placement, the Dolly leader, applied
//! deterministically) and its openraft state machine ([`StateMachineStore`], snapshotted into
//! the same RocksDB). It must never touch zmq or the segment store.

// openraft's storage traits fix the error type (`StorageError`, ~224 bytes); boxing it in our
// helpers would only add conversions at every trait boundary.
#![allow(clippy::result_large_err)]

pub mod cluster;
pub mod controller;
pub mod dolly;
pub mod log_store;
pub mod metadata;
pub mod network;
pub mod state_machine;
mod types;

pub use cluster::{ClusterConfig, ClusterError, ClusterNode, ProposalStats};
pub use log_store::LogStore;
/// openraft's role of a Raft node (Leader, Follower, ..., Shutdown), as metrics report it.
pub use openraft::ServerState;
pub use state_machine::{DollyUpdate, StateMachineStore};
pub use types::{valid_http_address, NodeEndpoints, NodeId, TypeConfig};

/// Opens (creating if needed) the RocksDB database of a node's Raft state under `dir` and
/// returns its log store and state machine, which share the database.
///
/// Errors: RocksDB cannot open `dir`; a stored snapshot cannot be decoded.
pub fn open(
    dir: &std::path::Path,
) -> Result<(LogStore, StateMachineStore), openraft::StorageError<NodeId>> {
    let db = log_store::open_db(dir)?;
    let log = LogStore::new(db.clone());
    let sm = StateMachineStore::new(db)?;
    Ok((log, sm))
}
