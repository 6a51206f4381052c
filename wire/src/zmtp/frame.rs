//! ZMTP frame headers (RFC 15 §"Framing" for ZMTP/2.0, RFC 23 §"Framing" for ZMTP/3.x).
//!
//! ```text
//! short: [flags][size:1]     [body:size]
//! long:  [flags][size:8 BE]  [body:size]   flags: 0x01 MORE, 0x02 LONG, 0x04 COMMAND (3.x only)
//! ```
//! A ZMTP/2.0 or 3.x data frame has the stored record layout of spec `zper.md` §6.2 once its
//! header is canonical (short form for 0..=255 bytes, long form above): [`FrameHeader::is_canonical`]
//! says when the received bytes can be stored as they are, [`FrameHeader::canonical`] gives the
//! header to store otherwise.

use thiserror::Error;

use crate::record::{FLAG_LONG, FLAG_MORE};

/// Flag bit of ZMTP/3.x: the frame is a command (READY, PING, ...), not message data.
pub const FLAG_COMMAND: u8 = 0x04;

/// Why a frame header is refused. Each closes the connection it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    /// Flag bits that the peer's ZMTP version reserves (ZMTP/2.0: anything but MORE and
    /// LONG; ZMTP/3.x: anything but MORE, LONG and COMMAND).
    #[error("reserved flag bits in frame flags {0:#04x}")]
    ReservedFlags(u8),
    /// A command frame with MORE set (RFC 23: commands are single frames).
    #[error("a command frame with MORE set")]
    CommandWithMore,
    /// A declared body larger than the limit this endpoint accepts.
    #[error("frame of {len} bytes over the limit of {max} bytes")]
    TooLong {
        /// Declared body length in bytes.
        len: u64,
        /// The endpoint's limit in bytes.
        max: u64,
    },
}

/// A decoded frame header; the body follows it in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The flags byte as received.
    pub flags: u8,
    /// Header length in bytes: 2 (short) or 9 (long).
    pub header_len: usize,
    /// Body length in bytes (at most the `max_body` it was decoded with).
    pub body_len: u64,
}

impl FrameHeader {
    /// Decodes the header at the start of `buf`. `Ok(None)` when `buf` ends inside the header.
    /// `commands` allows the COMMAND flag (ZMTP/3.x peers); `max_body` bounds the body length
    /// in bytes, so nothing downstream buffers more than that for one frame.
    pub fn decode(buf: &[u8], commands: bool, max_body: u64) -> Result<Option<Self>, FrameError> {
        let Some(&flags) = buf.first() else {
            return Ok(None);
        };
        let allowed = FLAG_MORE | FLAG_LONG | if commands { FLAG_COMMAND } else { 0 };
        if flags & !allowed != 0 {
            return Err(FrameError::ReservedFlags(flags));
        }
        if flags & FLAG_COMMAND != 0 && flags & FLAG_MORE != 0 {
            return Err(FrameError::CommandWithMore);
        }
        let (header_len, body_len) = if flags & FLAG_LONG != 0 {
            let Some(size) = buf.get(1..9) else {
                return Ok(None);
            };
            let mut be = [0u8; 8];
            be.copy_from_slice(size);
            (9, u64::from_be_bytes(be))
        } else {
            let Some(&size) = buf.get(1) else {
                return Ok(None);
            };
            (2, u64::from(size))
        };
        if body_len > max_body {
            return Err(FrameError::TooLong {
                len: body_len,
                max: max_body,
            });
        }
        Ok(Some(FrameHeader {
            flags,
            header_len,
            body_len,
        }))
    }

    /// MORE: another frame of the same message follows.
    pub fn more(&self) -> bool {
        self.flags & FLAG_MORE != 0
    }

    /// COMMAND: a ZMTP/3.x command frame.
    pub fn command(&self) -> bool {
        self.flags & FLAG_COMMAND != 0
    }

    /// Header plus body, in bytes.
    pub fn frame_len(&self) -> u64 {
        self.header_len as u64 + self.body_len
    }

    /// True when the received header is already the stored one (§6.2): a data frame in short
    /// form for 0..=255 bytes or long form above.
    pub fn is_canonical(&self) -> bool {
        !self.command() && (self.header_len == 9) == (self.body_len > 255)
    }

    /// The stored header for this data frame (§6.2) and its length in bytes: the MORE bit kept,
    /// short form for 0..=255 bytes, long form above.
    pub fn canonical(&self) -> ([u8; 9], usize) {
        let mut header = [0u8; 9];
        let len = encode_header(self.more(), false, self.body_len, &mut header);
        (header, len)
    }
}

/// Writes a frame header into `out` (at least 9 bytes) and returns its length: short form for
/// bodies of 0..=255 bytes, long form above, as libzmq and JeroMQ send (spec §2).
pub fn encode_header(more: bool, command: bool, body_len: u64, out: &mut [u8; 9]) -> usize {
    let mut flags = if more { FLAG_MORE } else { 0 } | if command { FLAG_COMMAND } else { 0 };
    if body_len > 255 {
        flags |= FLAG_LONG;
        out[0] = flags;
        out[1..9].copy_from_slice(&body_len.to_be_bytes());
        9
    } else {
        out[0] = flags;
        out[1] = body_len as u8;
        2
    }
}

/// Appends one whole frame (header and body) to `out`.
pub fn encode_frame(more: bool, command: bool, body: &[u8], out: &mut Vec<u8>) {
    let mut header = [0u8; 9];
    let len = encode_header(more, command, body.len() as u64, &mut header);
    out.extend_from_slice(&header[..len]);
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_and_long_headers_decode() {
        assert_eq!(
            FrameHeader::decode(&[0x01, 5, b'h'], false, 100),
            Ok(Some(FrameHeader {
                flags: 1,
                header_len: 2,
                body_len: 5
            }))
        );
        let mut long = vec![0x02];
        long.extend_from_slice(&300u64.to_be_bytes());
        let h = FrameHeader::decode(&long, false, 1000)
            .expect("decodes")
            .expect("whole header");
        assert_eq!((h.header_len, h.body_len, h.more()), (9, 300, false));
        assert!(h.is_canonical());
        assert_eq!(FrameHeader::decode(&long[..5], false, 1000), Ok(None));
        assert_eq!(FrameHeader::decode(&[], false, 1000), Ok(None));
    }

    #[test]
    fn a_declared_length_of_2_pow_63_is_refused_before_any_body_is_read() {
        let mut long = vec![0x02];
        long.extend_from_slice(&(1u64 << 63).to_be_bytes());
        assert_eq!(
            FrameHeader::decode(&long, true, 1 << 20),
            Err(FrameError::TooLong {
                len: 1 << 63,
                max: 1 << 20
            })
        );
    }

    #[test]
    fn reserved_bits_and_commands_follow_the_version() {
        assert_eq!(
            FrameHeader::decode(&[0x04, 0], false, 10),
            Err(FrameError::ReservedFlags(0x04))
        );
        assert!(FrameHeader::decode(&[0x04, 0], true, 10)
            .expect("valid")
            .expect("valid")
            .command());
        assert_eq!(
            FrameHeader::decode(&[0x05, 0], true, 10),
            Err(FrameError::CommandWithMore)
        );
        assert_eq!(
            FrameHeader::decode(&[0x08, 0], true, 10),
            Err(FrameError::ReservedFlags(0x08))
        );
    }

    #[test]
    fn a_long_header_for_a_short_body_is_stored_in_short_form() {
        let mut long = vec![0x03];
        long.extend_from_slice(&7u64.to_be_bytes());
        let h = FrameHeader::decode(&long, false, 100)
            .expect("decodes")
            .expect("whole header");
        assert!(!h.is_canonical());
        let (header, len) = h.canonical();
        assert_eq!(&header[..len], &[0x01, 7]);
    }

    proptest! {
        #[test]
        fn any_bytes_decode_without_panic_and_within_the_limit(
            bytes in proptest::collection::vec(any::<u8>(), 0..20),
            commands: bool,
            max in 0u64..100_000,
        ) {
            if let Ok(Some(h)) = FrameHeader::decode(&bytes, commands, max) {
                prop_assert!(h.body_len <= max);
                prop_assert!(h.header_len <= bytes.len());
            }
        }

        #[test]
        fn encoded_frames_decode_to_the_same_header_and_are_stored_records(
            more: bool,
            body in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            let mut frame = Vec::new();
            encode_frame(more, false, &body, &mut frame);
            let h = FrameHeader::decode(&frame, false, 1 << 20).expect("decodes").expect("whole header");
            prop_assert_eq!(h.more(), more);
            prop_assert_eq!(h.body_len as usize, body.len());
            prop_assert!(h.is_canonical());
            let (record, len) = crate::record::Record::decode(&frame).expect("valid");
            prop_assert_eq!(len, frame.len());
            prop_assert_eq!(record.payload, &body[..]);
            prop_assert_eq!(record.more, more);
        }
    }
}
