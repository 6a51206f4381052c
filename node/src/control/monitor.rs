//! Open connections per endpoint, from libzmq's socket monitor (`zmq_socket_monitor`): a PAIR
//! socket receives `[event:u16 native][value:u32 native]` + `[address]` for each event; an
//! accepted connection adds one, a disconnected one takes one away.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tracing::{debug, warn};

use crate::metrics::Counters;

/// Starts watching `socket` (before it moves to its own thread): its open connections are kept
/// in `counters.connections[index]` (index into [`crate::metrics::ENDPOINTS`]). Returns the watcher thread, which ends at `stop` or when the
/// socket closes.
///
/// Errors: the monitor cannot be set up (then the gauge stays 0 and the endpoint still runs).
pub(crate) fn watch(
    ctx: &zmq::Context,
    socket: &zmq::Socket,
    index: usize,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, zmq::Error> {
    let name = crate::metrics::ENDPOINTS
        .get(index)
        .copied()
        .unwrap_or("unknown");
    let address = format!("inproc://zper-monitor-{name}");
    let events = zmq::SocketEvent::ACCEPTED as i32 | zmq::SocketEvent::DISCONNECTED as i32;
    socket.monitor(&address, events)?;
    let pair = ctx.socket(zmq::PAIR)?;
    pair.set_rcvtimeo(crate::endpoint::POLL_MS as i32)?;
    pair.set_linger(0)?;
    pair.connect(&address)?;
    std::thread::Builder::new()
        .name(format!("zper-monitor-{name}"))
        .spawn(move || {
            if let Some(open) = counters.connections.get(index) {
                run(pair, name, open, &stop);
            }
        })
        .map_err(|_| zmq::Error::EMFILE)
}

fn run(pair: zmq::Socket, name: &str, open: &AtomicI64, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let frames = match pair.recv_multipart(0) {
            Ok(f) => f,
            Err(zmq::Error::EAGAIN) => continue,
            Err(e) => {
                warn!(endpoint = name, error = %e, "connection monitor stopped");
                return;
            }
        };
        let Some(event) = frames
            .first()
            .and_then(|f| f.get(..2))
            .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        else {
            continue;
        };
        match event {
            e if e == zmq::SocketEvent::ACCEPTED as u16 => {
                open.fetch_add(1, Ordering::Relaxed);
            }
            e if e == zmq::SocketEvent::DISCONNECTED as u16 => {
                open.fetch_sub(1, Ordering::Relaxed);
            }
            e if e == zmq::SocketEvent::MONITOR_STOPPED as u16 => break,
            _ => {}
        }
    }
    debug!(endpoint = name, "connection monitor stopped");
}
