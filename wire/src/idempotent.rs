//! Idempotent producers' message ids (issue #18; docs/protocol.md "Idempotent producers").
//!
//! An idempotent message's first frame is `[producer id:16][sequence:8 BE]`. A producer id is
//! a UUID version 8 (RFC 9562) whose first two bytes are `7a 70` ("zp"): the fixed bits tell
//! zper's producer ids from other 16-byte prefixes, so a plain producer whose own message ids
//! happen to be 24 bytes long is never taken for an idempotent one when a node rebuilds its
//! window from the log. 106 bits stay random. The sequence `u64::MAX` is not a valid one (a
//! producer's next sequence must fit in a `u64`).

/// Bytes of a producer id.
pub const PRODUCER_ID_LEN: usize = 16;
/// Bytes of an idempotent message id: producer id, then the sequence.
pub const MESSAGE_ID_LEN: usize = PRODUCER_ID_LEN + 8;
/// The first two bytes of every producer id.
pub const PRODUCER_ID_TAG: [u8; 2] = *b"zp";

/// `bytes` (16 random bytes, e.g. a UUID v4) with the fixed bits of a producer id set: the
/// tag, version 8 in byte 6's high nibble, variant `10` in byte 8's two high bits. The same
/// input always gives the same id (zper-client derives it from its identity's UUID).
pub const fn producer_id(bytes: [u8; 16]) -> [u8; 16] {
    let mut id = bytes;
    id[0] = PRODUCER_ID_TAG[0];
    id[1] = PRODUCER_ID_TAG[1];
    id[6] = 0x80 | (id[6] & 0x0f);
    id[8] = 0x80 | (id[8] & 0x3f);
    id
}

/// True if `id` has the fixed bits of [`producer_id`].
pub fn is_producer_id(id: &[u8]) -> bool {
    id.len() == PRODUCER_ID_LEN
        && id[..2] == PRODUCER_ID_TAG
        && id[6] >> 4 == 8
        && id[8] >> 6 == 0b10
}

/// Splits an idempotent message id into producer id and sequence. None unless `frame` is
/// [`MESSAGE_ID_LEN`] bytes, its producer id passes [`is_producer_id`] and its sequence is
/// below `u64::MAX`.
pub fn parse_message_id(frame: &[u8]) -> Option<([u8; PRODUCER_ID_LEN], u64)> {
    if frame.len() != MESSAGE_ID_LEN {
        return None;
    }
    let (pid, seq) = frame.split_at(PRODUCER_ID_LEN);
    if !is_producer_id(pid) {
        return None;
    }
    let seq = u64::from_be_bytes(seq.try_into().ok()?);
    if seq == u64::MAX {
        return None;
    }
    Some((pid.try_into().ok()?, seq))
}

/// The message id `[producer:16][sequence:8 BE]`.
pub fn message_id(producer: &[u8; PRODUCER_ID_LEN], sequence: u64) -> [u8; MESSAGE_ID_LEN] {
    let mut out = [0u8; MESSAGE_ID_LEN];
    out[..PRODUCER_ID_LEN].copy_from_slice(producer);
    out[PRODUCER_ID_LEN..].copy_from_slice(&sequence.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_id_parses_and_others_do_not() {
        let pid = producer_id([0xab; 16]);
        assert!(is_producer_id(&pid));
        assert_eq!(&pid[..2], b"zp");
        assert_eq!(producer_id(pid), pid, "marking twice changes nothing");
        assert_eq!(parse_message_id(&message_id(&pid, 258)), Some((pid, 258)));
        assert_eq!(parse_message_id(&message_id(&pid, 1)[..23]), None);
        assert_eq!(parse_message_id(&message_id(&pid, u64::MAX)), None);
        assert_eq!(
            parse_message_id(&message_id(&pid, u64::MAX - 1)).map(|p| p.1),
            Some(u64::MAX - 1)
        );
        // A UUID v4 (what a plain producer's [uuid][counter] id starts with) is not one.
        let v4 = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0x4d, 0xef, 0x9a, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(parse_message_id(&message_id(&v4, 0)), None);
        assert!(!is_producer_id(&[0xab; 16]));
        assert!(!is_producer_id(b"zp"));
    }
}
