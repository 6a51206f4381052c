//! Every endpoint a zper node serves, in one table: its name, config key, default port and
//! socket type (spec `zper.md` §2 for ZPER's, `dolly.md` §3 for Dolly's, issues #3-#7 for the
//! cluster's). Config defaults, the client's defaults and the docs come from it.

/// One kind of endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndpointKind {
    /// Short name (`writer`, `reader`, ...), also the metrics label.
    pub name: &'static str,
    /// The config key that binds it.
    pub key: &'static str,
    /// Default TCP port.
    pub port: u16,
    /// The ZeroMQ socket type the node binds (`HTTP` for the admin API).
    pub socket: &'static str,
}

/// Writer: producers send messages (`zper.md` §4).
pub const WRITER: EndpointKind = EndpointKind {
    name: "writer",
    key: "writer.bind",
    port: 5555,
    socket: "ROUTER",
};
/// Reader: FETCH and OFFSET (§5).
pub const READER: EndpointKind = EndpointKind {
    name: "reader",
    key: "reader.bind",
    port: 5556,
    socket: "ROUTER",
};
/// Ack: flush notices (§8).
pub const ACK: EndpointKind = EndpointKind {
    name: "ack",
    key: "ack.bind",
    port: 5557,
    socket: "PUB",
};
/// Controller: cluster information and subscriptions (§9, issue #7).
pub const CONTROLLER: EndpointKind = EndpointKind {
    name: "controller",
    key: "controller.bind",
    port: 5558,
    socket: "ROUTER",
};
/// Relay: push delivery to subscription groups (issue #7).
pub const RELAY: EndpointKind = EndpointKind {
    name: "relay",
    key: "relay.bind",
    port: 5559,
    socket: "ROUTER",
};
/// Replication between nodes (issue #4).
pub const REPLICA: EndpointKind = EndpointKind {
    name: "replica",
    key: "replica.bind",
    port: 5560,
    socket: "ROUTER",
};
/// Dolly updates, bound while this node leads (`dolly.md` §3).
pub const DOLLY_UPDATES: EndpointKind = EndpointKind {
    name: "dolly_updates",
    key: "dolly.updates.bind",
    port: 3264,
    socket: "PUB",
};
/// Dolly snapshots, bound while this node leads (`dolly.md` §3).
pub const DOLLY_SNAPSHOTS: EndpointKind = EndpointKind {
    name: "dolly_snapshots",
    key: "dolly.snapshots.bind",
    port: 3265,
    socket: "ROUTER",
};
/// Dolly requests (`dolly.md` §6).
pub const DOLLY_REQUESTS: EndpointKind = EndpointKind {
    name: "dolly_requests",
    key: "dolly.requests.bind",
    port: 3266,
    socket: "ROUTER",
};
/// HTTP admin API, metrics and Raft RPCs (issue #3).
pub const HTTP: EndpointKind = EndpointKind {
    name: "http",
    key: "http.bind",
    port: 9644,
    socket: "HTTP",
};

/// Every endpoint, in port order of the README's table.
pub const ALL: [EndpointKind; 10] = [
    DOLLY_UPDATES,
    DOLLY_SNAPSHOTS,
    DOLLY_REQUESTS,
    WRITER,
    READER,
    ACK,
    CONTROLLER,
    RELAY,
    REPLICA,
    HTTP,
];

impl EndpointKind {
    /// The default bind: `tcp://*:<port>` (`0.0.0.0:<port>` for HTTP).
    pub fn default_bind(self) -> String {
        if self.socket == "HTTP" {
            format!("0.0.0.0:{}", self.port)
        } else {
            format!("tcp://*:{}", self.port)
        }
    }

    /// Where a client on the same machine connects by default.
    pub fn local(self) -> String {
        if self.socket == "HTTP" {
            format!("127.0.0.1:{}", self.port)
        } else {
            format!("tcp://127.0.0.1:{}", self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keys_and_ports_are_unique() {
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert!(
                    a.name != b.name && a.key != b.key && a.port != b.port,
                    "{a:?} {b:?}"
                );
            }
        }
        assert_eq!(WRITER.default_bind(), "tcp://*:5555");
        assert_eq!(HTTP.default_bind(), "0.0.0.0:9644");
        assert_eq!(READER.local(), "tcp://127.0.0.1:5556");
    }
}
