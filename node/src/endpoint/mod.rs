//! The ZPER endpoints: one module each. Each runs its zmq sockets on its own threads (zmq sockets
//! are Send, not Sync) and talks to worker threads through channels and inproc sockets.

pub mod ack;
pub mod controller;
pub mod reader;
pub mod writer;

/// How often endpoint loops wake to check for shutdown, ms.
pub(crate) const POLL_MS: i64 = 100;

/// Sends a multipart message without blocking; false when it could not be delivered (peer gone,
/// queue full). Used for every reply, so one slow or vanished client never blocks the endpoint.
pub(crate) fn try_send(socket: &zmq::Socket, frames: Vec<Vec<u8>>) -> bool {
    socket.send_multipart(frames, zmq::DONTWAIT).is_ok()
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
