//! Opening a topic directory and recovering its newest segment (spec `zper.md` §6.1, §6.4):
//! a torn tail is truncated to the end of the last complete message. The original cuts at the
//! last complete frame, which glues the next message onto a dangling one (§6.4); zper cuts at the
//! message boundary instead, so a complete flushed message is never lost and never glued.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tracing::{error, info, warn};
use zper_wire::Records;

use crate::checksum::{self, Checksums};
use crate::index::SparseIndex;
use crate::segment::{file_name, parse_file_name, Segment};
use crate::topic::TopicState;
use crate::writing::sync_dir;
use crate::{StoreError, TopicLog};

const SCAN_CHUNK: usize = 4 << 20;

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
        }
        let last = starts.len() - 1;
        let mut segments = Vec::with_capacity(starts.len());
        let mut written_end = 0;
        let mut damaged_at = None;
        for (i, start) in starts.into_iter().enumerate() {
            let path = dir.join(file_name(start));
            if i == last {
                let file = Segment::open_for_append(&path)
                    .map_err(|e| StoreError::io("open segment", &path, e))?;
                let rec = recover_tail(name, &path, &file, start, allow_empty)?;
                written_end = start + rec.len;
                damaged_at = rec.damaged_at.map(|d| start + d);
                segments.push(Arc::new(Segment::active(
                    start, &path, file, rec.index, rec.sums,
                )));
            } else {
                segments.push(Arc::new(Segment::closed(start, &path)));
            }
        }
        sync_dir(dir)?;
        let epochs = crate::epochs::load(dir);
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
            (Some(at), _) => Some(crate::topic::Damage { at, cut: true }),
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
                corruptions: u64::from(damaged_at.is_some()),
            }),
        })
    }
}

/// What recovering the newest segment found.
pub(crate) struct Recovered {
    pub(crate) index: SparseIndex,
    /// Length kept, bytes.
    pub(crate) len: u64,
    pub(crate) sums: Checksums,
    /// Relative offset where checksummed (durable) bytes stopped matching, if they did.
    pub(crate) damaged_at: Option<u64>,
}

/// Recovers the newest segment (spec §6.4, fixed; issue #13):
///
/// 1. the bytes its checksum sidecar covers were durable when summed: they are checked, and
///    the first range that does not match (or is missing from the file) is damage — the log
///    is cut there and the caller marks the copy damaged;
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
    sums.entries = checksum::load(&sums_path);
    sums.stored = sums.entries.len();
    let loaded = sums.entries.clone();
    // 1. Check what the sidecar covers.
    let mut damaged_at = None;
    let mut i = 0;
    'check: while i < sums.entries.len() {
        // Read runs of appends in chunks of about SCAN_CHUNK bytes.
        let from = sums.start_of(i);
        let mut j = i;
        while j + 1 < sums.entries.len() && sums.entries[j + 1].end - from <= SCAN_CHUNK as u64 {
            j += 1;
        }
        let to = sums.entries[j].end;
        let mut buf = vec![0u8; (to.min(file_len).saturating_sub(from)) as usize];
        file.read_exact_at(&mut buf, from)
            .map_err(|e| io("read", e))?;
        for k in i..=j {
            let (a, b) = (sums.start_of(k), sums.entries[k].end);
            let bytes = buf.get((a - from) as usize..(b - from) as usize);
            if bytes.is_none_or(|bytes| checksum::crc(bytes) != sums.entries[k].crc) {
                error!(
                    topic,
                    path = %path.display(),
                    from = start + a,
                    to = start + b,
                    "checksum mismatch in durable bytes: this copy is damaged from here"
                );
                damaged_at = Some(a);
                sums.entries.truncate(k);
                sums.stored = sums.stored.min(k);
                break 'check;
            }
        }
        i = j + 1;
    }
    let covered = sums.covered();
    // 2-3. Parse records (indexing them) up to the damage, or the file end.
    let scan_end = damaged_at.unwrap_or(file_len);
    let mut index = SparseIndex::live(start);
    let mut pos = 0u64; // relative, at a record boundary
    let mut message_end = 0u64;
    // Record boundaries at or past the covered end, for cutting a zero-filled tail.
    let mut tail_ends: Vec<u64> = Vec::new();
    let mut chunk = SCAN_CHUNK;
    while pos < scan_end {
        let n = (scan_end - pos).min(chunk as u64) as usize;
        let mut buf = vec![0u8; n];
        file.read_exact_at(&mut buf, pos)
            .map_err(|e| io("read", e))?;
        let mut it = Records::with_empty(&buf, allow_empty);
        let mut at = pos;
        for rec in it.by_ref() {
            at += rec.stored_len() as u64;
            if !rec.more && at > covered {
                tail_ends.push(at);
            }
        }
        index.note_records(start + pos, &buf[..it.valid_bytes()]);
        if it.message_bytes() > 0 {
            message_end = pos + it.message_bytes() as u64;
        }
        let advanced = it.valid_bytes() as u64;
        match it.stop() {
            None => pos += advanced,
            Some(e) if e.is_incomplete() && pos + n as u64 != scan_end => {
                // The chunk cut a record: read again from the last whole record.
                if advanced == 0 {
                    chunk = chunk.saturating_mul(2);
                }
                tail_ends.retain(|e| *e <= pos + advanced);
                pos += advanced;
            }
            Some(_) => break,
        }
    }
    let mut keep = if damaged_at.is_some() {
        message_end
    } else {
        message_end.max(covered)
    };
    if !legacy && damaged_at.is_none() && keep > covered {
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
    if legacy || sums.entries != loaded {
        checksum::rewrite(&sums_path, &mut sums)
            .map_err(|e| StoreError::io("write checksums", &sums_path, e))?;
    }
    Ok(Recovered {
        index,
        len: keep,
        sums,
        damaged_at,
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
