//! ZPER client identity (spec `zper.md` §3).
//!
//! Layout: `[hash:1][mode:1][tlen:1][topic:tlen][uuid:any]`. The hash byte is the low byte of Java's
//! `String.hashCode()` of the topic; the server never trusts it (it recomputes it, §3 notes).

use thiserror::Error;

/// Longest topic name accepted, in bytes (§3 rule 2).
pub const MAX_TOPIC_LEN: usize = 64;

/// Why an identity is not a valid ZPER topic identity (§3).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IdentityError {
    /// Fewer than the 3 header bytes (§3 rule 1).
    #[error("identity is {len} bytes, at least 3 are needed")]
    TooShort {
        /// Identity length in bytes.
        len: usize,
    },
    /// `tlen` is 0: the original accepts it and writes into `base_dir` itself (§3 rule 5, a bug).
    #[error("topic is empty")]
    EmptyTopic,
    /// `tlen` over 64, or a negative signed byte (the original throws, §3 rule 5).
    #[error("topic length byte {tlen:#04x} is over {MAX_TOPIC_LEN}")]
    TopicTooLong {
        /// The raw length byte.
        tlen: u8,
    },
    /// A topic name (not an identity) longer than 64 bytes.
    #[error("topic name is {len} bytes, at most {MAX_TOPIC_LEN} are allowed")]
    NameTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// `3 + tlen` runs past the identity.
    #[error("topic length {tlen} runs past the {len}-byte identity")]
    Truncated {
        /// Declared topic length.
        tlen: usize,
        /// Identity length in bytes.
        len: usize,
    },
    /// A topic byte outside `[A-Za-z0-9]` (§3 rule 3).
    #[error("topic byte {byte:#04x} at {index} is not an ASCII letter or digit")]
    InvalidTopicByte {
        /// The offending byte.
        byte: u8,
        /// Its index within the topic.
        index: usize,
    },
}

/// Acknowledgement mode from identity byte 1, read as a signed byte (§4.5, issue #2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AckMode {
    /// Mode 0 and 0x80..=0xFF: nothing is ever sent back.
    None,
    /// Mode 1 (DEALER) and 3..=127: after a flush makes this connection's messages durable, one
    /// single-frame ack carrying the message id (first frame) of the newest message covered.
    PerFlush,
    /// Mode 2 (REQ): one reply per message, `[empty delimiter][message id]`, once it is durable.
    PerMessage,
}

impl AckMode {
    /// Maps the raw mode byte; total. The idempotent modes map to their ack modes:
    /// [`IDEMPOTENT_PER_FLUSH`] to per flush, [`IDEMPOTENT_PER_MESSAGE`] to per message.
    pub fn from_byte(b: u8) -> Self {
        match b as i8 {
            i8::MIN..=0 => AckMode::None,
            2 => AckMode::PerMessage,
            _ if b == IDEMPOTENT_PER_MESSAGE => AckMode::PerMessage,
            _ => AckMode::PerFlush,
        }
    }

    /// The canonical byte for this mode (0, 1 or 2).
    pub fn to_byte(self) -> u8 {
        match self {
            AckMode::None => 0,
            AckMode::PerFlush => 1,
            AckMode::PerMessage => 2,
        }
    }

    /// True when a producer in this mode waits for durability.
    pub fn wants_ack(self) -> bool {
        self != AckMode::None
    }
}

/// Mode byte 0x41: an idempotent producer with mode-1 acks (issue #18). The original treats
/// it as mode 1 (any of 3-127), so such a client still works against it, without
/// de-duplication. Every message id is `[producer id:16][sequence:8]` (docs/protocol.md).
pub const IDEMPOTENT_PER_FLUSH: u8 = 0x41;
/// Mode byte 0x42: an idempotent producer with mode-2 replies (issue #18); REQ sockets.
pub const IDEMPOTENT_PER_MESSAGE: u8 = 0x42;

/// True for the idempotent mode bytes ([`IDEMPOTENT_PER_FLUSH`], [`IDEMPOTENT_PER_MESSAGE`]).
pub fn is_idempotent(mode: u8) -> bool {
    mode == IDEMPOTENT_PER_FLUSH || mode == IDEMPOTENT_PER_MESSAGE
}

/// A parsed ZPER client identity (§3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    /// Hash byte as the client sent it (not trusted; see [`topic_hash`]).
    pub hash: u8,
    /// Raw mode byte (writer ack mode; the reader ignores it).
    pub mode: u8,
    /// Topic name, 1..=64 ASCII letters or digits.
    pub topic: String,
    /// Whatever follows the topic: a 16-byte UUID for well-behaved clients; not checked.
    pub uuid: Vec<u8>,
}

impl Identity {
    /// Builds the identity a ZPER client would use: correct hash byte, given mode and uuid.
    ///
    /// Errors: the topic is not valid (§3).
    pub fn new(topic: &str, mode: u8, uuid: &[u8]) -> Result<Self, IdentityError> {
        validate_topic(topic.as_bytes())?;
        Ok(Identity {
            hash: topic_hash(topic),
            mode,
            topic: topic.to_owned(),
            uuid: uuid.to_vec(),
        })
    }

    /// Parses identity bytes as the server does (§3 rules 1-4), rejecting the empty and the
    /// negative-length topics the original mishandles (rule 5).
    pub fn parse(bytes: &[u8]) -> Result<Self, IdentityError> {
        let (topic, rest) = split_topic(bytes)?;
        Ok(Identity {
            hash: bytes[0],
            mode: bytes[1],
            topic: String::from_utf8_lossy(topic).into_owned(),
            uuid: rest.to_vec(),
        })
    }

    /// Ack mode from the mode byte (§4.5).
    pub fn ack_mode(&self) -> AckMode {
        AckMode::from_byte(self.mode)
    }

    /// Encodes to `3 + topic.len() + uuid.len()` bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(3 + self.topic.len() + self.uuid.len());
        out.push(self.hash);
        out.push(self.mode);
        // Topic length is at most 64 by construction or parse.
        out.push(self.topic.len() as u8);
        out.extend_from_slice(self.topic.as_bytes());
        out.extend_from_slice(&self.uuid);
        out
    }
}

/// Returns the topic slice of an identity without allocating, validated as in [`Identity::parse`].
pub fn topic_of(bytes: &[u8]) -> Result<&str, IdentityError> {
    let (topic, _) = split_topic(bytes)?;
    // validate_topic checked ASCII alphanumerics, so this cannot fail; map defensively anyway.
    std::str::from_utf8(topic).map_err(|_| IdentityError::InvalidTopicByte { byte: 0, index: 0 })
}

fn split_topic(bytes: &[u8]) -> Result<(&[u8], &[u8]), IdentityError> {
    if bytes.len() < 3 {
        return Err(IdentityError::TooShort { len: bytes.len() });
    }
    let tlen_byte = bytes[2];
    if tlen_byte as i8 <= 0 {
        return Err(if tlen_byte == 0 {
            IdentityError::EmptyTopic
        } else {
            IdentityError::TopicTooLong { tlen: tlen_byte }
        });
    }
    let tlen = tlen_byte as usize;
    if tlen > MAX_TOPIC_LEN {
        return Err(IdentityError::TopicTooLong { tlen: tlen_byte });
    }
    if 3 + tlen > bytes.len() {
        return Err(IdentityError::Truncated {
            tlen,
            len: bytes.len(),
        });
    }
    let topic = &bytes[3..3 + tlen];
    validate_topic(topic)?;
    Ok((topic, &bytes[3 + tlen..]))
}

/// Checks a topic name: 1..=64 bytes of `[A-Za-z0-9]` (§3).
pub fn validate_topic(topic: &[u8]) -> Result<(), IdentityError> {
    if topic.is_empty() {
        return Err(IdentityError::EmptyTopic);
    }
    if topic.len() > MAX_TOPIC_LEN {
        return Err(IdentityError::NameTooLong { len: topic.len() });
    }
    match topic.iter().position(|b| !b.is_ascii_alphanumeric()) {
        Some(index) => Err(IdentityError::InvalidTopicByte {
            byte: topic[index],
            index,
        }),
        None => Ok(()),
    }
}

/// Low byte of Java's `String.hashCode()` (h = 31·h + c over UTF-16 units) (§3).
pub fn topic_hash(topic: &str) -> u8 {
    topic
        .encode_utf16()
        .fold(0u32, |h, c| h.wrapping_mul(31).wrapping_add(u32::from(c))) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const UUID: [u8; 16] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee,
        0xff,
    ];

    #[test]
    fn topic_hash_examples_spec_3() {
        assert_eq!(topic_hash("test"), 0x92);
        assert_eq!(topic_hash("probe"), 0xB0);
        assert_eq!(topic_hash("topic1"), 0xE2);
        assert_eq!(topic_hash("A"), 0x41);
    }

    #[test]
    fn identity_for_test_mode_0_spec_11_1() {
        let id = Identity::new("test", 0, &UUID).expect("valid");
        let bytes = id.to_bytes();
        let expected: Vec<u8> = [0x92, 0x00, 0x04, b't', b'e', b's', b't']
            .iter()
            .chain(UUID.iter())
            .copied()
            .collect();
        assert_eq!(bytes, expected);
        assert_eq!(bytes.len(), 23);
        assert_eq!(Identity::parse(&bytes).expect("parses"), id);
        assert_eq!(id.ack_mode(), AckMode::None);
        let mode1 = Identity::new("test", 1, &UUID).expect("valid").to_bytes();
        assert_eq!(mode1[1], 0x01);
    }

    #[test]
    fn invalid_identities_spec_3() {
        assert_eq!(
            Identity::parse(&[1, 2]),
            Err(IdentityError::TooShort { len: 2 })
        );
        assert_eq!(Identity::parse(&[0, 0, 0]), Err(IdentityError::EmptyTopic));
        assert_eq!(
            Identity::parse(&[0, 0, 0x80, b'a']),
            Err(IdentityError::TopicTooLong { tlen: 0x80 })
        );
        assert_eq!(
            Identity::parse(&[0, 0, 65]),
            Err(IdentityError::TopicTooLong { tlen: 65 })
        );
        let long = validate_topic(&[b'a'; 300]).expect_err("too long");
        assert_eq!(long, IdentityError::NameTooLong { len: 300 });
        assert_eq!(
            long.to_string(),
            "topic name is 300 bytes, at most 64 are allowed"
        );
        assert_eq!(
            Identity::parse(&[0, 0, 3, b'a', b'b']),
            Err(IdentityError::Truncated { tlen: 3, len: 5 })
        );
        assert_eq!(
            Identity::parse(&[0, 0, 2, b'a', b'-']),
            Err(IdentityError::InvalidTopicByte {
                byte: b'-',
                index: 1
            })
        );
        assert!(Identity::parse(&[0, 0, 1, 0xC3]).is_err());
        // The uuid part is not checked: none at all is fine (§3 rule 4).
        assert_eq!(
            Identity::parse(&[0, 0, 1, b'x']).map(|i| i.topic),
            Ok("x".to_owned())
        );
    }

    #[test]
    fn ack_mode_is_a_signed_byte_spec_4_5() {
        assert_eq!(AckMode::from_byte(0), AckMode::None);
        assert_eq!(AckMode::from_byte(0x80), AckMode::None);
        assert_eq!(AckMode::from_byte(0xFF), AckMode::None);
        assert_eq!(AckMode::from_byte(1), AckMode::PerFlush);
        assert_eq!(AckMode::from_byte(2), AckMode::PerMessage);
        assert_eq!(AckMode::from_byte(127), AckMode::PerFlush);
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = Identity::parse(&bytes);
            let _ = topic_of(&bytes);
        }

        #[test]
        fn identity_round_trips(topic in "[A-Za-z0-9]{1,64}", mode in any::<u8>(),
                                uuid in proptest::collection::vec(any::<u8>(), 0..20)) {
            let id = Identity::new(&topic, mode, &uuid).expect("valid topic");
            let parsed = Identity::parse(&id.to_bytes()).expect("round trip");
            let bytes = id.to_bytes();
            prop_assert_eq!(topic_of(&bytes).expect("topic"), topic.as_str());
            prop_assert_eq!(parsed, id);
        }
    }
}
