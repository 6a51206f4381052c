//! A producer connection's byte stream cut into whole messages and copied into stored records
//! (issue #17): after the handshake, ZMTP/2.0 and 3.x data frames already have the stored
//! record layout (spec `zper.md` §6.2), so a message is appended with one copy and no decoding
//! into separate buffers.
//!
//! What the writer keeps from the original (§4.1, §4.2) and from zper's libzmq front:
//! - an empty first frame followed by more frames is a REQ envelope: not stored, reported;
//! - a frame over `max_message` bytes drops its whole message, whose bytes are skipped as they
//!   arrive (never buffered), and the connection goes on; a declared length of 2^63 or more is
//!   a protocol error (JeroMQ reads the length as a signed long and refuses a negative one), so
//!   a peer cannot hold its connection in an endless skip;
//! - an empty message is dropped when `allow_empty_message` is false (§6.3);
//! - a message whose frames add up to more than `max_buffered` bytes is dropped the same way,
//!   so one connection never holds more than that in its buffer;
//! - ZMTP/3 commands between messages (PING, ...) are handed back; a command inside a
//!   multi-frame message is a protocol error.

use std::ops::Range;

use super::command::{Command, CommandError};
use super::frame::{FrameError, FrameHeader};
use super::handshake::{Version, MAX_HANDSHAKE_COMMAND};

/// Largest frame length a peer may declare, bytes: 2^63 - 1. Longer is a protocol error, as
/// in JeroMQ 0.3 (a negative `long`) and libzmq (more than `size_t` or `ZMQ_MAXMSGSIZE`).
pub const MAX_DECLARED_LEN: u64 = i64::MAX as u64;

/// Why a message was not stored (the connection goes on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// A frame over `max_message` bytes.
    OversizedFrame,
    /// The message's frames add up to more than `max_buffered` bytes.
    OversizedMessage,
    /// An empty message while `allow_empty_message` is false (§6.3).
    EmptyMessage,
}

/// A protocol error: the connection must be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InboundError {
    /// A malformed frame header.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A malformed command.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// A command frame between the frames of one message.
    #[error("a command frame inside a multi-frame message")]
    CommandInsideMessage,
    /// A CURVE MESSAGE that is malformed, replayed or does not decrypt (issue #19).
    #[error(transparent)]
    Curve(#[from] super::curve::CurveError),
}

/// What [`Inbound::next`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// A whole message was appended to `out`.
    Message {
        /// Where its stored records are in `out`.
        stored: Range<usize>,
        /// Where its first stored frame's payload (the message id of §4.5) is in `out`.
        first_frame: Range<usize>,
        /// Whether a REQ envelope (empty first frame) preceded it.
        envelope: bool,
    },
    /// A message was dropped (counted by the caller); nothing was appended.
    Dropped(Dropped),
    /// A ZMTP/3 command between messages.
    Command(Command<'a>),
}

/// Limits of one writer connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest frame stored, bytes (`max_message`).
    pub max_message: u64,
    /// Largest message buffered whole before it is stored, bytes (headers included; at
    /// least `max_message` + 9). The caller's read buffer must hold this much plus 9 bytes.
    pub max_buffered: u64,
    /// Whether an empty message is stored (`allow_empty_message`, §6.3).
    pub allow_empty_message: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At a message boundary (or inside one whose frames are all still in the input).
    Idle,
    /// Discarding a dropped message: bytes left of the current frame body, and whether more
    /// frames of the message follow it.
    Skipping { body_left: u64, more: bool },
}

/// One producer connection's inbound state after its handshake.
#[derive(Debug, Clone)]
pub struct Inbound {
    commands: bool,
    limits: Limits,
    state: State,
    /// Whether the last message dropped for its size began with a REQ envelope.
    dropped_envelope: bool,
}

impl Inbound {
    /// For a peer that agreed `version`, with the writer's `limits`.
    pub fn new(version: Version, limits: Limits) -> Self {
        Inbound {
            commands: version.has_commands(),
            limits,
            state: State::Idle,
            dropped_envelope: false,
        }
    }

    /// Whether the last message dropped as [`Dropped::OversizedFrame`] or
    /// [`Dropped::OversizedMessage`] began with a REQ envelope (an empty first frame with more
    /// following), so a reply to it can carry the envelope a REQ peer needs (§5.5).
    pub fn dropped_envelope(&self) -> bool {
        self.dropped_envelope
    }

    /// Looks at the start of `input` (the connection's unconsumed bytes): returns how many
    /// bytes it consumed and at most one event; `(n, None)` means the input holds no whole
    /// message after the first `n` bytes (read more, keep the rest, call again). A stored
    /// message is appended to `out`.
    ///
    /// Errors: [`InboundError`]; the connection must be closed.
    pub fn next<'a>(
        &mut self,
        input: &'a [u8],
        out: &mut Vec<u8>,
    ) -> Result<(usize, Option<Event<'a>>), InboundError> {
        match self.state {
            State::Skipping { .. } => {
                let used = self.skip(input)?;
                if self.state != State::Idle {
                    return Ok((used, None));
                }
                let (more, event) = self.message(&input[used..], out)?;
                Ok((used + more, event))
            }
            State::Idle => self.message(input, out),
        }
    }

    /// Discards what `input` holds of a dropped message; returns the bytes consumed.
    fn skip(&mut self, input: &[u8]) -> Result<usize, InboundError> {
        let mut at = 0;
        while let State::Skipping { body_left, more } = self.state {
            let take = body_left.min((input.len() - at) as u64);
            at += take as usize;
            if take < body_left {
                self.state = State::Skipping {
                    body_left: body_left - take,
                    more,
                };
                break;
            }
            if !more {
                self.state = State::Idle;
                break;
            }
            // The next frame of the dropped message: any valid length, it is skipped too.
            let Some(h) = FrameHeader::decode(&input[at..], self.commands, MAX_DECLARED_LEN)?
            else {
                self.state = State::Skipping { body_left: 0, more };
                break;
            };
            if h.command() {
                return Err(InboundError::CommandInsideMessage);
            }
            at += h.header_len;
            self.state = State::Skipping {
                body_left: h.body_len,
                more: h.more(),
            };
        }
        Ok(at)
    }

    fn message<'a>(
        &mut self,
        input: &'a [u8],
        out: &mut Vec<u8>,
    ) -> Result<(usize, Option<Event<'a>>), InboundError> {
        // First pass: find the end of the message without copying anything, and note its
        // first two frame headers (the second is the first stored one after a REQ envelope).
        let mut at = 0;
        let mut heads: [Option<FrameHeader>; 2] = [None, None];
        let mut frames = 0usize;
        let mut canonical = true;
        let last = loop {
            let h = match FrameHeader::decode(&input[at..], self.commands, MAX_DECLARED_LEN)? {
                Some(h) => h,
                None => return Ok((0, None)),
            };
            if h.command() {
                if frames > 0 {
                    return Err(InboundError::CommandInsideMessage);
                }
                return self.command(input, h);
            }
            let oversized = if h.body_len > self.limits.max_message {
                Some(Dropped::OversizedFrame)
            } else if at as u64 + h.frame_len() > self.limits.max_buffered {
                Some(Dropped::OversizedMessage)
            } else {
                None
            };
            if let Some(why) = oversized {
                self.dropped_envelope = heads[0].is_some_and(|e| e.body_len == 0 && e.more());
                return Ok(self.drop_from(at, h, why));
            }
            let end = at as u64 + h.frame_len();
            if let Some(slot) = heads.get_mut(frames) {
                *slot = Some(h);
            }
            frames += 1;
            canonical &= h.is_canonical();
            if (input.len() as u64) < end {
                return Ok((0, None));
            }
            at = end as usize;
            if !h.more() {
                break h;
            }
        };
        let end = at;
        if last.body_len == 0 && !self.limits.allow_empty_message {
            return Ok((end, Some(Event::Dropped(Dropped::EmptyMessage))));
        }
        // An empty first frame followed by more is a REQ envelope (§4.2): not stored.
        let envelope = heads[0].filter(|h| frames > 1 && h.body_len == 0);
        let first = if envelope.is_some() {
            heads[1]
        } else {
            heads[0]
        }
        .unwrap_or(last);
        let mut from = envelope.map_or(0, |e| e.header_len);
        let mark = out.len();
        if canonical {
            out.extend_from_slice(&input[from..end]);
        } else {
            while let Ok(Some(h)) = FrameHeader::decode(&input[from..end], self.commands, u64::MAX)
            {
                let (header, len) = h.canonical();
                out.extend_from_slice(&header[..len]);
                let body = from + h.header_len;
                from = body + h.body_len as usize;
                out.extend_from_slice(&input[body..from]);
            }
        }
        let (_, first_header_len) = first.canonical();
        let payload = mark + first_header_len;
        Ok((
            end,
            Some(Event::Message {
                stored: mark..out.len(),
                first_frame: payload..payload + first.body_len as usize,
                envelope: envelope.is_some(),
            }),
        ))
    }

    /// A command frame `h` at the start of `input`, between messages.
    fn command<'a>(
        &mut self,
        input: &'a [u8],
        h: FrameHeader,
    ) -> Result<(usize, Option<Event<'a>>), InboundError> {
        if h.body_len > MAX_HANDSHAKE_COMMAND {
            return Err(FrameError::TooLong {
                len: h.body_len,
                max: MAX_HANDSHAKE_COMMAND,
            }
            .into());
        }
        let end = h.frame_len() as usize;
        let Some(body) = input.get(h.header_len..end) else {
            return Ok((0, None));
        };
        Ok((end, Some(Event::Command(Command::parse(body)?))))
    }

    /// Drops the message whose frame `h` starts at `at`: the frames before it and its header
    /// are consumed now, its body (and any later frames) as they arrive.
    fn drop_from<'a>(
        &mut self,
        at: usize,
        h: FrameHeader,
        why: Dropped,
    ) -> (usize, Option<Event<'a>>) {
        self.state = State::Skipping {
            body_left: h.body_len,
            more: h.more(),
        };
        (at + h.header_len, Some(Event::Dropped(why)))
    }
}

#[cfg(test)]
#[path = "inbound_tests.rs"]
mod tests;
