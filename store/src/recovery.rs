//! Opening a topic directory and recovering its newest segment (spec `zper.md` §6.1, §6.4):
//! a torn tail is truncated to the end of the last complete message. The original cuts at the
//! last complete frame, which glues the next message onto a dangling one (§6.4); zper cuts at the
//! message boundary instead, so a complete flushed message is never lost and never glued.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tracing::{error, info, warn};

use crate::checksum::{self, Checksums};
use crate::index::SparseIndex;
use crate::scan::{scan, Scan, SCAN_CHUNK};
use crate::segment::{file_name, parse_file_name, Segment};
use crate::topic::TopicState;
use crate::writing::sync_dir;
use crate::{StoreError, TopicLog};

impl TopicLog {
    /// Opens (creating if needed) the topic directory `dir`, opens every segment and recovers the
    /// newest one. A topic with no segment gets an empty `00000000000000000000.dat`.
    pub(crate) fn open(
        name: &str,
        dir: &Path,
        segment_size: u64,
        allow_empty: bool,
    ) -> Result<TopicLog, StoreError> {
        let existed = dir.is_dir();
        fs::create_dir_all(dir).map_err(|e| StoreError::io("create topic dir", dir, e))?;
        if !existed {
            // A new topic directory survives a power loss only once its parent is fsynced.
            if let Some(parent) = dir.parent() {
                sync_dir(parent)?;
            }
        }
        let mut starts = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| StoreError::io("list", dir, e))? {
            let entry = entry.map_err(|e| StoreError::io("list", dir, e))?;
            if let Some(start) = entry.file_name().to_str().and_then(parse_file_name) {
                starts.push(start);
            }
        }
        starts.sort_unstable();
        if starts.is_empty() {
            starts.push(0);
            // Its checksum sidecar exists before the segment does (as at rotation), so a
            // segment without one is ZPER's own data or a sidecar that went missing.
            checksum::create(&dir.join(checksum::file_name(0)))
                .map_err(|e| StoreError::io("create checksums", dir, e))?;
        }
        let checked_from = checksums_from(dir, &starts)?;
        let last = starts.len() - 1;
        let mut segments = Vec::with_capacity(starts.len());
        let mut written_end = 0;
        let mut damaged_at = None;
        let mut mismatches = 0;
        let mut unchecked = Vec::new();
        for (i, start) in starts.into_iter().enumerate() {
            let path = dir.join(file_name(start));
            let empty = || fs::metadata(&path).is_ok_and(|m| m.len() == 0);
            if checked_from.is_some_and(|f| start >= f)
                && !checksum::path_for(&path).exists()
                && !(i == last && empty())
            {
                // Issue #13: checks must not silently stop because a sidecar is gone.
                error!(
                    topic = name,
                    path = %path.display(),
                    "checksum sidecar missing: this segment's bytes cannot be checked"
                );
                unchecked.push(start);
            }
            if i == last {
                let file = Segment::open_for_append(&path)
                    .map_err(|e| StoreError::io("open segment", &path, e))?;
                let rec = recover_tail(name, &path, &file, start, allow_empty)?;
                written_end = start + rec.len;
                damaged_at = rec.damaged_at.map(|(d, cut)| (start + d, cut));
                mismatches = rec.mismatches + u64::from(rec.damaged_at.is_some_and(|d| d.1));
                if rec.damaged_sidecar && !unchecked.contains(&start) {
                    unchecked.push(start);
                }
                segments.push(Arc::new(Segment::active(
                    start, &path, file, rec.index, rec.sums,
                )));
            } else {
                segments.push(Arc::new(Segment::closed(start, &path)));
            }
        }
        sync_dir(dir)?;
        let mut epochs = crate::epochs::load(dir);
        // Issue #13 (Kafka trims its leader-epoch cache the same way): an epoch recorded as
        // starting past the recovered end names bytes that never became durable (a replica
        // copies the leader's entries before it flushes what it fetched). Kept, a new epoch
        // would be recorded there too, past the end, and a replica holding the lost bytes
        // would not be told to cut them. The file follows at the next recorded epoch.
        if epochs.last().is_some_and(|(_, s)| *s > written_end) {
            warn!(
                topic = name,
                written_end,
                history = ?epochs,
                "leader epochs recorded past the recovered end are dropped"
            );
            epochs.retain(|(_, s)| *s <= written_end);
        }
        // Issue #13: a replicated log serves nothing above the mark it last recorded until
        // replication confirms more (readers must not see what a new leader may cut).
        let recorded = crate::checkpoint::load(dir, !epochs.is_empty());
        let high_water = recorded.map(|h| h.min(written_end));
        if let Some(h) = high_water {
            info!(
                topic = name,
                high_water = h,
                written_end,
                "replicated log reopened at its recorded high-water mark"
            );
        }
        // A copy that lost checksummed bytes, or lost bytes below the mark it had recorded
        // (it had acknowledged or replicated them), is damaged: it must not lead or make
        // others truncate until it has fetched them again.
        let lost_acknowledged = recorded.is_some_and(|h| h > written_end);
        let damage = match (damaged_at, lost_acknowledged) {
            (Some((at, cut)), _) => Some(crate::topic::Damage { at, cut }),
            (None, true) => Some(crate::topic::Damage {
                at: written_end,
                cut: true,
            }),
            (None, false) => None,
        };
        if let Some(d) = damage {
            error!(topic = name, at = d.at, recorded_high_water = ?recorded, "recovered copy is damaged: it will repair from an in-sync replica");
        }
        Ok(TopicLog {
            name: name.to_owned(),
            dir: dir.to_owned(),
            segment_size,
            state: Mutex::new(TopicState {
                segments,
                written_end,
                flushed_end: written_end,
                pending: 0,
                first_unflushed: None,
                broken: None,
                high_water,
                epochs,
                truncations: 0,
                hw_recorded: None,
                damage,
                corruptions: mismatches,
                unchecked,
            }),
            counted: Mutex::new(Default::default()),
        })
    }
}

/// File in a topic directory naming (in decimal) the first segment start from which every
/// segment has a checksum sidecar (older ones are ZPER's own data). Written the first time
/// zper opens the directory, so deleting every sidecar is noticed too.
pub const CHECKSUMS_FROM_FILE: &str = "checksums-from";

/// The offset from which every segment of the topic in `dir` must have a sidecar: the
/// recorded one, or (first opening) the start of the oldest segment that has one (`None`
/// when none has: ZPER's own data). The first opening records it, or the newest segment's
/// start (which recovery gives a sidecar), durably.
///
/// Errors: I/O recording it.
fn checksums_from(dir: &Path, starts: &[u64]) -> Result<Option<u64>, StoreError> {
    let path = dir.join(CHECKSUMS_FROM_FILE);
    if let Some(from) = fs::read_to_string(&path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        return Ok(Some(from));
    }
    let first = starts
        .iter()
        .copied()
        .find(|s| dir.join(checksum::file_name(*s)).exists());
    let from = first.or(starts.last().copied()).unwrap_or(0);
    let tmp = dir.join(format!("{CHECKSUMS_FROM_FILE}.tmp"));
    let io = |e| StoreError::io("record checksums-from", &path, e);
    {
        let mut f = fs::File::create(&tmp).map_err(io)?;
        std::io::Write::write_all(&mut f, format!("{from}\n").as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    fs::rename(&tmp, &path).map_err(io)?;
    Ok(first)
}

/// What recovering the newest segment found.
pub(crate) struct Recovered {
    pub(crate) index: SparseIndex,
    /// Length kept, bytes.
    pub(crate) len: u64,
    pub(crate) sums: Checksums,
    /// Where checksummed (durable) bytes stopped being trustworthy, relative, if they did,
    /// and whether the log was cut there (the bytes were missing) or only fenced.
    pub(crate) damaged_at: Option<(u64, bool)>,
    /// Damaged ranges found (each counted as one checksum mismatch).
    pub(crate) mismatches: u64,
    /// The sidecar was damaged (what it no longer covered was summed again as found).
    pub(crate) damaged_sidecar: bool,
}

/// Recovers the newest segment (spec §6.4, fixed; issue #13):
///
/// 1. the bytes its checksum sidecar covers were durable when summed: they are checked. A
///    range that does not match is damage: it is fenced (never served; `scan.rs`) and the
///    messages after it are kept, so one flipped byte costs one append, not the rest of the
///    segment. Bytes a checksum names but the file lacks are cut from there. Either way the
///    caller marks the copy damaged;
/// 2. past them, whole messages are kept as ZPER keeps them, except a run of zero bytes at
///    the very end (a crash after the file was extended reads back as thousands of empty
///    messages): no checksum vouches for it, so it is cut;
/// 3. a torn last message is cut at the end of the last complete one.
///
/// A segment without a sidecar (ZPER's own data) is recovered as before and gets a sidecar
/// covering what was kept.
fn recover_tail(
    topic: &str,
    path: &Path,
    file: &fs::File,
    start: u64,
    allow_empty: bool,
) -> Result<Recovered, StoreError> {
    let io = |op, e| StoreError::io(op, path, e);
    let file_len = file.metadata().map_err(|e| io("stat", e))?.len();
    let sums_path = checksum::path_for(path);
    let legacy = !sums_path.exists();
    let mut sums = Checksums::fresh();
    let (entries, damaged_sidecar) = checksum::load_checked(&sums_path);
    if damaged_sidecar {
        error!(
            topic,
            path = %sums_path.display(),
            valid_entries = entries.len(),
            "checksum sidecar damaged: the bytes past its valid entries cannot be checked"
        );
    }
    sums.entries = entries;
    sums.stored = sums.entries.len();
    let loaded = sums.entries.clone();
    let scanned =
        scan(file, start, &sums.entries, file_len, allow_empty).map_err(|e| io("read", e))?;
    for &(a, b) in scanned.index.damaged() {
        error!(
            topic,
            path = %path.display(),
            from = a,
            to = b,
            "checksum mismatch in durable bytes: this range is damaged and will not be served"
        );
    }
    let mismatches = scanned.index.damaged().len() as u64;
    let mut damaged_at = scanned
        .index
        .damaged()
        .first()
        .map(|&(a, _)| (a - start, false));
    if let Some(k) = scanned.missing {
        let from = sums.start_of(k);
        error!(
            topic,
            path = %path.display(),
            from = start + from,
            to = start + sums.covered(),
            "durable bytes are missing from the segment: this copy is damaged from here"
        );
        sums.entries.truncate(k);
        sums.stored = sums.stored.min(k);
        if damaged_at.is_none() {
            damaged_at = Some((from, true));
        }
    }
    let covered = sums.covered();
    let Scan {
        mut index,
        missing,
        message_end,
        tail_ends,
    } = scanned;
    // Bytes a checksum names but the file lacks are cut from that entry on; fenced ranges
    // before it stay (fenced, not cut: they may be intact and the sidecar wrong).
    let mut keep = message_end.max(covered);
    if !legacy && missing.is_none() && keep > covered {
        keep = zero_tail_start(file, covered, keep, &tail_ends).map_err(|e| io("read", e))?;
    }
    if keep < file_len {
        warn!(
            topic,
            path = %path.display(),
            from = file_len,
            to = keep,
            "truncating tail of newest segment"
        );
        file.set_len(keep).map_err(|e| io("truncate", e))?;
        file.sync_all().map_err(|e| io("fsync", e))?;
        index.truncate(start + keep);
    } else {
        info!(topic, path = %path.display(), bytes = file_len, "recovered segment");
    }
    // What was kept past the checked range gets checksums of its own.

    // Pieces end at message ends, so a later mismatch is cut at a message boundary.
    let mut from = sums.covered().min(keep);
    sums.entries.retain(|e| e.end <= keep);
    let mut pieces: Vec<u64> = Vec::new();
    for end in tail_ends
        .iter()
        .copied()
        .filter(|e| *e > from && *e <= keep)
    {
        if end - pieces.last().copied().unwrap_or(from) >= SCAN_CHUNK as u64 {
            pieces.push(end);
        }
    }
    if keep > from && pieces.last() != Some(&keep) {
        pieces.push(keep);
    }
    for to in pieces {
        let mut buf = vec![0u8; (to - from) as usize];
        file.read_exact_at(&mut buf, from)
            .map_err(|e| io("read", e))?;
        sums.appended(to, &buf);
        from = to;
    }
    if keep > covered {
        // The kept tail may never have been made durable (a crash before the flush leaves it
        // in the page cache): make it so before a checksum names it or a leader epoch is
        // recorded at its end (issue #13: a power loss then kept an epoch starting past a
        // log that had lost the tail, and a replica holding the lost bytes was not cut).
        file.sync_data().map_err(|e| io("fsync", e))?;
    }
    if legacy || sums.entries != loaded {
        checksum::rewrite(&sums_path, &mut sums)
            .map_err(|e| StoreError::io("write checksums", &sums_path, e))?;
    }
    Ok(Recovered {
        index,
        len: keep,
        sums,
        damaged_at,
        mismatches,
        damaged_sidecar,
    })
}

/// Where a run of zero bytes that ends the segment at `end` begins, at one of the message
/// ends `ends` (ascending) past `covered`; `end` when the segment does not end in zeros.
fn zero_tail_start(file: &fs::File, covered: u64, end: u64, ends: &[u64]) -> std::io::Result<u64> {
    let mut buf = vec![0u8; (end - covered) as usize];
    file.read_exact_at(&mut buf, covered)?;
    let nonzero = buf
        .iter()
        .rposition(|b| *b != 0)
        .map_or(covered, |i| covered + i as u64 + 1);
    if nonzero == end {
        return Ok(end);
    }
    // The first message end at or after the last non-zero byte starts the zeros.
    Ok(std::iter::once(covered)
        .chain(ends.iter().copied())
        .find(|e| *e >= nonzero && *e <= end)
        .unwrap_or(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `checksums-from` file is pinned: its name, and one decimal offset and a newline.
    #[test]
    fn checksums_from_is_recorded_once_as_a_decimal_offset() {
        let dir = tempfile::tempdir().expect("tmp");
        assert_eq!(CHECKSUMS_FROM_FILE, "checksums-from");
        // ZPER's own segments 0 and 100, zper's sidecars from segment 200 on.
        fs::write(dir.path().join(checksum::file_name(200)), b"").expect("sidecar");
        assert_eq!(
            checksums_from(dir.path(), &[0, 100, 200, 300]).expect("first"),
            Some(200)
        );
        let path = dir.path().join(CHECKSUMS_FROM_FILE);
        assert_eq!(fs::read_to_string(&path).expect("file"), "200\n");
        // Recorded: later openings read it, whatever sidecars exist then.
        fs::remove_file(dir.path().join(checksum::file_name(200))).expect("rm");
        assert_eq!(
            checksums_from(dir.path(), &[0, 100, 200, 300]).expect("again"),
            Some(200)
        );
        // No sidecar anywhere (ZPER's data): nothing is checked, the newest start is recorded.
        let zper = tempfile::tempdir().expect("tmp");
        assert_eq!(checksums_from(zper.path(), &[0, 100]).expect("zper"), None);
        assert_eq!(
            fs::read_to_string(zper.path().join(CHECKSUMS_FROM_FILE)).expect("file"),
            "100\n"
        );
    }
}
