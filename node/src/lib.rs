//! zper-node: the server library. Composes the segment store (`zper-store`), the ZPER wire
//! codecs (`zper-wire`) and the Raft metadata (`zper-raft`, `zper-http`) into the writer,
//! reader, ack, controller, relay, replication and Dolly endpoints of spec `zper.md`, plus the
//! node's configuration. The `zper` binary (`cli/`) starts it with [`Node::start`]; clients
//! live in `zper-client`.

pub mod cluster_metrics;
pub mod config;
mod context;
pub mod control;
pub mod dolly;
pub mod endpoint;
pub mod error;
pub mod fetch;
mod mailbox;
pub mod membership;
pub mod memory;
pub mod metrics;
pub mod node;
pub mod produce;
pub(crate) mod relay;
pub mod replication;
mod sockets;
pub(crate) mod zmtp;

pub use config::{ConfigError, NodeConfig};
pub use node::{Endpoints, Node, NodeError};
