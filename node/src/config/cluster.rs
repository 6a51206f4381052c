//! The `[cluster]` part of the configuration: node id, HTTP address, voters, Raft timing, the
//! admin token and TLS on the admin port.

use super::*;

/// The node's place in the Raft metadata group (issue #3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// This node's id (`node.id`, default 1).
    pub node_id: u64,
    /// Human name (`node.name`, default `node<id>`).
    pub node_name: String,
    /// HTTP admin and Raft address to bind (`http.bind`, default `0.0.0.0:9644`).
    pub http_bind: String,
    /// HTTP address other nodes and clients use (`http.advertise`; default: `http.bind` with an
    /// unspecified host replaced by 127.0.0.1 and the bound port).
    pub http_advertise: Option<String>,
    /// Initial voters: `controller.quorum.<id> = host:port` (their HTTP addresses). Empty: this
    /// node alone (a one-voter group). A node whose id is not among them is a joining node: it
    /// starts empty and waits to be added (`zper cluster add-node`, `POST /v1/cluster/nodes`).
    pub voters: std::collections::BTreeMap<u64, String>,
    /// Raft data directory (`raft.dir`, default `<base_dir>/.raft`, which is not a topic name).
    pub raft_dir: Option<std::path::PathBuf>,
    /// Lease of a node's liveness, ms, renewed every quarter of it (`node.lease_ms`).
    pub lease_ms: u64,
    /// Raft heartbeat interval (`raft.heartbeat_ms`).
    pub heartbeat_ms: u64,
    /// Raft election timeout, lower bound (`raft.election_timeout_ms`).
    pub election_timeout_ms: u64,
    /// When set (`http.admin_token`), mutating HTTP requests (admin writes, Raft RPCs,
    /// forwarded proposals) need `Authorization: Bearer <token>`; every node of a cluster
    /// must have the same one.
    pub admin_token: Option<String>,
    /// The admin port's TLS certificate chain, PEM (`http.tls_cert`, issue #19). Set with
    /// `tls_key` and `tls_ca`: the admin API, the Raft stream and forwarded proposals then
    /// speak TLS only.
    pub tls_cert: Option<std::path::PathBuf>,
    /// Its private key, PEM (`http.tls_key`).
    pub tls_key: Option<std::path::PathBuf>,
    /// The CA certificates, PEM, that signed every node's certificate (`http.tls_ca`): what
    /// this node trusts when it speaks to its peers' admin ports.
    pub tls_ca: Option<std::path::PathBuf>,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            node_id: 1,
            node_name: String::new(),
            http_bind: endpoint::HTTP.default_bind(),
            http_advertise: None,
            voters: Default::default(),
            raft_dir: None,
            lease_ms: 1000,
            heartbeat_ms: 200,
            election_timeout_ms: 1000,
            admin_token: None,
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
        }
    }
}

/// The admin token held in the file `path` (`http.admin_token_file`, issue #19: a mounted
/// Secret keeps it out of the config and the process list): its text without the line end
/// and surrounding blanks.
///
/// Errors: the file cannot be read, or holds no token.
fn read_token_file(path: &str) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        bad(
            "http.admin_token_file",
            path,
            format!("a readable file holding the admin token ({e})"),
        )
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(bad(
            "http.admin_token_file",
            path,
            "a file holding the admin token (this one is empty)",
        ));
    }
    Ok(token.to_owned())
}

pub(super) fn cluster_settings(
    map: &HashMap<String, String>,
) -> Result<ClusterSettings, ConfigError> {
    let mut c = ClusterSettings::default();
    let get = |k: &str| map.get(k).map(|v| v.trim().to_owned());
    c.node_id = num(map, "node.id", 1, 1)?;
    c.node_name = get("node.name").unwrap_or_else(|| format!("node{}", c.node_id));
    let host_port = |key: &str, v: &str| -> Result<String, ConfigError> {
        if zper_raft::valid_http_address(v) {
            Ok(v.to_owned())
        } else {
            Err(bad(
                key,
                v,
                "host:port (no scheme or path) with a port of 0-65535",
            ))
        }
    };
    if let Some(v) = get("http.bind") {
        c.http_bind = host_port("http.bind", &v)?;
    }
    if let Some(v) = get("http.advertise") {
        c.http_advertise = Some(host_port("http.advertise", &v)?);
    }
    for (k, v) in map {
        if let Some(id) = k.strip_prefix("controller.quorum.") {
            let id: u64 = match id.parse() {
                Ok(n) if n >= 1 => n,
                _ => return Err(bad(k, id, "controller.quorum.<node id >= 1> = host:port")),
            };
            // ZPER's README writes `controller.quorum.1 = tcp://addr1:port`; in zper the
            // entry names the voter's HTTP (Raft) address, so the scheme is dropped.
            let v = v.trim();
            c.voters
                .insert(id, host_port(k, v.strip_prefix("tcp://").unwrap_or(v))?);
        }
    }
    c.raft_dir = get("raft.dir").map(std::path::PathBuf::from);
    c.admin_token = get("http.admin_token").filter(|t| !t.is_empty());
    if let Some(path) = get("http.admin_token_file").filter(|p| !p.is_empty()) {
        if c.admin_token.is_some() {
            return Err(bad(
                "http.admin_token_file",
                &path,
                "either http.admin_token or http.admin_token_file, not both",
            ));
        }
        c.admin_token = Some(read_token_file(&path)?);
    }
    let path = |k: &str| {
        get(k)
            .filter(|p| !p.is_empty())
            .map(std::path::PathBuf::from)
    };
    (c.tls_cert, c.tls_key, c.tls_ca) = (
        path("http.tls_cert"),
        path("http.tls_key"),
        path("http.tls_ca"),
    );
    match (&c.tls_cert, &c.tls_key, &c.tls_ca) {
        (None, None, None) | (Some(_), Some(_), Some(_)) => {}
        (cert, key, ca) => {
            let keys = [
                ("http.tls_cert", cert),
                ("http.tls_key", key),
                ("http.tls_ca", ca),
            ];
            let named = |set: bool| {
                keys.iter()
                    .filter(|(_, v)| v.is_some() == set)
                    .map(|(k, _)| *k)
                    .collect::<Vec<_>>()
            };
            let (set, missing) = (named(true).join(", "), named(false));
            // The error names the first key missing (the value: the keys that are set).
            return Err(bad(
                missing.first().copied().unwrap_or("http.tls_cert"),
                &set,
                "TLS on the admin port needs all three of http.tls_cert, http.tls_key and http.tls_ca (only these are set)",
            ));
        }
    }
    if let Some(t) = &c.admin_token {
        if !t.chars().all(|ch| ch.is_ascii_graphic()) {
            return Err(bad(
                "http.admin_token",
                "<hidden>",
                "printable ASCII without spaces",
            ));
        }
    }
    c.lease_ms = millis(map, "node.lease_ms", c.lease_ms, 100)?;
    c.heartbeat_ms = millis(map, "raft.heartbeat_ms", c.heartbeat_ms, 10)?;
    c.election_timeout_ms = millis(map, "raft.election_timeout_ms", c.election_timeout_ms, 50)?;
    if c.election_timeout_ms <= c.heartbeat_ms {
        return Err(bad(
            "raft.election_timeout_ms",
            &c.election_timeout_ms.to_string(),
            "more than raft.heartbeat_ms",
        ));
    }
    Ok(c)
}
