//! The `zper` command line's arguments: run a node (default), produce, consume, subscribe,
//! topics, cluster, dolly and perf tools (spec `zper.md` §10). Each command's flags live in its
//! own module.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::{consume, dolly, output, perf, produce, run, subscribe};

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
    Run(run::RunArgs),
    /// Send messages to a topic: the arguments, or stdin lines when there are none.
    Produce(produce::ProduceArgs),
    /// Print a topic's messages from an offset, optionally following the log.
    Consume(consume::ConsumeArgs),
    /// Join a subscription group and print the records pushed to it, acknowledging each batch.
    Subscribe(subscribe::SubscribeArgs),
    /// Measure throughput and latency against a running node.
    #[command(subcommand)]
    Perf(perf::PerfCommand),
    /// Topics through the HTTP admin API: list, create, describe, delete.
    Topics {
        /// What to do.
        #[command(subcommand)]
        command: crate::topics::TopicsCommand,
        /// Admin address and output format.
        #[command(flatten)]
        target: output::AdminTarget,
    },
    /// Dolly's key/value map over Dolly's protocol: get KEY..., put KEY VALUE.
    Dolly {
        /// What to do.
        #[command(subcommand)]
        command: dolly::DollyCommand,
        /// Which node, and the reply timeout.
        #[command(flatten)]
        target: dolly::DollyTarget,
    },
    /// The cluster through the HTTP admin API: status, add-node, remove-node.
    Cluster {
        /// What to do.
        #[command(subcommand)]
        command: crate::cluster::ClusterCommand,
        /// Admin address and output format.
        #[command(flatten)]
        target: output::AdminTarget,
    },
}
