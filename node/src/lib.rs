//! zper: the node binary's library. Composes the segment store (`zper-store`) and the ZPER wire
//! codecs (`zper-wire`) into the writer, reader and ack endpoints of spec `zper.md`, plus the
//! configuration and the CLI. zmq lives here and only here.

pub mod cli;
mod cluster;
pub mod config;
pub mod dolly_peers;
pub mod endpoint;
pub mod memory;
pub mod metrics;
pub mod node;
pub mod replication;
pub mod subscriber;

pub use config::{ConfigError, NodeConfig};
pub use node::{Endpoints, Node, NodeError};
