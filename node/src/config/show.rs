//! The effective configuration with each value's source, for `zper config show` (issue #15):
//! code default, the config file (or the embedded default file), or the command line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{apply_overrides, file_layer, keys, ConfigError, NodeConfig};

/// Where an effective value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "path")]
pub enum Source {
    /// The code default (the key is in no file and on no flag).
    Default,
    /// Computed from other keys (`node.name`, `raft.dir`, `http.advertise`).
    Computed,
    /// A config file: the `--config` file, or `<embedded default>`.
    File(PathBuf),
    /// A flag of `zper run` (`--set`, `--node-id`, `--voters`).
    CommandLine,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Computed => f.write_str("computed"),
            Source::File(p) => write!(f, "{}", p.display()),
            Source::CommandLine => f.write_str("command line"),
        }
    }
}

/// One key's effective value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Effective {
    /// The key (`controller.quorum.2`, not the table's `controller.quorum.N`).
    pub key: String,
    /// The value as the node reads it (comments and quotes stripped); empty when unset and
    /// without a default.
    pub value: String,
    /// Where it comes from.
    pub source: Source,
    /// Set for a key zper does not know (ignored) or accepts without effect, saying so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The effective value of every key for `path` (or the embedded default) with `overrides` on
/// top, in the key table's order, then the file's voters, unknown keys and keys without effect.
///
/// Errors: as [`NodeConfig::load`] (the whole config is validated first, so a value shown is
/// one the node accepts).
pub fn effective(
    path: Option<&Path>,
    overrides: &[(String, String)],
) -> Result<Vec<Effective>, ConfigError> {
    let config = NodeConfig::load(path, overrides)?;
    let (file, name) = file_layer(path)?;
    let mut merged = file.clone();
    apply_overrides(&mut merged, overrides);
    let from_command_line: HashMap<&str, &str> = overrides
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let source_of = |key: &str| -> Option<Source> {
        if from_command_line.contains_key(key) {
            Some(Source::CommandLine)
        } else if merged.contains_key(key) {
            Some(Source::File(name.clone()))
        } else {
            None
        }
    };
    let mut out = Vec::new();
    // Secrets are not printed (a terminal, a CI log).
    let shown = |key: &str, value: String| {
        if key == "http.admin_token" && !value.is_empty() {
            "<hidden>".to_owned()
        } else {
            value
        }
    };
    for k in keys::KEYS {
        if k.name == "controller.quorum.N" {
            let mut voters: Vec<(u64, &String)> = merged
                .iter()
                .filter_map(|(key, v)| {
                    let id = key.strip_prefix("controller.quorum.")?.parse().ok()?;
                    Some((id, v))
                })
                .collect();
            voters.sort();
            if voters.is_empty() {
                out.push(Effective {
                    key: k.name.into(),
                    value: String::new(),
                    source: Source::Computed,
                    note: Some("no voters listed: this node alone is the Raft group".into()),
                });
            }
            for (id, v) in voters {
                let key = format!("controller.quorum.{id}");
                out.push(Effective {
                    source: source_of(&key).unwrap_or(Source::Default),
                    key,
                    value: v.clone(),
                    note: None,
                });
            }
            continue;
        }
        let (value, source) = match (merged.get(k.name), source_of(k.name)) {
            (Some(v), Some(source)) => (v.clone(), source),
            _ => match computed(&config, k.name) {
                Some(v) => (v, Source::Computed),
                None => (k.default.to_owned(), Source::Default),
            },
        };
        out.push(Effective {
            key: k.name.into(),
            value: shown(k.name, value),
            source,
            note: None,
        });
    }
    let mut extra: Vec<&String> = merged
        .keys()
        .filter(|key| !keys::is_known(key) || keys::no_effect(key).is_some())
        .collect();
    extra.sort();
    for key in extra {
        let note = match keys::no_effect(key) {
            Some(why) => format!("no effect in zper: {why}"),
            None => "unknown key, ignored".to_owned(),
        };
        out.push(Effective {
            key: key.clone(),
            value: merged[key].clone(),
            source: source_of(key).unwrap_or(Source::Default),
            note: Some(note),
        });
    }
    Ok(out)
}

/// The value a key without a setting takes from other keys.
fn computed(config: &NodeConfig, key: &str) -> Option<String> {
    let cluster = &config.cluster;
    match key {
        "node.name" => Some(format!("node{}", cluster.node_id)),
        "raft.dir" => Some(
            cluster
                .raft_dir
                .clone()
                .unwrap_or_else(|| config.store.base_dir.join(".raft"))
                .display()
                .to_string(),
        ),
        "http.advertise" => Some(cluster.http_advertise.clone().unwrap_or_else(|| {
            match cluster.http_bind.rsplit_once(':') {
                Some(("0.0.0.0" | "[::]" | "::", port)) => format!("127.0.0.1:{port}"),
                _ => cluster.http_bind.clone(),
            }
        })),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_names_its_source() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("server.properties");
        std::fs::write(
            &path,
            "segment_size = 1048576   # 1 MiB\nbase_dir = \"/tmp/z\"\nwriter.replica.1 = x\nfoo = 1\n",
        )
        .expect("write");
        let overrides = vec![
            ("http.bind".to_owned(), "0.0.0.0:19644".to_owned()),
            ("http.admin_token".to_owned(), "s3cret".to_owned()),
        ];
        let shown = effective(Some(&path), &overrides).expect("valid");
        let get = |key: &str| shown.iter().find(|e| e.key == key).expect(key).clone();
        assert_eq!(get("segment_size").value, "1048576");
        assert_eq!(get("segment_size").source, Source::File(path.clone()));
        assert_eq!(get("base_dir").value, "/tmp/z");
        assert_eq!(get("http.bind").source, Source::CommandLine);
        assert_eq!(get("http.admin_token").value, "<hidden>");
        assert_eq!(get("http.advertise").value, "127.0.0.1:19644");
        assert_eq!(get("http.advertise").source, Source::Computed);
        assert_eq!(get("raft.dir").value, "/tmp/z/.raft");
        assert_eq!(get("reader.bind").source, Source::Default);
        assert_eq!(get("reader.bind").value, "tcp://*:5556");
        assert!(get("foo").note.expect("note").contains("unknown"));
        assert!(get("writer.replica.1")
            .note
            .expect("note")
            .contains("no effect"));
        assert!(effective(Some(&path), &[("segment_size".into(), "x".into())]).is_err());
    }
}
