//! What the writer and reader engines both do with their peers' connections (issue #17): take
//! a new one, name its peer, pick the connections to close, count protocol errors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Poll, Token};
use tracing::warn;
use zper_wire::zmtp::{Handshake, Limits, SocketType};

use super::connection::Connection;
use super::security::{mechanism, CurveEndpoint};

/// Most connections from one IP address still in their handshake (attack finding: one host
/// opening connections and never finishing a handshake held every slot of an endpoint until
/// the handshake timeout). A burst of honest clients past it is closed and reconnects, as
/// libzmq clients do.
pub(crate) const MAX_HANDSHAKES_PER_ADDRESS: usize = 128;

/// Whether the new connection `stream` would be one too many still in their handshake from
/// its peer's address among `connections`.
pub(crate) fn too_many_handshakes<'a>(
    connections: impl Iterator<Item = &'a Connection>,
    stream: &TcpStream,
) -> bool {
    let Ok(ip) = stream.peer_addr().map(|a| a.ip()) else {
        return false;
    };
    connections
        .filter(|c| c.remote == Some(ip) && c.in_handshake())
        .nth(MAX_HANDSHAKES_PER_ADDRESS - 1)
        .is_some()
}

/// The next connection waiting on `listener`; `None` when none waits (or accepting failed,
/// logged for `endpoint`).
pub(crate) fn next_stream(listener: &TcpListener, endpoint: &str) -> Option<TcpStream> {
    match listener.accept() {
        Ok((stream, _)) => Some(stream),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(e) => {
            warn!(endpoint, error = %e, "accept failed");
            None
        }
    }
}

/// Watches `stream` with `poll` under `token` (reads and writes), with TCP_NODELAY, and begins
/// its handshake as a ROUTER that accepts `peers`, with CURVE when `curve` is set (issue
/// #19); `None` (the stream closed, logged) when it cannot be watched.
pub(crate) fn open(
    poll: &Poll,
    mut stream: TcpStream,
    token: Token,
    peers: &[SocketType],
    limits: Limits,
    endpoint: &str,
    curve: Option<&CurveEndpoint>,
) -> Option<Connection> {
    let _ = stream.set_nodelay(true);
    if let Err(e) =
        poll.registry()
            .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
    {
        warn!(endpoint, error = %e, "could not watch a connection");
        return None;
    }
    let handshake = Handshake::new(SocketType::Router, peers, mechanism(curve));
    Some(Connection::accept(stream, handshake, limits))
}

/// The routing id of a peer that sent `identity`: the identity, or for an empty one, as
/// libzmq's ROUTER does, a made-up 5-byte id starting with 0 (spec `zper.md` §2), counted by
/// `anonymous`.
pub(crate) fn routing_id(identity: &[u8], anonymous: &mut u32) -> Vec<u8> {
    if !identity.is_empty() {
        return identity.to_vec();
    }
    *anonymous = anonymous.wrapping_add(1);
    [&[0u8][..], &anonymous.to_be_bytes()].concat()
}

/// Of `(token, last active)` pairs, the one idle the longest if it has been idle `min` at
/// least.
pub(crate) fn idle_longest(
    connections: impl Iterator<Item = (Token, Instant)>,
    min: Duration,
) -> Option<Token> {
    connections
        .min_by_key(|(_, active)| *active)
        .filter(|(_, active)| active.elapsed() >= min)
        .map(|(t, _)| t)
}

/// The connections of `connections` whose handshake has run longer than `limit`.
pub(crate) fn late_handshakes<'a>(
    connections: impl Iterator<Item = (&'a Token, &'a Connection)>,
    limit: Duration,
) -> Vec<Token> {
    connections
        .filter(|(_, c)| c.in_handshake() && c.accepted.elapsed() > limit)
        .map(|(t, _)| *t)
        .collect()
}

/// The CURVE connections of `connections` whose client key `curve` no longer admits (its key
/// file was removed from `curve.clients`, seen within [`super::security::RESCAN`]): they are
/// closed, so revoking a key cuts off the clients already connected with it, not only new
/// ones (attack finding). They are counted in `refused`.
pub(crate) fn revoked<'a>(
    connections: impl Iterator<Item = (&'a Token, &'a Connection)>,
    curve: Option<&CurveEndpoint>,
    refused: &AtomicU64,
) -> Vec<Token> {
    use zper_wire::zmtp::curve::Authorizer;
    let Some(curve) = curve else {
        return Vec::new();
    };
    let tokens: Vec<Token> = connections
        .filter(|(_, c)| c.client_key.is_some_and(|k| !curve.clients.allows(&k)))
        .map(|(t, _)| *t)
        .collect();
    refused.fetch_add(tokens.len() as u64, Ordering::Relaxed);
    tokens
}

/// Counts `conn`, being closed, in `counters.curve_refused` when it is a connection to a CURVE
/// endpoint whose handshake never completed (issue #19): a client without CURVE, with another
/// server key or a key not admitted, or one that gave up or timed out on the way. Whatever
/// closed it (a refusal, the client's own close or reset, the handshake timeout), it did not
/// get through.
pub(crate) fn count_unfinished_curve(counters: &crate::metrics::Counters, conn: &Connection) {
    if conn.in_handshake() && conn.requires_curve() {
        counters.curve_refused.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts a connection closed for a protocol error in `counter`, logging it (with `why`) at
/// every power of two so a hostile peer cannot flood the log.
pub(crate) fn count_protocol_error(counter: &AtomicU64, endpoint: &str, why: &str) {
    let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        warn!(
            endpoint,
            reason = why,
            errors_so_far = n,
            "closed a connection for a protocol error"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_whose_key_was_removed_is_revoked_and_others_are_kept() {
        use std::sync::Arc;
        use zper_wire::zmtp::curve::{encode_key, CurveKeyPair};
        use zper_wire::zmtp::{Null, Security};
        let dir = tempfile::tempdir().expect("tmp");
        let (kept, gone) = (CurveKeyPair::generate(), CurveKeyPair::generate());
        std::fs::write(dir.path().join("kept.key"), encode_key(&kept.public())).expect("write");
        std::fs::write(dir.path().join("gone.key"), encode_key(&gone.public())).expect("write");
        let curve = CurveEndpoint {
            keys: Arc::new(CurveKeyPair::generate()),
            clients: Arc::new(
                super::super::security::ClientKeys::load(Some(dir.path()), None).expect("keys"),
            ),
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut peers = Vec::new();
        let mut conns = Vec::new();
        for key in [Some(kept.public()), Some(gone.public()), None] {
            peers.push(std::net::TcpStream::connect(addr).expect("connect"));
            let (server, _) = listener.accept().expect("accept");
            server.set_nonblocking(true).expect("nonblocking");
            let handshake = Handshake::new(
                SocketType::Router,
                &[SocketType::Dealer],
                Security::Null(Null),
            );
            let limits = Limits {
                max_message: 1024,
                max_buffered: 2048,
                allow_empty_message: true,
            };
            let mut c = Connection::accept(TcpStream::from_std(server), handshake, limits);
            c.client_key = key;
            conns.push(c);
        }
        let tokens = [Token(1), Token(2), Token(3)];
        let all = || tokens.iter().zip(conns.iter());
        let refused = AtomicU64::new(0);
        assert!(revoked(all(), Some(&curve), &refused).is_empty());
        assert!(revoked(all(), None, &refused).is_empty());
        std::fs::remove_file(dir.path().join("gone.key")).expect("rm");
        std::thread::sleep(super::super::security::RESCAN + Duration::from_millis(50));
        assert_eq!(revoked(all(), Some(&curve), &refused), vec![Token(2)]);
        assert_eq!(refused.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_empty_identity_gets_a_fresh_id_starting_with_zero() {
        let mut anonymous = 0;
        assert_eq!(routing_id(b"abc", &mut anonymous), b"abc");
        assert_eq!(anonymous, 0);
        assert_eq!(routing_id(b"", &mut anonymous), vec![0, 0, 0, 0, 1]);
        assert_eq!(routing_id(b"", &mut anonymous), vec![0, 0, 0, 0, 2]);
    }

    #[test]
    fn the_connection_idle_the_longest_is_chosen_only_past_the_minimum() {
        let now = Instant::now();
        let old = now.checked_sub(Duration::from_secs(20)).unwrap_or(now);
        let older = now.checked_sub(Duration::from_secs(30)).unwrap_or(now);
        let all = [(Token(2), old), (Token(3), older), (Token(4), now)];
        let min = Duration::from_secs(10);
        assert_eq!(idle_longest(all.into_iter(), min), Some(Token(3)));
        assert_eq!(idle_longest(all.into_iter(), Duration::from_secs(60)), None);
        assert_eq!(idle_longest(std::iter::empty(), min), None);
    }
}
