//! ZMTP socket types: the byte a ZMTP/2.0 peer sends in its greeting (RFC 15 §"socket-type")
//! and the name a ZMTP/3 peer sends in its READY `Socket-Type` property (RFC 23 §"The Socket
//! Type Property").

/// A ZeroMQ socket type as peers announce it in the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SocketType {
    /// PAIR.
    Pair,
    /// PUB.
    Pub,
    /// SUB.
    Sub,
    /// REQ.
    Req,
    /// REP.
    Rep,
    /// DEALER (XREQ in ZMTP/2.0).
    Dealer,
    /// ROUTER (XREP in ZMTP/2.0).
    Router,
    /// PULL.
    Pull,
    /// PUSH.
    Push,
    /// XPUB.
    XPub,
    /// XSUB.
    XSub,
}

const ALL: [SocketType; 11] = [
    SocketType::Pair,
    SocketType::Pub,
    SocketType::Sub,
    SocketType::Req,
    SocketType::Rep,
    SocketType::Dealer,
    SocketType::Router,
    SocketType::Pull,
    SocketType::Push,
    SocketType::XPub,
    SocketType::XSub,
];

impl SocketType {
    /// The ZMTP/2.0 greeting byte (RFC 15: PAIR 0, PUB 1, SUB 2, REQ 3, REP 4, DEALER 5,
    /// ROUTER 6, PULL 7, PUSH 8; libzmq adds XPUB 9, XSUB 10).
    pub fn code(self) -> u8 {
        match self {
            SocketType::Pair => 0,
            SocketType::Pub => 1,
            SocketType::Sub => 2,
            SocketType::Req => 3,
            SocketType::Rep => 4,
            SocketType::Dealer => 5,
            SocketType::Router => 6,
            SocketType::Pull => 7,
            SocketType::Push => 8,
            SocketType::XPub => 9,
            SocketType::XSub => 10,
        }
    }

    /// The socket type of a ZMTP/2.0 greeting byte; `None` for an unknown byte.
    pub fn from_code(code: u8) -> Option<SocketType> {
        ALL.into_iter().find(|t| t.code() == code)
    }

    /// The ZMTP/3 `Socket-Type` property value (upper case, RFC 23).
    pub fn name(self) -> &'static str {
        match self {
            SocketType::Pair => "PAIR",
            SocketType::Pub => "PUB",
            SocketType::Sub => "SUB",
            SocketType::Req => "REQ",
            SocketType::Rep => "REP",
            SocketType::Dealer => "DEALER",
            SocketType::Router => "ROUTER",
            SocketType::Pull => "PULL",
            SocketType::Push => "PUSH",
            SocketType::XPub => "XPUB",
            SocketType::XSub => "XSUB",
        }
    }

    /// The socket type of a `Socket-Type` property value (exact, case-sensitive as RFC 23
    /// spells it); `None` for anything else.
    pub fn from_name(name: &[u8]) -> Option<SocketType> {
        ALL.into_iter().find(|t| t.name().as_bytes() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for t in ALL {
            assert_eq!(SocketType::from_code(t.code()), Some(t));
            assert_eq!(SocketType::from_name(t.name().as_bytes()), Some(t));
        }
        assert_eq!(SocketType::from_code(11), None);
        assert_eq!(SocketType::from_name(b"dealer"), None);
    }
}
