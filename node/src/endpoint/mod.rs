//! The ZPER endpoints: one module each. Each runs its zmq sockets on its own threads (zmq sockets
//! are Send, not Sync) and talks to worker threads through channels and inproc sockets.

pub mod ack;
pub mod reader;
pub mod writer;

/// How often endpoint loops wake to check for shutdown, ms.
pub(crate) const POLL_MS: i64 = 100;

/// Sends a multipart message without blocking; false when it could not be delivered (peer gone,
/// queue full). Used for every reply, so one slow or vanished client never blocks the endpoint.
pub(crate) fn try_send(socket: &zmq::Socket, frames: Vec<Vec<u8>>) -> bool {
    socket.send_multipart(frames, zmq::DONTWAIT).is_ok()
}
