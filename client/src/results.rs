//! The producer's side of Pirius' retrievable pattern (`pirius.md` §13): a registration on a
//! relay for the results subscribers post about a topic's messages.

use std::time::{Duration, Instant};

use zper_wire::relay::{RelayReply, RelayRequest, ResultMessage};

/// A producer's side of the retrievable pattern (`pirius.md` §13): registered on a relay for
/// the results of `topic` whose message id starts with a prefix, renewed before the
/// registration lapses.
pub struct ResultsListener {
    socket: zmq::Socket,
    request: RelayRequest,
    renew_at: Instant,
    _ctx: zmq::Context,
}

impl ResultsListener {
    /// Registers on `relay` (any node's relay endpoint).
    pub fn register(relay: &str, topic: &str, prefix: &[u8]) -> Result<Self, zmq::Error> {
        let ctx = zmq::Context::new();
        let socket = ctx.socket(zmq::DEALER)?;
        socket.set_linger(0)?;
        socket.connect(relay)?;
        let request = RelayRequest::Results {
            topic: topic.into(),
            prefix: prefix.to_vec(),
        };
        socket.send_multipart(request.encode(), 0)?;
        Ok(ResultsListener {
            socket,
            request,
            renew_at: Instant::now()
                + Duration::from_millis(zper_wire::relay::RESULTS_LEASE_MS / 3),
            _ctx: ctx,
        })
    }

    /// Waits until the registration is confirmed.
    pub fn wait_registered(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.socket.poll(zmq::POLLIN, 100).unwrap_or(0) > 0 {
                if let Ok(frames) = self.socket.recv_multipart(0) {
                    if matches!(
                        RelayReply::decode(&frames),
                        Some(RelayReply::Registered { .. })
                    ) {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// The next result within `timeout`, renewing the registration when due.
    pub fn next(&mut self, timeout: Duration) -> Result<Option<ResultMessage>, zmq::Error> {
        if Instant::now() >= self.renew_at {
            self.socket.send_multipart(self.request.encode(), 0)?;
            self.renew_at =
                Instant::now() + Duration::from_millis(zper_wire::relay::RESULTS_LEASE_MS / 3);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.socket.poll(zmq::POLLIN, left.as_millis() as i64)? == 0 {
                return Ok(None);
            }
            let frames = self.socket.recv_multipart(0)?;
            if let Some(RelayReply::Result(r)) = RelayReply::decode(&frames) {
                return Ok(Some(r));
            }
            if left.is_zero() {
                return Ok(None);
            }
        }
    }
}
