//! The relay endpoint's frames (issue #7; the README's ZPRelay, Pirius push delivery of
//! `pirius.md` §11 "Serving subscribers" and the retrievable back-channel of §13): a subscriber's
//! DEALER asks for its assigned fragments once and the node pushes their records in batches as
//! they pass the high-water mark, within a credit window that the subscriber's ACKs refill.
//!
//! ```text
//! subscriber -> relay
//!   [STREAM][topic][group][subscriber][fragment:4][offset:8][max batch:4][flush ms:4]
//!           [window:4][revision:8]           push `fragment` from `offset` (restarts a stream)
//!   [ACK][topic][group][subscriber][fragment:4][offset:8]
//!                                            processed up to `offset`: refills the window and
//!                                            commits the group's offset through Raft
//!   [RESULT][topic][fragment:4][offset:8][id][payload]
//!                                            a result for the record at `offset` whose first
//!                                            frame (ZPER message id) is `id` (§13)
//! producer -> relay
//!   [RESULTS][topic][id prefix]              receive results of `topic` whose id starts with the
//!                                            prefix, for RESULTS_LEASE_MS (send again to renew)
//! relay -> client
//!   [RECORDS][topic][fragment:4][offset:8][end:8][records]
//!                                            a batch: whole messages from `offset` to `end` as
//!                                            stored (the segment record format, `zper.md`
//!                                            §6.2), one frame, as a FETCH reply carries them
//!   [ACKED][topic][fragment:4][offset:8]     the group's offset is committed up to `offset`
//!   [REVOKED][topic][fragment:4][reason]     the fragment is no longer this subscriber's; the
//!                                            stream ended (unacknowledged records go to the
//!                                            fragment's new owner from the committed offset)
//!   [HEARTBEAT][topic][fragment:4]          the stream is alive but had nothing to send for a
//!                                            while (the relay checks the member is still there)
//!   [REGISTERED][topic][id prefix][lease ms:8]
//!   [RESULT][topic][fragment:4][offset:8][id][payload]     to registered producers
//!   [ERROR][reason]                          malformed request; nothing changed
//! node -> node
//!   [RESULT-FWD] + the RESULT frames         a result passed on to every other node's relay
//! ```
//! All numbers are big-endian. Decoders are total: any frames give a value or an error.

use thiserror::Error;

/// Command and reply words.
pub const STREAM: &[u8] = b"STREAM";
/// Command and reply words.
pub const ACK: &[u8] = b"ACK";
/// Command and reply words.
pub const RESULT: &[u8] = b"RESULT";
/// Command and reply words.
pub const RESULTS: &[u8] = b"RESULTS";
/// Command and reply words.
pub const RESULT_FWD: &[u8] = b"RESULT-FWD";
/// Command and reply words.
pub const RECORDS: &[u8] = b"RECORDS";
/// Command and reply words.
pub const ACKED: &[u8] = b"ACKED";
/// Command and reply words.
pub const REVOKED: &[u8] = b"REVOKED";
/// Command and reply words.
pub const REGISTERED: &[u8] = b"REGISTERED";
/// Command and reply words.
pub const ERROR: &[u8] = b"ERROR";
/// Command and reply words.
pub const HEARTBEAT: &[u8] = b"HEARTBEAT";

/// How long a RESULTS registration lasts, ms.
pub const RESULTS_LEASE_MS: u64 = 60_000;

/// Longest `flush ms` a STREAM may ask for (a partial batch waits at most a minute).
pub const MAX_FLUSH_MS: u32 = 60_000;

/// Largest `window` (messages pushed and not yet acknowledged) a STREAM may ask for.
pub const MAX_WINDOW: u32 = 100_000;

/// A STREAM request: push `fragment` of `topic` from `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRequest {
    /// Topic.
    pub topic: String,
    /// Subscription group.
    pub group: String,
    /// Subscriber id.
    pub subscriber: String,
    /// Fragment id.
    pub fragment: u32,
    /// First offset to push (a record boundary; the committed offset or later).
    pub offset: u64,
    /// Messages per batch, at least 1 (Pirius `max_batch_size`).
    pub max_batch: u32,
    /// How long a partial batch may wait for more messages, ms (Pirius `flush_interval`; 0 =
    /// send what is there at once).
    pub flush_ms: u32,
    /// Messages pushed and not yet acknowledged before the relay pauses, 1..=[`MAX_WINDOW`].
    pub window: u32,
    /// Raft index of the assignment the subscriber holds (from SUBSCRIBE/KEEPALIVE).
    pub revision: u64,
}

/// An ACK: the subscriber has processed `fragment` up to `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckRequest {
    /// Topic.
    pub topic: String,
    /// Group.
    pub group: String,
    /// Subscriber id.
    pub subscriber: String,
    /// Fragment id.
    pub fragment: u32,
    /// Offset after the last processed message.
    pub offset: u64,
}

/// A result sent back for one record (§13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultMessage {
    /// Topic.
    pub topic: String,
    /// Fragment of the record.
    pub fragment: u32,
    /// Offset of the record.
    pub offset: u64,
    /// The record's ZPER message id (its first frame).
    pub id: Vec<u8>,
    /// The result.
    pub payload: Vec<u8>,
}

/// A decoded request to the relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayRequest {
    /// Start or restart pushing a fragment.
    Stream(StreamRequest),
    /// Acknowledge.
    Ack(AckRequest),
    /// A subscriber's result.
    Result(ResultMessage),
    /// A result forwarded by another node (delivered locally only).
    Forwarded(ResultMessage),
    /// A producer registers for results: topic and id prefix.
    Results {
        /// Topic.
        topic: String,
        /// Id prefix (empty = every result of the topic).
        prefix: Vec<u8>,
    },
}

/// Why a relay request is malformed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RelayError {
    /// No frames.
    #[error("empty request")]
    Empty,
    /// Unknown command word.
    #[error("unknown relay command {0:?}")]
    UnknownCommand(String),
    /// Wrong frame count.
    #[error("{0} takes {1} frames")]
    FrameCount(&'static str, usize),
    /// A number frame of the wrong width.
    #[error("{0} must be {1} bytes")]
    Number(&'static str, usize),
    /// Topic, group or subscriber invalid.
    #[error("invalid {0}")]
    Name(&'static str),
    /// A batch size, window out of range.
    #[error("{0} out of range")]
    Range(&'static str),
}

fn u32_of(f: &[u8], what: &'static str) -> Result<u32, RelayError> {
    Ok(u32::from_be_bytes(
        f.try_into().map_err(|_| RelayError::Number(what, 4))?,
    ))
}

fn u64_of(f: &[u8], what: &'static str) -> Result<u64, RelayError> {
    Ok(u64::from_be_bytes(
        f.try_into().map_err(|_| RelayError::Number(what, 8))?,
    ))
}

fn topic_of(f: &[u8]) -> Result<String, RelayError> {
    crate::identity::validate_topic(f).map_err(|_| RelayError::Name("topic"))?;
    Ok(String::from_utf8_lossy(f).into_owned())
}

fn name_of(f: &[u8], what: &'static str) -> Result<String, RelayError> {
    if f.is_empty() || f.len() > 64 || !f.iter().all(|b| b.is_ascii_graphic()) {
        return Err(RelayError::Name(what));
    }
    Ok(String::from_utf8_lossy(f).into_owned())
}

fn result_of<F: AsRef<[u8]>>(args: &[F], word: &'static str) -> Result<ResultMessage, RelayError> {
    if args.len() != 5 {
        return Err(RelayError::FrameCount(word, 6));
    }
    Ok(ResultMessage {
        topic: topic_of(args[0].as_ref())?,
        fragment: u32_of(args[1].as_ref(), "fragment")?,
        offset: u64_of(args[2].as_ref(), "offset")?,
        id: args[3].as_ref().to_vec(),
        payload: args[4].as_ref().to_vec(),
    })
}

impl RelayRequest {
    /// Decodes a request (routing id already removed).
    pub fn decode<F: AsRef<[u8]>>(frames: &[F]) -> Result<Self, RelayError> {
        let (word, args) = frames.split_first().ok_or(RelayError::Empty)?;
        let arg = |i: usize| args[i].as_ref();
        match word.as_ref() {
            STREAM => {
                if args.len() != 9 {
                    return Err(RelayError::FrameCount("STREAM", 10));
                }
                let r = StreamRequest {
                    topic: topic_of(arg(0))?,
                    group: name_of(arg(1), "group")?,
                    subscriber: name_of(arg(2), "subscriber")?,
                    fragment: u32_of(arg(3), "fragment")?,
                    offset: u64_of(arg(4), "offset")?,
                    max_batch: u32_of(arg(5), "max batch")?,
                    flush_ms: u32_of(arg(6), "flush ms")?,
                    window: u32_of(arg(7), "window")?,
                    revision: u64_of(arg(8), "revision")?,
                };
                if r.max_batch == 0 || r.max_batch > MAX_WINDOW {
                    return Err(RelayError::Range("max batch"));
                }
                if r.window == 0 || r.window > MAX_WINDOW {
                    return Err(RelayError::Range("window"));
                }
                if r.flush_ms > MAX_FLUSH_MS {
                    return Err(RelayError::Range("flush ms"));
                }
                Ok(RelayRequest::Stream(r))
            }
            ACK => {
                if args.len() != 5 {
                    return Err(RelayError::FrameCount("ACK", 6));
                }
                Ok(RelayRequest::Ack(AckRequest {
                    topic: topic_of(arg(0))?,
                    group: name_of(arg(1), "group")?,
                    subscriber: name_of(arg(2), "subscriber")?,
                    fragment: u32_of(arg(3), "fragment")?,
                    offset: u64_of(arg(4), "offset")?,
                }))
            }
            RESULT => result_of(args, "RESULT").map(RelayRequest::Result),
            RESULT_FWD => result_of(args, "RESULT-FWD").map(RelayRequest::Forwarded),
            RESULTS => {
                if args.len() != 2 {
                    return Err(RelayError::FrameCount("RESULTS", 3));
                }
                Ok(RelayRequest::Results {
                    topic: topic_of(arg(0))?,
                    prefix: arg(1).to_vec(),
                })
            }
            other => Err(RelayError::UnknownCommand(
                String::from_utf8_lossy(other).into_owned(),
            )),
        }
    }

    /// The frames a client sends.
    pub fn encode(&self) -> Vec<Vec<u8>> {
        match self {
            RelayRequest::Stream(r) => vec![
                STREAM.to_vec(),
                r.topic.as_bytes().to_vec(),
                r.group.as_bytes().to_vec(),
                r.subscriber.as_bytes().to_vec(),
                r.fragment.to_be_bytes().to_vec(),
                r.offset.to_be_bytes().to_vec(),
                r.max_batch.to_be_bytes().to_vec(),
                r.flush_ms.to_be_bytes().to_vec(),
                r.window.to_be_bytes().to_vec(),
                r.revision.to_be_bytes().to_vec(),
            ],
            RelayRequest::Ack(a) => vec![
                ACK.to_vec(),
                a.topic.as_bytes().to_vec(),
                a.group.as_bytes().to_vec(),
                a.subscriber.as_bytes().to_vec(),
                a.fragment.to_be_bytes().to_vec(),
                a.offset.to_be_bytes().to_vec(),
            ],
            RelayRequest::Result(r) => r.frames(RESULT),
            RelayRequest::Forwarded(r) => r.frames(RESULT_FWD),
            RelayRequest::Results { topic, prefix } => {
                vec![RESULTS.to_vec(), topic.as_bytes().to_vec(), prefix.clone()]
            }
        }
    }
}

impl ResultMessage {
    /// `[word][topic][fragment:4][offset:8][id][payload]`.
    pub fn frames(&self, word: &[u8]) -> Vec<Vec<u8>> {
        vec![
            word.to_vec(),
            self.topic.as_bytes().to_vec(),
            self.fragment.to_be_bytes().to_vec(),
            self.offset.to_be_bytes().to_vec(),
            self.id.clone(),
            self.payload.clone(),
        ]
    }
}

/// One pushed message: its offset and its frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedMessage {
    /// Offset of its first record.
    pub offset: u64,
    /// Its frames.
    pub frames: Vec<Vec<u8>>,
}

/// A message from the relay to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayReply {
    /// A batch of one fragment's whole messages, as stored bytes.
    Records {
        /// Topic.
        topic: String,
        /// Fragment.
        fragment: u32,
        /// Offset of the first message.
        offset: u64,
        /// Offset after the last message.
        end: u64,
        /// The stored records (`zper.md` §6.2), `end - offset` bytes.
        records: Vec<u8>,
    },
    /// Committed up to `offset`.
    Acked {
        /// Topic.
        topic: String,
        /// Fragment.
        fragment: u32,
        /// Committed offset.
        offset: u64,
    },
    /// The stream of `fragment` ended: not assigned to this subscriber (any more).
    Revoked {
        /// Topic.
        topic: String,
        /// Fragment.
        fragment: u32,
        /// Why.
        reason: String,
    },
    /// A RESULTS registration is in place.
    Registered {
        /// Topic.
        topic: String,
        /// Prefix.
        prefix: Vec<u8>,
        /// Lease, ms.
        lease_ms: u64,
    },
    /// A result for a producer.
    Result(ResultMessage),
    /// A malformed request.
    Error(String),
    /// A quiet stream is still there.
    Heartbeat {
        /// Topic.
        topic: String,
        /// Fragment.
        fragment: u32,
    },
}

/// Splits a batch's stored records into its messages (offset and frames); `None` when the
/// bytes are not whole, valid messages.
pub fn split_messages(offset: u64, records: &[u8]) -> Option<Vec<PushedMessage>> {
    let mut out = Vec::new();
    let mut frames = Vec::new();
    let (mut pos, mut start) = (0usize, 0usize);
    let mut it = crate::Records::new(records);
    for rec in it.by_ref() {
        frames.push(rec.payload.to_vec());
        pos += rec.stored_len();
        if !rec.more {
            out.push(PushedMessage {
                offset: offset + start as u64,
                frames: std::mem::take(&mut frames),
            });
            start = pos;
        }
    }
    (pos == records.len() && frames.is_empty()).then_some(out)
}

impl RelayReply {
    /// The frames the relay sends (after the routing id).
    pub fn into_frames(self) -> Vec<Vec<u8>> {
        match self {
            RelayReply::Records {
                topic,
                fragment,
                offset,
                end,
                records,
            } => vec![
                RECORDS.to_vec(),
                topic.into_bytes(),
                fragment.to_be_bytes().to_vec(),
                offset.to_be_bytes().to_vec(),
                end.to_be_bytes().to_vec(),
                records,
            ],
            RelayReply::Acked {
                topic,
                fragment,
                offset,
            } => vec![
                ACKED.to_vec(),
                topic.into_bytes(),
                fragment.to_be_bytes().to_vec(),
                offset.to_be_bytes().to_vec(),
            ],
            RelayReply::Revoked {
                topic,
                fragment,
                reason,
            } => vec![
                REVOKED.to_vec(),
                topic.into_bytes(),
                fragment.to_be_bytes().to_vec(),
                reason.into_bytes(),
            ],
            RelayReply::Registered {
                topic,
                prefix,
                lease_ms,
            } => vec![
                REGISTERED.to_vec(),
                topic.into_bytes(),
                prefix,
                lease_ms.to_be_bytes().to_vec(),
            ],
            RelayReply::Result(r) => r.frames(RESULT),
            RelayReply::Error(reason) => vec![ERROR.to_vec(), reason.into_bytes()],
            RelayReply::Heartbeat { topic, fragment } => vec![
                HEARTBEAT.to_vec(),
                topic.into_bytes(),
                fragment.to_be_bytes().to_vec(),
            ],
        }
    }

    /// Decodes what a relay sent (client side); `None` when malformed.
    pub fn decode<F: AsRef<[u8]>>(frames: &[F]) -> Option<Self> {
        let (word, rest) = frames.split_first()?;
        let f = |i: usize| rest.get(i).map(|f| f.as_ref());
        let text = |i: usize| f(i).map(|b| String::from_utf8_lossy(b).into_owned());
        let n32 = |i: usize| f(i).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes);
        let n64 = |i: usize| f(i).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
        let reply = match word.as_ref() {
            RECORDS => {
                let (offset, end) = (n64(2)?, n64(3)?);
                let records = f(4)?.to_vec();
                if end.checked_sub(offset)? != records.len() as u64 {
                    return None;
                }
                RelayReply::Records {
                    topic: text(0)?,
                    fragment: n32(1)?,
                    offset,
                    end,
                    records,
                }
            }
            ACKED => RelayReply::Acked {
                topic: text(0)?,
                fragment: n32(1)?,
                offset: n64(2)?,
            },
            REVOKED => RelayReply::Revoked {
                topic: text(0)?,
                fragment: n32(1)?,
                reason: text(2)?,
            },
            REGISTERED => RelayReply::Registered {
                topic: text(0)?,
                prefix: f(1)?.to_vec(),
                lease_ms: n64(2)?,
            },
            RESULT => RelayReply::Result(ResultMessage {
                topic: text(0)?,
                fragment: n32(1)?,
                offset: n64(2)?,
                id: f(3)?.to_vec(),
                payload: f(4)?.to_vec(),
            }),
            ERROR => RelayReply::Error(text(0)?),
            HEARTBEAT => RelayReply::Heartbeat {
                topic: text(0)?,
                fragment: n32(1)?,
            },
            _ => return None,
        };
        let expected = match &reply {
            RelayReply::Records { .. } => 5,
            RelayReply::Error(_) => 1,
            RelayReply::Heartbeat { .. } => 2,
            RelayReply::Result(_) => 5,
            _ => 3,
        };
        (rest.len() == expected).then_some(reply)
    }
}

#[cfg(test)]
mod tests;
