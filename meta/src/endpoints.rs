//! Node identity: the Raft node id and the endpoints every node advertises.

use serde::{Deserialize, Serialize};

/// A node's id in the cluster (`node.id`; the Raft node id).
pub type NodeId = u64;

/// What every node advertises (the openraft `Node` of the membership): its ZPER, Dolly, HTTP
/// and Raft addresses. Strings are ZeroMQ endpoints (`tcp://host:port`) or `host:port` for HTTP
/// and Raft.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeEndpoints {
    /// Human name of the node.
    pub name: String,
    /// Writer ROUTER.
    pub writer: String,
    /// Reader ROUTER.
    pub reader: String,
    /// Ack PUB.
    pub ack: String,
    /// Controller ROUTER.
    pub controller: String,
    /// Dolly requests ROUTER.
    pub dolly_requests: String,
    /// Dolly updates PUB.
    pub dolly_updates: String,
    /// Dolly snapshots ROUTER.
    pub dolly_snapshots: String,
    /// HTTP admin `host:port` (also carries the Raft RPCs).
    pub http: String,
    /// Replication ROUTER (`replica.bind`, issue #4); empty for nodes that predate it.
    #[serde(default)]
    pub replica: String,
    /// Relay ROUTER (`relay.bind`, issue #7: push delivery to subscribers); empty for nodes
    /// that predate it.
    #[serde(default)]
    pub relay: String,
    /// Where other nodes reach this node's writer, reader and relay, when clients are told
    /// other addresses (`writer.advertise`, `reader.advertise`, `relay.advertise`: clients
    /// outside a NAT or a compose network get published addresses while peers keep the
    /// internal ones; issue #15). `None`: peers use the fields above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerEndpoints>,
}

/// A node's endpoints as other nodes reach them (see [`NodeEndpoints::peer`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PeerEndpoints {
    /// Writer ROUTER (forwarded producer writes).
    pub writer: String,
    /// Reader ROUTER (forwarded reader requests).
    pub reader: String,
    /// Relay ROUTER (subscriber results passed between nodes).
    pub relay: String,
}

impl NodeEndpoints {
    /// The writer endpoint other nodes connect to.
    pub fn peer_writer(&self) -> &str {
        self.peer.as_ref().map_or(&self.writer, |p| &p.writer)
    }

    /// The reader endpoint other nodes connect to.
    pub fn peer_reader(&self) -> &str {
        self.peer.as_ref().map_or(&self.reader, |p| &p.reader)
    }

    /// The relay endpoint other nodes connect to.
    pub fn peer_relay(&self) -> &str {
        self.peer.as_ref().map_or(&self.relay, |p| &p.relay)
    }
}

/// True for an HTTP address as nodes advertise it: `host:port`, a port of 0-65535 and a
/// non-empty host of letters, digits, `.`, `-`, `_` or a bracketed IPv6 literal (no scheme, no
/// path: the address is put into `http://{address}/...`).
pub fn valid_http_address(address: &str) -> bool {
    let Some((host, port)) = address.rsplit_once(':') else {
        return false;
    };
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        !v6.is_empty()
            && v6
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
    } else {
        !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    };
    host_ok && port.parse::<u16>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::valid_http_address;

    #[test]
    fn http_addresses_are_host_and_port_only() {
        for ok in [
            "127.0.0.1:9644",
            "node-1.example:80",
            "[::1]:9644",
            "zper_2:0",
        ] {
            assert!(valid_http_address(ok), "{ok}");
        }
        for bad in [
            "http://127.0.0.1:9644",
            "evil.example/x?y=:1",
            "127.0.0.1",
            ":9644",
            "host:99999",
            "a b:1",
            "user@host:1",
            "[]:1",
        ] {
            assert!(!valid_http_address(bad), "{bad}");
        }
    }
}
