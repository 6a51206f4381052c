//! `zper`: run a node (default) or use the CLI tools. See `zper --help`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use tracing_subscriber::EnvFilter;
use zper::cli::{consume, perf, produce, Cli, Command};
use zper::{Node, NodeConfig};

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        None | Some(Command::Run) => run_node(cli.config.as_deref()),
        Some(Command::Produce(a)) => produce::run(a),
        Some(Command::Consume(a)) => consume::run(a),
        Some(Command::Perf(p)) => perf::run(p),
    };
    if let Err(e) = result {
        eprintln!("zper: {e:#}");
        std::process::exit(1);
    }
}

fn run_node(config: Option<&std::path::Path>) -> Result<()> {
    let config = match config {
        Some(path) => NodeConfig::from_file(path)?,
        None => NodeConfig::embedded()?,
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("install signal handler")?;
    }
    let node = Node::start(&config)?;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    node.shutdown()?;
    Ok(())
}
