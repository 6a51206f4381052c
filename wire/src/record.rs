//! Stored record codec (spec `zper.md` §6.2): one stored frame, laid out as a ZMTP/2.0 frame.
//!
//! ```text
//! short form: [flags][len:1]     [payload:len]   flags in {0x00, 0x01}
//! long form:  [flags][len:8 BE]  [payload:len]   flags in {0x02, 0x03}
//! ```
//! A message is a run of records whose last one lacks MORE. Writers use short form for 0..=255
//! payload bytes and long form for >= 256 (§4.2, what every ZMTP sender emits); readers accept long
//! form for lengths >= 255 (single mode stores 255 long, §4.2) and stop, as ZPER's `MsgIterator`
//! does (§5.3), at the first record that is incomplete or invalid.

use thiserror::Error;

/// Flag bit: another record of the same message follows.
pub const FLAG_MORE: u8 = 0x01;
/// Flag bit: the length is 8 bytes big-endian instead of 1.
pub const FLAG_LONG: u8 = 0x02;
/// Largest long-form length accepted by readers (2^31 - 1, §5.3).
pub const MAX_LONG_LEN: u64 = i32::MAX as u64;

/// Why a record could not be decoded at some position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The bytes end inside the record: normal at a segment tail or a FETCH cut.
    #[error("record incomplete: {needed} more bytes needed")]
    Incomplete {
        /// Bytes missing to finish the record (at least 1).
        needed: usize,
    },
    /// A flags byte other than 0..=3.
    #[error("invalid flags byte {0:#04x}")]
    InvalidFlags(u8),
    /// A long-form length under 255 or over 2^31 - 1.
    #[error("invalid long-form length {0}")]
    InvalidLongLength(u64),
    /// An empty final record while empty messages are not allowed (§6.3).
    #[error("empty message while allow_empty_message is false")]
    EmptyMessage,
}

impl DecodeError {
    /// True for [`DecodeError::Incomplete`]: more bytes could complete the record.
    pub fn is_incomplete(&self) -> bool {
        matches!(self, DecodeError::Incomplete { .. })
    }
}

/// One decoded record, borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// MORE flag: another record of this message follows.
    pub more: bool,
    /// Header length in bytes: 2 (short form) or 9 (long form).
    pub header_len: usize,
    /// The payload bytes.
    pub payload: &'a [u8],
}

impl<'a> Record<'a> {
    /// Total stored size in bytes: header + payload.
    pub fn stored_len(&self) -> usize {
        self.header_len + self.payload.len()
    }

    /// Decodes the record at the start of `buf`, returning it and its stored length.
    ///
    /// Errors: [`DecodeError::Incomplete`] when `buf` ends inside it; invalid flags or long length.
    pub fn decode(buf: &'a [u8]) -> Result<(Record<'a>, usize), DecodeError> {
        let Some(&flags) = buf.first() else {
            return Err(DecodeError::Incomplete { needed: 2 });
        };
        if flags > (FLAG_MORE | FLAG_LONG) {
            return Err(DecodeError::InvalidFlags(flags));
        }
        let (header_len, len) = if flags & FLAG_LONG == 0 {
            match buf.get(1) {
                Some(&l) => (2usize, u64::from(l)),
                None => return Err(DecodeError::Incomplete { needed: 1 }),
            }
        } else {
            let Some(raw) = buf.get(1..9) else {
                return Err(DecodeError::Incomplete {
                    needed: 9 - buf.len(),
                });
            };
            let mut b = [0u8; 8];
            b.copy_from_slice(raw);
            let len = u64::from_be_bytes(b);
            if !(255..=MAX_LONG_LEN).contains(&len) {
                return Err(DecodeError::InvalidLongLength(len));
            }
            (9usize, len)
        };
        // len <= 2^31 - 1, so it fits usize on every supported target.
        let total = header_len + len as usize;
        if buf.len() < total {
            return Err(DecodeError::Incomplete {
                needed: total - buf.len(),
            });
        }
        Ok((
            Record {
                more: flags & FLAG_MORE != 0,
                header_len,
                payload: &buf[header_len..total],
            },
            total,
        ))
    }
}

/// Stored size of a record with a `payload_len`-byte payload as zper writes it (short form for
/// 0..=255 bytes, long form above).
pub fn encoded_len(payload_len: usize) -> usize {
    if payload_len > 255 {
        9 + payload_len
    } else {
        2 + payload_len
    }
}

/// Appends one record to `out`: short form for 0..=255 payload bytes, long form for >= 256 (§4.2).
pub fn encode_record(payload: &[u8], more: bool, out: &mut Vec<u8>) {
    let more_bit = if more { FLAG_MORE } else { 0 };
    if payload.len() > 255 {
        out.push(more_bit | FLAG_LONG);
        out.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    } else {
        out.push(more_bit);
        out.push(payload.len() as u8);
    }
    out.extend_from_slice(payload);
}

/// Iterator over the records of a byte range; stops cleanly at the first incomplete or invalid
/// record, which [`Records::stop`] then reports.
#[derive(Debug, Clone)]
pub struct Records<'a> {
    buf: &'a [u8],
    pos: usize,
    allow_empty: bool,
    stop: Option<DecodeError>,
    /// Offset just after the last complete message (a record without MORE).
    message_end: usize,
}

impl<'a> Records<'a> {
    /// Iterates `buf` with `allow_empty_message = true` (the default, §6.3).
    pub fn new(buf: &'a [u8]) -> Self {
        Self::with_empty(buf, true)
    }

    /// Iterates `buf`; when `allow_empty` is false an empty final record stops the iteration.
    pub fn with_empty(buf: &'a [u8], allow_empty: bool) -> Self {
        Records {
            buf,
            pos: 0,
            allow_empty,
            stop: None,
            message_end: 0,
        }
    }

    /// Bytes of complete records seen so far: ZPER's frame-granular `validBytes` (§5.3) once the
    /// iterator is exhausted.
    pub fn valid_bytes(&self) -> usize {
        self.pos
    }

    /// Bytes up to the end of the last complete message seen so far.
    pub fn message_bytes(&self) -> usize {
        self.message_end
    }

    /// Why iteration stopped before the end of the range, if it did.
    pub fn stop(&self) -> Option<DecodeError> {
        self.stop
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        if self.stop.is_some() || self.pos >= self.buf.len() {
            return None;
        }
        match Record::decode(&self.buf[self.pos..]) {
            Ok((rec, len)) => {
                if !self.allow_empty && !rec.more && rec.payload.is_empty() {
                    self.stop = Some(DecodeError::EmptyMessage);
                    return None;
                }
                self.pos += len;
                if !rec.more {
                    self.message_end = self.pos;
                }
                Some(rec)
            }
            Err(e) => {
                self.stop = Some(e);
                None
            }
        }
    }
}

/// Frame-granular valid bytes of `buf` (ZPER's `MsgIterator.validBytes`, §5.3).
pub fn valid_bytes(buf: &[u8]) -> usize {
    let mut it = Records::new(buf);
    it.by_ref().for_each(drop);
    it.valid_bytes()
}

/// Bytes of `buf` up to the end of its last complete message (what a whole-message consumer may
/// skip, §5.3).
pub fn whole_message_len(buf: &[u8]) -> usize {
    let mut it = Records::new(buf);
    it.by_ref().for_each(drop);
    it.message_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn perf_message() -> Vec<u8> {
        let mut out = Vec::new();
        encode_record(&[0x00, 0x5e, 0x0e, 0x5d, 0x8f], true, &mut out);
        encode_record(&[b'x'; 100], false, &mut out);
        out
    }

    #[test]
    fn stored_two_frame_message_spec_11_2() {
        let m = perf_message();
        assert_eq!(m.len(), 109);
        assert_eq!(
            &m[..9],
            &[0x01, 0x05, 0x00, 0x5e, 0x0e, 0x5d, 0x8f, 0x00, 0x64]
        );
        let mut small = Vec::new();
        encode_record(b"id2", true, &mut small);
        encode_record(b"hello2", false, &mut small);
        assert_eq!(
            small,
            [0x01, 0x03, b'i', b'd', b'2', 0x00, 0x06, b'h', b'e', b'l', b'l', b'o', b'2']
        );
        let mut long = Vec::new();
        encode_record(&[7u8; 300], false, &mut long);
        assert_eq!(&long[..9], &[0x02, 0, 0, 0, 0, 0, 0, 0x01, 0x2c]);
        assert_eq!(long.len(), 309);
        let mut b255 = Vec::new();
        encode_record(&[7u8; 255], false, &mut b255);
        assert_eq!(&b255[..2], &[0x00, 0xff]);
        assert_eq!(b255.len(), encoded_len(255));
    }

    #[test]
    fn single_mode_long_255_is_read_spec_6_2() {
        let mut buf = vec![0x02, 0, 0, 0, 0, 0, 0, 0, 0xff];
        buf.extend_from_slice(&[1u8; 255]);
        let (rec, len) = Record::decode(&buf).expect("valid");
        assert_eq!(len, 264);
        assert_eq!(rec.payload.len(), 255);
        // Long form under 255 is invalid.
        let bad = [0x02, 0, 0, 0, 0, 0, 0, 0, 0x10];
        assert_eq!(
            Record::decode(&bad),
            Err(DecodeError::InvalidLongLength(16))
        );
    }

    #[test]
    fn fetch_of_300_bytes_valid_bytes_spec_11_3() {
        let mut log = Vec::new();
        for _ in 0..3 {
            log.extend_from_slice(&perf_message());
        }
        let chunk = &log[..300];
        assert_eq!(valid_bytes(chunk), 225);
        assert_eq!(whole_message_len(chunk), 218);
        let mut it = Records::new(chunk);
        assert_eq!(it.by_ref().count(), 5);
        assert!(it.stop().is_some_and(|e| e.is_incomplete()));
    }

    #[test]
    fn invalid_flags_stop_iteration_spec_6_4() {
        let buf = [0x00, 0x01, b'a', 0x05, 0x01, b'z'];
        let mut it = Records::new(&buf);
        assert_eq!(it.by_ref().count(), 1);
        assert_eq!(it.valid_bytes(), 3);
        assert_eq!(it.stop(), Some(DecodeError::InvalidFlags(5)));
    }

    #[test]
    fn empty_messages_follow_allow_empty_spec_6_3() {
        let buf = [0u8; 6];
        let mut yes = Records::with_empty(&buf, true);
        assert_eq!(yes.by_ref().count(), 3);
        let mut no = Records::with_empty(&buf, false);
        assert_eq!(no.by_ref().count(), 0);
        assert_eq!(no.stop(), Some(DecodeError::EmptyMessage));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Record::decode(&bytes);
            let mut it = Records::new(&bytes);
            let n = it.by_ref().count();
            prop_assert!(it.valid_bytes() <= bytes.len());
            prop_assert!(it.message_bytes() <= it.valid_bytes());
            prop_assert!(n <= bytes.len() / 2 + 1);
        }

        #[test]
        fn records_round_trip(frames in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..700), any::<bool>()), 0..8)) {
            let mut buf = Vec::new();
            for (p, more) in &frames {
                encode_record(p, *more, &mut buf);
            }
            let decoded: Vec<(Vec<u8>, bool)> =
                Records::new(&buf).map(|r| (r.payload.to_vec(), r.more)).collect();
            prop_assert_eq!(&decoded, &frames);
            prop_assert_eq!(valid_bytes(&buf), buf.len());
            let cut = buf.len() / 2;
            prop_assert!(valid_bytes(&buf[..cut]) <= cut);
        }
    }
}
