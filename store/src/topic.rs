//! One topic's log: its segments, written and flushed offsets, and pending-flush bookkeeping.
//! The append path lives in `writing.rs`, the read path in `reading.rs`, opening in `recovery.rs`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::segment::Segment;
use crate::StoreError;

/// Result of [`TopicLog::flush`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushOutcome {
    /// Flushed offset after the call: every byte below it is durable and readable.
    pub flushed_end: u64,
    /// Messages made durable by this call (0 when nothing was pending).
    pub messages: u64,
}

#[derive(Debug)]
pub(crate) struct TopicState {
    /// Ascending by start; the last one is the active (appended) segment. Never empty.
    pub(crate) segments: Vec<Arc<Segment>>,
    /// End of the last byte written (absolute).
    pub(crate) written_end: u64,
    /// End of the last byte made durable and visible to readers (absolute).
    pub(crate) flushed_end: u64,
    /// Messages appended since the last flush.
    pub(crate) pending: u64,
    /// When the oldest of those was appended.
    pub(crate) first_unflushed: Option<Instant>,
    /// Set when a failed write could not be rolled back: appends are refused from then on.
    pub(crate) broken: Option<String>,
    /// High-water mark of a replicated log: readers see at most this far (issue #4).
    pub(crate) high_water: Option<u64>,
    /// Leader-epoch history `(epoch, start offset)`, ascending (`epochs.rs`).
    pub(crate) epochs: Vec<(u64, u64)>,
    /// Truncations since the log was opened (`replica.rs`).
    pub(crate) truncations: u64,
    /// The high-water mark last recorded in the checkpoint file, and when (`checkpoint.rs`).
    pub(crate) hw_recorded: Option<(u64, Instant)>,
    /// Set when this copy was found damaged (issue #13); cleared by [`TopicLog::repaired`].
    pub(crate) damage: Option<Damage>,
    /// Checksum mismatches found since the log was opened.
    pub(crate) corruptions: u64,
    /// Starts of segments whose checksum sidecar was missing when the log was opened
    /// (issue #13): their bytes are served unchecked.
    pub(crate) unchecked: Vec<u64>,
}

/// Where a copy of a log is damaged (issue #13): from `at` (an absolute offset, a message
/// boundary) on, its bytes cannot be trusted; `cut` when recovery already cut the log there.
/// A replicated copy leaves the in-sync replicas and fetches the rest again from the leader;
/// it must neither lead nor make others truncate meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Damage {
    /// First untrusted offset.
    pub at: u64,
    /// The log was already cut back to `at` (at recovery).
    pub cut: bool,
}

impl TopicState {
    /// What readers may see: the flushed end, capped by the high-water mark.
    pub(crate) fn visible_end(&self) -> u64 {
        self.high_water
            .map_or(self.flushed_end, |h| h.min(self.flushed_end))
    }
}

/// A topic: `<base_dir>/<topic>/` and its segments (spec `zper.md` §6.1).
#[derive(Debug)]
pub struct TopicLog {
    pub(crate) name: String,
    pub(crate) dir: PathBuf,
    pub(crate) segment_size: u64,
    pub(crate) state: Mutex<TopicState>,
    /// How far each segment's messages are counted (`count.rs`).
    pub(crate) counted: Mutex<crate::count::Counted>,
}

impl TopicLog {
    /// Topic name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Directory of the topic's segments.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, TopicState>, StoreError> {
        self.state
            .lock()
            .map_err(|_| StoreError::Poisoned(self.name.clone()))
    }

    /// Offset readers may read up to (bytes below it are durable).
    pub fn flushed_end(&self) -> Result<u64, StoreError> {
        Ok(self.lock()?.flushed_end)
    }

    /// Offset just after the last byte written (durable or not).
    pub fn written_end(&self) -> Result<u64, StoreError> {
        Ok(self.lock()?.written_end)
    }

    /// Start offsets of the segments, oldest first.
    pub fn segment_starts(&self) -> Result<Vec<u64>, StoreError> {
        Ok(self.lock()?.segments.iter().map(|s| s.start).collect())
    }

    /// Where this copy is damaged, if it is (issue #13).
    pub fn damage(&self) -> Result<Option<Damage>, StoreError> {
        Ok(self.lock()?.damage)
    }

    /// Checksum mismatches found since the log was opened (at recovery and on reads).
    pub fn corruptions(&self) -> Result<u64, StoreError> {
        Ok(self.lock()?.corruptions)
    }

    /// Starts of the segments whose checksum sidecar was missing when the log was opened
    /// (their bytes cannot be checked; a recovered newest segment has one again).
    pub fn unchecked_segments(&self) -> Result<Vec<u64>, StoreError> {
        Ok(self.lock()?.unchecked.clone())
    }

    /// The damaged ranges `[start, end)` (absolute offsets) known so far, ascending: never
    /// served; readers resume at `end`. Closed segments not read since the log was opened
    /// are not scanned for this.
    pub fn damaged_ranges(&self) -> Result<Vec<(u64, u64)>, StoreError> {
        let segments = self.lock()?.segments.clone();
        let mut out = Vec::new();
        for seg in segments {
            let index = seg
                .index
                .lock()
                .map_err(|_| StoreError::Poisoned(self.name.clone()))?;
            out.extend_from_slice(index.damaged());
        }
        Ok(out)
    }

    /// Repairs a damaged copy so it can fetch the rest again: cuts the log back to where the
    /// damage starts (unless recovery already did) and clears the mark. Call it only once
    /// this copy is out of the in-sync replicas (or is the only copy).
    ///
    /// Errors: the cut failed (I/O); the mark then stays.
    pub fn repaired(&self) -> Result<(), StoreError> {
        let damage = self.lock()?.damage;
        let Some(d) = damage else {
            return Ok(());
        };
        if !d.cut && d.at < self.written_end()? {
            self.truncate_to(d.at)?;
        }
        let mut st = self.lock()?;
        if st.damage == damage {
            st.damage = None;
        }
        Ok(())
    }

    /// Marks this copy damaged from `at` (the lowest mark wins) and counts the mismatch.
    pub(crate) fn note_corruption(&self, at: u64) {
        if let Ok(mut st) = self.lock() {
            st.corruptions += 1;
            st.damage = Some(match st.damage {
                Some(d) if d.at <= at => d,
                _ => Damage { at, cut: false },
            });
        }
    }

    /// Messages appended since the last flush, and when the oldest of them was appended.
    pub fn pending(&self) -> Result<(u64, Option<Instant>), StoreError> {
        let st = self.lock()?;
        Ok((st.pending, st.first_unflushed))
    }
}
