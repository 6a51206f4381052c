//! An idempotent producer (issue #18; docs/protocol.md "Idempotent producers"): every message
//! carries `[producer id:16][sequence:8]` as its first frame, the fragment leader stores each
//! sequence once and in order, so the producer can send a message again whenever its outcome
//! is unknown (a timeout, a 104, a reconnect) without storing it twice.
//!
//! One DEALER to one writer at a time (order must hold across a producer's messages); after
//! a failure it moves to the next endpoint given. Mode 2 (per message) waits for each reply;
//! mode 1 (per flush) keeps up to [`MAX_IN_FLIGHT`] messages unacknowledged and sends them
//! again from the first one the node does not have.

use std::time::{Duration, Instant};

use zper_wire::{AckMode, ReaderReply, ReaderRequest, Status};

use crate::unacked::Unacked;
use crate::{identity, ClientError};

/// Messages a mode-1 idempotent producer keeps sent and unacknowledged (a copy of each, to
/// send again); at this many it waits until half are acknowledged.
pub const MAX_IN_FLIGHT: usize = 65_536;

/// An idempotent message id: the first frame of the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageId {
    /// The producer id (`zper_wire::idempotent::producer_id` of its identity's UUID).
    pub producer: [u8; 16],
    /// The message's place in the producer's sequence (from 0).
    pub sequence: u64,
}

impl MessageId {
    /// The 24 bytes on the wire: producer id, then the sequence big-endian.
    pub fn to_bytes(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[..16].copy_from_slice(&self.producer);
        out[16..].copy_from_slice(&self.sequence.to_be_bytes());
        out
    }

    /// Parses the 24 bytes of a message's first frame; None for any other length.
    pub fn from_bytes(b: &[u8]) -> Option<MessageId> {
        if b.len() != 24 {
            return None;
        }
        Some(MessageId {
            producer: b[..16].try_into().ok()?,
            sequence: u64::from_be_bytes(b[16..].try_into().ok()?),
        })
    }
}

/// What a fragment leader says of a message (`PRODUCED`, docs/protocol.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Produced {
    /// Stored and durable.
    Stored {
        /// Offset of its first record in its fragment, bytes.
        start: u64,
        /// Offset just after it.
        end: u64,
    },
    /// Not stored: sending it again stores it once.
    NotStored,
    /// Stored but not durable yet: ask again.
    Pending,
    /// This node does not lead the fragment: ask the leader.
    NotLeader,
    /// Older than what the leader reads back (64 MiB of the fragment): it cannot tell.
    Unknown,
}

/// Asks the reader at `endpoint` what became of message `id` of the producer presenting
/// `producer_identity` (the fragment is chosen from its UUID, as the writer chooses it).
///
/// Errors: [`ClientError::Timeout`], [`ClientError::Malformed`], zmq errors.
pub fn produced(
    ctx: &zmq::Context,
    endpoint: &str,
    producer_identity: &[u8],
    id: &MessageId,
    timeout: Duration,
) -> Result<Produced, ClientError> {
    let z = |what| ClientError::zmq(what, endpoint);
    let s = ctx.socket(zmq::DEALER).map_err(z("socket for reader"))?;
    s.set_identity(producer_identity).map_err(z("identity"))?;
    s.set_rcvtimeo(millis(timeout)).map_err(z("rcvtimeo"))?;
    s.set_linger(0).map_err(z("linger"))?;
    s.connect(endpoint).map_err(z("connect to reader"))?;
    let req = ReaderRequest::Produced {
        message_id: id.to_bytes(),
    };
    s.send_multipart(req.encode(), 0).map_err(z("send"))?;
    let frames = match s.recv_multipart(0) {
        Ok(f) => f,
        Err(zmq::Error::EAGAIN) => {
            return Err(ClientError::Timeout {
                endpoint: format!("reader {endpoint}"),
                timeout_ms: timeout.as_millis() as u64,
            })
        }
        Err(e) => return Err(z("receive")(e)),
    };
    match ReaderReply::decode(&req, &frames) {
        Some(ReaderReply::Offsets(o)) if o.len() == 2 => Ok(Produced::Stored {
            start: o[0],
            end: o[1],
        }),
        Some(ReaderReply::Status(Status::InvalidOffset)) => Ok(Produced::NotStored),
        Some(ReaderReply::Status(Status::Unavailable)) => Ok(Produced::Pending),
        Some(ReaderReply::Status(Status::NotLeader)) => Ok(Produced::NotLeader),
        Some(ReaderReply::Status(Status::OutOfSequence)) => Ok(Produced::Unknown),
        _ => Err(ClientError::Malformed {
            endpoint: endpoint.to_owned(),
            detail: format!("PRODUCED reply {frames:?}"),
        }),
    }
}

fn millis(d: Duration) -> i32 {
    d.as_millis().min(i32::MAX as u128) as i32
}

/// How an [`IdempotentProducer`] behaves.
#[derive(Debug, Clone)]
pub struct IdempotentOptions {
    /// Topic (1-64 ASCII letters or digits).
    pub topic: String,
    /// Per flush (mode byte 0x41) or per message (0x42); [`AckMode::None`] is refused.
    pub mode: AckMode,
    /// How long one attempt waits for an ack before the message is sent again.
    pub timeout: Duration,
    /// How long a message may take in all, attempts included, before `send` or `flush`
    /// fails with the last error.
    pub deadline: Duration,
    /// The identity to present (the producer id is derived from its last 16 bytes, its UUID);
    /// default a fresh one.
    pub identity: Option<Vec<u8>>,
    /// Where an earlier producer left off: its [`IdempotentProducer::next_id`], producer id and
    /// sequence together (a sequence that was used, even without an ack, must not be used
    /// again). None: the identity's own producer id from sequence 0.
    ///
    /// The producer id is part of it because a producer may have gone on under a new one
    /// (after a gap it could not fill); resuming the identity's producer id at the new one's
    /// sequence would send sequences that id used long ago, which the node answers as
    /// duplicates: acknowledged and not stored.
    pub resume: Option<MessageId>,
    /// CURVE keys, for a writer that requires CURVE (issue #19); `None`: plain ZMTP.
    pub curve: Option<crate::ClientCurve>,
}

impl IdempotentOptions {
    /// Options for `topic` in `mode`: 2 s per attempt, 60 s in all.
    pub fn new(topic: &str, mode: AckMode) -> Self {
        IdempotentOptions {
            topic: topic.to_owned(),
            mode,
            timeout: Duration::from_secs(2),
            deadline: Duration::from_secs(60),
            identity: None,
            resume: None,
            curve: None,
        }
    }
}

/// A producer whose messages are stored once each however often they are sent (issue #18).
/// Not `Sync`: use it from one thread.
pub struct IdempotentProducer {
    ctx: zmq::Context,
    endpoints: Vec<String>,
    at: usize,
    socket: zmq::Socket,
    identity: Vec<u8>,
    producer: [u8; 16],
    mode: AckMode,
    opts: IdempotentOptions,
    next: u64,
    /// Mode 1: sent and not yet acknowledged, oldest first (frames after the id).
    unacked: Unacked,
    /// Messages sent again (after a timeout, a refusal or a reconnect).
    pub resent: u64,
    /// Mode 1: messages that went on under a new producer id after a gap that could not be
    /// filled (the ids [`IdempotentProducer::send`] returned for them are void).
    pub renumbered: u64,
}

impl IdempotentProducer {
    /// Connects to the first of `endpoints` (writers of one cluster).
    ///
    /// Errors: no endpoint, an invalid topic, [`AckMode::None`] (nothing would be
    /// acknowledged, so nothing could be retried), zmq errors.
    pub fn connect(
        ctx: &zmq::Context,
        endpoints: &[String],
        opts: IdempotentOptions,
    ) -> Result<Self, ClientError> {
        if endpoints.is_empty() {
            return Err(ClientError::Invalid("no writer endpoint".into()));
        }
        let byte = match opts.mode {
            AckMode::PerFlush => zper_wire::IDEMPOTENT_PER_FLUSH,
            AckMode::PerMessage => zper_wire::IDEMPOTENT_PER_MESSAGE,
            AckMode::None => {
                return Err(ClientError::Invalid(
                    "an idempotent producer needs acks: mode 1 or 2".into(),
                ))
            }
        };
        let mut id = match &opts.identity {
            Some(id) => id.clone(),
            None => identity(&opts.topic, byte)?,
        };
        if id.len() < 3 + 16 {
            return Err(ClientError::Invalid(
                "identity without a 16-byte uuid".into(),
            ));
        }
        id[1] = byte;
        let uuid: [u8; 16] = id[id.len() - 16..]
            .try_into()
            .map_err(|_| ClientError::Invalid("identity without a 16-byte uuid".into()))?;
        // The same identity gives the same producer id, unless `resume` names the id an
        // earlier producer went on under.
        let (producer, next) = match opts.resume {
            Some(at) if zper_wire::idempotent::parse_message_id(&at.to_bytes()).is_none() => {
                return Err(ClientError::Invalid(
                    "resume: not an idempotent message id (use a producer's next_id())".into(),
                ))
            }
            Some(at) => (at.producer, at.sequence),
            None => (zper_wire::idempotent::producer_id(uuid), 0),
        };
        let socket = open(ctx, &endpoints[0], &id, &opts)?;
        Ok(IdempotentProducer {
            ctx: ctx.clone(),
            endpoints: endpoints.to_vec(),
            at: 0,
            socket,
            identity: id,
            producer,
            mode: opts.mode,
            next,
            opts,
            unacked: Unacked::default(),
            resent: 0,
            renumbered: 0,
        })
    }

    /// The identity presented (for [`produced`]).
    pub fn identity(&self) -> &[u8] {
        &self.identity
    }

    /// The id the next message will get.
    pub fn next_id(&self) -> MessageId {
        MessageId {
            producer: self.producer,
            sequence: self.next,
        }
    }

    /// Sends one message (`frames` follow its id frame) and returns its id. Mode 2: returns
    /// once it is durable,
    /// sending it again (to the next endpoint after a failure) until then or the deadline.
    /// Mode 1: returns once queued; at [`MAX_IN_FLIGHT`] unacknowledged it first waits as
    /// [`IdempotentProducer::flush`] does.
    ///
    /// Errors: the deadline passed (the last error met); the node refused it for good (102).
    pub fn send(&mut self, frames: &[&[u8]]) -> Result<MessageId, ClientError> {
        let mut id = self.next_id();
        if self.mode == AckMode::PerMessage {
            let owned: Vec<Vec<u8>> = frames.iter().map(|f| f.to_vec()).collect();
            // The sequence is used up even when the outcome stays unknown: the next message
            // must not reuse it (the node would take it for a duplicate of this one).
            let result = self.send_and_wait(id.sequence, &owned);
            if let Ok(seq) = result {
                id = MessageId {
                    producer: self.producer,
                    sequence: seq,
                };
            }
            self.next = self.next.max(id.sequence) + 1;
            return result.map(|_| id);
        }
        if self.unacked.len() >= MAX_IN_FLIGHT {
            self.wait_acked(MAX_IN_FLIGHT / 2)?;
        }
        self.transmit(id.sequence, frames.iter().copied())?;
        self.unacked.push(id.sequence, frames);
        self.next += 1;
        Ok(id)
    }

    /// Mode 1: waits until every message sent is acknowledged, sending again from the first
    /// one the node lacks on a timeout or a 104/105/103/106. Mode 2: nothing to wait for.
    ///
    /// Errors: the deadline passed with messages unacknowledged.
    pub fn flush(&mut self) -> Result<(), ClientError> {
        self.wait_acked(0)
    }

    /// Mode 1: waits until at most `left` messages are unacknowledged (see `flush`).
    fn wait_acked(&mut self, left: usize) -> Result<(), ClientError> {
        let started = Instant::now();
        while self.unacked.len() > left {
            let Some(first) = self.unacked.first() else {
                break;
            };
            match self.reply()? {
                Some(Reply::Ack(seq)) => {
                    // Sequences are stored in order: the ack covers every earlier one.
                    self.unacked.ack(seq);
                }
                Some(Reply::Refused(_, _, Status::OutOfSequence, expected)) => {
                    // A gap: messages were lost in flight. Those before `expected` are
                    // stored but maybe not durable yet: send every unacknowledged one again
                    // (the stored ones are only acknowledged). A gap before the first one
                    // kept (a message that failed for good, or a producer the node forgot)
                    // cannot be filled: go on under a new producer id.
                    if expected.is_some_and(|e| e < first) {
                        self.renumber();
                    }
                    self.resend_unacked()?;
                }
                Some(Reply::Refused(id, _, Status::InvalidCommand, _)) => {
                    return Err(ClientError::Refused {
                        id,
                        status: Status::InvalidCommand.byte(),
                    })
                }
                Some(Reply::Refused(..)) | None => {
                    self.check_deadline(started)?;
                    self.failover()?;
                    self.resend_unacked()?;
                }
            }
        }
        Ok(())
    }

    /// Mode 2: sends `seq` until acknowledged; returns the sequence it was stored under (0 of
    /// a new producer id after a gap it cannot fill).
    fn send_and_wait(&mut self, seq: u64, frames: &[Vec<u8>]) -> Result<u64, ClientError> {
        let started = Instant::now();
        let mut seq = seq;
        self.transmit(seq, frames.iter().map(Vec::as_slice))?;
        loop {
            match self.reply()? {
                Some(Reply::Ack(s)) if s == seq => return Ok(seq),
                Some(Reply::Ack(_)) => continue, // a late reply to an earlier attempt
                Some(Reply::Refused(_, s, Status::OutOfSequence, _)) if s == seq => {
                    // A gap this producer cannot fill: an earlier message failed for good and
                    // its sequence must not be reused (a late copy of it could still arrive).
                    // Go on as a new producer id from sequence 0.
                    self.producer = zper_wire::idempotent::producer_id(crate::random_uuid());
                    self.next = 0;
                    seq = 0;
                    self.resent += 1;
                    self.transmit(seq, frames.iter().map(Vec::as_slice))?;
                }
                Some(Reply::Refused(id, s, Status::InvalidCommand, _)) if s == seq => {
                    return Err(ClientError::Refused {
                        id,
                        status: Status::InvalidCommand.byte(),
                    })
                }
                Some(Reply::Refused(_, s, _, _)) if s != seq => continue,
                Some(Reply::Refused(..)) | None => {
                    self.check_deadline(started)?;
                    self.failover()?;
                    self.resent += 1;
                    self.transmit(seq, frames.iter().map(Vec::as_slice))?;
                }
            }
        }
    }

    fn transmit<'a>(
        &self,
        seq: u64,
        frames: impl Iterator<Item = &'a [u8]>,
    ) -> Result<(), ClientError> {
        let id = MessageId {
            producer: self.producer,
            sequence: seq,
        }
        .to_bytes();
        // The REQ envelope a DEALER adds itself, in mode 2.
        let envelope: Option<&[u8]> = (self.mode == AckMode::PerMessage).then_some(&[]);
        let out = envelope
            .into_iter()
            .chain([&id[..]])
            .chain(frames.map(|f| -> &[u8] { f }));
        match self.socket.send_multipart(out, 0) {
            Ok(()) | Err(zmq::Error::EAGAIN) => Ok(()), // EAGAIN: the wait times out, then resends
            Err(e) => Err(ClientError::zmq("send to writer", &self.endpoints[self.at])(e)),
        }
    }

    /// Mode 1 after a gap it cannot fill: a new producer id, and the unacknowledged messages
    /// renumbered from 0 under it ([`IdempotentProducer::next_id`] follows; ids returned by
    /// earlier sends are void, counted in `renumbered`).
    fn renumber(&mut self) {
        self.producer = zper_wire::idempotent::producer_id(crate::random_uuid());
        self.renumbered += self.unacked.len() as u64;
        self.unacked.renumber();
        self.next = self.unacked.len() as u64;
    }

    fn resend_unacked(&mut self) -> Result<(), ClientError> {
        for (seq, frames) in self.unacked.iter() {
            self.resent += 1;
            self.transmit(seq, frames)?;
        }
        Ok(())
    }

    /// [`ClientError::Timeout`] once the deadline passed since `started`.
    fn check_deadline(&self, started: Instant) -> Result<(), ClientError> {
        if started.elapsed() > self.opts.deadline {
            return Err(ClientError::Timeout {
                endpoint: self.endpoints[self.at].clone(),
                timeout_ms: self.opts.deadline.as_millis() as u64,
            });
        }
        Ok(())
    }

    /// A new connection to the next endpoint (or the same one when there is one).
    fn failover(&mut self) -> Result<(), ClientError> {
        self.at = (self.at + 1) % self.endpoints.len();
        self.socket = open(
            &self.ctx,
            &self.endpoints[self.at],
            &self.identity,
            &self.opts,
        )?;
        Ok(())
    }

    /// The next reply within the attempt timeout: an ack or a refusal of one of this
    /// producer's sequences; None on timeout or a reply that is not one.
    ///
    /// Replies naming another producer id are skipped: after going on under a new id
    /// (renumbered after a gap it could not fill), a late ack for the old id's sequence `s` would
    /// otherwise be taken for the new id's `s` and cover messages the node never stored.
    fn reply(&self) -> Result<Option<Reply>, ClientError> {
        loop {
            let mut frames = match self.socket.recv_multipart(0) {
                Ok(f) => f,
                Err(zmq::Error::EAGAIN) => return Ok(None),
                Err(e) => {
                    return Err(ClientError::zmq(
                        "receive from writer",
                        &self.endpoints[self.at],
                    )(e))
                }
            };
            if frames.first().is_some_and(Vec::is_empty) {
                frames.remove(0);
            }
            let Some(id) = frames.first().and_then(|f| MessageId::from_bytes(f)) else {
                return Ok(None);
            };
            if id.producer != self.producer {
                continue;
            }
            return Ok(match frames.as_slice() {
                [_] => Some(Reply::Ack(id.sequence)),
                [raw, status, rest @ ..] if status.len() == 1 => {
                    let status = Status::from_byte(status[0]).unwrap_or(Status::InternalError);
                    let expected = rest
                        .first()
                        .and_then(|f| <[u8; 8]>::try_from(f.as_slice()).ok())
                        .map(u64::from_be_bytes);
                    Some(Reply::Refused(raw.clone(), id.sequence, status, expected))
                }
                _ => None,
            });
        }
    }
}

/// A writer reply to an idempotent producer.
enum Reply {
    /// `[id]`: durable, with every earlier sequence.
    Ack(u64),
    /// `[id][status]([expected:8])`.
    Refused(Vec<u8>, u64, Status, Option<u64>),
}

fn open(
    ctx: &zmq::Context,
    endpoint: &str,
    identity: &[u8],
    opts: &IdempotentOptions,
) -> Result<zmq::Socket, ClientError> {
    let z = |what| ClientError::zmq(what, endpoint);
    let s = ctx.socket(zmq::DEALER).map_err(z("socket for writer"))?;
    if let Some(curve) = &opts.curve {
        curve.apply(&s, endpoint)?;
    }
    s.set_identity(identity).map_err(z("identity for writer"))?;
    // The producer bounds what it keeps in flight itself: room for all of it in the queue,
    // so a send blocks only when the node is not there.
    s.set_sndhwm(MAX_IN_FLIGHT as i32).map_err(z("sndhwm"))?;
    s.set_immediate(true).map_err(z("immediate"))?;
    s.set_sndtimeo(millis(opts.timeout))
        .map_err(z("sndtimeo"))?;
    s.set_rcvtimeo(millis(opts.timeout))
        .map_err(z("rcvtimeo"))?;
    s.set_linger(0).map_err(z("linger"))?;
    s.connect(endpoint).map_err(z("connect to writer"))?;
    Ok(s)
}

#[cfg(test)]
#[path = "idempotent_tests.rs"]
mod tests;
