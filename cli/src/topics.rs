//! `zper topics list|create|describe|delete`: the admin API's topics (issue #3) as commands.

use anyhow::Result;
use clap::Subcommand;
use serde_json::Value;
use zper_client::admin::{AlterTopicRequest, CreateTopicRequest, FragmentPolicy};
use zper_client::Endpoints;

use crate::output::{ids, json, print, text, AdminTarget};
use crate::table::{render, Align::Left, Align::Right};

/// `zper topics` subcommands.
#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// List topics.
    List,
    /// Create a topic.
    Create {
        /// Topic name (1-64 ASCII letters or digits).
        #[arg(value_parser = crate::topic_name::topic_name)]
        name: String,
        /// Fragments (default 1).
        #[arg(long)]
        fragments: Option<u32>,
        /// Copies of each fragment (default min(3, live nodes)).
        #[arg(long)]
        replication_factor: Option<u32>,
        /// Retention in hours, or a duration in whole hours such as `7days` (default 168).
        #[arg(long, value_parser = crate::duration::parse_hours)]
        retain_hours: Option<u32>,
        /// Fragment policy: default or distribution.
        #[arg(long, value_parser = ["default", "distribution"])]
        policy: Option<String>,
    },
    /// Show a topic's fragments: leader, epoch, replicas, in-sync replicas, and this node's
    /// start/end offsets (`-` where it holds no copy).
    Describe {
        /// Topic name.
        name: String,
    },
    /// Change a topic after creation: its retention (through Raft; every node's retention
    /// uses it from its next check).
    Alter {
        /// Topic name.
        name: String,
        /// New retention: hours, or a duration in whole hours such as `7days`.
        #[arg(long, value_parser = crate::duration::parse_hours)]
        retain_hours: u32,
    },
    /// Delete a topic.
    Delete {
        /// Topic name.
        name: String,
    },
}

/// Bytes this node holds of `fragments` (end - start offset), human-readable (`1.5 MiB`); `-`
/// when it holds none of them. Exact numbers are in `--json`.
fn stored<'a>(fragments: impl Iterator<Item = &'a Value>) -> String {
    let mut total = None;
    for f in fragments {
        if let (Some(start), Some(end)) = (f["start_offset"].as_u64(), f["end_offset"].as_u64()) {
            *total.get_or_insert(0u64) += end.saturating_sub(start);
        }
    }
    total.map_or("-".to_owned(), crate::output::human_bytes)
}

/// Messages this node holds of `fragments`: `-` when it holds none, `counting` while the node
/// has not counted them all yet (it counts a bounded amount per request; ask again).
fn messages<'a>(fragments: impl Iterator<Item = &'a Value>) -> String {
    let (mut total, mut held, mut counting) = (0u64, false, false);
    for f in fragments.filter(|f| f["start_offset"].as_u64().is_some()) {
        held = true;
        match f["messages"].as_u64() {
            Some(n) => total += n,
            None => counting = true,
        }
    }
    match (held, counting) {
        (false, _) => "-".to_owned(),
        (true, true) => "counting".to_owned(),
        (true, false) => total.to_string(),
    }
}

/// Runs `zper topics ...`.
pub fn run(cmd: TopicsCommand, target: &AdminTarget, defaults: &Endpoints) -> Result<()> {
    let api = target.client(defaults)?;
    match cmd {
        TopicsCommand::List => {
            let v = json(&api.topics()?);
            print(crate::output::json_output(), &v, |v| {
                let rows = v.as_array().into_iter().flatten().map(|t| {
                    vec![
                        t["name"].as_str().unwrap_or("").to_owned(),
                        t["fragments"].as_array().map_or(0, Vec::len).to_string(),
                        text(&t["replication_factor"]),
                        format!("{}h", text(&t["retain_hours"])),
                        t["policy"].as_str().unwrap_or("").to_owned(),
                        stored(t["fragments"].as_array().into_iter().flatten()),
                        messages(t["fragments"].as_array().into_iter().flatten()),
                    ]
                });
                render(
                    &[
                        ("TOPIC", Left),
                        ("FRAGMENTS", Right),
                        ("RF", Right),
                        ("RETAIN", Right),
                        ("POLICY", Left),
                        ("SIZE", Right),
                        ("MESSAGES", Right),
                    ],
                    rows.collect(),
                )
            });
        }
        TopicsCommand::Create {
            name,
            fragments,
            replication_factor,
            retain_hours,
            policy,
        } => {
            let spec = CreateTopicRequest {
                fragments,
                replication_factor,
                retain_hours,
                policy: policy.map(|p| match p.as_str() {
                    "distribution" => FragmentPolicy::Distribution,
                    _ => FragmentPolicy::Default,
                }),
            };
            let v = json(&api.create_topic(&name, &spec)?);
            print(crate::output::json_output(), &v, |v| {
                format!("created {}\n", v["name"].as_str().unwrap_or(""))
            });
        }
        TopicsCommand::Describe { name } => {
            let v = json(&api.topic(&name)?);
            print(crate::output::json_output(), &v, |v| {
                let offset = |o: &Value| o.as_u64().map_or("-".to_owned(), |n| n.to_string());
                let rows = v["fragments"].as_array().into_iter().flatten().map(|f| {
                    vec![
                        text(&f["id"]),
                        text(&f["leader"]),
                        text(&f["leader_epoch"]),
                        ids(&f["replicas"]),
                        ids(&f["isr"]),
                        offset(&f["start_offset"]),
                        offset(&f["end_offset"]),
                        stored(std::iter::once(f)),
                        messages(std::iter::once(f)),
                    ]
                });
                render(
                    &[
                        ("FRAGMENT", Right),
                        ("LEADER", Right),
                        ("EPOCH", Right),
                        ("REPLICAS", Left),
                        ("ISR", Left),
                        ("START", Right),
                        ("END", Right),
                        ("SIZE", Right),
                        ("MESSAGES", Right),
                    ],
                    rows.collect(),
                )
            });
        }
        TopicsCommand::Alter { name, retain_hours } => {
            let v = json(&api.alter_topic(&name, &AlterTopicRequest { retain_hours })?);
            print(crate::output::json_output(), &v, |v| {
                format!("{}: retain_hours = {}\n", name, text(&v["retain_hours"]))
            });
        }
        TopicsCommand::Delete { name } => {
            api.delete_topic(&name)?;
            if !crate::output::json_output() {
                println!("deleted {name}");
            }
        }
    }
    Ok(())
}
