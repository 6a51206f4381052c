//! The `zper` command line: run a node (default), produce, consume, and perf tools in the spirit
//! of ZPER's ProducerPerformance/ConsumerPerformance (spec `zper.md` §10).

pub mod admin;
pub mod client;
pub mod consume;
pub mod perf;
pub mod produce;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// zper: a ZeroMQ persistence broker speaking ZPER's protocol.
#[derive(Debug, Parser)]
#[command(name = "zper", version, about)]
pub struct Cli {
    /// A server.properties-style config file (default: the embedded one, data under ./data).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// What to do (default: run a node).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node (the default when no subcommand is given).
    Run,
    /// Send messages to a topic: the arguments, or stdin lines when there are none.
    Produce(produce::ProduceArgs),
    /// Print a topic's messages from an offset, optionally following the log.
    Consume(consume::ConsumeArgs),
    /// Measure throughput and latency against a running node.
    #[command(subcommand)]
    Perf(perf::PerfCommand),
    /// Topics through the HTTP admin API: list, create, describe, delete.
    Topics {
        /// What to do.
        #[command(subcommand)]
        command: admin::TopicsCommand,
        /// Admin address and output format.
        #[command(flatten)]
        target: admin::AdminTarget,
    },
    /// The cluster through the HTTP admin API: status, add-node, remove-node.
    Cluster {
        /// What to do.
        #[command(subcommand)]
        command: admin::ClusterCommand,
        /// Admin address and output format.
        #[command(flatten)]
        target: admin::AdminTarget,
    },
}
