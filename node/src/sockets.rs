//! zmq helpers every loop shares (endpoints and replication alike).

/// Sends a multipart message without blocking; false when it could not be delivered (peer gone,
/// queue full). Used for every reply, so one slow or vanished client never blocks the endpoint.
/// Frames are byte vectors or [`zmq::Message`]s (handed to libzmq without a copy).
pub(crate) fn try_send<T: Into<zmq::Message>>(
    socket: &zmq::Socket,
    frames: impl IntoIterator<Item = T>,
) -> bool {
    socket.send_multipart(frames, zmq::DONTWAIT).is_ok()
}

/// Receives one whole multipart message as libzmq holds it, without copying its bytes into
/// vectors (a reader's 1 MiB FETCH reply passes from a worker to the client this way).
///
/// Errors: `EAGAIN` with [`zmq::DONTWAIT`] when no message is waiting; the socket's errors.
pub(crate) fn recv_parts(
    socket: &zmq::Socket,
    flags: i32,
) -> Result<Vec<zmq::Message>, zmq::Error> {
    let mut parts = Vec::with_capacity(4);
    loop {
        let mut part = zmq::Message::new();
        // Only the first part can be missing: libzmq delivers a message's parts together.
        socket.recv(&mut part, if parts.is_empty() { flags } else { 0 })?;
        let more = part.get_more();
        parts.push(part);
        if !more {
            return Ok(parts);
        }
    }
}

/// Receives the next whole multipart message (as `recv_multipart`) from a client whose CURVE
/// key `gate` still admits. libzmq's ZAP handler vouched for the key when the client connected
/// and put it on every message (the `User-Id` property, Z85); a key removed from
/// `curve.clients` since then is refused here (issue #19: revoking a key cuts off the clients
/// already connected with it), its messages dropped and counted in `refused`. Without `gate`
/// (CURVE off on this endpoint) every message passes.
///
/// Errors: as `recv_multipart` (`EAGAIN` with [`zmq::DONTWAIT`] when no admitted message
/// waits).
pub(crate) fn recv_admitted(
    socket: &zmq::Socket,
    flags: i32,
    gate: Option<&crate::zmtp::security::ClientKeys>,
    refused: &std::sync::atomic::AtomicU64,
) -> Result<Vec<Vec<u8>>, zmq::Error> {
    use zper_wire::zmtp::curve::{decode_key, Authorizer};
    let Some(keys) = gate else {
        return socket.recv_multipart(flags);
    };
    loop {
        let mut parts = recv_parts(socket, flags)?;
        // The last part came from the peer (a ROUTER's first is its own routing id, without
        // the connection's properties).
        let admitted = parts
            .last_mut()
            .and_then(|p| p.gets("User-Id"))
            .and_then(|id| decode_key(id).ok())
            .is_none_or(|key| keys.allows(&key));
        if admitted {
            return Ok(parts.iter().map(|p| p.to_vec()).collect());
        }
        refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_to_an_unknown_peer_is_refused_not_blocking() {
        // The writer's and reader's ROUTERs are mandatory: a reply to a peer that is gone
        // fails at once (and the endpoints count it) instead of being silently queued.
        let ctx = zmq::Context::new();
        let router = ctx.socket(zmq::ROUTER).expect("socket");
        router.set_router_mandatory(true).expect("mandatory");
        router.bind("inproc://try-send-test").expect("bind");
        assert!(!try_send(
            &router,
            vec![b"nobody".to_vec(), b"ack".to_vec()]
        ));
        let dealer = ctx.socket(zmq::DEALER).expect("socket");
        dealer.set_identity(b"somebody").expect("identity");
        dealer.connect("inproc://try-send-test").expect("connect");
        dealer.send("hello", 0).expect("send");
        let _ = router.recv_multipart(0).expect("recv");
        assert!(try_send(
            &router,
            vec![b"somebody".to_vec(), b"ack".to_vec()]
        ));
    }

    #[test]
    fn a_multipart_message_passes_through_whole_and_unchanged() {
        let ctx = zmq::Context::new();
        let pull = ctx.socket(zmq::PULL).expect("socket");
        pull.bind("inproc://recv-parts-test").expect("bind");
        let push = ctx.socket(zmq::PUSH).expect("socket");
        push.connect("inproc://recv-parts-test").expect("connect");
        assert!(matches!(
            recv_parts(&pull, zmq::DONTWAIT),
            Err(zmq::Error::EAGAIN)
        ));
        let big = vec![7u8; 1 << 20];
        let frames = vec![b"peer".to_vec(), Vec::new(), vec![100], big];
        push.send_multipart(frames.clone(), 0).expect("send");
        push.send("next", 0).expect("send");
        let parts = recv_parts(&pull, 0).expect("recv");
        let got: Vec<Vec<u8>> = parts.iter().map(|p| p.to_vec()).collect();
        assert_eq!(got, frames);
        let next = recv_parts(&pull, 0).expect("recv");
        assert_eq!(next.len(), 1);
        assert_eq!(&next[0][..], b"next");
    }

    #[test]
    fn a_client_whose_key_was_removed_is_not_heard_any_more() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        use std::time::Duration;
        use zper_wire::zmtp::curve::{encode_key, CurveKeyPair};
        let ctx = zmq::Context::new();
        let dir = tempfile::tempdir().expect("tmp");
        let (server, app) = (CurveKeyPair::generate(), CurveKeyPair::generate());
        std::fs::write(dir.path().join("app.key"), encode_key(&app.public())).expect("write");
        let keys = Arc::new(
            crate::zmtp::security::ClientKeys::load(Some(dir.path()), Some(server.public()))
                .expect("keys"),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(crate::metrics::Counters::default());
        let zap = crate::zmtp::zap::spawn(
            crate::zmtp::zap::bind(&ctx).expect("zap"),
            crate::zmtp::zap::ZapPolicy {
                clients: keys.clone(),
                cluster: server.public(),
            },
            counters,
            stop.clone(),
        )
        .expect("zap thread");
        let router = ctx.socket(zmq::ROUTER).expect("router");
        router.set_curve_server(true).expect("server");
        router.set_curve_secretkey(&server.secret()).expect("key");
        router
            .set_zap_domain(crate::zmtp::zap::CLIENTS_DOMAIN)
            .expect("domain");
        router.bind("tcp://127.0.0.1:*").expect("bind");
        router.set_rcvtimeo(5000).expect("timeout");
        let dealer = ctx.socket(zmq::DEALER).expect("dealer");
        dealer.set_linger(0).expect("linger");
        dealer.set_curve_serverkey(&server.public()).expect("sk");
        dealer.set_curve_publickey(&app.public()).expect("pk");
        dealer.set_curve_secretkey(&app.secret()).expect("sk");
        dealer
            .connect(&router.get_last_endpoint().expect("ep").expect("utf8"))
            .expect("connect");
        let refused = AtomicU64::new(0);
        dealer.send("before", 0).expect("send");
        let got = recv_admitted(&router, 0, Some(&keys), &refused).expect("admitted");
        assert_eq!(got[1], b"before");
        // The key is removed: the same connection's next messages are dropped and counted.
        std::fs::remove_file(dir.path().join("app.key")).expect("rm");
        std::thread::sleep(crate::zmtp::security::RESCAN + Duration::from_millis(50));
        dealer.send("after", 0).expect("send");
        assert_eq!(
            router.poll(zmq::POLLIN, 10_000).expect("poll"),
            1,
            "it arrives"
        );
        assert_eq!(
            recv_admitted(&router, zmq::DONTWAIT, Some(&keys), &refused),
            Err(zmq::Error::EAGAIN),
            "dropped"
        );
        assert_eq!(refused.load(Ordering::Relaxed), 1);
        // Without a gate (CURVE off there) the same message would have passed.
        dealer.send("ungated", 0).expect("send");
        router.set_rcvtimeo(10_000).expect("timeout");
        let got = recv_admitted(&router, 0, None, &refused).expect("passes");
        assert_eq!(got[1], b"ungated");
        stop.store(true, Ordering::Relaxed);
        drop((router, dealer));
        zap.join().expect("zap");
    }
}
