//! ZMTP as a pure codec (issue #17): the greeting and handshake of ZMTP/2.0 (RFC 15) and
//! ZMTP/3.0/3.1 with the NULL mechanism (RFC 23, RFC 37) or CURVE (RFC 26, module [`curve`]), data and command frames, and the
//! commands a server meets (READY, ERROR, PING, PONG). zper's own engine on the data endpoints
//! drives these with a TCP socket; nothing here does I/O.
//!
//! Spec `zper.md` §2 is the contract for ZMTP/2.0 peers (JeroMQ 0.3.x and libzmq 3.2): the
//! server greeting `ff 00 00 00 00 00 00 00 01 7f`, the identity travelling in the handshake,
//! and frames laid out exactly as stored records (§6.2), so a data frame received from a peer
//! can be appended to a segment as it is.
//!
//! Every decoder here is total and bounded: any byte string, split anywhere, gives progress,
//! "need more bytes" or a typed error; no input makes it allocate more than its documented
//! limit.

pub mod command;
pub mod curve;
pub mod error;
pub mod frame;
pub mod handshake;
pub mod inbound;
pub mod mechanism;
pub mod socket_type;

pub use command::{Command, CommandError, Properties};
pub use error::HandshakeError;
pub use frame::{FrameError, FrameHeader, FLAG_COMMAND};
pub use handshake::{Handshake, Peer, Progress, Version};
pub use inbound::{Dropped, Event, Inbound, InboundError, Limits};
pub use mechanism::{Mechanism, MechanismStep, Null, Security};
pub use socket_type::SocketType;

/// `input` cut at `cuts` (clamped, in any order) into consecutive pieces that cover it, as
/// reads from a socket could deliver it.
#[cfg(test)]
pub(crate) fn pieces<'a>(input: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(input.len())).collect();
    bounds.sort_unstable();
    bounds.push(input.len());
    let mut from = 0;
    bounds
        .into_iter()
        .map(|to| {
            let piece = &input[from..to];
            from = to;
            piece
        })
        .collect()
}
