//! One TCP connection of zper's ZMTP engine: its handshake, then its inbound byte stream and
//! its outbound replies, with bounded buffers (issue #17).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::Instant;

use mio::net::TcpStream;
use zper_wire::zmtp::command::encode_pong;
use zper_wire::zmtp::curve::{CurveSession, MESSAGE_OVERHEAD};
use zper_wire::zmtp::frame::encode_frame;
use zper_wire::zmtp::{
    Event, Handshake, HandshakeError, Inbound, InboundError, Limits, Peer, Progress, Security,
};

/// Bytes read from a socket at a time, and the most read from one connection per wake before
/// the loop turns to the others.
pub(crate) const READ_CHUNK: usize = 64 * 1024;
/// Input buffer of a new or quiet connection, bytes (4,096 connections hold 16 MiB).
pub(crate) const MIN_INPUT: usize = 4 * 1024;
/// Reply bytes a connection may hold that its peer has not taken yet; replies past this are
/// refused (the endpoint drops and counts them).
pub(crate) const MAX_OUTBOUND: usize = 4 * 1024 * 1024;

/// Reply bytes queued behind `output` once a file range is queued (issue #17): a range of a
/// segment file goes out with `sendfile`, without passing through the node's memory.
#[derive(Debug)]
enum Queued {
    Bytes(Vec<u8>),
    File { file: Arc<File>, at: u64, left: u64 },
}

/// Where a connection is in its life.
#[derive(Debug)]
enum Phase {
    Handshake(Handshake<Security>),
    Open(Inbound),
}

/// A CURVE connection's decryption (issue #19): the frames of the MESSAGEs read so far, as
/// plain ZMTP frames for the [`Inbound`] decoder, `plain[start..]` unread. `plain` holds less
/// than twice the unread bytes, which are at most one message's limit plus one MESSAGE.
#[derive(Debug)]
struct Curve {
    session: CurveSession,
    plain: Vec<u8>,
    start: usize,
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
    /// The peer's IP address as accepted (`None` when the OS could not tell).
    pub(crate) remote: Option<std::net::IpAddr>,
    /// The peer, once its handshake is done; `routing_id` is then its identity (or one the
    /// endpoint made up for an empty identity).
    pub(crate) peer: Option<Peer>,
    phase: Phase,
    limits: Limits,
    /// Received bytes; `input[start..end]` are unread. Sized between reads by `size_input`,
    /// so reads themselves do not allocate.
    input: Vec<u8>,
    start: usize,
    end: usize,
    /// The last read stopped because the buffer was full (the peer sends fast).
    filled: bool,
    output: Vec<u8>,
    sent: usize,
    /// Replies after `output`, in order; empty unless a file range was queued.
    queued: VecDeque<Queued>,
    /// Set once a CURVE handshake is done: every frame in and out is a MESSAGE.
    curve: Option<Box<Curve>>,
    /// The CURVE client's permanent public key, once its handshake is done.
    pub(crate) client_key: Option<[u8; 32]>,
    /// A reply that could not be queued (a file range not readable for encryption): the next
    /// flush fails and the connection closes.
    broken: Option<io::ErrorKind>,
}

impl Connection {
    /// A connection just accepted; its first bytes to send (the signature) are queued.
    pub(crate) fn accept(
        stream: TcpStream,
        handshake: Handshake<Security>,
        limits: Limits,
    ) -> Self {
        let mut output = Vec::new();
        handshake.open(&mut output);
        let remote = stream.peer_addr().ok().map(|a| a.ip());
        Connection {
            stream,
            accepted: Instant::now(),
            remote,
            peer: None,
            phase: Phase::Handshake(handshake),
            limits,
            input: Vec::new(),
            start: 0,
            end: 0,
            filled: false,
            output,
            sent: 0,
            queued: VecDeque::new(),
            curve: None,
            client_key: None,
            broken: None,
        }
    }

    /// Reads what the socket holds, at most `budget` bytes and at most what the input buffer
    /// holds (see `size_input`).
    ///
    /// Errors: the socket failed (the connection is to be closed).
    pub(crate) fn fill(&mut self, budget: usize) -> io::Result<Fill> {
        self.compact();
        self.size_input();
        let mut fill = Fill {
            bytes: 0,
            eof: false,
            more: false,
        };
        loop {
            if self.end == self.input.len() || fill.bytes >= budget {
                // Full: the caller takes what is whole, then reads again.
                self.filled = self.end == self.input.len();
                fill.more = true;
                return Ok(fill);
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
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.filled = false;
                    return Ok(fill);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Sizes the input buffer before a read: [`MIN_INPUT`] for a new or quiet connection,
    /// doubling up to [`READ_CHUNK`] while the peer fills it, and past that (up to
    /// `max_buffered` + 9 + [`READ_CHUNK`]) only while one incomplete message fills it all.
    /// A buffer grown past [`READ_CHUNK`] is given back once it is empty.
    fn size_input(&mut self) {
        let len = self.input.len();
        let cap = self.limits.max_buffered as usize + 9 + READ_CHUNK;
        if self.end == 0 && len > READ_CHUNK {
            self.input = vec![0; READ_CHUNK];
            return;
        }
        let target = if len == 0 {
            MIN_INPUT
        } else if self.end == len {
            (len * 2).min(cap)
        } else if self.filled && len < READ_CHUNK {
            (len * 2).min(READ_CHUNK)
        } else {
            len
        };
        if target > len {
            self.input.resize(target, 0);
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
                let open = Phase::Open(Inbound::new(peer.version, self.limits));
                if let Phase::Handshake(done) = std::mem::replace(&mut self.phase, open) {
                    if let Some((session, key)) = done.into_mechanism().into_curve() {
                        self.client_key = Some(key);
                        self.curve = Some(Box::new(Curve {
                            session,
                            plain: Vec::new(),
                            start: 0,
                        }));
                    }
                }
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
        let Some(curve) = self.curve.as_deref_mut() else {
            let (used, event) = inbound.next(&self.input[self.start..self.end], out)?;
            self.start += used;
            return Ok(event);
        };
        // Drop the plain bytes taken once they are at least as many as the unread ones (each
        // byte moves O(1) times; the buffer stays under twice the unread bytes). Attack
        // finding: dropping them only when all were taken let the buffer grow with every
        // message that a read ended inside, for as long as the connection lived.
        let unread = curve.plain.len() - curve.start;
        if curve.start > 0 && curve.start >= unread {
            curve.plain.drain(..curve.start);
            curve.start = 0;
            if unread == 0 && curve.plain.capacity() > READ_CHUNK {
                curve.plain.shrink_to(READ_CHUNK);
            }
        }
        // Decrypt whole MESSAGEs while the unread plain bytes are fewer than a message may
        // hold; a MESSAGE is authenticated whole, so one over that is a protocol error.
        let cap = self.limits.max_buffered as usize + 9;
        let max_body = (cap + MESSAGE_OVERHEAD) as u64;
        while curve.plain.len() - curve.start < cap {
            let input = &mut self.input[self.start..self.end];
            match curve.session.open_frame(input, max_body, &mut curve.plain) {
                Ok(Some(used)) => self.start += used,
                Ok(None) => break,
                Err(e) => return Err(InboundError::Curve(e)),
            }
        }
        let (used, event) = inbound.next(&curve.plain[curve.start..], out)?;
        curve.start += used;
        Ok(event)
    }

    /// Queues one message of `frames` (MORE on all but the last).
    /// Returns false, queuing nothing, when the peer already holds [`MAX_OUTBOUND`] bytes unread.
    pub(crate) fn send(&mut self, frames: &[Vec<u8>]) -> bool {
        if self.unsent() >= MAX_OUTBOUND {
            return false;
        }
        self.queue(frames);
        true
    }

    /// Queues one message of `frames` whatever the peer holds unread (the caller bounds it).
    pub(crate) fn queue(&mut self, frames: &[Vec<u8>]) {
        let mut curve = self.curve.take();
        let out = self.tail();
        for (i, frame) in frames.iter().enumerate() {
            let more = i + 1 < frames.len();
            match curve.as_deref_mut() {
                Some(c) => c.session.seal_frame(more, false, frame, out),
                None => encode_frame(more, false, frame, out),
            }
        }
        self.curve = curve;
    }

    /// Queues a PONG echoing `context` (RFC 37), after every reply queued before.
    pub(crate) fn send_pong(&mut self, context: &[u8]) {
        let mut curve = self.curve.take();
        let out = self.tail();
        match curve.as_deref_mut() {
            Some(c) => {
                let mut frame = Vec::new();
                encode_pong(context, &mut frame);
                // The command's body, without the plain frame header (2 bytes: short form).
                c.session.seal_frame(false, true, &frame[2..], out);
            }
            None => encode_pong(context, out),
        }
        self.curve = curve;
    }

    /// Queues one message of `frames` followed by a last frame of `len` bytes read from `file`
    /// at position `at`, sent with `sendfile` when its turn comes.
    ///
    /// On a CURVE connection the range is read now and encrypted (`sendfile` cannot encrypt);
    /// the caller bounds `len` as it bounds any reply. A read that fails or comes up short
    /// closes the connection at the next flush.
    pub(crate) fn queue_file(&mut self, frames: &[Vec<u8>], file: Arc<File>, at: u64, len: u64) {
        if self.curve.is_some() {
            let mut body = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
            if let Err(e) = std::os::unix::fs::FileExt::read_exact_at(&*file, &mut body, at) {
                self.broken = Some(e.kind());
            }
            let mut all = frames.to_vec();
            all.push(body);
            self.queue(&all);
            return;
        }
        let out = self.tail();
        for frame in frames {
            encode_frame(true, false, frame, out);
        }
        let mut head = [0u8; 9];
        let n = zper_wire::zmtp::frame::encode_header(false, false, len, &mut head);
        out.extend_from_slice(&head[..n]);
        if len > 0 {
            self.queued.push_back(Queued::File {
                file,
                at,
                left: len,
            });
        }
    }

    /// Where bytes queued now go: `output`, or the bytes after the last queued file range.
    fn tail(&mut self) -> &mut Vec<u8> {
        if self.queued.is_empty() {
            return &mut self.output;
        }
        if !matches!(self.queued.back(), Some(Queued::Bytes(_))) {
            self.queued.push_back(Queued::Bytes(Vec::new()));
        }
        match self.queued.back_mut() {
            Some(Queued::Bytes(b)) => b,
            _ => &mut self.output, // unreachable: a Bytes entry was just made the last
        }
    }

    /// Reply bytes queued that the peer has not taken yet (file ranges included).
    pub(crate) fn unsent(&self) -> usize {
        let queued: u64 = self
            .queued
            .iter()
            .map(|q| match q {
                Queued::Bytes(b) => b.len() as u64,
                Queued::File { left, .. } => *left,
            })
            .sum();
        (self.output.len() - self.sent)
            .saturating_add(usize::try_from(queued).unwrap_or(usize::MAX))
    }

    /// Whether the last message dropped for its size began with a REQ envelope (see
    /// [`Inbound::dropped_envelope`]).
    pub(crate) fn dropped_envelope(&self) -> bool {
        matches!(&self.phase, Phase::Open(inbound) if inbound.dropped_envelope())
    }

    /// Writes queued bytes (and sends queued file ranges) until the socket would block.
    ///
    /// Errors: the socket failed, or a file range could not be read whole (its frame could
    /// not be completed): the connection is to be closed.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        if let Some(kind) = self.broken {
            return Err(kind.into());
        }
        loop {
            self.write_output()?;
            if self.sent < self.output.len() {
                return Ok(());
            }
            match self.queued.pop_front() {
                None => return Ok(()),
                Some(Queued::Bytes(b)) => {
                    self.output = b;
                    self.sent = 0;
                }
                Some(Queued::File {
                    file,
                    mut at,
                    mut left,
                }) => {
                    while left > 0 {
                        let want = usize::try_from(left).unwrap_or(usize::MAX).min(1 << 30);
                        match rustix::fs::sendfile(&self.stream, &*file, Some(&mut at), want) {
                            // The file ends before the range: the frame cannot be completed.
                            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                            Ok(n) => left -= n as u64, // `at` moved past the bytes sent
                            Err(rustix::io::Errno::AGAIN) => {
                                self.queued.push_front(Queued::File { file, at, left });
                                return Ok(());
                            }
                            Err(rustix::io::Errno::INTR) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
            }
        }
    }

    /// Writes `output` until the socket would block; releases it once it is all sent.
    fn write_output(&mut self) -> io::Result<()> {
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
            self.output.shrink_to(READ_CHUNK);
            self.sent = 0;
        } else if self.sent > MAX_OUTBOUND {
            self.output.drain(..self.sent);
            self.sent = 0;
        }
        Ok(())
    }

    /// Whether this connection's endpoint requires CURVE.
    pub(crate) fn requires_curve(&self) -> bool {
        match &self.phase {
            Phase::Handshake(h) => h.mechanism_name() == b"CURVE",
            Phase::Open(_) => self.curve.is_some(),
        }
    }

    /// Whether the handshake is still running.
    pub(crate) fn in_handshake(&self) -> bool {
        matches!(self.phase, Phase::Handshake(_))
    }
}

#[cfg(test)]
#[path = "connection_tests.rs"]
mod tests;
