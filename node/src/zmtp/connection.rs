//! One TCP connection of zper's ZMTP engine: its handshake, then its inbound byte stream and
//! its outbound replies, with bounded buffers (issue #17).

use std::io::{self, Read, Write};
use std::time::Instant;

use mio::net::TcpStream;
use zper_wire::zmtp::frame::encode_frame;
use zper_wire::zmtp::{
    Event, Handshake, HandshakeError, Inbound, InboundError, Limits, Null, Peer, Progress,
};

/// Bytes read from a socket at a time, and the most read from one connection per wake before
/// the loop turns to the others.
pub(crate) const READ_CHUNK: usize = 64 * 1024;
/// Reply bytes a connection may hold that its peer has not taken yet; replies past this are
/// refused (the endpoint drops and counts them).
pub(crate) const MAX_OUTBOUND: usize = 4 * 1024 * 1024;

/// Where a connection is in its life.
#[derive(Debug)]
enum Phase {
    Handshake(Handshake<Null>),
    Open(Inbound),
}

/// What one [`Connection::fill`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fill {
    /// Bytes read.
    pub(crate) bytes: usize,
    /// The peer closed its side.
    pub(crate) eof: bool,
    /// Reading stopped before the socket ran dry (budget or buffer full): read again later,
    /// since an edge-triggered poll will not say so.
    pub(crate) more: bool,
}

/// One accepted connection.
#[derive(Debug)]
pub(crate) struct Connection {
    /// The socket, registered with the endpoint's poll.
    pub(crate) stream: TcpStream,
    /// When it was accepted (the handshake must finish within the endpoint's timeout).
    pub(crate) accepted: Instant,
    /// The peer, once its handshake is done; `routing_id` is then its identity (or one the
    /// endpoint made up for an empty identity).
    pub(crate) peer: Option<Peer>,
    phase: Phase,
    limits: Limits,
    /// Received bytes; `input[start..end]` are unread. Grown (and zeroed) only when a read
    /// needs room, never shrunk, so reads do not allocate.
    input: Vec<u8>,
    start: usize,
    end: usize,
    output: Vec<u8>,
    sent: usize,
}

impl Connection {
    /// A connection just accepted; its first bytes to send (the signature) are queued.
    pub(crate) fn accept(stream: TcpStream, handshake: Handshake<Null>, limits: Limits) -> Self {
        let mut output = Vec::new();
        handshake.open(&mut output);
        Connection {
            stream,
            accepted: Instant::now(),
            peer: None,
            phase: Phase::Handshake(handshake),
            limits,
            input: Vec::new(),
            start: 0,
            end: 0,
            output,
            sent: 0,
        }
    }

    /// Reads what the socket holds, at most `budget` bytes and never past the buffer bound
    /// (`max_buffered` + one chunk).
    ///
    /// Errors: the socket failed (the connection is to be closed).
    pub(crate) fn fill(&mut self, budget: usize) -> io::Result<Fill> {
        self.compact();
        let cap = self.limits.max_buffered as usize + 9 + READ_CHUNK;
        let mut fill = Fill {
            bytes: 0,
            eof: false,
            more: false,
        };
        loop {
            if fill.bytes >= budget || self.end - self.start + READ_CHUNK > cap {
                fill.more = true;
                return Ok(fill);
            }
            if self.input.len() < self.end + READ_CHUNK {
                self.input.resize(self.end + READ_CHUNK, 0);
            }
            match self.stream.read(&mut self.input[self.end..]) {
                Ok(0) => {
                    fill.eof = true;
                    return Ok(fill);
                }
                Ok(n) => {
                    self.end += n;
                    fill.bytes += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(fill),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Moves the unread bytes to the front of the buffer.
    fn compact(&mut self) {
        if self.start > 0 {
            self.input.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// Runs the handshake over the unread bytes; the peer once it is done (and again `None`
    /// afterwards). Replies are queued.
    ///
    /// Errors: the handshake failed; an ERROR command may be queued for a ZMTP/3 peer.
    pub(crate) fn handshake(&mut self) -> Result<Option<Peer>, HandshakeError> {
        let Phase::Handshake(handshake) = &mut self.phase else {
            return Ok(None);
        };
        let (used, progress) =
            handshake.advance(&self.input[self.start..self.end], &mut self.output)?;
        self.start += used;
        match progress {
            Progress::NeedMore => Ok(None),
            Progress::Done(peer) => {
                self.phase = Phase::Open(Inbound::new(peer.version, self.limits));
                Ok(Some(peer))
            }
        }
    }

    /// The next event of an open connection: a whole message appended to `out`, a dropped
    /// message or a command; `None` when the unread bytes hold no more (or the handshake is
    /// not done).
    ///
    /// Errors: a protocol error; close the connection.
    pub(crate) fn next_event(
        &mut self,
        out: &mut Vec<u8>,
    ) -> Result<Option<Event<'_>>, InboundError> {
        let Phase::Open(inbound) = &mut self.phase else {
            return Ok(None);
        };
        let (used, event) = inbound.next(&self.input[self.start..self.end], out)?;
        self.start += used;
        Ok(event)
    }

    /// Queues one message of `frames` (MORE on all but the last).
    /// Returns false, queuing nothing, when the peer already holds [`MAX_OUTBOUND`] bytes unread.
    pub(crate) fn send(&mut self, frames: &[Vec<u8>]) -> bool {
        if self.output.len() - self.sent >= MAX_OUTBOUND {
            return false;
        }
        for (i, frame) in frames.iter().enumerate() {
            encode_frame(i + 1 < frames.len(), false, frame, &mut self.output);
        }
        true
    }

    /// Queues raw bytes (a command such as PONG).
    pub(crate) fn send_raw(&mut self) -> &mut Vec<u8> {
        &mut self.output
    }

    /// Writes queued bytes until the socket would block.
    ///
    /// Errors: the socket failed (the connection is to be closed).
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        while self.sent < self.output.len() {
            match self.stream.write(&self.output[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.sent == self.output.len() {
            self.output.clear();
            self.sent = 0;
        } else if self.sent > MAX_OUTBOUND {
            self.output.drain(..self.sent);
            self.sent = 0;
        }
        Ok(())
    }

    /// Whether the handshake is still running.
    pub(crate) fn in_handshake(&self) -> bool {
        matches!(self.phase, Phase::Handshake(_))
    }
}
