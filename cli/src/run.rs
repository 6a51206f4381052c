//! `zper run`: start a node from the `zper-node` library with the config file and flags, until
//! SIGINT or SIGTERM.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use zper_node::{Node, NodeConfig};

/// Flags of `zper run`; each overrides the config file's key of the same meaning.
#[derive(Debug, Default, clap::Args)]
pub struct RunArgs {
    /// This node's id, >= 1 (key `node.id`).
    #[arg(long, value_name = "ID", conflicts_with = "node_id_from_hostname")]
    pub node_id: Option<u64>,
    /// Take the node id from the host name's trailing `-<ordinal>` plus 1 (a StatefulSet pod
    /// `zper-0` is node 1), as the Helm chart does.
    #[arg(long)]
    pub node_id_from_hostname: bool,
    /// The initial voters, `ID=HOST:PORT` of their HTTP admin address, comma-separated or
    /// repeated (keys `controller.quorum.ID`; replaces the file's voters). A node whose id is not
    /// among them waits to be added with `zper cluster add-node`.
    #[arg(long = "voters", value_name = "ID=HOST:PORT", value_delimiter = ',')]
    pub voters: Vec<String>,
    /// Any other key, `KEY=VALUE` (repeatable), for example `--set http.bind=0.0.0.0:9645`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

impl RunArgs {
    /// The flags as config (key, value) overrides, in order: `--set`, then `--node-id`, then
    /// `--voters`.
    ///
    /// Errors: a `--voters` or `--set` item without `=`, naming the item.
    pub fn overrides(&self) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        for item in &self.set {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("--set {item:?}: expected KEY=VALUE"))?;
            out.push((k.trim().to_owned(), v.trim().to_owned()));
        }
        if let Some(id) = self.node_id {
            out.push(("node.id".into(), id.to_string()));
        }
        if self.node_id_from_hostname {
            let host = hostname();
            let id = node_id_of_hostname(&host).ok_or_else(|| {
                format!("--node-id-from-hostname: host name {host:?} does not end in -<ordinal>")
            })?;
            out.push(("node.id".into(), id.to_string()));
        }
        let mut seen = std::collections::BTreeSet::new();
        for item in &self.voters {
            let (id, addr) = item
                .split_once('=')
                .ok_or_else(|| format!("--voters {item:?}: expected ID=HOST:PORT"))?;
            if !seen.insert(id.trim().to_owned()) {
                return Err(format!("--voters: node id {} is listed twice", id.trim()));
            }
            out.push((
                format!("controller.quorum.{}", id.trim()),
                addr.trim().to_owned(),
            ));
        }
        Ok(out)
    }
}

/// Runs a node until SIGINT/SIGTERM, then shuts it down.
///
/// Errors: a bad flag or config (naming the key), a node that cannot start.
pub fn run(config: Option<&std::path::Path>, args: &RunArgs) -> Result<()> {
    let mut overrides = args.overrides().map_err(anyhow::Error::msg)?;
    token_from_env(&mut overrides, std::env::var("ZPER_ADMIN_TOKEN").ok());
    let config = NodeConfig::load(config, &overrides)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("install signal handler")?;
    }
    zper_node::memory::return_freed_memory_in_background();
    let node = Node::start(&config)?;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    node.shutdown()?;
    Ok(())
}

/// `$ZPER_ADMIN_TOKEN` (the Helm chart's Secret) as `http.admin_token`, unless the flags set
/// the key (then they win). An empty variable changes nothing.
pub fn token_from_env(overrides: &mut Vec<(String, String)>, token: Option<String>) {
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return;
    };
    if !overrides.iter().any(|(k, _)| k == "http.admin_token") {
        overrides.push(("http.admin_token".into(), token));
    }
}

/// This machine's host name (`$HOSTNAME`, else the kernel's).
fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// `name-<ordinal>` -> ordinal + 1 (a StatefulSet pod name).
pub fn node_id_of_hostname(host: &str) -> Option<u64> {
    let (_, ordinal) = host.rsplit_once('-')?;
    ordinal.parse::<u64>().ok()?.checked_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_token_comes_from_the_environment_unless_a_flag_sets_it() {
        let mut o = Vec::new();
        token_from_env(&mut o, Some("s3cret".into()));
        assert_eq!(o, [("http.admin_token".to_owned(), "s3cret".to_owned())]);
        let mut o = vec![("http.admin_token".to_owned(), "flag".to_owned())];
        token_from_env(&mut o, Some("env".into()));
        assert_eq!(o, [("http.admin_token".to_owned(), "flag".to_owned())]);
        let mut o = Vec::new();
        token_from_env(&mut o, Some(String::new()));
        assert!(o.is_empty());
    }

    #[test]
    fn statefulset_pod_names_give_node_ids_from_1() {
        assert_eq!(node_id_of_hostname("zper-0"), Some(1));
        assert_eq!(node_id_of_hostname("rel-zper-12"), Some(13));
        assert_eq!(node_id_of_hostname("zper"), None);
        assert_eq!(node_id_of_hostname("zper-x"), None);
    }
}
