//! Append path: whole messages in, rotation at `segment_size`, fdatasync on flush, retention
//! (spec `zper.md` §4.3, §4.4, fixed as issue #2 asks).

use std::fs;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tracing::{debug, info};

use crate::index::SparseIndex;
use crate::plan::{plan, Chunk, Start};
use crate::segment::{file_name, Segment};
use crate::topic::{FlushOutcome, TopicState};
use crate::{StoreError, TopicLog};

impl TopicLog {
    /// Appends `records`, the stored form of one or more whole messages (§6.2). When a message
    /// makes the active segment exceed `segment_size`, the segment is rotated right after that
    /// message, so segments overshoot by at most one message; the next segment's file is created
    /// at once (no rotation gap, §4.4). Returns the end offset after the append. The bytes become
    /// readable after a flush.
    ///
    /// A failed write is rolled back (the file is cut to its previous length), so a disk-full
    /// error never leaves a partial record in the log.
    ///
    /// Errors: `MalformedAppend` when `records` is not a run of whole messages; `Broken` after a
    /// write that could not be rolled back; I/O errors.
    pub fn append(&self, records: &[u8]) -> Result<u64, StoreError> {
        let mut st = self.lock()?;
        if let Some(reason) = &st.broken {
            return Err(StoreError::Broken {
                topic: self.name.clone(),
                reason: reason.clone(),
            });
        }
        for chunk in self.plan(&st, records, self.segment_size)? {
            self.write_chunk(&mut st, records, &chunk)?;
            if chunk.rotate_after {
                self.rotate(&mut st)?;
            }
        }
        Ok(st.written_end)
    }

    /// Plans an append of `records` at the written end (`crate::plan`), rotating after the
    /// message that takes the active segment past `segment_size`.
    ///
    /// Errors: `MalformedAppend` when `records` is not a run of whole messages; a poisoned
    /// index lock.
    pub(crate) fn plan(
        &self,
        st: &TopicState,
        records: &[u8],
        segment_size: u64,
    ) -> Result<Vec<Chunk>, StoreError> {
        let active = st.active();
        let last_indexed = active
            .index
            .lock()
            .map_err(|_| StoreError::Poisoned(self.name.clone()))?
            .last();
        let start = Start {
            at: st.written_end,
            segment_start: active.start,
            last_indexed,
            segment_size,
        };
        plan(records, start).map_err(|whole| StoreError::MalformedAppend {
            topic: self.name.clone(),
            reason: format!("{whole} of {} bytes form whole messages", records.len()),
        })
    }

    /// Writes `planned`'s bytes of `records` at the written end of the active segment and
    /// notes them in its index and checksums.
    ///
    /// Errors: I/O (the write is rolled back; `broken` set when that fails too); a poisoned
    /// index lock.
    pub(crate) fn write_chunk(
        &self,
        st: &mut TopicState,
        records: &[u8],
        planned: &Chunk,
    ) -> Result<(), StoreError> {
        let chunk = &records[planned.range.clone()];
        let messages = planned.messages;
        let seg = st.active().clone();
        let at = st.written_end;
        let file = seg
            .file()
            .map_err(|e| StoreError::io("open segment", &seg.path, e))?;
        if let Err(e) = write_all(&file, chunk) {
            if let Err(cut) = file.set_len(at - seg.start) {
                st.broken = Some(format!(
                    "write failed ({e}) and could not be rolled back ({cut})"
                ));
            }
            return Err(StoreError::io("write", &seg.path, e));
        }
        seg.index
            .lock()
            .map_err(|_| StoreError::Poisoned(self.name.clone()))?
            .note_starts(&planned.index);
        seg.sums()
            .appended_pieces(at - seg.start, chunk, &planned.pieces);
        st.written_end += chunk.len() as u64;
        if st.pending == 0 {
            st.first_unflushed = Some(Instant::now());
        }
        st.pending += messages;
        Ok(())
    }

    /// Closes the active segment (fdatasync, so everything before the new segment is durable and
    /// visible) and creates the next one, named by the old one's end offset.
    pub(crate) fn rotate(&self, st: &mut TopicState) -> Result<(), StoreError> {
        let old = st.active().clone();
        old.file()
            .and_then(|f| f.sync_data())
            .map_err(|e| StoreError::io("fdatasync", &old.path, e))?;
        // Its checksums are complete and durable before it counts as closed.
        {
            let mut sums = old.sums();
            let all = sums.entries.len();
            crate::checksum::persist(&old.sums_path(), &mut sums, all, true)
                .map_err(|e| StoreError::io("write checksums", old.sums_path(), e))?;
            sums.file = None; // closed segments keep no file open
        }
        let start = st.written_end;
        let path = self.dir.join(file_name(start));
        // The sidecar first: a segment without one is noticed at recovery (issue #13).
        crate::checksum::create(&crate::checksum::path_for(&path))
            .map_err(|e| StoreError::io("create checksums", &path, e))?;
        let file = Segment::open_for_append(&path)
            .map_err(|e| StoreError::io("create segment", &path, e))?;
        sync_dir(&self.dir)?;
        old.close();
        st.segments.push(Arc::new(Segment::active(
            start,
            &path,
            file,
            SparseIndex::live(start),
            crate::checksum::Checksums::fresh(),
        )));
        st.flushed_end = start;
        st.pending = 0;
        st.first_unflushed = None;
        info!(topic = %self.name, start, "rotated segment");
        Ok(())
    }

    /// Flushes (fdatasync) the active segment if anything is unflushed and moves the flushed
    /// offset to what was written before the call. Appends may go on meanwhile: the lock is not
    /// held during the fdatasync.
    pub fn flush(&self) -> Result<FlushOutcome, StoreError> {
        let (seg, target, messages, truncations) = {
            let st = self.lock()?;
            if st.written_end == st.flushed_end {
                return Ok(FlushOutcome {
                    flushed_end: st.flushed_end,
                    messages: 0,
                });
            }
            (
                st.active().clone(),
                st.written_end,
                st.pending,
                st.truncations,
            )
        };
        seg.file()
            .and_then(|f| f.sync_data())
            .map_err(|e| StoreError::io("fdatasync", &seg.path, e))?;
        let mut st = self.lock()?;
        if st.truncations != truncations {
            // The log was cut during the fdatasync (a replica truncating, a damaged copy cut
            // back): `target` may no longer exist, and this segment object may be gone or
            // replaced, so neither the flushed offset nor its checksums move. Before this
            // check a late flush set the flushed offset past the cut, and the fetcher then
            // asked its leader for data after an end it no longer had, forever.
            return Ok(FlushOutcome {
                flushed_end: st.flushed_end,
                messages: 0,
            });
        }
        // The checksums of what is now durable go to the sidecar (never before their bytes).
        {
            let mut sums = seg.sums();
            let upto = sums
                .entries
                .partition_point(|e| e.end <= target - seg.start);
            crate::checksum::persist(&seg.sums_path(), &mut sums, upto, false)
                .map_err(|e| StoreError::io("write checksums", seg.sums_path(), e))?;
        }
        st.flushed_end = st.flushed_end.max(target).min(st.written_end);
        st.pending -= messages.min(st.pending);
        st.first_unflushed = if st.pending == 0 {
            None
        } else {
            Some(Instant::now())
        };
        debug!(topic = %self.name, flushed_end = st.flushed_end, messages, "flushed");
        Ok(FlushOutcome {
            flushed_end: st.flushed_end,
            messages,
        })
    }

    /// Makes the active segment's checksum sidecar durable up to the flushed offset (a clean
    /// exit; rotation does it for closed segments).
    ///
    /// Errors: I/O writing the sidecar.
    pub fn sync_checksums(&self) -> Result<(), StoreError> {
        let (seg, flushed) = {
            let st = self.lock()?;
            (st.active().clone(), st.flushed_end)
        };
        let mut sums = seg.sums();
        let upto = sums
            .entries
            .partition_point(|e| e.end <= flushed.saturating_sub(seg.start));
        crate::checksum::persist(&seg.sums_path(), &mut sums, upto, true)
            .map_err(|e| StoreError::io("write checksums", seg.sums_path(), e))
    }

    /// Deletes closed segments, oldest first, whose file was last modified more than `retain`
    /// before `now`; stops at the first one that is not expired and never touches the active
    /// segment (§4.4, run by the node on a timer). Returns the start offsets deleted.
    pub fn apply_retention(
        &self,
        retain: Duration,
        now: SystemTime,
    ) -> Result<Vec<u64>, StoreError> {
        let mut st = self.lock()?;
        let mut deleted = Vec::new();
        while st.segments.len() > 1 {
            let seg = &st.segments[0];
            let mtime = seg
                .modified()
                .map_err(|e| StoreError::io("stat", &seg.path, e))?;
            if now.duration_since(mtime).unwrap_or_default() <= retain {
                break;
            }
            fs::remove_file(&seg.path).map_err(|e| StoreError::io("delete", &seg.path, e))?;
            let _ = fs::remove_file(seg.sums_path());
            info!(topic = %self.name, start = seg.start, "retention deleted segment");
            deleted.push(seg.start);
            st.segments.remove(0);
        }
        Ok(deleted)
    }
}

impl TopicState {
    pub(crate) fn active(&self) -> &Arc<Segment> {
        // Invariant: a topic always has at least one segment (created on open).
        &self.segments[self.segments.len() - 1]
    }
}

/// `write_all` on a shared handle; test builds can inject a short write followed by an error.
fn write_all(mut file: &fs::File, chunk: &[u8]) -> std::io::Result<()> {
    #[cfg(test)]
    if let Some(n) = tests::FAIL_AFTER.with(|f| f.take()) {
        file.write_all(&chunk[..n.min(chunk.len())])?;
        return Err(std::io::Error::other("injected write failure"));
    }
    file.write_all(chunk)
}

pub(crate) fn sync_dir(dir: &std::path::Path) -> Result<(), StoreError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io("fsync dir", dir, e))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use zper_wire::encode_record;

    use crate::{FlushPolicy, Store, StoreConfig};

    thread_local! {
        /// Makes the next write on this thread write this many bytes and then fail.
        pub(super) static FAIL_AFTER: Cell<Option<usize>> = const { Cell::new(None) };
    }

    fn message(body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        encode_record(b"id", true, &mut m);
        encode_record(body, false, &mut m);
        m
    }

    fn store(dir: &std::path::Path, segment_size: u64) -> Store {
        Store::open(StoreConfig {
            base_dir: dir.to_owned(),
            segment_size,
            flush: FlushPolicy {
                flush_messages: 10,
                flush_interval: Duration::from_secs(1),
            },
            retain: Duration::from_secs(3600),
            allow_empty_message: true,
        })
        .expect("open")
    }

    #[test]
    fn failed_write_is_rolled_back_and_nothing_partial_is_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = store(dir.path(), 1 << 20);
        let t = s.topic_or_create("full").expect("topic");
        t.append(&message(b"one")).expect("append");
        FAIL_AFTER.with(|f| f.set(Some(4))); // as a disk that fills up mid-record
        assert!(t.append(&message(b"two")).is_err());
        let seg = dir.path().join("full").join("00000000000000000000.dat");
        assert_eq!(std::fs::metadata(&seg).expect("seg").len(), 9);
        assert_eq!(t.written_end().expect("end"), 9);
        t.append(&message(b"three"))
            .expect("append after the disk has room again");
        t.flush().expect("flush");
        let all = t.fetch(0, 100, 100).expect("fetch").bytes;
        assert_eq!(all, [message(b"one"), message(b"three")].concat());
    }

    #[test]
    fn rotation_happens_after_the_message_that_crosses_segment_size_spec_4_4() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = store(dir.path(), 30);
        let t = s.topic_or_create("split").expect("topic");
        // One append of five 11-byte messages: segments of 33 bytes (3 messages, the third
        // crosses 30) and 22 bytes, not one 55-byte segment.
        let batch: Vec<u8> = (0..5).flat_map(|_| message(b"abcde")).collect();
        assert_eq!(t.append(&batch).expect("append"), 55);
        assert_eq!(t.segment_starts().expect("starts"), vec![0, 33]);
        let (pending, _) = t.pending().expect("pending");
        assert_eq!(pending, 2, "messages after the rotation are pending");
    }
}
