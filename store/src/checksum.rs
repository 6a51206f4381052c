//! Checksums of segment bytes (issue #13, defect 3), kept in a sidecar beside each segment so
//! the `.dat` stays byte for byte ZPER's format (spec `zper.md` §6.1: files that are not
//! `<20 digits>.dat` are ignored): `<20-digit start offset>.crc`.
//!
//! Layout: the 8-byte magic `ZPERCRC1`, then one 16-byte entry per append
//! `[end: u64 LE][crc: u32 LE][check: u32 LE]`: `end` is the segment length (bytes, relative to
//! the segment start) after the append, `crc` the CRC32C of the bytes since the previous entry,
//! and `check` the CRC32C of the entry's first 12 bytes (a torn or damaged entry ends the
//! list). An entry reaches the file only after the bytes it covers were made durable, so every
//! entry in the file names durable bytes: a mismatch is damage, never a torn write. The file
//! itself is fsynced when its segment is closed and at a clean exit; losing its newest entries
//! in a power loss only leaves more of the tail to the record parser, as for ZPER's own data.
//!
//! Verified at recovery (the newest segment), on every read of a closed segment, and when
//! the leader reads for its replicas. A segment without a sidecar (ZPER's own data) opens as
//! before and gets one covering what recovery kept.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// File name of the sidecar of the segment starting at absolute offset `start`.
pub fn file_name(start: u64) -> String {
    format!("{start:020}.crc")
}

/// The sidecar path beside segment `dat`.
pub(crate) fn path_for(dat: &Path) -> PathBuf {
    dat.with_extension("crc")
}

/// Magic at the start of every sidecar.
pub(crate) const MAGIC: &[u8; 8] = b"ZPERCRC1";
/// Bytes of one entry.
pub(crate) const ENTRY: usize = 16;

/// Bytes an entry covers at most where message ends allow (16 KiB: the sidecar is 0.1% of
/// the segment for large appends; one entry per append for small ones).
pub(crate) const PIECE: usize = 16 << 10;

/// CRC32C of `bytes` (hardware-accelerated where the CPU has it).
pub(crate) fn crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// CRC32C of bytes `[lo, hi)` of the concatenation of `parts` (`hi` at most their total length).
fn crc_of_parts(parts: &[&[u8]], lo: u64, hi: u64) -> u32 {
    let mut sum = 0u32;
    let mut base = 0u64;
    for part in parts {
        let end = base + part.len() as u64;
        let (from, to) = (lo.max(base), hi.min(end));
        if from < to {
            // Both within this part, so they fit in usize.
            sum = crc32c::crc32c_append(sum, &part[(from - base) as usize..(to - base) as usize]);
        }
        base = end;
    }
    sum
}

/// One entry: the segment length after an append and the CRC32C of that append's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Segment length after the append (relative bytes).
    pub(crate) end: u64,
    /// CRC32C of the bytes from the previous entry's end to `end`.
    pub(crate) crc: u32,
}

impl Entry {
    pub(crate) fn encode(&self) -> [u8; ENTRY] {
        let mut out = [0u8; ENTRY];
        out[..8].copy_from_slice(&self.end.to_le_bytes());
        out[8..12].copy_from_slice(&self.crc.to_le_bytes());
        let check = crc(&out[..12]);
        out[12..].copy_from_slice(&check.to_le_bytes());
        out
    }
}

/// The valid entries of a sidecar's bytes: those after a correct magic, each with a correct
/// check and a strictly growing end, up to the first that is not. Bytes that are not a
/// sidecar give none.
pub(crate) fn decode(bytes: &[u8]) -> Vec<Entry> {
    let Some(body) = bytes.strip_prefix(MAGIC) else {
        return Vec::new();
    };
    let mut out: Vec<Entry> = Vec::new();
    for raw in body.chunks_exact(ENTRY) {
        let le64 = |b: &[u8]| b.try_into().map(u64::from_le_bytes).ok();
        let le32 = |b: &[u8]| b.try_into().map(u32::from_le_bytes).ok();
        let (Some(end), Some(sum), Some(check)) =
            (le64(&raw[..8]), le32(&raw[8..12]), le32(&raw[12..]))
        else {
            break;
        };
        if check != crc(&raw[..12]) || out.last().is_some_and(|e| e.end >= end) {
            break;
        }
        out.push(Entry { end, crc: sum });
    }
    out
}

/// A range of a segment whose bytes do not match their checksum: `[start, end)`, relative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mismatch {
    pub(crate) start: u64,
    pub(crate) end: u64,
}

/// The segment's checksums: every entry in append order, and how many of them are in the
/// sidecar file.
#[derive(Debug, Default)]
pub(crate) struct Checksums {
    pub(crate) entries: Vec<Entry>,
    /// Entries `[..stored]` are in the file.
    pub(crate) stored: usize,
    /// False for a closed segment whose sidecar has not been read yet.
    pub(crate) loaded: bool,
    /// The sidecar, kept open for appending while the segment is active.
    pub(crate) file: Option<File>,
    /// A closed segment's sidecar, read for the first time, was damaged or covers less than
    /// the segment: the bytes past its valid entries cannot be checked, and the topic lists
    /// the segment as unchecked (stop-41 attack: they were served without any report).
    pub(crate) short: bool,
}

impl Checksums {
    /// Checksums for a fresh, empty segment.
    pub(crate) fn fresh() -> Self {
        Checksums {
            loaded: true,
            ..Default::default()
        }
    }

    /// End of the covered bytes (relative).
    pub(crate) fn covered(&self) -> u64 {
        self.entries.last().map_or(0, |e| e.end)
    }

    /// Start of entry `i`'s bytes (relative).
    pub(crate) fn start_of(&self, i: usize) -> u64 {
        i.checked_sub(1).map_or(0, |p| self.entries[p].end)
    }

    /// Notes an append of `bytes` that made the segment `end` bytes long.
    pub(crate) fn appended(&mut self, end: u64, bytes: &[u8]) {
        if end > self.covered() {
            self.entries.push(Entry {
                end,
                crc: crc(bytes),
            });
        }
    }

    /// Notes an append of `chunk` (whole messages) that started at relative `at`: one entry
    /// per run of whole messages of about [`PIECE`] bytes, so a damaged byte fences its
    /// piece, not a whole large batch (issue #13: one byte fenced 3,922 messages of one
    /// 262 KB append). `ends` are the chunk-relative message ends where pieces before the last
    /// end, ascending, as `crate::plan` chose them (message ends at least [`PIECE`] apart).
    pub(crate) fn appended_pieces(&mut self, at: u64, chunk: &[u8], ends: &[usize]) {
        let mut from = 0usize;
        for &end in ends.iter().filter(|&&e| e < chunk.len()) {
            self.appended(at + end as u64, &chunk[from..end]);
            from = end;
        }
        self.appended(at + chunk.len() as u64, &chunk[from..]);
    }

    /// The indexes of the entries covering relative `[from, to)` (empty when the range is
    /// empty or not covered).
    pub(crate) fn covering(&self, from: u64, to: u64) -> std::ops::Range<usize> {
        if from >= to || to > self.covered() {
            return 0..0;
        }
        let first = self.entries.partition_point(|e| e.end <= from);
        let last = self.entries.partition_point(|e| e.end < to);
        first..last + 1
    }

    /// Checks `bytes`, the segment's bytes from relative `at` (an entry start), against the
    /// entries they cover entirely; the first range that does not match, if any.
    #[cfg(test)]
    pub(crate) fn verify(&self, at: u64, bytes: &[u8]) -> Option<Mismatch> {
        self.verify_parts(at, &[bytes])
    }

    /// As [`Checksums::verify`] for bytes held in consecutive `parts` (the first starting at
    /// relative `at`, an entry start), so a reader can check a range it read straight into
    /// the caller's buffer plus the few bytes before and after it that its entries also cover,
    /// without gathering them into one buffer first.
    pub(crate) fn verify_parts(&self, at: u64, parts: &[&[u8]]) -> Option<Mismatch> {
        let total: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let first = self.entries.partition_point(|e| e.end <= at);
        let mut start = at;
        for e in &self.entries[first..] {
            if e.end - at > total {
                break;
            }
            if crc_of_parts(parts, start - at, e.end - at) != e.crc {
                return Some(Mismatch { start, end: e.end });
            }
            start = e.end;
        }
        None
    }

    /// Keeps only what covers relative `[0, len)`: entries ending past `len` go, and `tail`
    /// (the bytes from the last kept entry's end to `len`) gets an entry of its own.
    pub(crate) fn truncate(&mut self, len: u64, tail: &[u8]) {
        let keep = self.entries.partition_point(|e| e.end <= len);
        self.entries.truncate(keep);
        self.stored = self.stored.min(keep);
        if len > self.covered() {
            self.appended(len, tail);
        }
    }
}

/// Appends entries `[stored..upto)` to the sidecar at `path` (creating it with its magic),
/// fsyncing it when `durable`; updates `stored`.
///
/// Errors: I/O.
pub(crate) fn persist(
    path: &Path,
    sums: &mut Checksums,
    upto: usize,
    durable: bool,
) -> std::io::Result<()> {
    let upto = upto.min(sums.entries.len());
    if upto <= sums.stored && !durable {
        return Ok(());
    }
    let mut out = Vec::with_capacity((upto - sums.stored.min(upto)) * ENTRY + MAGIC.len());
    if sums.file.is_none() {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        if file.metadata()?.len() == 0 {
            out.extend_from_slice(MAGIC);
        }
        sums.file = Some(file);
    }
    for e in &sums.entries[sums.stored.min(upto)..upto] {
        out.extend_from_slice(&e.encode());
    }
    if let Some(file) = sums.file.as_mut() {
        file.write_all(&out)?;
        if durable {
            file.sync_data()?;
        }
    }
    sums.stored = sums.stored.max(upto);
    Ok(())
}

/// Rewrites the sidecar at `path` with exactly `sums`' entries, durably (after a truncation
/// or a recovery that changed them).
///
/// Errors: I/O.
pub(crate) fn rewrite(path: &Path, sums: &mut Checksums) -> std::io::Result<()> {
    sums.file = None; // the rename replaces the file: reopen it on the next append
    let tmp = path.with_extension("crc.tmp");
    let mut out = Vec::with_capacity(MAGIC.len() + sums.entries.len() * ENTRY);
    out.extend_from_slice(MAGIC);
    for e in &sums.entries {
        out.extend_from_slice(&e.encode());
    }
    let mut f = File::create(&tmp)?;
    f.write_all(&out)?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    sums.stored = sums.entries.len();
    Ok(())
}

/// Creates an empty sidecar at `path` (its magic is written with the first entry), before
/// its segment is created, so a segment without a sidecar is noticed (issue #13).
///
/// Errors: I/O.
pub(crate) fn create(path: &Path) -> std::io::Result<()> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(drop)
}

/// Reads the sidecar at `path`: its valid entries, and whether it is damaged: bytes that are
/// not a sidecar, or at least one whole entry's worth of non-zero bytes past the valid
/// entries (a torn last append leaves less, or zeros). A damaged sidecar is logged by the
/// caller; the bytes it no longer covers cannot be checked (issue #13).
pub(crate) fn load_checked(path: &Path) -> (Vec<Entry>, bool) {
    let Ok(bytes) = fs::read(path) else {
        return (Vec::new(), false);
    };
    let entries = decode(&bytes);
    let used = if entries.is_empty() && !bytes.starts_with(MAGIC) {
        0
    } else {
        MAGIC.len() + entries.len() * ENTRY
    };
    let rest = bytes.get(used..).unwrap_or_default();
    let not_a_sidecar = bytes.len() >= MAGIC.len() && !bytes.starts_with(MAGIC);
    let damaged = not_a_sidecar || (rest.len() >= ENTRY && rest.iter().any(|b| *b != 0));
    (entries, damaged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sums_over(pieces: &[&[u8]]) -> (Checksums, Vec<u8>) {
        let mut s = Checksums::fresh();
        let mut all = Vec::new();
        for p in pieces {
            all.extend_from_slice(p);
            s.appended(all.len() as u64, p);
        }
        (s, all)
    }

    #[test]
    fn the_sidecar_layout_is_pinned_byte_for_byte() {
        // [end: u64 LE][crc32c: u32 LE][crc32c of the 12 bytes before: u32 LE], after "ZPERCRC1".
        let e = Entry {
            end: 5,
            crc: crc(b"hello"),
        };
        assert_eq!(crc(b"hello"), 0x9a71_bb4c, "CRC32C (Castagnoli)");
        let bytes = e.encode();
        assert_eq!(&bytes[..8], &5u64.to_le_bytes());
        assert_eq!(&bytes[8..12], &0x9a71_bb4cu32.to_le_bytes());
        assert_eq!(&bytes[12..], &crc(&bytes[..12]).to_le_bytes());
        assert_eq!(MAGIC, b"ZPERCRC1");
        assert_eq!(file_name(288), "00000000000000000288.crc");
    }

    #[test]
    fn entries_round_trip_and_a_damaged_entry_ends_the_list() {
        let (s, _) = sums_over(&[b"hello", b"world", b"!"]);
        let mut bytes = MAGIC.to_vec();
        for e in &s.entries {
            bytes.extend_from_slice(&e.encode());
        }
        assert_eq!(decode(&bytes), s.entries);
        let mut torn = bytes.clone();
        torn.truncate(bytes.len() - 3);
        assert_eq!(decode(&torn), s.entries[..2]);
        let mut flipped = bytes.clone();
        flipped[8 + ENTRY + 2] ^= 0x40; // the second entry's end
        assert_eq!(decode(&flipped), s.entries[..1]);
        assert!(decode(b"not a sidecar").is_empty());
    }

    #[test]
    fn a_flipped_byte_is_found_in_the_range_that_holds_it() {
        let (s, mut all) = sums_over(&[b"aaaa", b"bbbbbb", b"cc"]);
        assert_eq!(s.verify(0, &all), None);
        all[6] ^= 1;
        assert_eq!(s.verify(0, &all), Some(Mismatch { start: 4, end: 10 }));
        assert_eq!(s.verify(4, &all[4..]), Some(Mismatch { start: 4, end: 10 }));
        assert_eq!(s.verify(10, &all[10..]), None);
        // Bytes short of an entry's end are not judged.
        assert_eq!(s.verify(0, &all[..5]), None);
    }

    #[test]
    fn a_large_append_is_summed_in_pieces_that_end_at_message_ends() {
        let mut chunk = Vec::new();
        let mut ends = Vec::new();
        for i in 0..100u32 {
            zper_wire::encode_record(&i.to_be_bytes(), true, &mut chunk);
            zper_wire::encode_record(&[b'z'; 1000], false, &mut chunk);
            ends.push(chunk.len() as u64 + 7);
        }
        let mut sums = Checksums::fresh();
        sums.appended(7, b"1234567");
        let start = crate::plan::Start {
            at: 7,
            segment_start: 0,
            last_indexed: Some(0),
            segment_size: u64::MAX,
        };
        let pieces = crate::plan::plan(&chunk, start).expect("whole")[0]
            .pieces
            .clone();
        sums.appended_pieces(7, &chunk, &pieces);
        assert!(sums.entries.len() > 5, "{}", sums.entries.len());
        assert_eq!(sums.covered(), 7 + chunk.len() as u64);
        for (i, e) in sums.entries.iter().enumerate().skip(1) {
            assert!(ends.contains(&e.end), "entry {i} ends at a message end");
            assert!(e.end - sums.start_of(i) < (PIECE + 2000) as u64);
        }
        let mut all = b"1234567".to_vec();
        all.extend_from_slice(&chunk);
        assert_eq!(sums.verify(0, &all), None);
    }

    #[test]
    fn a_damaged_sidecar_is_told_from_a_torn_last_entry() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join(file_name(0));
        let mut sums = Checksums::fresh();
        for end in 1..=4u64 {
            sums.appended(end * 10, &[end as u8; 10]);
        }
        rewrite(&path, &mut sums).expect("write");
        let intact = fs::read(&path).expect("read");
        assert_eq!(load_checked(&path), (sums.entries.clone(), false));
        // A torn last append: part of an entry, or zeros.
        fs::write(&path, &intact[..intact.len() - 5]).expect("torn");
        assert!(!load_checked(&path).1);
        let mut zeros = intact.clone();
        zeros.extend_from_slice(&[0u8; 32]);
        fs::write(&path, &zeros).expect("zeros");
        assert!(!load_checked(&path).1);
        // A flipped byte in entry 2 of 4: two valid entries and damage after them.
        let mut flipped = intact.clone();
        flipped[MAGIC.len() + ENTRY + 3] ^= 0x10;
        fs::write(&path, &flipped).expect("flip");
        let (entries, damaged) = load_checked(&path);
        assert_eq!(entries.len(), 1);
        assert!(damaged);
        // Not a sidecar at all.
        fs::write(&path, [7u8; 64]).expect("garbage");
        assert_eq!(load_checked(&path), (Vec::new(), true));
    }

    #[test]
    fn covering_ranges_and_truncation() {
        let (mut s, all) = sums_over(&[b"aaaa", b"bbbbbb", b"cc"]);
        assert_eq!(s.covering(0, 1), 0..1);
        assert_eq!(s.covering(3, 5), 0..2);
        assert_eq!(s.covering(4, 10), 1..2);
        assert_eq!(s.covering(9, 12), 1..3);
        assert_eq!(s.covering(5, 5), 0..0);
        assert_eq!(s.covering(0, 13), 0..0, "past the covered end");
        s.stored = 3;
        s.truncate(7, &all[4..7]);
        assert_eq!(s.entries.len(), 2);
        assert_eq!(s.stored, 1);
        assert_eq!(s.verify(0, &all[..7]), None);
    }

    #[test]
    fn persisted_entries_load_back_and_a_rewrite_replaces_them() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join(file_name(0));
        let (mut s, all) = sums_over(&[b"aaaa", b"bbbbbb", b"cc"]);
        persist(&path, &mut s, 2, false).expect("persist");
        assert_eq!(load_checked(&path).0, s.entries[..2]);
        persist(&path, &mut s, 3, true).expect("persist");
        assert_eq!(load_checked(&path).0, s.entries);
        s.truncate(4, &all[..4]);
        rewrite(&path, &mut s).expect("rewrite");
        assert_eq!(load_checked(&path).0, s.entries);
        assert_eq!(s.stored, 1);
    }

    proptest! {
        #[test]
        fn any_single_flip_in_covered_bytes_is_detected(
            pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..64), 1..8),
            at in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
            let (s, mut all) = sums_over(&refs);
            let i = at.index(all.len());
            all[i] ^= 1 << bit;
            let m = s.verify(0, &all).expect("detected");
            prop_assert!(m.start <= i as u64 && (i as u64) < m.end);
        }

        #[test]
        fn split_bytes_verify_as_the_whole_does(
            pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..64), 1..8),
            flip in any::<Option<(prop::sample::Index, u8)>>(),
            cut1 in any::<prop::sample::Index>(),
            cut2 in any::<prop::sample::Index>(),
            short in any::<prop::sample::Index>(),
        ) {
            let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
            let (s, mut all) = sums_over(&refs);
            if let Some((at, bit)) = flip {
                let i = at.index(all.len());
                all[i] ^= 1 << (bit % 8);
            }
            // Bytes that stop short of the covered end leave the entries past them unchecked,
            // split or not.
            all.truncate(1 + short.index(all.len()));
            let (mut a, mut b) = (cut1.index(all.len() + 1), cut2.index(all.len() + 1));
            if a > b {
                std::mem::swap(&mut a, &mut b);
            }
            let parts = [&all[..a], &all[a..b], &all[b..]];
            prop_assert_eq!(s.verify_parts(0, &parts), s.verify(0, &all));
            let whole = crc(&all);
            prop_assert_eq!(crc_of_parts(&parts, 0, all.len() as u64), whole);
        }
    }
}
