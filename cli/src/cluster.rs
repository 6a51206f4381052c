//! `zper cluster status|ready|add-node|remove-node`: the admin API's cluster view and
//! membership (issue #3) as commands.

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;
use zper_client::Endpoints;

use crate::output::{ids, json, print, text, AdminTarget};
use crate::table::{render, Align::Left, Align::Right};

/// `zper cluster` subcommands.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Raft state and brokers.
    Status,
    /// Exit 0 when this node is ready (`GET /v1/status/ready`: a member that knows a leader
    /// and has applied its log), else 1: a container health check.
    Ready,
    /// Add a node as learner, then voter (through any node: the leader does it).
    AddNode {
        /// The new node's id.
        #[arg(long)]
        id: u64,
        /// Its HTTP admin address, host:port.
        #[arg(long)]
        http: String,
    },
    /// Remove a node from the voters (through any node: the leader does it).
    RemoveNode {
        /// Node id.
        id: u64,
    },
}

/// Runs `zper cluster ...`.
pub fn run(cmd: ClusterCommand, target: &AdminTarget, defaults: &Endpoints) -> Result<()> {
    let api = target.client(defaults)?;
    match cmd {
        ClusterCommand::Status => {
            let raft = json(&api.raft()?);
            let brokers = json(&api.brokers()?);
            let v = json!({ "raft": raft, "brokers": brokers });
            print(crate::output::json_output(), &v, |v| {
                let r = &v["raft"];
                let rows = v["brokers"].as_array().into_iter().flatten().map(|b| {
                    vec![
                        text(&b["id"]),
                        b["endpoints"]["name"].as_str().unwrap_or("").to_owned(),
                        text(&b["live"]),
                        if b["id"] == r["leader"] { "*" } else { "" }.to_owned(),
                        b["endpoints"]["writer"].as_str().unwrap_or("").to_owned(),
                        b["endpoints"]["reader"].as_str().unwrap_or("").to_owned(),
                    ]
                });
                format!(
                    "term {}  leader {}  voters {}  learners {}\n\n{}",
                    text(&r["term"]),
                    text(&r["leader"]),
                    ids(&r["voters"]),
                    ids(&r["learners"]),
                    render(
                        &[
                            ("ID", Right),
                            ("NAME", Left),
                            ("LIVE", Left),
                            ("LEADER", Left),
                            ("WRITER", Left),
                            ("READER", Left),
                        ],
                        rows.collect(),
                    )
                )
            });
        }
        ClusterCommand::Ready => {
            let v = json(&api.ready()?);
            print(crate::output::json_output(), &v, |v| {
                format!(
                    "ready: leader {}, applied {}\n",
                    text(&v["leader"]),
                    text(&v["last_applied"])
                )
            });
        }
        ClusterCommand::AddNode { id, http } => {
            let v = json(&api.add_node(id, &http)?);
            print(crate::output::json_output(), &v, |v| {
                format!("voters {}\n", ids(&v["voters"]))
            });
        }
        ClusterCommand::RemoveNode { id } => {
            api.remove_node(id)?;
            if !crate::output::json_output() {
                println!("removed node {id}");
            }
        }
    }
    Ok(())
}
