//! The server side of the ZMTP handshake, as a state machine fed with received bytes.
//!
//! Version negotiation follows RFC 23 §"Version Negotiation" the way libzmq 4 does it, which is
//! what ZMTP/2.0 peers already meet when they talk to a libzmq 4 server:
//!
//! 1. Each side sends the 10-byte signature `ff 00 00 00 00 00 00 00 01 7f` (spec `zper.md` §2:
//!    the 8 bytes are "identity length + 1" for ZMTP/1.0 peers, so an empty identity).
//!    A first byte other than `ff`, or a tenth byte with bit 0 clear, is a ZMTP/1.0 peer,
//!    which ZPER never supported (§2): refused.
//! 2. On the peer's signature the server sends its version: 1 (ZMTP/2.0, what the original
//!    sends, §2) when the signature's padding says the peer has an identity (libzmq and JeroMQ
//!    send "identity length + 1" there), else 3; then it reads the peer's version. A libzmq 4
//!    peer answered with 1 falls back to ZMTP/2.0 (as it does with the original): that is how
//!    a libzmq 4 PUSH producer presents its identity, which its ZMTP/3 READY never carries.
//! 3. ZMTP/2.0 (RFC 15): the server sends its socket type byte and an empty identity frame
//!    (`06 00 00`, the bytes the original sends, §2), then reads the peer's socket type byte
//!    and identity frame.
//! 4. Version 3 is ZMTP/3.x (RFC 23, RFC 37): the rest of the 64-byte greeting goes each way
//!    (minor version, mechanism name padded to 20 bytes, as-server, 31 bytes of filler), then
//!    the mechanism's commands; for NULL, one READY each way carrying `Socket-Type` and, from
//!    DEALER and REQ peers, `Identity`.
//!
//! The result is a [`Peer`]: its ZMTP version, socket type and identity (at most 255 bytes).
//! Bytes after the handshake are left unconsumed for the frame decoder.

use super::command::{encode_error, Command, Properties};
use super::error::HandshakeError;
use super::frame::{FrameError, FrameHeader};
use super::mechanism::{Mechanism, MechanismStep};
use super::socket_type::SocketType;

/// The signature each side sends first (RFC 23; spec §2).
pub const SIGNATURE: [u8; 10] = [0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f];
/// Longest identity a peer may present, in bytes (RFC 15, RFC 23).
pub const MAX_IDENTITY: usize = 255;
/// Largest command frame body accepted during the handshake, in bytes (a READY with a
/// 255-byte identity and a few properties is well under 1 KiB).
pub const MAX_HANDSHAKE_COMMAND: u64 = 8 * 1024;
/// The minor version this side announces: ZMTP/3.1 (RFC 37, PING and PONG).
pub const MINOR: u8 = 1;
/// Bytes of a ZMTP/3 greeting after the signature and the major version: minor (1),
/// mechanism (20), as-server (1), filler (31).
const GREETING_REST: usize = 53;

/// The ZMTP version agreed with a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// ZMTP/2.0 (RFC 15): JeroMQ 0.3.x, libzmq 3.2.
    V2,
    /// ZMTP/3.x (RFC 23, RFC 37) with the peer's minor version.
    V3 {
        /// 0 for ZMTP/3.0, 1 for 3.1 (PING/PONG).
        minor: u8,
    },
}

impl Version {
    /// True when frames may carry the COMMAND flag.
    pub fn has_commands(self) -> bool {
        matches!(self, Version::V3 { .. })
    }
}

/// A peer whose handshake completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The agreed version.
    pub version: Version,
    /// The socket type the peer announced (one this server accepts).
    pub socket_type: SocketType,
    /// The identity from the ZMTP/2.0 identity frame or the ZMTP/3 `Identity` property;
    /// empty when the peer sent none. At most [`MAX_IDENTITY`] bytes.
    pub identity: Vec<u8>,
}

/// How far the handshake got with the bytes given so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// More bytes from the peer are needed.
    NeedMore,
    /// The handshake is complete.
    Done(Peer),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Signature,
    /// Waiting for the peer's version byte; `zmtp2` when this side announced revision 1.
    Version {
        zmtp2: bool,
    },
    V2SocketType,
    V2Identity(SocketType),
    V3Greeting,
    V3Commands {
        minor: u8,
    },
    Done,
}

/// The server side of one connection's handshake.
///
/// ```text
/// let mut hs = Handshake::new(SocketType::Router, &[SocketType::Dealer], Null);
/// hs.open(&mut out);                        // send `out`
/// let (used, progress) = hs.advance(&received, &mut out)?;  // send `out`, drop `used` bytes
/// ```
#[derive(Debug)]
pub struct Handshake<M> {
    state: State,
    ours: SocketType,
    accepts: Vec<SocketType>,
    mechanism: M,
}

impl<M: Mechanism> Handshake<M> {
    /// A handshake for an endpoint of socket type `ours` that accepts peers of the types in
    /// `accepts`, with security `mechanism` for ZMTP/3 peers (ZMTP/2.0 has none).
    pub fn new(ours: SocketType, accepts: &[SocketType], mechanism: M) -> Self {
        Handshake {
            state: State::Signature,
            ours,
            accepts: accepts.to_vec(),
            mechanism,
        }
    }

    /// Appends what this side sends as soon as the connection opens: the signature.
    pub fn open(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&SIGNATURE);
    }

    /// Feeds received bytes. Returns how many bytes of `input` were consumed (keep the rest,
    /// append the next read to it, and call again) and the progress; appends to `out` what
    /// must be sent to the peer, in order. After [`Progress::Done`] the unconsumed bytes are
    /// the peer's first frames.
    ///
    /// Errors: see [`HandshakeError`]; the connection must be closed after sending `out`.
    pub fn advance(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(usize, Progress), HandshakeError> {
        let mut at = 0;
        loop {
            match self.step(&input[at..], out) {
                Ok(Some((used, None))) => at += used,
                Ok(Some((used, Some(peer)))) => return Ok((at + used, Progress::Done(peer))),
                Ok(None) => return Ok((at, Progress::NeedMore)),
                Err(e) => {
                    if matches!(self.state, State::V3Commands { .. }) {
                        encode_error(&e.to_string(), out);
                    }
                    return Err(e);
                }
            }
        }
    }

    /// One state's worth of input: `None` when it needs more bytes, else the bytes it used
    /// and the peer once done.
    #[allow(clippy::type_complexity)]
    fn step(
        &mut self,
        rest: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<(usize, Option<Peer>)>, HandshakeError> {
        match self.state {
            State::Signature => {
                if rest.first().is_some_and(|&b| b != 0xff) {
                    return Err(HandshakeError::Zmtp1);
                }
                let Some(signature) = rest.get(..SIGNATURE.len()) else {
                    return Ok(None);
                };
                if signature[9] & 0x01 == 0 {
                    return Err(HandshakeError::Zmtp1);
                }
                // libzmq and JeroMQ put "identity length + 1" in the padding. A peer with an
                // identity is answered as the original answers (revision 1): a libzmq 4 peer
                // then falls back to ZMTP/2.0 and sends its identity as a frame, which a
                // libzmq 4 PUSH never sends over ZMTP/3 (its READY has no Identity).
                let mut padding = [0u8; 8];
                padding.copy_from_slice(&signature[1..9]);
                // ZMTP/2.0 has no security mechanism: an endpoint that requires one (CURVE)
                // always answers 3, and refuses a peer that answers less.
                let zmtp2 = u64::from_be_bytes(padding) > 1 && self.mechanism.name() == b"NULL";
                out.push(if zmtp2 { 1 } else { 3 });
                self.state = State::Version { zmtp2 };
                Ok(Some((SIGNATURE.len(), None)))
            }
            State::Version { zmtp2 } => {
                let Some(&version) = rest.first() else {
                    return Ok(None);
                };
                match version {
                    v if v < 3 && self.mechanism.name() != b"NULL" => {
                        return Err(HandshakeError::SecurityRequired)
                    }
                    v if v == 1 || (zmtp2 && v >= 3) => {
                        out.extend_from_slice(&[self.ours.code(), 0x00, 0x00]);
                        self.state = State::V2SocketType;
                    }
                    v if v >= 3 => {
                        out.push(MINOR);
                        out.extend_from_slice(&padded_name(self.mechanism.name()));
                        out.push(u8::from(self.mechanism.as_server()));
                        out.extend_from_slice(&[0u8; 31]);
                        self.state = State::V3Greeting;
                    }
                    v => return Err(HandshakeError::UnsupportedRevision(v)),
                }
                Ok(Some((1, None)))
            }
            State::V2SocketType => {
                let Some(&code) = rest.first() else {
                    return Ok(None);
                };
                let socket_type = SocketType::from_code(code)
                    .ok_or_else(|| HandshakeError::UnknownSocketType(code.to_string()))?;
                self.check(socket_type)?;
                self.state = State::V2Identity(socket_type);
                Ok(Some((1, None)))
            }
            State::V2Identity(socket_type) => {
                let header = match FrameHeader::decode(rest, false, MAX_IDENTITY as u64) {
                    Ok(Some(h)) => h,
                    Ok(None) => return Ok(None),
                    Err(FrameError::TooLong { len, .. }) => {
                        return Err(HandshakeError::IdentityTooLong(len))
                    }
                    Err(e) => return Err(e.into()),
                };
                if header.more() {
                    return Err(HandshakeError::IdentityWithMore);
                }
                let end = header.header_len + header.body_len as usize;
                let Some(identity) = rest.get(header.header_len..end) else {
                    return Ok(None);
                };
                self.state = State::Done;
                let peer = Peer {
                    version: Version::V2,
                    socket_type,
                    identity: identity.to_vec(),
                };
                Ok(Some((end, Some(peer))))
            }
            State::V3Greeting => {
                let Some(greeting) = rest.get(..GREETING_REST) else {
                    return Ok(None);
                };
                let ours = padded_name(self.mechanism.name());
                if greeting[1..21] != ours {
                    return Err(HandshakeError::MechanismMismatch {
                        ours: name_of(&ours),
                        theirs: name_of(&greeting[1..21]),
                    });
                }
                let socket_type = self.ours.name().as_bytes();
                self.mechanism.start(&[("Socket-Type", socket_type)], out);
                self.state = State::V3Commands { minor: greeting[0] };
                Ok(Some((GREETING_REST, None)))
            }
            State::V3Commands { minor } => {
                let Some(header) = FrameHeader::decode(rest, true, MAX_HANDSHAKE_COMMAND)? else {
                    return Ok(None);
                };
                if !header.command() {
                    return Err(HandshakeError::NotACommand);
                }
                let end = header.header_len + header.body_len as usize;
                let Some(body) = rest.get(header.header_len..end) else {
                    return Ok(None);
                };
                let command = Command::parse(body)?;
                let MechanismStep::Ready(metadata) = self.mechanism.receive(&command, out)? else {
                    return Ok(Some((end, None)));
                };
                let properties = Properties::parse(&metadata)?;
                let name = properties
                    .get("Socket-Type")
                    .ok_or(HandshakeError::MissingSocketType)?;
                let socket_type = SocketType::from_name(name).ok_or_else(|| {
                    HandshakeError::UnknownSocketType(String::from_utf8_lossy(name).into_owned())
                })?;
                self.check(socket_type)?;
                let identity = properties.get("Identity").unwrap_or_default();
                if identity.len() > MAX_IDENTITY {
                    return Err(HandshakeError::IdentityTooLong(identity.len() as u64));
                }
                self.state = State::Done;
                let peer = Peer {
                    version: Version::V3 { minor },
                    socket_type,
                    identity: identity.to_vec(),
                };
                Ok(Some((end, Some(peer))))
            }
            // Called again after Done: nothing more to do with the bytes.
            State::Done => Ok(None),
        }
    }

    /// The name of the mechanism this side runs (`NULL`, `CURVE`).
    pub fn mechanism_name(&self) -> &'static [u8] {
        self.mechanism.name()
    }

    /// The mechanism, once the handshake is done (CURVE's session keys are in it).
    pub fn into_mechanism(self) -> M {
        self.mechanism
    }

    fn check(&self, socket_type: SocketType) -> Result<(), HandshakeError> {
        if self.accepts.contains(&socket_type) {
            Ok(())
        } else {
            Err(HandshakeError::SocketTypeRefused(socket_type))
        }
    }
}

/// A mechanism name zero-padded to the greeting's 20 bytes (longer names are cut).
fn padded_name(name: &[u8]) -> [u8; 20] {
    let mut padded = [0u8; 20];
    let len = name.len().min(20);
    padded[..len].copy_from_slice(&name[..len]);
    padded
}

/// A greeting's mechanism field as text, without its padding.
fn name_of(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;
