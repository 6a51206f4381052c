//! Dolly's key/value clone protocol (`dolly.md` §4), for issue #5: every message is exactly
//! four frames `[method][sequence: u64 little-endian, 8 bytes][key][body]`, behind a routing
//! identity on ROUTER sockets. Methods are the exact ASCII bytes `Get`, `Put`, `Error`,
//! `Snapshot` and `Terminate`.
//!
//! The original panics on fewer than four frames or a short sequence and exits on an unknown
//! method (§4, §5.7); this decoder returns a typed error for each instead (and for a REQ
//! envelope, an empty first frame), so a server can answer `Error` and keep serving.

use thiserror::Error;

/// A Dolly method (§4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// Client read request.
    Get,
    /// Client write request, and every stored record, update, snapshot record, Put reply and
    /// successful Get reply.
    Put,
    /// Error reply; the reason is in the body.
    Error,
    /// Replica -> leader snapshot request.
    Snapshot,
    /// Leader -> replica end-of-snapshot marker.
    Terminate,
}

impl Method {
    /// The method's exact bytes.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            Method::Get => b"Get",
            Method::Put => b"Put",
            Method::Error => b"Error",
            Method::Snapshot => b"Snapshot",
            Method::Terminate => b"Terminate",
        }
    }

    fn parse(b: &[u8]) -> Option<Method> {
        [
            Method::Get,
            Method::Put,
            Method::Error,
            Method::Snapshot,
            Method::Terminate,
        ]
        .into_iter()
        .find(|m| m.as_bytes() == b)
    }
}

/// One Dolly message (§4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Method.
    pub method: Method,
    /// Sequence (meaning by message: §4's table).
    pub sequence: u64,
    /// Key (raw bytes; may be empty).
    pub key: Vec<u8>,
    /// Body (raw bytes; empty when there is none).
    pub body: Vec<u8>,
}

/// Why frames are not a Dolly message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DollyError {
    /// Not exactly four frames (after the routing identity).
    #[error("a Dolly message has 4 frames, not {0}")]
    FrameCount(usize),
    /// Five frames, the first empty: a REQ envelope, which Dolly does not use (§4).
    #[error("REQ envelope (empty first frame): use a DEALER socket")]
    ReqEnvelope,
    /// The sequence frame is not 8 bytes.
    #[error("sequence frame is {0} bytes, not 8")]
    Sequence(usize),
    /// A method that is not one of Dolly's.
    #[error("unknown method {0:?}")]
    UnknownMethod(String),
}

impl Message {
    /// A message.
    pub fn new(method: Method, sequence: u64, key: &[u8], body: &[u8]) -> Self {
        Message {
            method,
            sequence,
            key: key.to_vec(),
            body: body.to_vec(),
        }
    }

    /// The four frames.
    pub fn to_frames(&self) -> Vec<Vec<u8>> {
        vec![
            self.method.as_bytes().to_vec(),
            self.sequence.to_le_bytes().to_vec(),
            self.key.clone(),
            self.body.clone(),
        ]
    }

    /// Decodes the frames after the routing identity.
    ///
    /// Errors: `ReqEnvelope`, `FrameCount`, `Sequence`, `UnknownMethod`.
    pub fn decode(frames: &[Vec<u8>]) -> Result<Message, DollyError> {
        if frames.len() == 5 && frames[0].is_empty() {
            return Err(DollyError::ReqEnvelope);
        }
        let [method, sequence, key, body] = frames else {
            return Err(DollyError::FrameCount(frames.len()));
        };
        let method = Method::parse(method)
            .ok_or_else(|| DollyError::UnknownMethod(String::from_utf8_lossy(method).into()))?;
        let seq: [u8; 8] = sequence
            .as_slice()
            .try_into()
            .map_err(|_| DollyError::Sequence(sequence.len()))?;
        Ok(Message {
            method,
            sequence: u64::from_le_bytes(seq),
            key: key.clone(),
            body: body.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).expect("hex"))
            .collect()
    }

    #[test]
    fn worked_examples_spec_8() {
        // Put color=blue, first write: the client's request and the leader's reply.
        let request = [
            hex("50 75 74"),
            hex("00 00 00 00 00 00 00 00"),
            hex("63 6f 6c 6f 72"),
            hex("62 6c 75 65"),
        ];
        assert_eq!(
            Message::decode(&request),
            Ok(Message::new(Method::Put, 0, b"color", b"blue"))
        );
        let reply = Message::new(Method::Put, 1, b"color", b"blue").to_frames();
        assert_eq!(reply[1], hex("01 00 00 00 00 00 00 00"));
        assert_eq!(reply[0], b"Put");
        // A miss: Error with the peer's sequence and the reason.
        let miss = Message::new(Method::Error, 2, b"nokey", b"key not found").to_frames();
        assert_eq!(miss[0], hex("45 72 72 6f 72"));
        assert_eq!(miss[1], hex("02 00 00 00 00 00 00 00"));
        // Snapshot request and terminator.
        let snap = Message::decode(&[b"Snapshot".to_vec(), vec![0; 8], Vec::new(), Vec::new()]);
        assert_eq!(snap.map(|m| m.method), Ok(Method::Snapshot));
        assert_eq!(
            Message::new(Method::Terminate, 2, b"", b"").to_frames()[0],
            b"Terminate"
        );
    }

    #[test]
    fn what_crashed_the_original_is_a_typed_error() {
        let ok = Message::new(Method::Get, 0, b"k", b"").to_frames();
        assert_eq!(Message::decode(&ok[..3]), Err(DollyError::FrameCount(3)));
        let mut short = ok.clone();
        short[1] = vec![1, 2, 3];
        assert_eq!(Message::decode(&short), Err(DollyError::Sequence(3)));
        let mut unknown = ok.clone();
        unknown[0] = b"Delete".to_vec();
        assert_eq!(
            Message::decode(&unknown),
            Err(DollyError::UnknownMethod("Delete".into()))
        );
        let mut req = vec![Vec::new()];
        req.extend(ok.clone());
        assert_eq!(Message::decode(&req), Err(DollyError::ReqEnvelope));
        // Four frames with an empty method are a (bad) Dolly message, not an envelope.
        let mut empty_method = ok;
        empty_method[0] = Vec::new();
        assert_eq!(
            Message::decode(&empty_method),
            Err(DollyError::UnknownMethod(String::new()))
        );
    }

    proptest! {
        #[test]
        fn messages_round_trip(m in 0usize..5, seq: u64,
                               key in proptest::collection::vec(any::<u8>(), 0..20),
                               body in proptest::collection::vec(any::<u8>(), 0..20)) {
            let method = [Method::Get, Method::Put, Method::Error, Method::Snapshot, Method::Terminate][m];
            let msg = Message { method, sequence: seq, key, body };
            prop_assert_eq!(Message::decode(&msg.to_frames()), Ok(msg));
        }

        #[test]
        fn decoding_never_panics(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 0..6)) {
            let _ = Message::decode(&frames);
        }
    }
}
