//! `zper`: run a node (default) or use the CLI tools. See `zper --help`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use tracing_subscriber::EnvFilter;
use zper::cli::client::Targets;
use zper::cli::{consume, perf, produce, Cli, Command, RunArgs};
use zper::{Node, NodeConfig};

/// jemalloc: its statistics are the node's memory budget (`zper::memory`), and it returns
/// freed memory to the system.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,openraft=error".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let config = cli.config.as_deref();
    let result = match cli.command {
        None => run_node(config, &RunArgs::default()),
        Some(Command::Run(args)) => run_node(config, &args),
        Some(Command::Produce(a)) => Targets::from_config(config).and_then(|t| produce::run(a, &t)),
        Some(Command::Consume(a)) => Targets::from_config(config).and_then(|t| consume::run(a, &t)),
        Some(Command::Subscribe(a)) => {
            Targets::from_config(config).and_then(|t| zper::cli::subscribe::run(a, &t))
        }
        Some(Command::Perf(p)) => Targets::from_config(config).and_then(|t| perf::run(p, &t)),
        Some(Command::Topics { command, target }) => Targets::from_config(config)
            .and_then(|t| zper::cli::admin::topics(command, &target, &t)),
        Some(Command::Dolly { command, target }) => {
            Targets::from_config(config).and_then(|t| zper::cli::dolly::run(command, &target, &t))
        }
        Some(Command::Cluster { command, target }) => Targets::from_config(config)
            .and_then(|t| zper::cli::admin::cluster(command, &target, &t)),
    };
    if let Err(e) = result {
        // Not eprintln!: it panics when stderr is a closed pipe.
        let _ = writeln!(std::io::stderr(), "zper: {}", error_chain(&e));
        std::process::exit(1);
    }
}

fn run_node(config: Option<&std::path::Path>, args: &RunArgs) -> Result<()> {
    let overrides = args.overrides().map_err(anyhow::Error::msg)?;
    let config = NodeConfig::load(config, &overrides)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("install signal handler")?;
    }
    zper::memory::return_freed_memory_in_background();
    let node = Node::start(&config)?;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    node.shutdown()?;
    Ok(())
}

/// The error and its causes, skipping a cause whose text the previous message already contains
/// (our errors print their source inline).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
