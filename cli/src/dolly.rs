//! `zper dolly get|put`: Dolly's client (`dolly.md` §6) through [`zper_client::DollyClient`].
//!
//! The client prints Dolly's lines (`K set in state N`, `K = V (state N)`, `could not get K:
//! MSG`), but unlike the original it applies `--timeout` and exits 1 when a request failed.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use zper_client::dolly::DollyReply;
use zper_client::{endpoint, DollyClient, Endpoints};

use crate::duration::parse_duration;
use crate::output::{json_line, json_output};

/// Which node to ask, as Dolly's `-p/-n` or an endpoint.
#[derive(Debug, Args)]
pub struct DollyTarget {
    /// A node's Dolly requests endpoint (`host:port` or `tcp://host:port`; default: from
    /// --config, else 127.0.0.1:3266).
    #[arg(long, short = 'e', global = true)]
    pub endpoint: Option<String>,
    /// Dolly's peers.json: with --name, ask that peer at `tcp://<address>:<requests>`.
    #[arg(long, short = 'p', global = true, value_name = "FILE")]
    pub peers: Option<PathBuf>,
    /// The peer's name in --peers.
    #[arg(long, global = true)]
    pub name: Option<String>,
    /// How long to wait for each reply: `2s`, `500ms` or a number of ms.
    #[arg(long, global = true, default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// `zper dolly` subcommands.
#[derive(Debug, Subcommand)]
pub enum DollyCommand {
    /// Read keys (one request each, in order).
    Get {
        /// Keys.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Write one key.
    Put {
        /// Key.
        key: String,
        /// Value.
        value: String,
    },
}

/// The requests endpoint named by `t`.
///
/// Errors: `--name` without `--peers` (or the reverse), an unreadable or invalid peers.json, an
/// unknown name.
pub fn resolve(t: &DollyTarget, targets: &Endpoints) -> Result<String> {
    match (&t.peers, &t.name, &t.endpoint) {
        (Some(_), _, Some(_)) => bail!("give either --endpoint or --peers/--name, not both"),
        (Some(path), Some(name), None) => {
            let peers = zper_node::dolly::peers::load(path)?;
            let peer = peers
                .iter()
                .find(|p| &p.name == name)
                .with_context(|| format!("could not find replica named {name}"))?;
            if peer.requests == 0 {
                bail!("peer {name} has no requests port");
            }
            let host = if peer.address.is_empty() {
                "127.0.0.1"
            } else {
                &peer.address
            };
            Ok(format!("tcp://{host}:{}", peer.requests))
        }
        (Some(_), None, None) => bail!("--peers needs --name (the peer to ask)"),
        (None, Some(_), _) => bail!("--name needs --peers"),
        (None, None, Some(e)) => Ok(endpoint(e)),
        (None, None, None) => Ok(targets.dolly.clone()),
    }
}

/// Runs `zper dolly ...`.
///
/// Errors: bad target; no reply in time; any `Error` reply (after printing it).
pub fn run(command: DollyCommand, target: &DollyTarget, targets: &Endpoints) -> Result<()> {
    let at = resolve(target, targets)?;
    let ctx = zmq::Context::new();
    let client = DollyClient::connect_with(&ctx, &at, targets.curve.as_ref())?;
    match command {
        DollyCommand::Put { key, value } => {
            match client.put(key.as_bytes(), value.as_bytes(), target.timeout)? {
                DollyReply::Value { sequence, .. } if json_output() => {
                    json_line(&serde_json::json!({"key": key, "sequence": sequence}))
                }
                DollyReply::Value { sequence, .. } => println!("{key} set in state {sequence}"),
                DollyReply::Error(e) => bail!("could not put {key}: {e}"),
            }
        }
        DollyCommand::Get { keys } => {
            let mut failed = 0;
            for key in &keys {
                match client.get(key.as_bytes(), target.timeout)? {
                    DollyReply::Value { value, sequence } if json_output() => json_line(
                        &serde_json::json!({"key": key, "value": String::from_utf8_lossy(&value), "sequence": sequence}),
                    ),
                    DollyReply::Error(e) if json_output() => {
                        json_line(&serde_json::json!({"key": key, "error": e}));
                        failed += 1;
                    }
                    DollyReply::Value { value, sequence } => println!(
                        "{key} = {} (state {sequence})",
                        String::from_utf8_lossy(&value)
                    ),
                    DollyReply::Error(e) => {
                        eprintln!("could not get {key}: {e}");
                        failed += 1;
                    }
                }
            }
            if failed > 0 {
                bail!(
                    "{failed} of {} not read",
                    crate::output::count(keys.len() as u64, "key", "keys")
                );
            }
        }
    }
    Ok(())
}
