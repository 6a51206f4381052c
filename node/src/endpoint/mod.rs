//! The ZPER endpoints: one module each. Each runs its zmq sockets on its own threads (zmq sockets
//! are Send, not Sync) and talks to worker threads through channels and inproc sockets.

pub mod ack;
pub mod controller;
pub mod dolly;
pub(crate) mod dolly_leader;
pub(crate) mod monitor;
pub mod reader;
pub(crate) mod relay;
pub mod writer;

/// How often endpoint loops wake to check for shutdown, ms.
pub(crate) const POLL_MS: i64 = 100;

/// Sends a multipart message without blocking; false when it could not be delivered (peer gone,
/// queue full). Used for every reply, so one slow or vanished client never blocks the endpoint.
pub(crate) fn try_send(socket: &zmq::Socket, frames: Vec<Vec<u8>>) -> bool {
    socket.send_multipart(frames, zmq::DONTWAIT).is_ok()
}

/// A request as a ROUTER delivers it, split into the routing id, whether it came in a REQ
/// envelope (an empty first frame followed by the request), and the request frames.
pub(crate) struct Request {
    pub(crate) routing_id: Vec<u8>,
    pub(crate) envelope: bool,
    pub(crate) frames: Vec<Vec<u8>>,
}

impl Request {
    /// Splits `[routing id][empty]?[frames]...`; None for a message without a routing id.
    pub(crate) fn split(mut frames: Vec<Vec<u8>>) -> Option<Request> {
        if frames.is_empty() {
            return None;
        }
        let routing_id = frames.remove(0);
        let envelope = frames.len() > 1 && frames[0].is_empty();
        if envelope {
            frames.remove(0);
        }
        Some(Request {
            routing_id,
            envelope,
            frames,
        })
    }

    /// The reply message: routing id, the envelope if the request had one, then `reply`.
    pub(crate) fn reply(self, reply: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(reply.len() + 2);
        out.push(self.routing_id);
        if self.envelope {
            out.push(Vec::new());
        }
        out.extend(reply);
        out
    }
}

/// Replies from worker threads to an endpoint's front thread: the front's PULL (bound to a fresh
/// inproc address) and `workers` PUSH sockets connected to it, one per worker. Unlimited HWM, so
/// a worker never blocks on a reply.
pub(crate) fn worker_replies(
    ctx: &zmq::Context,
    name: &str,
    workers: usize,
) -> Result<(zmq::Socket, Vec<zmq::Socket>), zmq::Error> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let inproc = format!("inproc://zper-{name}-{n}");
    let pull = ctx.socket(zmq::PULL)?;
    pull.set_rcvhwm(0)?;
    pull.bind(&inproc)?;
    let mut pushes = Vec::with_capacity(workers);
    for _ in 0..workers {
        let push = ctx.socket(zmq::PUSH)?;
        push.set_sndhwm(0)?;
        push.set_linger(1000)?;
        push.connect(&inproc)?;
        pushes.push(push);
    }
    Ok((pull, pushes))
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
