//! Append path: whole messages in, rotation at `segment_size`, fdatasync on flush, retention
//! (spec `zper.md` §4.3, §4.4, fixed as issue #2 asks).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tracing::{debug, info};
use zper_wire::Records;

use crate::index::SparseIndex;
use crate::segment::{file_name, Segment};
use crate::topic::{FlushOutcome, TopicState};
use crate::{StoreError, TopicLog};

impl TopicLog {
    /// Appends `records`, the stored form of `messages` whole messages (§6.2), to the active
    /// segment, then rotates if the segment now exceeds `segment_size` (the new segment file is
    /// created at once: no rotation gap, §4.4). Returns the end offset after the append. The bytes
    /// become readable only after a flush.
    ///
    /// Errors: `MalformedAppend` when `records` does not end on a message boundary; I/O errors.
    pub fn append(&self, records: &[u8], messages: u64) -> Result<u64, StoreError> {
        let mut st = self.lock()?;
        let seg = st.active().clone();
        let at = st.written_end;
        {
            let mut index = seg
                .index
                .lock()
                .map_err(|_| StoreError::Poisoned(self.name.clone()))?;
            let mut it = Records::new(records);
            it.by_ref().for_each(drop);
            if it.message_bytes() != records.len() {
                return Err(StoreError::MalformedAppend {
                    topic: self.name.clone(),
                    reason: format!(
                        "{} of {} bytes form whole messages",
                        it.message_bytes(),
                        records.len()
                    ),
                });
            }
            index.note_records(at, records);
        }
        (&seg.file)
            .write_all(records)
            .map_err(|e| StoreError::io("write", &seg.path, e))?;
        st.written_end += records.len() as u64;
        if st.pending == 0 {
            st.first_unflushed = Some(Instant::now());
        }
        st.pending += messages;
        if st.written_end - seg.start > self.segment_size {
            self.rotate(&mut st)?;
        }
        Ok(st.written_end)
    }

    /// Closes the active segment (fdatasync, so everything before the new segment is durable and
    /// visible) and creates the next one, named by the old one's end offset.
    fn rotate(&self, st: &mut TopicState) -> Result<(), StoreError> {
        let old = st.active().clone();
        old.file
            .sync_data()
            .map_err(|e| StoreError::io("fdatasync", &old.path, e))?;
        let start = st.written_end;
        let path = self.dir.join(file_name(start));
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)
            .map_err(|e| StoreError::io("create segment", &path, e))?;
        sync_dir(&self.dir)?;
        st.segments.push(Arc::new(Segment::new(
            start,
            &path,
            file,
            SparseIndex::live(start),
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
        let (seg, target, messages) = {
            let st = self.lock()?;
            if st.written_end == st.flushed_end {
                return Ok(FlushOutcome {
                    flushed_end: st.flushed_end,
                    messages: 0,
                });
            }
            (st.active().clone(), st.written_end, st.pending)
        };
        seg.file
            .sync_data()
            .map_err(|e| StoreError::io("fdatasync", &seg.path, e))?;
        let mut st = self.lock()?;
        st.flushed_end = st.flushed_end.max(target);
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
                .file
                .metadata()
                .and_then(|m| m.modified())
                .map_err(|e| StoreError::io("stat", &seg.path, e))?;
            if now.duration_since(mtime).unwrap_or_default() <= retain {
                break;
            }
            fs::remove_file(&seg.path).map_err(|e| StoreError::io("delete", &seg.path, e))?;
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

pub(crate) fn sync_dir(dir: &std::path::Path) -> Result<(), StoreError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io("fsync dir", dir, e))
}
