//! zper-raft: the cluster's metadata, replicated by one Raft group (openraft 0.9) in place of
//! ZooKeeper, as Kafka's KRaft does (KIP-500/595): message data never goes through Raft.
//!
//! This crate owns the openraft glue: the type configuration ([`TypeConfig`]), the RocksDB log
//! and vote store ([`LogStore`]: every vote is fsynced before openraft is told, every appended
//! entry before its flush callback fires, several appends per fsync), the openraft state
//! machine ([`StateMachineStore`], snapshotted into the same RocksDB), the network, the cluster
//! handle, Dolly puts and the controller. The replicated metadata itself (nodes, topics,
//! fragment placement, the Dolly leader, applied deterministically) lives in the serde-only
//! crate `zper-meta`, re-exported here as [`metadata`]. It must never touch zmq or the segment
//! store.

// openraft's storage traits fix the error type (`StorageError`, ~224 bytes); boxing it in our
// helpers would only add conversions at every trait boundary.
#![allow(clippy::result_large_err)]

mod batch;
pub mod cluster;
pub mod controller;
pub mod dolly;
mod election;
mod error;
pub mod lease;
pub mod log_store;
mod log_sync;
mod members;
pub mod network;
pub mod snapshot_file;
pub mod state_machine;
mod stored;
pub mod tls;
pub mod transport;
mod types;

pub use cluster::{ClusterConfig, ClusterError, ClusterNode, ProposalStats};
pub use log_store::LogStore;
/// openraft's role of a Raft node (Leader, Follower, ..., Shutdown), as metrics report it.
pub use openraft::ServerState;
pub use state_machine::{DollyUpdate, StateMachineStore};
pub use types::TypeConfig;
/// The replicated cluster metadata (the `zper-meta` crate): commands, their deterministic apply,
/// fragment placement and subscription assignment.
pub use zper_meta as metadata;
pub use zper_meta::{valid_http_address, NodeEndpoints, NodeId};

/// Opens (creating if needed) the RocksDB database of a node's Raft state under `dir` and
/// returns its log store and state machine, which share the database.
///
/// Errors: RocksDB cannot open `dir`; a stored snapshot cannot be decoded.
pub fn open(
    dir: &std::path::Path,
) -> Result<(LogStore, StateMachineStore), openraft::StorageError<NodeId>> {
    let db = log_store::open_db(dir)?;
    let log = LogStore::new(db.clone())?;
    let sm = StateMachineStore::new(db)?;
    Ok((log, sm))
}
