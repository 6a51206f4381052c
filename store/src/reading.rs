//! Read path: FETCH, stream fetch and OFFSET over a topic's flushed bytes (spec `zper.md` §5.3,
//! §5.4), answering 101 for offsets that are not record boundaries of the visible log.

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use zper_wire::{Records, Timestamp};

use crate::index::walk_to;
use crate::segment::{pread_new, ReadFailure, Segment};
use crate::{StoreError, TopicLog};

/// Bytes of one FETCH: a raw range of one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// Absolute offset of the first byte.
    pub offset: u64,
    /// The bytes (possibly empty at the flushed end).
    pub bytes: Vec<u8>,
    /// Visible end of the segment the bytes came from (the next FETCH after it starts a segment).
    pub segment_end: u64,
}

/// A FETCH's bytes as a reader endpoint sends them (issue #17): in memory, or a range of the
/// segment file to be sent from the page cache straight to the socket (`sendfile`), so the
/// bytes never pass through the node's memory.
#[derive(Debug, Clone)]
pub enum FetchedRange {
    /// Read (and, for a closed segment, checked against its checksums) into memory.
    Bytes(Vec<u8>),
    /// `len` bytes at position `at` (bytes, relative to the file's start) of an open segment's
    /// file: flushed bytes at or below the high-water mark, which no checksum check covers
    /// yet (as [`TopicLog::fetch`] reads them unchecked too). The file stays readable while
    /// held, even if retention deletes the segment.
    File {
        /// The segment file.
        file: Arc<std::fs::File>,
        /// Position of the first byte in the file, bytes.
        at: u64,
        /// Bytes to send.
        len: u64,
    },
}

/// One whole message as push delivery reads it: its offset and its frames (issue #7).
pub type Message = (u64, Vec<Vec<u8>>);

/// Whole messages as stored bytes ([`TopicLog::raw_messages`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawMessages {
    /// The stored records of whole messages (spec §6.2 format).
    pub bytes: Vec<u8>,
    /// Offset of each message's first record.
    pub starts: Vec<u64>,
    /// Offset after the last message.
    pub end: u64,
}

/// A segment located for reading: the segment and its readable end.
struct Located {
    seg: Arc<Segment>,
    visible_end: u64,
}

impl TopicLog {
    fn invalid(&self, offset: i64) -> StoreError {
        StoreError::InvalidOffset {
            topic: self.name.clone(),
            offset,
        }
    }

    /// Finds the segment holding `offset` and checks that `offset` is a record boundary no
    /// further than the flushed offset.
    fn locate(&self, offset: i64) -> Result<Located, StoreError> {
        let off = u64::try_from(offset).map_err(|_| self.invalid(offset))?;
        let (seg, visible_end) = {
            let st = self.lock()?;
            let i = st.segments.partition_point(|s| s.start <= off);
            let Some(i) = i.checked_sub(1) else {
                return Err(self.invalid(offset));
            };
            let seg_end = st
                .segments
                .get(i + 1)
                .map_or(st.written_end, |next| next.start);
            (st.segments[i].clone(), seg_end.min(st.visible_end()))
        };
        if off > visible_end {
            return Err(self.invalid(offset));
        }
        let boundary = off == visible_end || self.is_boundary(&seg, off, visible_end)?;
        // Damaged ranges (issue #13) are never served: a read starting in one fails, a read
        // before one stops at its start; the records after one are served.
        let (hit, next) = {
            let index = seg
                .index
                .lock()
                .map_err(|_| StoreError::Poisoned(self.name.clone()))?;
            (index.damage_at(off), index.next_damage(off))
        };
        if let Some((start, end)) = hit {
            return Err(StoreError::Corrupt {
                topic: self.name.clone(),
                path: seg.path.clone(),
                start,
                end,
            });
        }
        if !boundary {
            return Err(self.invalid(offset));
        }
        let visible_end = next.map_or(visible_end, |d| d.min(visible_end));
        Ok(Located { seg, visible_end })
    }

    pub(crate) fn is_boundary(
        &self,
        seg: &Segment,
        off: u64,
        end: u64,
    ) -> Result<bool, StoreError> {
        if off == seg.start {
            return Ok(true);
        }
        let (from, found) = {
            let mut index = seg
                .index
                .lock()
                .map_err(|_| StoreError::Poisoned(self.name.clone()))?;
            let mut found = Vec::new();
            if !index.built {
                // A segment found on disk: index it once, checking its checksums as it goes,
                // so a damaged range is fenced and the records after it are still found.
                let file = self.open_for_read(seg, seg.start)?;
                let file_len = file
                    .metadata()
                    .map_err(|e| StoreError::io("stat", &seg.path, e))?
                    .len();
                let want = end - seg.start;
                // A file cut short is scanned as far as it goes; the rest is damage (below).
                let len = want.min(file_len);
                let entries: Vec<_> = seg
                    .sums()
                    .entries
                    .iter()
                    .take_while(|e| e.end <= len)
                    .copied()
                    .collect();
                let scanned = crate::scan::scan(&file, seg.start, &entries, len, true)
                    .map_err(|e| StoreError::io("read", &seg.path, e))?;
                // Ranges a read already found were counted then.
                found.extend(
                    scanned
                        .index
                        .damaged()
                        .iter()
                        .filter(|(a, _)| index.damage_at(*a).is_none())
                        .map(|(a, _)| *a),
                );
                let mut built = scanned.index;
                for &(a, b) in index.damaged() {
                    built.note_damaged(a, b);
                }
                if file_len < want {
                    let from = seg
                        .cut_start(&file, file_len)
                        .map_err(|e| StoreError::io("read", &seg.path, e))?;
                    tracing::error!(topic = %self.name, path = %seg.path.display(), from = seg.start + from, to = end, "segment file cut short: the bytes it lost will not be served");
                    built.note_damaged(seg.start + from, end);
                    if index.damage_at(seg.start + from).is_none() {
                        found.push(seg.start + from);
                    }
                }
                built.built = true;
                *index = built;
            }
            (index.floor(off).unwrap_or(seg.start), found)
        };
        // Noted after the index lock is released (the topic lock is taken before an index's).
        for at in found {
            tracing::error!(topic = %self.name, path = %seg.path.display(), at, "checksum mismatch found while indexing a segment: the damaged range will not be served");
            self.note_corruption(at);
        }
        let file = self.open_for_read(seg, off)?;
        walk_to(from, off, end, |pos, buf| {
            file.read_at(buf, pos - seg.start)
        })
        .map_err(|e| StoreError::io("read", &seg.path, e))
    }

    /// Opens a segment for reading; a segment deleted by retention meanwhile is an invalid
    /// offset, not an I/O failure.
    fn open_for_read(&self, seg: &Segment, off: u64) -> Result<Arc<std::fs::File>, StoreError> {
        seg.file().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => self.invalid(off as i64),
            _ => StoreError::io("open segment", &seg.path, e),
        })
    }

    /// FETCH (§5.3): up to `max_bytes` raw bytes of one segment from `offset`, never past the
    /// flushed offset, at most `cap` bytes. `offset` must be a record boundary in
    /// [oldest segment start, flushed end]; at the flushed end the result is empty.
    ///
    /// Errors: `InvalidOffset` (reply 101); I/O errors.
    pub fn fetch(&self, offset: i64, max_bytes: u64, cap: u64) -> Result<Fetched, StoreError> {
        let loc = self.locate(offset)?;
        let off = offset as u64; // locate checked it is >= 0
        let n = max_bytes.min(cap).min(loc.visible_end - off);
        let bytes = self.read_stored(&loc.seg, n as usize, off)?;
        Ok(Fetched {
            offset: off,
            bytes,
            segment_end: loc.visible_end,
        })
    }

    /// FETCH as [`TopicLog::fetch`] answers it, but a range of at least `min_file` bytes of
    /// the open segment is given as a file range to send without reading it
    /// ([`FetchedRange::File`]); shorter ranges and closed segments (whose bytes are checked
    /// against their checksums on every read) are read into memory.
    ///
    /// Errors: as [`TopicLog::fetch`].
    pub fn fetch_range(
        &self,
        offset: i64,
        max_bytes: u64,
        cap: u64,
        min_file: u64,
    ) -> Result<FetchedRange, StoreError> {
        let loc = self.locate(offset)?;
        let off = offset as u64; // locate checked it is >= 0
        let n = max_bytes.min(cap).min(loc.visible_end - off);
        if n >= min_file.max(1) && !loc.seg.is_closed() {
            if let Ok(file) = loc.seg.file() {
                return Ok(FetchedRange::File {
                    file,
                    at: off - loc.seg.start,
                    len: n,
                });
            }
        }
        self.read_stored(&loc.seg, n as usize, off)
            .map(FetchedRange::Bytes)
    }

    /// Stream fetch (FETCH with max_bytes -1, the README's intent, §9): the payloads of the whole
    /// messages from `offset` within one segment, at most `cap` bytes unless the first message is
    /// larger. Returns (payloads, offset after the last message returned).
    pub fn stream(&self, offset: i64, cap: u64) -> Result<(Vec<Vec<u8>>, u64), StoreError> {
        let loc = self.locate(offset)?;
        let off = offset as u64;
        let mut available = loc.visible_end - off;
        let mut want = available.min(cap);
        loop {
            let bytes = self.read_stored(&loc.seg, want as usize, off)?;
            if (bytes.len() as u64) < want {
                (want, available) = (bytes.len() as u64, bytes.len() as u64);
            }
            let mut it = Records::new(&bytes);
            let mut payloads = Vec::new();
            let mut pending = Vec::new();
            for rec in it.by_ref() {
                pending.push(rec.payload.to_vec());
                if !rec.more {
                    payloads.append(&mut pending);
                }
            }
            let used = it.message_bytes() as u64;
            if used > 0 || want == available {
                return Ok((payloads, off + used));
            }
            want = (want * 2).min(available);
        }
    }

    /// Whole messages from `offset` within one segment, for push delivery (issue #7): at most
    /// `max_messages`, reading about `cap` bytes (more when a single message is larger).
    /// Returns each message as (its offset, its frames) and the offset after the last one
    /// (`offset` itself when nothing past it is visible yet). An offset past the visible end
    /// gives no messages (a replica may not have caught up yet).
    ///
    /// Errors: `InvalidOffset` when `offset` is before the oldest segment or not a record
    /// boundary; I/O errors.
    pub fn messages(
        &self,
        offset: u64,
        max_messages: usize,
        cap: u64,
    ) -> Result<(Vec<Message>, u64), StoreError> {
        if offset >= self.visible_end()? {
            return Ok((Vec::new(), offset));
        }
        let signed = i64::try_from(offset).map_err(|_| self.invalid(i64::MAX))?;
        let loc = self.locate(signed)?;
        let mut available = loc.visible_end.saturating_sub(offset);
        if available == 0 {
            return Ok((Vec::new(), offset));
        }
        let mut want = available.min(cap.max(1));
        loop {
            let bytes = self.read_stored(&loc.seg, want as usize, offset)?;
            if (bytes.len() as u64) < want {
                (want, available) = (bytes.len() as u64, bytes.len() as u64);
            }
            let mut out = Vec::new();
            let mut frames = Vec::new();
            let (mut pos, mut start) = (0usize, 0usize);
            for rec in Records::new(&bytes) {
                frames.push(rec.payload.to_vec());
                pos += rec.stored_len();
                if !rec.more {
                    out.push((offset + start as u64, std::mem::take(&mut frames)));
                    start = pos;
                    if out.len() >= max_messages {
                        break;
                    }
                }
            }
            if !out.is_empty() || want == available {
                return Ok((out, offset + start as u64));
            }
            want = want.saturating_mul(2).min(available);
        }
    }

    /// Whole messages from `offset` within one segment as stored bytes (the on-disk record
    /// format, spec §6.2), for push delivery (issue #7): at most `max_messages` messages,
    /// reading about `cap` bytes (more when a single message is larger). Returns the bytes,
    /// where each message starts, and the offset after the last one (empty when nothing past
    /// `offset` is visible yet).
    ///
    /// Errors: `InvalidOffset` when `offset` is before the oldest segment or not a record
    /// boundary; I/O errors.
    pub fn raw_messages(
        &self,
        offset: u64,
        max_messages: usize,
        cap: u64,
    ) -> Result<RawMessages, StoreError> {
        let none = RawMessages {
            bytes: Vec::new(),
            starts: Vec::new(),
            end: offset,
        };
        if offset >= self.visible_end()? {
            return Ok(none);
        }
        let signed = i64::try_from(offset).map_err(|_| self.invalid(i64::MAX))?;
        let loc = self.locate(signed)?;
        let mut available = loc.visible_end.saturating_sub(offset);
        if available == 0 {
            return Ok(none);
        }
        let mut want = available.min(cap.max(1));
        loop {
            let mut bytes = self.read_stored(&loc.seg, want as usize, offset)?;
            if (bytes.len() as u64) < want {
                (want, available) = (bytes.len() as u64, bytes.len() as u64);
            }
            let mut starts = Vec::new();
            let (mut pos, mut start, mut in_message) = (0usize, 0usize, false);
            for rec in Records::new(&bytes) {
                if !in_message {
                    starts.push(offset + pos as u64);
                    in_message = true;
                }
                pos += rec.stored_len();
                if !rec.more {
                    in_message = false;
                    start = pos;
                    if starts.len() >= max_messages {
                        break;
                    }
                }
            }
            if in_message {
                starts.pop(); // a message cut by the read: not in this batch
            }
            if !starts.is_empty() || want == available {
                bytes.truncate(start);
                return Ok(RawMessages {
                    bytes,
                    starts,
                    end: offset + start as u64,
                });
            }
            want = want.saturating_mul(2).min(available);
        }
    }

    /// OFFSET (§5.4): `Earliest` -> [oldest start]; `Latest` -> [newest start, flushed end];
    /// `At(t)` -> starts of the segments last modified before `t` (ms since the epoch), the last
    /// `max_entries` of them if `max_entries > 0`, plus the flushed end when the newest segment
    /// qualifies.
    ///
    /// Errors: `InvalidOffset` when no segment was modified before `t`.
    pub fn offsets(
        &self,
        timestamp: Timestamp,
        max_entries: Option<i32>,
    ) -> Result<Vec<u64>, StoreError> {
        let st = self.lock()?;
        let first = st.segments[0].start;
        let visible = st.visible_end();
        // Segments a reader can see: those starting at or below the visible end (a replicated
        // log may have rotated past its high-water mark).
        let seen = st.segments.partition_point(|s| s.start <= visible).max(1);
        let newest = st.segments[seen - 1].start;
        match timestamp {
            Timestamp::Earliest => Ok(vec![first]),
            Timestamp::Latest => Ok(vec![newest, visible]),
            Timestamp::At(t) => {
                let mut qualifying = Vec::new();
                for (i, seg) in st.segments[..seen].iter().enumerate() {
                    let mtime = seg
                        .modified()
                        .map_err(|e| StoreError::io("stat", &seg.path, e))?;
                    if millis(mtime) < t {
                        qualifying.push(i);
                    }
                }
                let Some(&last) = qualifying.last() else {
                    return Err(self.invalid(t));
                };
                let from = match max_entries {
                    Some(e) if e > 0 && (e as usize) < last + 1 => last + 1 - e as usize,
                    _ => 0,
                };
                let mut out: Vec<u64> = st.segments[from..=last].iter().map(|s| s.start).collect();
                if last == seen - 1 {
                    out.push(visible);
                }
                Ok(out)
            }
        }
    }
}

fn millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl TopicLog {
    /// Reads `n` stored bytes at absolute `offset` of `seg` for a reader into a new buffer
    /// (never zeroed first, see [`pread_new`]): a closed segment's bytes are checked against
    /// their checksums first (issue #13), so damaged bytes are never served; the damage is
    /// noted on the log.
    ///
    /// Returns fewer than `n` bytes when a damaged range starts inside the range (the read
    /// stops there; `locate` already stops reads at ranges known before).
    ///
    /// Errors: `Corrupt`; I/O.
    pub(crate) fn read_stored(
        &self,
        seg: &Segment,
        n: usize,
        offset: u64,
    ) -> Result<Vec<u8>, StoreError> {
        if !seg.is_closed() {
            return seg
                .file()
                .and_then(|f| pread_new(&f, n, offset - seg.start))
                .map_err(|e| StoreError::io("read", &seg.path, e));
        }
        if seg.sums().short {
            self.note_unchecked(seg.start)?;
        }
        match self.read_checked(seg, n, offset) {
            Err(StoreError::Corrupt { start, .. }) if start > offset => {
                let n = usize::try_from(start - offset).map_or(n, |m| m.min(n));
                self.read_checked(seg, n, offset)
            }
            other => other,
        }
    }

    /// Lists the segment starting at `start` as unchecked (its sidecar does not cover it all),
    /// once: health warnings and `checksums_missing` report it.
    ///
    /// Errors: a poisoned lock.
    fn note_unchecked(&self, start: u64) -> Result<(), StoreError> {
        let mut st = self.lock()?;
        if !st.unchecked.contains(&start) {
            st.unchecked.push(start);
            st.unchecked.sort_unstable();
        }
        Ok(())
    }

    /// Reads `n` bytes at absolute `offset` of `seg` into a new buffer, checking every byte a
    /// checksum covers; a mismatch is logged, counted and noted as damage on the log.
    ///
    /// Errors: `Corrupt`; I/O.
    pub(crate) fn read_checked(
        &self,
        seg: &Segment,
        n: usize,
        offset: u64,
    ) -> Result<Vec<u8>, StoreError> {
        match seg.read_verified(n, offset - seg.start) {
            Ok(buf) => Ok(buf),
            Err(ReadFailure::Io(e)) => Err(StoreError::io("read", &seg.path, e)),
            Err(ReadFailure::Corrupt(m)) => {
                let (start, end) = (seg.start + m.start, seg.start + m.end);
                tracing::error!(
                    topic = %self.name,
                    path = %seg.path.display(),
                    start,
                    end,
                    "checksum mismatch: stored bytes are damaged and will not be served"
                );
                self.note_corruption(start);
                if let Ok(mut index) = seg.index.lock() {
                    index.note_damaged(start, end);
                }
                Err(StoreError::Corrupt {
                    topic: self.name.clone(),
                    path: seg.path.clone(),
                    start,
                    end,
                })
            }
        }
    }
}
