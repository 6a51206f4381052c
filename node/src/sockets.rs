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
}
