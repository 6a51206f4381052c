//! ZMTP/3 security mechanisms (RFC 23 §"Authentication and Confidentiality"). The handshake
//! hands every command it receives after the greetings to the mechanism until the mechanism
//! says the peer is ready; NULL (RFC 23 §"The NULL Security Mechanism") is one READY each
//! way. CURVE (RFC 26) fits the same trait: HELLO/WELCOME/INITIATE/READY, with the peer's
//! metadata in INITIATE.

use super::command::{encode_ready, Command, Properties};
use super::error::HandshakeError;

/// What the mechanism made of one command from the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MechanismStep {
    /// More commands are needed.
    Continue,
    /// The peer is ready; its metadata (RFC 23 property list, validated) is owned here.
    Ready(Vec<u8>),
}

/// A ZMTP/3 security mechanism, seen from one side of one connection.
pub trait Mechanism {
    /// The mechanism's name as the greeting carries it (at most 20 bytes, zero-padded there).
    fn name(&self) -> &'static [u8];

    /// The greeting's as-server byte for this side.
    fn as_server(&self) -> bool;

    /// Called once both greetings are exchanged: appends this side's opening command frames to
    /// `out`. `metadata` is this side's property list (`Socket-Type`, ...).
    fn start(&mut self, metadata: &[(&str, &[u8])], out: &mut Vec<u8>);

    /// One command frame from the peer during the handshake; appends any reply to `out`.
    ///
    /// Errors: the peer's ERROR ([`HandshakeError::PeerError`]), or a command this mechanism
    /// does not expect now ([`HandshakeError::UnexpectedCommand`]).
    fn receive(
        &mut self,
        command: &Command<'_>,
        out: &mut Vec<u8>,
    ) -> Result<MechanismStep, HandshakeError>;
}

/// The NULL mechanism: no authentication, no encryption; each side sends READY with its
/// metadata and the connection is up once the peer's READY arrives.
#[derive(Debug, Clone, Copy, Default)]
pub struct Null;

impl Mechanism for Null {
    fn name(&self) -> &'static [u8] {
        b"NULL"
    }

    fn as_server(&self) -> bool {
        false
    }

    fn start(&mut self, metadata: &[(&str, &[u8])], out: &mut Vec<u8>) {
        encode_ready(metadata, out);
    }

    fn receive(
        &mut self,
        command: &Command<'_>,
        _out: &mut Vec<u8>,
    ) -> Result<MechanismStep, HandshakeError> {
        match command {
            Command::Ready(properties) => Ok(MechanismStep::Ready(
                Properties::as_bytes(properties).to_vec(),
            )),
            Command::Error(reason) => Err(HandshakeError::PeerError(
                String::from_utf8_lossy(reason).into_owned(),
            )),
            Command::Ping { .. } => Err(HandshakeError::UnexpectedCommand("PING".into())),
            Command::Pong(_) => Err(HandshakeError::UnexpectedCommand("PONG".into())),
            Command::Other { name, .. } => Err(HandshakeError::UnexpectedCommand(
                String::from_utf8_lossy(name).into_owned(),
            )),
        }
    }
}

/// The mechanism of a server endpoint: NULL, or CURVE when the endpoint requires it (issue
/// #19).
#[derive(Debug)]
pub enum Security {
    /// No security (the default; what ZPER's clients speak).
    Null(Null),
    /// CurveZMQ (RFC 26).
    Curve(Box<super::curve::CurveServer>),
}

impl Security {
    /// The CURVE session of a finished handshake, with the client's permanent key; `None` for
    /// NULL.
    pub fn into_curve(self) -> Option<(super::curve::CurveSession, [u8; 32])> {
        match self {
            Security::Null(_) => None,
            Security::Curve(server) => {
                let key = server.client_key()?;
                Some((server.into_session()?, key))
            }
        }
    }
}

impl Mechanism for Security {
    fn name(&self) -> &'static [u8] {
        match self {
            Security::Null(m) => m.name(),
            Security::Curve(m) => m.name(),
        }
    }

    fn as_server(&self) -> bool {
        match self {
            Security::Null(m) => m.as_server(),
            Security::Curve(m) => m.as_server(),
        }
    }

    fn start(&mut self, metadata: &[(&str, &[u8])], out: &mut Vec<u8>) {
        match self {
            Security::Null(m) => m.start(metadata, out),
            Security::Curve(m) => m.start(metadata, out),
        }
    }

    fn receive(
        &mut self,
        command: &Command<'_>,
        out: &mut Vec<u8>,
    ) -> Result<MechanismStep, HandshakeError> {
        match self {
            Security::Null(m) => m.receive(command, out),
            Security::Curve(m) => m.receive(command, out),
        }
    }
}
