//! zmq helpers every loop shares (endpoints and replication alike).

/// Sends a multipart message without blocking; false when it could not be delivered (peer gone,
/// queue full). Used for every reply, so one slow or vanished client never blocks the endpoint.
pub(crate) fn try_send(socket: &zmq::Socket, frames: Vec<Vec<u8>>) -> bool {
    socket.send_multipart(frames, zmq::DONTWAIT).is_ok()
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
}
