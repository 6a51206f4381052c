//! Segment files (spec `zper.md` §6.1): `<start offset as 20 zero-padded digits>.dat`.
//!
//! Only the active segment of a topic keeps its file open; closed segments are opened for each
//! read, so a node with many topics or segments does not run out of file descriptors.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::checksum::{self, Checksums, Mismatch};
use crate::index::SparseIndex;

/// File name of the segment starting at absolute offset `start`.
pub fn file_name(start: u64) -> String {
    format!("{start:020}.dat")
}

/// Parses a segment file name; `None` for anything but exactly 20 digits + `.dat` (§6.1: other
/// files are ignored).
pub fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".dat")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// One segment file.
#[derive(Debug)]
pub struct Segment {
    /// Absolute offset of its first byte.
    pub start: u64,
    /// Path of the file.
    pub path: PathBuf,
    /// The open file (read + append) while this is the active segment; `None` once closed.
    open: Mutex<Option<Arc<File>>>,
    /// Record boundaries, built on append or lazily on first lookup.
    pub(crate) index: Mutex<SparseIndex>,
    /// Checksums of its bytes (`checksum.rs`): kept up to date on append for the active
    /// segment, read from the sidecar on first use for a closed one.
    pub(crate) sums: Mutex<Checksums>,
}

/// Why a verified read failed.
#[derive(Debug)]
pub(crate) enum ReadFailure {
    Io(io::Error),
    /// The bytes at this relative range do not match their checksum.
    Corrupt(Mismatch),
}

/// Reads `n` bytes of `file` at byte offset `at` into a new buffer of exactly `n` bytes.
///
/// The buffer's memory is handed to `pread` as it was allocated, not zeroed first: for a
/// 1 MiB FETCH, zeroing was a whole extra pass over the reply's bytes (issue #17). rustix's
/// spare-capacity buffer does this without `unsafe` in zper.
///
/// Errors: I/O; `UnexpectedEof` when the file ends before `at + n`.
pub(crate) fn pread_new(file: &File, n: usize, at: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(n);
    while buf.len() < n {
        let pos = at + buf.len() as u64;
        match rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buf), pos) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // The allocator may have given more capacity than asked for, and pread filled it.
    buf.truncate(n);
    Ok(buf)
}

impl Segment {
    /// A segment kept open for appending.
    pub(crate) fn active(
        start: u64,
        path: &Path,
        file: File,
        index: SparseIndex,
        sums: Checksums,
    ) -> Self {
        Segment {
            start,
            path: path.to_owned(),
            open: Mutex::new(Some(Arc::new(file))),
            index: Mutex::new(index),
            sums: Mutex::new(sums),
        }
    }

    /// A closed segment: opened on demand for reads.
    pub(crate) fn closed(start: u64, path: &Path) -> Self {
        Segment {
            start,
            path: path.to_owned(),
            open: Mutex::new(None),
            index: Mutex::new(SparseIndex::default()),
            sums: Mutex::new(Checksums::default()),
        }
    }

    /// Path of its checksum sidecar.
    pub(crate) fn sums_path(&self) -> PathBuf {
        checksum::path_for(&self.path)
    }

    /// Its checksums (loaded from the sidecar on first use).
    pub(crate) fn sums(&self) -> std::sync::MutexGuard<'_, Checksums> {
        let mut g = match self.sums.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if !g.loaded {
            let (entries, damaged) = checksum::load_checked(&self.sums_path());
            if damaged {
                tracing::error!(
                    path = %self.sums_path().display(),
                    valid_entries = entries.len(),
                    "checksum sidecar damaged: the segment's bytes past its valid entries cannot be checked"
                );
            }
            g.entries = entries;
            g.stored = g.entries.len();
            g.loaded = true;
            // A closed segment's sidecar was made durable with it and covers all of it; one
            // that covers less was cut or damaged. (No sidecar at all: ZPER's own data, or
            // one recovery already reported missing.)
            let len = std::fs::metadata(&self.path).map_or(0, |m| m.len());
            let covered = g.covered();
            g.short = self.sums_path().exists() && (damaged || covered < len);
            if g.short && !damaged {
                tracing::error!(
                    path = %self.sums_path().display(),
                    covered,
                    segment_bytes = len,
                    "checksum sidecar cut short: the segment's bytes past its entries cannot be checked"
                );
            }
        }
        g
    }

    /// True once rotation closed it.
    pub(crate) fn is_closed(&self) -> bool {
        self.open.lock().map(|g| g.is_none()).unwrap_or(false)
    }

    /// Reads `n` bytes at relative offset `rel` into a new buffer, checking every byte its
    /// checksums cover (bytes no checksum covers, such as ZPER's own data, are read as they
    /// are). The range is read straight into the returned buffer, which is never zeroed first
    /// ([`pread_new`]); only the bytes of its first and last covering appends that lie outside
    /// it (each at most about one [`checksum::PIECE`], or one message) are read on the side, so
    /// a 1 MiB FETCH costs one pass over its bytes besides the check.
    ///
    /// Errors: [`ReadFailure::Io`] (also when the file ends before `rel + n`);
    /// [`ReadFailure::Corrupt`] with the first damaged append.
    pub(crate) fn read_verified(&self, n: usize, rel: u64) -> Result<Vec<u8>, ReadFailure> {
        use std::os::unix::fs::FileExt;
        let file = self.file().map_err(ReadFailure::Io)?;
        let to = rel + n as u64;
        let file_len = file.metadata().map_err(ReadFailure::Io)?.len();
        if to > file_len {
            // The file was cut short under a closed segment: bytes it held are gone. Damage
            // from the last whole append (or, past the checksums, message) before the cut.
            let from = self.cut_start(&file, file_len).map_err(ReadFailure::Io)?;
            let end = to.max(self.sums().covered());
            return Err(ReadFailure::Corrupt(Mismatch { start: from, end }));
        }
        // The checksums are taken before the bytes are read: an entry added later (the
        // segment was reopened and grew) never checks bytes read before it.
        let (from_cov, entries, covered) = {
            let sums = self.sums();
            let covered = sums.covered().min(to);
            let r = sums.covering(rel, covered);
            if r.is_empty() {
                (0, Vec::new(), 0)
            } else {
                let from = sums.start_of(r.start);
                (from, sums.entries[r].to_vec(), covered)
            }
        };
        let buf = pread_new(&file, n, rel).map_err(ReadFailure::Io)?;
        let Some(cov_end) = entries.last().map(|e| e.end) else {
            return Ok(buf);
        };
        let mut head = vec![0u8; (rel - from_cov) as usize];
        file.read_exact_at(&mut head, from_cov)
            .map_err(ReadFailure::Io)?;
        // The covering appends end at or after `covered`, which is at most `to`.
        let mut tail = vec![0u8; cov_end.saturating_sub(to) as usize];
        file.read_exact_at(&mut tail, to).map_err(ReadFailure::Io)?;
        // A tail means the appends cover all of `buf` (covered == to); without one, bytes past
        // `covered` have no checksum.
        let within = (covered - rel) as usize;
        let parts = [&head[..], &buf[..within], &tail[..]];
        let check = Checksums {
            entries,
            stored: 0,
            loaded: true,
            file: None,
            short: false,
        };
        match check.verify_parts(from_cov, &parts) {
            Some(m) => Err(ReadFailure::Corrupt(m)),
            None => Ok(buf),
        }
    }

    /// Where the damage starts in this segment's file cut short at `file_len` bytes (relative):
    /// the start of the checksummed append the cut falls in, or past the checksums the end of
    /// the last whole message before the cut (a message boundary either way, so a copy can be
    /// cut back there and fetch the rest again).
    ///
    /// Errors: reading the bytes past the checksums.
    pub(crate) fn cut_start(&self, file: &File, file_len: u64) -> io::Result<u64> {
        let covered = {
            let sums = self.sums();
            let i = sums.entries.partition_point(|e| e.end <= file_len);
            if i < sums.entries.len() {
                return Ok(sums.start_of(i));
            }
            sums.covered()
        };
        let tail = pread_new(file, file_len.saturating_sub(covered) as usize, covered)?;
        let mut it = zper_wire::Records::with_empty(&tail, true);
        it.by_ref().for_each(drop);
        Ok(covered + it.message_bytes() as u64)
    }

    /// Creates (or opens) a segment file for appending.
    pub(crate) fn open_for_append(path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
    }

    /// The file: the kept handle of the active segment, or a fresh read-only handle.
    pub(crate) fn file(&self) -> io::Result<Arc<File>> {
        let kept = self.open.lock().map(|g| g.clone()).unwrap_or(None);
        match kept {
            Some(f) => Ok(f),
            None => File::open(&self.path).map(Arc::new),
        }
    }

    /// Drops the kept handle (the segment was closed by rotation).
    pub(crate) fn close(&self) {
        if let Ok(mut g) = self.open.lock() {
            *g = None;
        }
    }

    /// Last modification time of the file.
    pub(crate) fn modified(&self) -> io::Result<SystemTime> {
        std::fs::metadata(&self.path)?.modified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_20_digit_offsets_spec_6_1() {
        assert_eq!(file_name(0), "00000000000000000000.dat");
        assert_eq!(file_name(288), "00000000000000000288.dat");
        assert_eq!(parse_file_name("00000000000000000288.dat"), Some(288));
        assert_eq!(parse_file_name("0000000000000000288.dat"), None);
        assert_eq!(parse_file_name("00000000000000000288.dat.tmp"), None);
        assert_eq!(parse_file_name("0000000000000000028x.dat"), None);
        assert_eq!(parse_file_name("99999999999999999999.dat"), None);
    }

    #[test]
    fn pread_new_reads_exactly_the_range_and_refuses_a_short_file() {
        use std::io::Write;
        let mut f = tempfile::tempfile().expect("tmp");
        let all: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
        f.write_all(&all).expect("write");
        for (n, at) in [(0, 0), (1, 0), (4096, 7), (200_000, 99_999), (300_000, 0)] {
            let got = pread_new(&f, n, at as u64).expect("read");
            assert_eq!(got.len(), n);
            assert_eq!(&got[..], &all[at..at + n]);
        }
        let short = pread_new(&f, 10, 299_995).expect_err("past the end");
        assert_eq!(short.kind(), io::ErrorKind::UnexpectedEof);
    }

    use proptest::prelude::*;

    /// A segment of `pieces` appended one by one (one checksum entry each), with byte `flip`
    /// of the file damaged after the checksums were taken.
    fn segment_of(dir: &Path, pieces: &[Vec<u8>], flip: Option<usize>) -> Segment {
        let path = dir.join(file_name(0));
        let mut sums = Checksums::fresh();
        let mut all = Vec::new();
        for p in pieces {
            all.extend_from_slice(p);
            sums.appended(all.len() as u64, p);
        }
        if let Some(i) = flip {
            all[i] ^= 0x10;
        }
        std::fs::write(&path, &all).expect("write");
        let file = Segment::open_for_append(&path).expect("open");
        Segment::active(0, &path, file, SparseIndex::default(), sums)
    }

    proptest! {
        #[test]
        fn a_verified_read_checks_every_append_it_touches_and_returns_the_stored_bytes(
            pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 1..8),
            from in any::<prop::sample::Index>(),
            len in any::<prop::sample::Index>(),
            flip in any::<Option<prop::sample::Index>>(),
        ) {
            let dir = tempfile::tempdir().expect("tmp");
            let all: Vec<u8> = pieces.concat();
            let rel = from.index(all.len());
            let n = 1 + len.index(all.len() - rel);
            let flip = flip.map(|f| f.index(all.len()));
            let seg = segment_of(dir.path(), &pieces, flip);
            let got = seg.read_verified(n, rel as u64);
            // The append holding the damaged byte, if the read touches it, must be refused.
            let mut ends = Vec::new();
            let mut end = 0;
            for p in &pieces {
                end += p.len();
                ends.push(end);
            }
            let hit = flip.and_then(|i| {
                let k = ends.partition_point(|&e| e <= i);
                let start = if k == 0 { 0 } else { ends[k - 1] };
                (start < rel + n && ends[k] > rel).then_some((start as u64, ends[k] as u64))
            });
            match (got, hit) {
                (Ok(buf), None) => prop_assert_eq!(&buf[..], &all[rel..rel + n]),
                (Err(ReadFailure::Corrupt(m)), Some((start, end))) => {
                    prop_assert_eq!((m.start, m.end), (start, end));
                }
                (other, hit) => prop_assert!(
                    false,
                    "read {:?}, damaged append {:?}",
                    other.map(|b| b.len()),
                    hit
                ),
            }
        }
    }
}
