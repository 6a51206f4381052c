//! Why a ZMTP handshake failed (RFC 15, RFC 23; spec `zper.md` §2).

use thiserror::Error;

use super::command::CommandError;
use super::frame::FrameError;
use super::socket_type::SocketType;

/// Why a handshake failed. The connection is closed; after the greetings of a ZMTP/3 peer the
/// handshake first leaves an ERROR command in the output to send.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HandshakeError {
    /// A ZMTP/1.0 peer (libzmq 2.x), not supported (spec §2).
    #[error("ZMTP/1.0 peers are not supported (spec zper.md §2)")]
    Zmtp1,
    /// A version byte that is neither 1 (ZMTP/2.0) nor 3 or more (ZMTP/3.x).
    #[error("unsupported ZMTP revision {0}")]
    UnsupportedRevision(u8),
    /// The peer wants a security mechanism this endpoint does not run.
    #[error("security mechanism {theirs:?} not supported here (this endpoint runs {ours:?})")]
    MechanismMismatch {
        /// This endpoint's mechanism.
        ours: String,
        /// The peer's, as its greeting names it.
        theirs: String,
    },
    /// A socket type byte or name that is not a ZeroMQ socket type.
    #[error("unknown socket type {0:?}")]
    UnknownSocketType(String),
    /// A socket type that cannot talk to this endpoint.
    #[error("socket type {0:?} cannot connect to this endpoint")]
    SocketTypeRefused(SocketType),
    /// A READY without the `Socket-Type` property.
    #[error("READY without a Socket-Type property")]
    MissingSocketType,
    /// An identity over 255 bytes.
    #[error("identity of {0} bytes over the limit of 255")]
    IdentityTooLong(u64),
    /// A ZMTP/2.0 identity frame with MORE set.
    #[error("the identity frame has MORE set")]
    IdentityWithMore,
    /// A data frame where a command was due.
    #[error("a data frame during the handshake")]
    NotACommand,
    /// A malformed frame header.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A malformed command.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// The peer sent ERROR.
    #[error("the peer refused the handshake: {0}")]
    PeerError(String),
    /// A ZMTP/2.0 peer (it has no security mechanism) on an endpoint that requires CURVE.
    #[error("ZMTP/2.0 peers cannot connect: this endpoint requires CURVE (RFC 26)")]
    SecurityRequired,
    /// The CURVE handshake failed (issue #19).
    #[error(transparent)]
    Curve(#[from] super::curve::CurveError),
    /// A command the mechanism does not expect now.
    #[error("unexpected command {0} during the handshake")]
    UnexpectedCommand(String),
}
