//! The original ZPER producer (spec `zper.md` §4): one DEALER (modes 0 and 1) or REQ (mode 2)
//! with a ZPER identity, connected to one or more writers, sending the caller's message ids,
//! with no retries. [`crate::Producer`] is the one to use unless you need exactly that.
//!
//! Every message is a list of frames; the first frame is the message id the acks echo. Mode 1
//! acks are `[id]` of the newest durable message of this connection; mode 2 replies `[id]` per
//! message once durable. A cluster node refuses with `[id][status]` (103, 104, 105, 0xFF;
//! [`zper_wire::Status`]): [`ClientError::Refused`].

use zper_wire::AckMode;

use crate::{identity, ClientError, ProducerOptions};

/// A connected plain producer. Not `Sync` (a zmq socket): use it from one thread.
pub struct PlainProducer {
    socket: zmq::Socket,
    mode: AckMode,
    endpoints: String,
    timeout_ms: u64,
}

fn millis(d: std::time::Duration) -> i32 {
    d.as_millis().min(i32::MAX as u128) as i32
}

impl PlainProducer {
    /// Connects to every writer of `endpoints` (`tcp://host:port`); messages go round-robin
    /// to the live ones, only to connections that are up (`ZMQ_IMMEDIATE`).
    ///
    /// Errors: an invalid topic ([`ClientError::Invalid`]); libzmq refusing an endpoint.
    pub fn connect(
        ctx: &zmq::Context,
        endpoints: &[String],
        opts: &ProducerOptions,
    ) -> Result<PlainProducer, ClientError> {
        let joined = endpoints.join(",");
        let z = |what| ClientError::zmq(what, &joined);
        let kind = if opts.mode == AckMode::PerMessage {
            zmq::REQ
        } else {
            zmq::DEALER
        };
        let socket = ctx.socket(kind).map_err(z("socket for writer"))?;
        if let Some(curve) = &opts.curve {
            curve.apply(&socket, &joined)?;
        }
        let id = match &opts.identity {
            Some(id) => id.clone(),
            None => identity(&opts.topic, opts.mode.to_byte())?,
        };
        let timeout = millis(opts.timeout);
        socket.set_identity(&id).map_err(z("identity for writer"))?;
        if opts.unbounded {
            socket.set_sndhwm(0).map_err(z("sndhwm for writer"))?;
        }
        // Queue only on a live connection and give up after the timeout, instead of waiting
        // forever for a node that is down.
        socket.set_immediate(true).map_err(z("immediate"))?;
        socket.set_sndtimeo(timeout).map_err(z("sndtimeo"))?;
        socket.set_linger(timeout).map_err(z("linger"))?;
        socket.set_rcvtimeo(timeout).map_err(z("rcvtimeo"))?;
        for ep in endpoints {
            socket
                .connect(ep)
                .map_err(ClientError::zmq("connect to writer", ep))?;
        }
        Ok(PlainProducer {
            socket,
            mode: opts.mode,
            endpoints: joined,
            timeout_ms: opts.timeout.as_millis() as u64,
        })
    }

    /// The socket, for callers that poll it with others.
    pub fn socket(&self) -> &zmq::Socket {
        &self.socket
    }

    /// The ack mode.
    pub fn mode(&self) -> AckMode {
        self.mode
    }

    /// Queues one message (`frames[0]` is its id). In mode 2 this waits for the message's
    /// reply: `Ok` means it is durable.
    ///
    /// Errors: [`ClientError::Unreachable`] when no writer takes it within the timeout; in
    /// mode 2 also [`ClientError::Timeout`], [`ClientError::Refused`] and
    /// [`ClientError::Malformed`].
    pub fn send(&self, frames: &[&[u8]]) -> Result<(), ClientError> {
        let Some((id, _)) = frames.split_first() else {
            return Err(ClientError::Invalid(
                "a message needs at least its id frame".into(),
            ));
        };
        self.socket.send_multipart(frames, 0).map_err(|e| match e {
            zmq::Error::EAGAIN => ClientError::Unreachable {
                endpoint: self.endpoints.clone(),
                timeout_ms: self.timeout_ms,
            },
            e => ClientError::zmq("send to writer", &self.endpoints)(e),
        })?;
        if self.mode == AckMode::PerMessage {
            let mut reply = self.recv(0)?.ok_or_else(|| self.timed_out())?;
            if reply.len() > 1 && reply[0].is_empty() {
                reply.remove(0); // a REQ envelope left in
            }
            let acked = writer_reply(reply, &self.endpoints)?;
            if acked != *id {
                return Err(ClientError::Malformed {
                    endpoint: self.endpoints.clone(),
                    detail: format!("reply for {acked:?}, expected {id:?}"),
                });
            }
        }
        Ok(())
    }

    /// Mode 1: the next ack, the id of the newest message now durable; `Ok(None)` when
    /// `wait` is false and none is there.
    ///
    /// Errors: [`ClientError::Timeout`] when `wait` and none came within the timeout;
    /// [`ClientError::Refused`] for a refusal of the message it names.
    pub fn next_ack(&self, wait: bool) -> Result<Option<Vec<u8>>, ClientError> {
        match self.recv(if wait { 0 } else { zmq::DONTWAIT })? {
            Some(reply) => writer_reply(reply, &self.endpoints).map(Some),
            None if wait => Err(self.timed_out()),
            None => Ok(None),
        }
    }

    /// Mode 1: waits until the ack of message `id` (everything sent before it is then durable).
    ///
    /// Errors: as [`PlainProducer::next_ack`] with `wait`.
    pub fn wait_for_ack(&self, id: &[u8]) -> Result<(), ClientError> {
        while self.next_ack(true)?.as_deref() != Some(id) {}
        Ok(())
    }

    fn timed_out(&self) -> ClientError {
        ClientError::Timeout {
            endpoint: self.endpoints.clone(),
            timeout_ms: self.timeout_ms,
        }
    }

    fn recv(&self, flags: i32) -> Result<Option<Vec<Vec<u8>>>, ClientError> {
        match self.socket.recv_multipart(flags) {
            Ok(frames) => Ok(Some(frames)),
            Err(zmq::Error::EAGAIN) => Ok(None),
            Err(e) => Err(ClientError::zmq("receive from writer", &self.endpoints)(e)),
        }
    }
}

/// A writer reply without its envelope: `[id]` is an ack of `id`, `[id][status]` a refusal
/// (issue #4).
///
/// Errors: [`ClientError::Refused`] with the status; [`ClientError::Malformed`] for anything
/// else.
pub fn writer_reply(reply: Vec<Vec<u8>>, endpoint: &str) -> Result<Vec<u8>, ClientError> {
    let mut frames = reply.into_iter();
    match (frames.next(), frames.next(), frames.next()) {
        (Some(id), None, None) => Ok(id),
        (Some(id), Some(status), None) if status.len() == 1 => Err(ClientError::Refused {
            id,
            status: status[0],
        }),
        (first, second, _) => Err(ClientError::Malformed {
            endpoint: endpoint.to_owned(),
            detail: format!("unexpected writer reply {first:?} {second:?}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_acks_refusals_or_malformed() {
        assert_eq!(
            writer_reply(vec![b"7".to_vec()], "w").ok(),
            Some(b"7".to_vec())
        );
        match writer_reply(vec![b"7".to_vec(), vec![104]], "w") {
            Err(e @ ClientError::Refused { .. }) => {
                assert_eq!(e.status(), Some(zper_wire::Status::NotLeader));
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            vec![],
            vec![b"7".to_vec(), vec![1, 2]],
            vec![vec![1], vec![2], vec![3]],
        ] {
            assert!(
                matches!(
                    writer_reply(bad.clone(), "w"),
                    Err(ClientError::Malformed { .. })
                ),
                "{bad:?}"
            );
        }
    }
}
