//! Dolly's `peers.json` (`dolly.md` §2) as the Dolly part of a node's config (key
//! `dolly.peers`, issue #5): a JSON array of `{pid, name, address, host, ipaddr, updates,
//! snapshots, requests}`; unknown fields are ignored, missing ones are zero/empty.
//!
//! This node's entry is the one named by `dolly.name`, or else the one whose `pid` equals its
//! `node.id`; its `requests` port is where it serves Dolly clients and its `updates` and
//! `snapshots` ports are bound while it is the leader (any node may lead, so every entry's
//! ports count, unlike the original where only the lowest pid's did). Unlike the original
//! (§2, W12), every duplicate pid or name is refused, not only duplicates of the smallest pid.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;
use thiserror::Error;

/// Dolly's `peers.json` (key `dolly.peers`) is unreadable or invalid (`dolly.md` §2).
#[derive(Debug, Error)]
#[error("dolly.peers {path}: {message}")]
pub struct PeersError {
    /// The file.
    pub path: std::path::PathBuf,
    /// What is wrong.
    pub message: String,
}

/// One peer of `peers.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct DollyPeer {
    /// Precedence id (the original's leader was the smallest; here informational).
    pub pid: u16,
    /// Unique peer name; Dolly clients pick a peer by it.
    pub name: String,
    /// Host or IP that clients connect to.
    pub address: String,
    /// Informational.
    pub host: String,
    /// Informational.
    pub ipaddr: String,
    /// Updates PUB port (bound while this peer leads).
    pub updates: u16,
    /// Snapshots ROUTER port (bound while this peer leads).
    pub snapshots: u16,
    /// Requests ROUTER port.
    pub requests: u16,
}

fn invalid(path: &Path, message: impl Into<String>) -> PeersError {
    PeersError {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// Reads and checks `path`.
///
/// Errors: unreadable file; not a JSON array of peer objects (numbers must fit in 16 bits);
/// an empty array ("no replicas configured", as the original says); a duplicate pid or name.
pub fn load(path: &Path) -> Result<Vec<DollyPeer>, PeersError> {
    let text = std::fs::read(path).map_err(|e| invalid(path, e.to_string()))?;
    parse(&text).map_err(|m| invalid(path, m))
}

/// Parses and checks `peers.json` text; the error is a message.
pub fn parse(text: &[u8]) -> Result<Vec<DollyPeer>, String> {
    let peers: Vec<DollyPeer> = serde_json::from_slice(text).map_err(|e| e.to_string())?;
    if peers.is_empty() {
        return Err("no replicas configured".into());
    }
    let mut pids = BTreeSet::new();
    let mut names = BTreeSet::new();
    for p in &peers {
        if !pids.insert(p.pid) {
            return Err(format!("conflicting PID {} for replicas", p.pid));
        }
        if !names.insert(p.name.as_str()) {
            return Err(format!("duplicate replica name {:?}", p.name));
        }
    }
    Ok(peers)
}

/// This node's entry in `peers` (read from `path`): named `name`, or else with
/// `pid == node_id`. `needed` says which of its requests, updates and snapshots ports are used
/// (false: an explicit `dolly.*.bind` key replaces it); those must be set and distinct.
///
/// Errors: no such entry ("could not find replica named X"); a needed port of 0; two of its
/// ports equal.
pub fn local(
    path: &Path,
    peers: &[DollyPeer],
    name: Option<String>,
    node_id: u64,
    needed: [bool; 3],
) -> Result<DollyPeer, PeersError> {
    let found = match &name {
        Some(n) => peers.iter().find(|p| &p.name == n),
        None => peers.iter().find(|p| u64::from(p.pid) == node_id),
    };
    let Some(me) = found else {
        return Err(invalid(
            path,
            match name {
                Some(n) => format!("could not find replica named {n}"),
                None => format!("no peer has pid {node_id} (this node.id); set dolly.name"),
            },
        ));
    };
    let ports = [
        ("requests", me.requests),
        ("updates", me.updates),
        ("snapshots", me.snapshots),
    ];
    for ((what, port), needed) in ports.iter().zip(needed) {
        if needed && *port == 0 {
            return Err(invalid(
                path,
                format!("peer {:?} has no {what} port", me.name),
            ));
        }
    }
    let used: Vec<u16> = ports
        .iter()
        .zip(needed)
        .filter(|(_, n)| *n)
        .map(|((_, p), _)| *p)
        .collect();
    let mut distinct = used.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != used.len() {
        return Err(invalid(
            path,
            format!(
                "peer {:?} uses one port twice among requests, updates and snapshots",
                me.name
            ),
        ));
    }
    Ok(me.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dolly's fixture (`dolly.md` §2), with an extra field that must be ignored.
    const FIXTURE: &str = r#"[
      {"pid": 1, "name": "alpha", "address": "localhost", "host": "a", "ipaddr": "127.0.0.1",
       "updates": 3264, "snapshots": 3265, "requests": 3266, "zone": "x"},
      {"pid": 2, "name": "bravo", "address": "localhost", "updates": 3267, "snapshots": 3268,
       "requests": 3269},
      {"pid": 3, "name": "charlie", "address": "localhost", "updates": 3270, "snapshots": 3271,
       "requests": 3272}
    ]"#;

    #[test]
    fn the_fixture_parses_and_picks_this_node_by_name_or_pid() {
        let peers = parse(FIXTURE.as_bytes()).expect("fixture");
        assert_eq!(peers.len(), 3);
        let p = Path::new("peers.json");
        let all = [true; 3];
        let by_pid = local(p, &peers, None, 2, all).expect("pid 2");
        assert_eq!((by_pid.name.as_str(), by_pid.requests), ("bravo", 3269));
        let by_name = local(p, &peers, Some("charlie".into()), 1, all).expect("named");
        assert_eq!(
            (by_name.updates, by_name.snapshots, by_name.requests),
            (3270, 3271, 3272)
        );
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        for (text, reason) in [
            ("[]", "no replicas configured"),
            ("{}", "invalid type"),
            (r#"[{"pid": 70000}]"#, "invalid value"),
            (
                r#"[{"pid": 1, "name": "a"}, {"pid": 2, "name": "a"}]"#,
                "duplicate replica name",
            ),
            // The original only caught duplicates of the smallest pid (W12).
            (
                r#"[{"pid": 1, "name": "a"}, {"pid": 3, "name": "b"}, {"pid": 3, "name": "c"}]"#,
                "conflicting PID 3",
            ),
        ] {
            let err = parse(text.as_bytes()).expect_err(text);
            assert!(err.contains(reason), "{text}: {err}");
        }
        let peers = parse(FIXTURE.as_bytes()).expect("fixture");
        let p = Path::new("/etc/zper/peers.json");
        let all = [true; 3];
        let err = local(p, &peers, Some("zulu".into()), 1, all).expect_err("unknown name");
        assert_eq!(
            err.to_string(),
            "dolly.peers /etc/zper/peers.json: could not find replica named zulu"
        );
        assert!(local(p, &peers, None, 9, all).is_err());
        let no_ports = parse(br#"[{"pid": 1, "name": "a", "requests": 1}]"#).expect("parses");
        assert!(local(p, &no_ports, None, 1, all)
            .expect_err("no updates port")
            .to_string()
            .contains("no updates port"));
        // Ports replaced by explicit dolly.*.bind keys are not needed.
        assert!(local(p, &no_ports, None, 1, [true, false, false]).is_ok());
        let same =
            parse(br#"[{"pid": 1, "name": "a", "requests": 7, "updates": 7, "snapshots": 8}]"#)
                .expect("parses");
        assert!(local(p, &same, None, 1, all)
            .expect_err("a port twice")
            .to_string()
            .contains("one port twice"));
    }
}
