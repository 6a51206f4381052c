//! Scanning a segment's bytes to index its records (spec `zper.md` §6.2 record format; issue
//! #13): every range its checksum sidecar covers is verified first, and records are indexed
//! only in ranges that verify. A damaged range is noted and skipped, and records are found
//! again at its end (a checksum covers whole appends, which are whole messages, so its end
//! starts a record). One flipped byte therefore fences one append, not everything after it.
//! Past the covered bytes records are parsed as ZPER stored them.
//!
//! Used by recovery (the newest segment) and by the first lookup in a closed segment.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use zper_wire::Records;

use crate::checksum::{self, Entry};
use crate::index::SparseIndex;

/// Bytes read at a time.
pub(crate) const SCAN_CHUNK: usize = 4 << 20;

/// What a scan found. Offsets are relative to the segment start unless noted.
#[derive(Debug)]
pub(crate) struct Scan {
    /// Record starts and damaged ranges (absolute).
    pub(crate) index: SparseIndex,
    /// The first entry whose bytes are not all in the file (the file is shorter than its
    /// checksums say): nothing from that entry's start on was scanned.
    pub(crate) missing: Option<usize>,
    /// End of the last whole message found outside damaged ranges (0 when none).
    pub(crate) message_end: u64,
    /// Message ends past the covered bytes, ascending.
    pub(crate) tail_ends: Vec<u64>,
}

/// Scans `file`, a segment starting at absolute offset `start`, from 0 to `len` (bytes),
/// against its checksum `entries`. `allow_empty` accepts empty messages past the covered
/// bytes as ZPER does.
///
/// Errors: I/O (a read failing, not bytes failing their checksum: that is a damaged range).
pub(crate) fn scan(
    file: &File,
    start: u64,
    entries: &[Entry],
    len: u64,
    allow_empty: bool,
) -> io::Result<Scan> {
    let mut out = Scan {
        index: SparseIndex::live(start),
        missing: None,
        message_end: 0,
        tail_ends: Vec::new(),
    };
    let start_of = |i: usize| i.checked_sub(1).map_or(0, |p| entries[p].end);
    // 1. The covered bytes, in runs of entries of about SCAN_CHUNK bytes.
    let mut i = 0;
    while i < entries.len() {
        let from = start_of(i);
        let mut j = i;
        while j + 1 < entries.len() && entries[j + 1].end - from <= SCAN_CHUNK as u64 {
            j += 1;
        }
        let to = entries[j].end;
        let mut buf = vec![0u8; to.min(len).saturating_sub(from) as usize];
        file.read_exact_at(&mut buf, from)?;
        for (k, entry) in entries.iter().enumerate().take(j + 1).skip(i) {
            let a = start_of(k);
            let Some(bytes) = buf.get((a - from) as usize..(entry.end - from) as usize) else {
                out.missing = Some(k);
                return Ok(out);
            };
            if checksum::crc(bytes) != entry.crc {
                out.index.note_damaged(start + a, start + entry.end);
                continue;
            }
            let mut it = Records::with_empty(bytes, true);
            it.by_ref().for_each(drop);
            out.index
                .note_records(start + a, &bytes[..it.valid_bytes()]);
            if it.message_bytes() > 0 {
                out.message_end = a + it.message_bytes() as u64;
            }
        }
        i = j + 1;
    }
    // 2. Past them: records as ZPER stored them, up to the first that is not whole.
    let covered = entries.last().map_or(0, |e| e.end);
    let mut pos = covered; // at a record boundary
    let mut chunk = SCAN_CHUNK;
    while pos < len {
        let n = (len - pos).min(chunk as u64) as usize;
        let mut buf = vec![0u8; n];
        file.read_exact_at(&mut buf, pos)?;
        let mut it = Records::with_empty(&buf, allow_empty);
        let mut at = pos;
        for rec in it.by_ref() {
            at += rec.stored_len() as u64;
            if !rec.more {
                out.tail_ends.push(at);
            }
        }
        out.index
            .note_records(start + pos, &buf[..it.valid_bytes()]);
        if it.message_bytes() > 0 {
            out.message_end = pos + it.message_bytes() as u64;
        }
        let advanced = it.valid_bytes() as u64;
        match it.stop() {
            None => pos += advanced,
            Some(e) if e.is_incomplete() && pos + n as u64 != len => {
                // The chunk cut a record: read again from the last whole record.
                if advanced == 0 {
                    chunk = chunk.saturating_mul(2);
                }
                out.tail_ends.retain(|e| *e <= pos + advanced);
                pos += advanced;
            }
            Some(_) => break,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::Checksums;
    use std::io::Write;
    use zper_wire::encode_record;

    fn message(id: u32) -> Vec<u8> {
        let mut m = Vec::new();
        encode_record(&id.to_be_bytes(), true, &mut m);
        encode_record(&[b'x'; 40], false, &mut m);
        m
    }

    /// Ten appends of one message each, with their checksums.
    fn segment() -> (tempfile::NamedTempFile, Vec<Entry>, u64) {
        let mut f = tempfile::NamedTempFile::new().expect("tmp");
        let mut sums = Checksums::fresh();
        let mut end = 0;
        for id in 0..10 {
            let m = message(id);
            f.write_all(&m).expect("write");
            end += m.len() as u64;
            sums.appended(end, &m);
        }
        (f, sums.entries, end / 10)
    }

    #[test]
    fn a_damaged_append_is_fenced_and_records_are_found_again_after_it() {
        let (f, entries, m) = segment();
        // The flags byte of message 3's first record: framing after it is garbage.
        let mut b = [0u8; 1];
        f.as_file().read_exact_at(&mut b, 3 * m).expect("read");
        f.as_file()
            .write_all_at(&[b[0] ^ 0x7F], 3 * m)
            .expect("flip");
        let s = scan(f.as_file(), 1000, &entries, 10 * m, true).expect("scan");
        assert_eq!(s.missing, None);
        assert_eq!(s.index.damaged(), &[(1000 + 3 * m, 1000 + 4 * m)]);
        assert_eq!(s.message_end, 10 * m, "messages after the damage are kept");
        assert_eq!(s.index.floor(1000 + 5 * m), Some(1000 + 4 * m));
    }

    #[test]
    fn bytes_a_checksum_names_but_the_file_lacks_are_missing() {
        let (f, entries, m) = segment();
        f.as_file().set_len(7 * m + 5).expect("cut");
        let s = scan(f.as_file(), 0, &entries, 7 * m + 5, true).expect("scan");
        assert_eq!(s.missing, Some(7));
        assert_eq!(s.message_end, 7 * m);
        assert!(s.index.damaged().is_empty());
    }

    #[test]
    fn an_intact_segment_has_no_damage_and_a_tail_past_the_checksums_is_parsed() {
        let (mut f, entries, m) = segment();
        f.write_all(&message(10)).expect("tail");
        f.write_all(&message(11)[..7]).expect("torn");
        let s = scan(f.as_file(), 0, &entries, 12 * m - (m - 7), true).expect("scan");
        assert!(s.index.damaged().is_empty());
        assert_eq!(s.message_end, 11 * m);
        assert_eq!(s.tail_ends, vec![11 * m]);
    }
}
