//! Binding a ZMTP endpoint the way libzmq names it: `tcp://HOST:PORT`, where HOST `*` is every
//! interface and PORT `*` or `0` lets the system choose.

use std::net::{SocketAddr, ToSocketAddrs};

use crate::error::NodeError;

/// The socket address of a `tcp://HOST:PORT` endpoint.
///
/// Errors: [`NodeError::Config`] for another transport, a missing port or a host that does
/// not resolve.
pub(crate) fn address(endpoint: &str) -> Result<SocketAddr, NodeError> {
    let bad = |why: &str| NodeError::Config(format!("endpoint {endpoint:?}: {why}"));
    let rest = endpoint
        .strip_prefix("tcp://")
        .ok_or_else(|| bad("only tcp:// endpoints are served by zper's ZMTP engine"))?;
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| bad("expected tcp://HOST:PORT"))?;
    let port: u16 = match port {
        "*" => 0,
        p => p.parse().map_err(|_| bad("the port is not a number"))?,
    };
    let host = match host {
        "*" => "0.0.0.0",
        h => h.trim_start_matches('[').trim_end_matches(']'),
    };
    (host, port)
        .to_socket_addrs()
        .map_err(|e| bad(&e.to_string()))?
        .next()
        .ok_or_else(|| bad("the host does not resolve"))
}

/// Binds a non-blocking listener on `endpoint`; returns it and the bound endpoint as libzmq
/// reports it (`tcp://IP:PORT`, the port resolved).
///
/// Errors: [`NodeError::Config`] (see [`address`]); [`NodeError::Listen`] when the bind fails.
pub(crate) fn bind(endpoint: &str) -> Result<(mio::net::TcpListener, String), NodeError> {
    let addr = address(endpoint)?;
    let listen = |source| NodeError::Listen {
        endpoint: endpoint.to_owned(),
        source,
    };
    let listener = mio::net::TcpListener::bind(addr).map_err(listen)?;
    let local = listener.local_addr().map_err(listen)?;
    Ok((listener, format!("tcp://{local}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libzmq_style_endpoints_resolve() {
        assert_eq!(
            address("tcp://*:5555").expect("valid"),
            "0.0.0.0:5555".parse().expect("addr")
        );
        assert_eq!(
            address("tcp://127.0.0.1:*").expect("valid"),
            "127.0.0.1:0".parse().expect("addr")
        );
        assert!(address("ipc:///tmp/x").is_err());
        assert!(address("tcp://127.0.0.1").is_err());
        assert!(address("tcp://127.0.0.1:port").is_err());
    }

    #[test]
    fn binding_port_zero_reports_the_chosen_port() {
        let (_l, bound) = bind("tcp://127.0.0.1:0").expect("bind");
        assert!(bound.starts_with("tcp://127.0.0.1:"), "{bound}");
        assert!(!bound.ends_with(":0"), "{bound}");
    }
}
