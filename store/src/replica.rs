//! What replication (issue #4) needs from a topic's log, kept byte-identical on every copy:
//!
//! - the leader reads what it has written (flushed or not) in whole messages, one segment at a
//!   time, noting whether the chunk ends where the leader rotated ([`TopicLog::read_for_replica`]);
//! - a replica appends such a chunk at exactly the offset it was read from and rotates where the
//!   leader did ([`TopicLog::append_replica`]), so offsets, segment boundaries and bytes match;
//! - readers see only the high-water mark ([`TopicLog::set_high_water`]): the offset every
//!   in-sync replica has made durable;
//! - a former leader or lagging replica cuts its log back to a message boundary the new leader's
//!   epoch history says is committed ([`TopicLog::truncate_to`], Kafka KIP-101).

use std::fs;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use tracing::warn;
use zper_wire::Records;

use crate::index::SparseIndex;
use crate::segment::Segment;
use crate::writing::sync_dir;
use crate::{StoreError, TopicLog};

/// A run of whole messages read by the leader for a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaChunk {
    /// Absolute offset of the first byte.
    pub offset: u64,
    /// Whole messages, all from one segment (may be empty at the log end).
    pub bytes: Vec<u8>,
    /// True when the chunk ends exactly where the leader closed that segment: the replica
    /// rotates after appending it.
    pub rotate_after: bool,
}

impl TopicLog {
    /// Offset readers may read up to: the flushed offset, capped by the high-water mark when
    /// one is set.
    pub fn visible_end(&self) -> Result<u64, StoreError> {
        Ok(self.lock()?.visible_end())
    }

    /// Sets the high-water mark (`None`: readers see everything flushed, the single-node and
    /// `acks = leader` behaviour). The mark never moves past the written end.
    ///
    /// A mark that rose is recorded in the topic's checkpoint file at most once per
    /// [`crate::CHECKPOINT_EVERY`] (issue #13), so a restarted node starts from it.
    pub fn set_high_water(&self, hw: Option<u64>) -> Result<(), StoreError> {
        let mut st = self.lock()?;
        st.high_water = hw.map(|h| h.min(st.written_end));
        if let Some(h) = st.high_water {
            let due = st.hw_recorded.is_none_or(|(recorded, at)| {
                recorded != h && at.elapsed() >= crate::CHECKPOINT_EVERY
            });
            if due {
                self.record_high_water(&mut st, h, false);
            }
        }
        Ok(())
    }

    /// Records the current high-water mark in the checkpoint file now, durably (before a
    /// clean exit). Nothing happens for a log without a mark.
    ///
    /// Errors: the topic lock is poisoned.
    pub fn checkpoint_high_water(&self) -> Result<(), StoreError> {
        let mut st = self.lock()?;
        if let Some(h) = st.high_water {
            self.record_high_water(&mut st, h, true);
        }
        Ok(())
    }

    /// Writes `mark` to the checkpoint file under the topic lock (so a truncation's lower
    /// mark is never overwritten by an older, higher one). A failure is logged: the file then
    /// holds an older, lower mark, which is safe.
    pub(crate) fn record_high_water(
        &self,
        st: &mut crate::topic::TopicState,
        mark: u64,
        durable: bool,
    ) {
        match crate::checkpoint::store(&self.dir, mark, durable) {
            Ok(()) => st.hw_recorded = Some((mark, std::time::Instant::now())),
            Err(e) => warn!(topic = %self.name, error = %e, "cannot record the high-water mark"),
        }
    }

    /// How many times the log was cut back since it was opened: a writer waiting to
    /// acknowledge offsets of this log must drop its waiters when this moves (the bytes they
    /// waited for are gone, whatever comes at those offsets next).
    pub fn truncations(&self) -> Result<u64, StoreError> {
        Ok(self.lock()?.truncations)
    }

    /// The high-water mark, if one is set.
    pub fn high_water(&self) -> Result<Option<u64>, StoreError> {
        Ok(self.lock()?.high_water)
    }

    /// Reads up to `max_bytes` (at least one whole message, however large) of written bytes
    /// from `offset`, which must be a message boundary at or below the written end.
    ///
    /// Errors: `InvalidOffset` for an offset outside the log or not on a record boundary; I/O.
    pub fn read_for_replica(
        &self,
        offset: u64,
        max_bytes: u64,
    ) -> Result<ReplicaChunk, StoreError> {
        let invalid = || StoreError::InvalidOffset {
            topic: self.name.clone(),
            offset: i64::try_from(offset).unwrap_or(i64::MAX),
        };
        let (seg, seg_end, closed) = {
            let st = self.lock()?;
            let i = st.segments.partition_point(|s| s.start <= offset);
            let i = i.checked_sub(1).ok_or_else(invalid)?;
            match st.segments.get(i + 1) {
                Some(next) => (st.segments[i].clone(), next.start, true),
                None => (st.segments[i].clone(), st.written_end, false),
            }
        };
        if offset > seg_end || (offset < seg_end && !self.is_boundary(&seg, offset, seg_end)?) {
            return Err(invalid());
        }
        let available = seg_end - offset;
        let mut want = available.min(max_bytes.max(1));
        loop {
            // Checked: a damaged leader never ships damage to its replicas (issue #13).
            let mut bytes = self.read_checked(&seg, want as usize, offset)?;
            let mut it = Records::new(&bytes);
            it.by_ref().for_each(drop);
            let whole = it.message_bytes() as u64;
            if whole > 0 || want == available {
                if whole == 0 && available > 0 {
                    // Not even one whole message where one must start: not a boundary.
                    return Err(invalid());
                }
                bytes.truncate(whole as usize);
                return Ok(ReplicaChunk {
                    offset,
                    rotate_after: closed && offset + whole == seg_end,
                    bytes,
                });
            }
            want = (want * 2).min(available);
        }
    }

    /// Appends a chunk read from the leader at `offset`, which must be this log's written end;
    /// rotates after it when the leader did. The bytes become visible after a flush and the
    /// high-water mark.
    ///
    /// Errors: `OffsetMismatch` when `offset` is not the written end (the replica must
    /// truncate or fetch from its end); `MalformedAppend` for bytes that are not whole
    /// messages; I/O (rolled back as for [`TopicLog::append`]).
    pub fn append_replica(
        &self,
        offset: u64,
        bytes: &[u8],
        rotate_after: bool,
    ) -> Result<u64, StoreError> {
        let mut st = self.lock()?;
        if let Some(reason) = &st.broken {
            return Err(StoreError::Broken {
                topic: self.name.clone(),
                reason: reason.clone(),
            });
        }
        if offset != st.written_end {
            return Err(StoreError::OffsetMismatch {
                topic: self.name.clone(),
                expected: st.written_end,
                got: offset,
            });
        }
        // A replica rotates where its leader did, not by its own segment size.
        for chunk in self.plan(&st, bytes, u64::MAX)? {
            self.write_chunk(&mut st, bytes, &chunk)?;
        }
        if rotate_after && st.written_end > st.active().start {
            self.rotate(&mut st)?;
        }
        Ok(st.written_end)
    }

    /// Cuts the log back to `offset`, a message boundary between the first segment's start and
    /// the written end: later segments are deleted, the one holding `offset` is cut there,
    /// made durable and becomes the active segment. The flushed offset and high-water mark
    /// move down with it. Nothing happens when `offset` is the written end.
    ///
    /// Errors: `InvalidOffset` for an offset outside the log or inside a message; I/O.
    pub fn truncate_to(&self, offset: u64) -> Result<(), StoreError> {
        let mut st = self.lock()?;
        let invalid = || StoreError::InvalidOffset {
            topic: self.name.clone(),
            offset: i64::try_from(offset).unwrap_or(i64::MAX),
        };
        if offset == st.written_end {
            return Ok(());
        }
        if offset > st.written_end {
            return Err(invalid());
        }
        let i = st.segments.partition_point(|s| s.start <= offset);
        let i = i.checked_sub(1).ok_or_else(invalid)?;
        let keep = st.segments[i].clone();
        let io = |op, e| StoreError::io(op, &keep.path, e);
        // Check the cut point before touching anything.
        let len = offset - keep.start;
        let mut head = vec![0u8; len as usize];
        keep.file()
            .and_then(|f| f.read_exact_at(&mut head, 0))
            .map_err(|e| io("read", e))?;
        let mut it = Records::new(&head);
        it.by_ref().for_each(drop);
        if it.message_bytes() as u64 != len {
            return Err(invalid());
        }
        warn!(
            topic = %self.name,
            from = st.written_end,
            to = offset,
            "truncating log (replica divergence)"
        );
        for later in st.segments.drain(i + 1..) {
            later.close();
            if let Err(e) = fs::remove_file(&later.path) {
                return Err(StoreError::io("delete segment", &later.path, e));
            }
            let _ = fs::remove_file(later.sums_path());
        }
        keep.close();
        let file = Segment::open_for_append(&keep.path).map_err(|e| io("open segment", e))?;
        file.set_len(len).map_err(|e| io("truncate", e))?;
        file.sync_all().map_err(|e| io("fsync", e))?;
        // The checksums follow the cut (the last kept range is summed again from its bytes).
        let sums = {
            let mut sums = keep.sums();
            let keep_n = sums.entries.partition_point(|e| e.end <= len);
            let from = sums.start_of(keep_n).min(len) as usize;
            sums.truncate(len, &head[from..]);
            crate::checksum::rewrite(&keep.sums_path(), &mut sums)
                .map_err(|e| StoreError::io("write checksums", keep.sums_path(), e))?;
            std::mem::take(&mut *sums)
        };
        sync_dir(&self.dir)?;
        let mut index = SparseIndex::live(keep.start);
        index.note_records(keep.start, &head);
        st.segments[i] = Arc::new(Segment::active(keep.start, &keep.path, file, index, sums));
        st.written_end = offset;
        st.flushed_end = offset;
        st.high_water = st.high_water.map(|h| h.min(offset));
        if st
            .hw_recorded
            .is_some_and(|(recorded, _)| recorded > offset)
            || st.hw_recorded.is_none()
        {
            // The file may name an offset that is gone: lower it before anything is
            // appended at the cut (issue #13).
            let mark = st.high_water.unwrap_or(0).min(offset);
            crate::checkpoint::store(&self.dir, mark, true)?;
            st.hw_recorded = Some((mark, std::time::Instant::now()));
        }
        st.pending = 0;
        st.first_unflushed = None;
        st.truncations += 1;
        drop(st);
        self.trim_epochs(offset)
    }
}
