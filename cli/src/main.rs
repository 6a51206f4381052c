//! `zper`: run a node (default) or use the CLI tools. See `zper --help`.
//!
//! The binary is argument parsing and output only: `zper run` starts the server from
//! `zper-node`; every other command talks to nodes through `zper-client`, one module each.

mod args;
mod cluster;
mod config;
mod consume;
mod dolly;
mod duration;
mod keygen;
mod output;
mod payload;
mod perf;
mod position;
mod produce;
mod run;
mod subscribe;
mod table;
mod targets;
mod topic_name;
mod topics;

use std::io::Write;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use args::{Cli, Command};
use targets::targets;

/// jemalloc: its statistics are the node's memory budget (`zper_node::memory`), and it returns
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
    output::set_json(cli.json);
    let config = cli.config.as_deref();
    let curve = (
        cli.curve_server_key.clone(),
        cli.curve_secret_key_file.clone(),
    );
    let targets = |config| -> anyhow::Result<zper_client::Endpoints> {
        let mut t = targets(config)?;
        t.curve = client_curve(curve.0.as_deref(), curve.1.as_deref())?;
        Ok(t)
    };
    let result = match cli.command {
        None => run::run(config, &run::RunArgs::default()),
        Some(Command::Run(args)) => run::run(config, &args),
        Some(Command::Produce(a)) => targets(config).and_then(|t| produce::run(a, &t)),
        Some(Command::Consume(a)) => targets(config).and_then(|t| consume::run(a, &t)),
        Some(Command::Subscribe(a)) => targets(config).and_then(|t| subscribe::run(a, &t)),
        Some(Command::Perf(p)) => targets(config).and_then(|t| perf::run(p, &t)),
        Some(Command::Topics { command, target }) => {
            targets(config).and_then(|t| topics::run(command, &target, &t))
        }
        Some(Command::Dolly { command, target }) => {
            targets(config).and_then(|t| dolly::run(command, &target, &t))
        }
        Some(Command::Cluster { command, target }) => {
            targets(config).and_then(|t| cluster::run(command, &target, &t))
        }
        Some(Command::Config { command }) => config::run(command, config),
        Some(Command::Keygen(args)) => keygen::run(&args),
        Some(Command::Completions { shell }) => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "zper", &mut std::io::stdout());
            Ok(())
        }
    };
    if let Err(e) = result {
        // `zper consume ... | head`: the reader went away, which is how a pipe ends.
        if e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        }) {
            std::process::exit(0);
        }
        // Not eprintln!: it panics when stderr is a closed pipe.
        let _ = writeln!(std::io::stderr(), "zper: {}", error_chain(&e));
        std::process::exit(1);
    }
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

/// The CURVE keys of `--curve-server-key` and `--curve-secret-key-file` (both or neither).
///
/// Errors: only one of the two given, or a key that cannot be read.
fn client_curve(
    server_key: Option<&str>,
    secret_key_file: Option<&std::path::Path>,
) -> anyhow::Result<Option<zper_client::ClientCurve>> {
    match (server_key, secret_key_file) {
        (None, None) => Ok(None),
        (Some(server), Some(file)) => Ok(Some(zper_client::ClientCurve::load(server, file)?)),
        (Some(_), None) => anyhow::bail!(
            "--curve-server-key needs --curve-secret-key-file too (this client's key pair; `zper keygen NAME` makes one)"
        ),
        (None, Some(_)) => anyhow::bail!(
            "--curve-secret-key-file needs --curve-server-key too (the node's public key, or its NAME.key file)"
        ),
    }
}
