//! zper-client's producer (spec `zper.md` §4, issue #18): idempotent with retries by default.
//!
//! Every message's first frame is its id, chosen by the producer: `[producer id:16]
//! [sequence:8]` ([`MessageId`]), followed by the caller's frames. In modes 1 and 2 the
//! producer is idempotent unless [`ProducerOptions::plain`]: the node stores each id once and
//! in order, and the producer sends a message again after a timeout, a refusal or a broken
//! connection (to the next writer given) until it is acknowledged or
//! [`ProducerOptions::retry_for`] passed (docs/protocol.md "Idempotent producers").
//! Plain producers (and mode 0) send once; use [`crate::PlainProducer`] to choose your own ids.

use zper_wire::AckMode;

use crate::plain::PlainProducer;
use crate::ProducerOptions;
use crate::{identity, ClientError, IdempotentOptions, IdempotentProducer, MessageId};

/// A connected producer. Not `Sync` (a zmq socket): use it from one thread.
pub struct Producer {
    inner: Inner,
}

enum Inner {
    Idempotent(Box<IdempotentProducer>),
    Plain {
        producer: PlainProducer,
        /// The identity's UUID: the producer id of the ids this producer chooses.
        id: [u8; 16],
        next: u64,
        /// Mode 1: the newest id sent and not yet known acknowledged.
        unacked: Option<Vec<u8>>,
    },
}

impl Producer {
    /// Connects to the writers of `endpoints` (`tcp://host:port`, nodes of one cluster). An
    /// idempotent producer talks to one at a time and moves to the next after a failure; a
    /// plain one sends round-robin to all of them.
    ///
    /// Errors: an invalid topic or identity ([`ClientError::Invalid`]); libzmq refusing an
    /// endpoint.
    pub fn connect(
        ctx: &zmq::Context,
        endpoints: &[String],
        opts: &ProducerOptions,
    ) -> Result<Producer, ClientError> {
        if opts.idempotent && opts.mode != AckMode::None {
            let mut o = IdempotentOptions::new(&opts.topic, opts.mode);
            o.timeout = o.timeout.min(opts.timeout);
            o.deadline = opts.retry_for;
            o.identity = opts.identity.clone();
            o.curve = opts.curve.clone();
            let inner =
                Inner::Idempotent(Box::new(IdempotentProducer::connect(ctx, endpoints, o)?));
            return Ok(Producer { inner });
        }
        let ident = match &opts.identity {
            Some(i) => i.clone(),
            None => identity(&opts.topic, opts.mode.to_byte())?,
        };
        let id = ident
            .len()
            .checked_sub(16)
            .and_then(|at| <[u8; 16]>::try_from(&ident[at..]).ok())
            .ok_or_else(|| ClientError::Invalid("identity without a 16-byte uuid".into()))?;
        let mut o = opts.clone();
        o.identity = Some(ident);
        let producer = PlainProducer::connect(ctx, endpoints, &o)?;
        Ok(Producer {
            inner: Inner::Plain {
                producer,
                id,
                next: 0,
                unacked: None,
            },
        })
    }

    /// Whether messages are stored once however often they are sent (issue #18).
    pub fn is_idempotent(&self) -> bool {
        matches!(self.inner, Inner::Idempotent(_))
    }

    /// Sends one message: its id frame (chosen here, returned), then `frames`.
    ///
    /// - Mode 2: returns once it is durable (idempotent: after as many attempts as it took).
    /// - Mode 1: returns once queued; [`Producer::flush`] waits for the acks.
    /// - Mode 0: returns once queued.
    ///
    /// Errors: idempotent: [`ProducerOptions::retry_for`] passed (the last error met), or a
    /// refusal for good (102). Plain: as [`PlainProducer::send`].
    pub fn send(&mut self, frames: &[&[u8]]) -> Result<MessageId, ClientError> {
        match &mut self.inner {
            Inner::Idempotent(p) => p.send(frames),
            Inner::Plain {
                producer,
                id,
                next,
                unacked,
            } => {
                let mid = MessageId {
                    producer: *id,
                    sequence: *next,
                };
                *next += 1;
                let bytes = mid.to_bytes();
                let mut all: Vec<&[u8]> = Vec::with_capacity(frames.len() + 1);
                all.push(&bytes);
                all.extend_from_slice(frames);
                producer.send(&all)?;
                if producer.mode() == AckMode::PerFlush {
                    *unacked = Some(bytes.to_vec());
                }
                Ok(mid)
            }
        }
    }

    /// Mode 1: waits until every message sent is acknowledged (idempotent: sending again
    /// what the node lacks); plain: until the newest message's ack. Modes 0 and 2: nothing
    /// to wait for.
    ///
    /// Errors: idempotent: [`ProducerOptions::retry_for`] passed with messages
    /// unacknowledged; plain: as [`PlainProducer::wait_for_ack`].
    pub fn flush(&mut self) -> Result<(), ClientError> {
        match &mut self.inner {
            Inner::Idempotent(p) => p.flush(),
            Inner::Plain {
                producer, unacked, ..
            } => {
                if let Some(last) = unacked.take() {
                    producer.wait_for_ack(&last)?;
                }
                Ok(())
            }
        }
    }
}
