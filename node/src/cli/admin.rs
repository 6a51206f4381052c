//! `zper topics ...` and `zper cluster ...`: the HTTP admin API (issue #3) as commands, human
//! tables by default, `--json` for scripts. HTTP errors print their `{code, message}` and exit 1.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::cli::client::Targets;

/// Where the admin API is.
#[derive(Debug, Args)]
pub struct AdminTarget {
    /// HTTP admin address `host:port` (default: from --config, else 127.0.0.1:9644).
    #[arg(long, global = true)]
    pub admin: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// Admin token for mutating commands on a node with `http.admin_token` set (default: from
    /// --config).
    #[arg(long, global = true, env = "ZPER_ADMIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// `zper topics` subcommands.
#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// List topics.
    List,
    /// Create a topic.
    Create {
        /// Topic name (1-64 ASCII letters or digits).
        name: String,
        /// Fragments (default 1).
        #[arg(long)]
        fragments: Option<u32>,
        /// Copies of each fragment (default min(3, live nodes)).
        #[arg(long)]
        replication_factor: Option<u32>,
        /// Retention in hours (default 168).
        #[arg(long)]
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
    /// Delete a topic.
    Delete {
        /// Topic name.
        name: String,
    },
}

/// `zper cluster` subcommands.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Raft state and brokers.
    Status,
    /// Exit 0 when this node is ready (`GET /v1/status/ready`: a member that knows a leader
    /// and has applied its log), else 1: a container health check.
    Ready,
    /// Add a node as learner, then voter (run against the leader).
    AddNode {
        /// The new node's id.
        #[arg(long)]
        id: u64,
        /// Its HTTP admin address, host:port.
        #[arg(long)]
        http: String,
    },
    /// Remove a node from the voters (run against the leader).
    RemoveNode {
        /// Node id.
        id: u64,
    },
}

struct Api {
    base: String,
    client: reqwest::blocking::Client,
    token: Option<String>,
}

impl Api {
    fn new(target: &AdminTarget, defaults: &Targets) -> Result<Self> {
        let admin = target.admin.as_deref().unwrap_or(&defaults.admin);
        Ok(Api {
            token: target
                .token
                .clone()
                .or_else(|| defaults.admin_token.clone()),
            base: format!("http://{admin}"),
            client: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
        })
    }

    fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value> {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .map_err(|e| anyhow!("admin API at {} not reachable: {e}", self.base))?;
        let status = resp.status();
        let text = resp.text()?;
        let value: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if !status.is_success() {
            let message = match value["message"].as_str() {
                Some(m) => m.to_owned(),
                None => value.to_string(),
            };
            bail!(
                "{} ({}): {message}",
                value["code"].as_str().unwrap_or("error"),
                status.as_u16(),
            );
        }
        Ok(value)
    }
}

/// A JSON value as table text (`serde_json::Value`'s Display ignores width and alignment).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

fn ids(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

fn print(json_out: bool, value: &Value, table: impl FnOnce(&Value) -> String) {
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    } else {
        print!("{}", table(value));
    }
}

/// Runs `zper topics ...`.
pub fn topics(cmd: TopicsCommand, target: &AdminTarget, defaults: &Targets) -> Result<()> {
    let api = Api::new(target, defaults)?;
    match cmd {
        TopicsCommand::List => {
            let v = api.call(reqwest::Method::GET, "/v1/topics", None)?;
            print(target.json, &v, |v| {
                let mut out = format!(
                    "{:<24} {:>9} {:>3} {:>6} {}\n",
                    "TOPIC", "FRAGMENTS", "RF", "RETAIN", "POLICY"
                );
                for t in v.as_array().into_iter().flatten() {
                    out += &format!(
                        "{:<24} {:>9} {:>3} {:>5}h {}\n",
                        t["name"].as_str().unwrap_or(""),
                        t["fragments"].as_array().map_or(0, Vec::len),
                        text(&t["replication_factor"]),
                        text(&t["retain_hours"]),
                        t["policy"].as_str().unwrap_or("")
                    );
                }
                out
            });
        }
        TopicsCommand::Create {
            name,
            fragments,
            replication_factor,
            retain_hours,
            policy,
        } => {
            let mut body = json!({});
            if let Some(f) = fragments {
                body["fragments"] = json!(f);
            }
            if let Some(r) = replication_factor {
                body["replication_factor"] = json!(r);
            }
            if let Some(h) = retain_hours {
                body["retain_hours"] = json!(h);
            }
            if let Some(p) = policy {
                body["policy"] = json!(p);
            }
            let v = api.call(
                reqwest::Method::POST,
                &format!("/v1/topics/{name}"),
                Some(body),
            )?;
            print(target.json, &v, |v| {
                format!("created {}\n", v["name"].as_str().unwrap_or(""))
            });
        }
        TopicsCommand::Describe { name } => {
            let v = api.call(reqwest::Method::GET, &format!("/v1/topics/{name}"), None)?;
            print(target.json, &v, |v| {
                let mut out = format!(
                    "{:>8} {:>6} {:>6} {:<12} {:<12} {:>12} {:>12}\n",
                    "FRAGMENT", "LEADER", "EPOCH", "REPLICAS", "ISR", "START", "END"
                );
                let offset = |o: &Value| o.as_u64().map_or("-".to_owned(), |n| n.to_string());
                for f in v["fragments"].as_array().into_iter().flatten() {
                    out += &format!(
                        "{:>8} {:>6} {:>6} {:<12} {:<12} {:>12} {:>12}\n",
                        text(&f["id"]),
                        text(&f["leader"]),
                        text(&f["leader_epoch"]),
                        ids(&f["replicas"]),
                        ids(&f["isr"]),
                        offset(&f["start_offset"]),
                        offset(&f["end_offset"])
                    );
                }
                out
            });
        }
        TopicsCommand::Delete { name } => {
            api.call(reqwest::Method::DELETE, &format!("/v1/topics/{name}"), None)?;
            if !target.json {
                println!("deleted {name}");
            }
        }
    }
    Ok(())
}

/// Runs `zper cluster ...`.
pub fn cluster(cmd: ClusterCommand, target: &AdminTarget, defaults: &Targets) -> Result<()> {
    let api = Api::new(target, defaults)?;
    match cmd {
        ClusterCommand::Status => {
            let raft = api.call(reqwest::Method::GET, "/v1/raft", None)?;
            let brokers = api.call(reqwest::Method::GET, "/v1/brokers", None)?;
            let v = json!({ "raft": raft, "brokers": brokers });
            print(target.json, &v, |v| {
                let r = &v["raft"];
                let mut out = format!(
                    "term {}  leader {}  voters {}  learners {}\n\n{:>4} {:<12} {:>5} {:>6} {:<28} {}\n",
                    text(&r["term"]), text(&r["leader"]), ids(&r["voters"]), ids(&r["learners"]),
                    "ID", "NAME", "LIVE", "LEADER", "WRITER", "READER"
                );
                for b in v["brokers"].as_array().into_iter().flatten() {
                    out += &format!(
                        "{:>4} {:<12} {:>5} {:>6} {:<28} {}\n",
                        text(&b["id"]),
                        b["endpoints"]["name"].as_str().unwrap_or(""),
                        text(&b["live"]),
                        if b["id"] == r["leader"] { "*" } else { "" },
                        b["endpoints"]["writer"].as_str().unwrap_or(""),
                        b["endpoints"]["reader"].as_str().unwrap_or("")
                    );
                }
                out
            });
        }
        ClusterCommand::Ready => {
            let v = api.call(reqwest::Method::GET, "/v1/status/ready", None)?;
            print(target.json, &v, |v| {
                format!(
                    "ready: leader {}, applied {}\n",
                    text(&v["leader"]),
                    text(&v["last_applied"])
                )
            });
        }
        ClusterCommand::AddNode { id, http } => {
            let v = api.call(
                reqwest::Method::POST,
                "/v1/cluster/nodes",
                Some(json!({ "id": id, "http": http })),
            )?;
            print(target.json, &v, |v| {
                format!("voters {}\n", ids(&v["voters"]))
            });
        }
        ClusterCommand::RemoveNode { id } => {
            api.call(
                reqwest::Method::DELETE,
                &format!("/v1/cluster/nodes/{id}"),
                None,
            )?;
            if !target.json {
                println!("removed node {id}");
            }
        }
    }
    Ok(())
}
