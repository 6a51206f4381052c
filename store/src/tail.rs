//! Reading the newest messages of a log back, whole, from about a given offset to the written
//! end: what a fragment leader scans to rebuild its idempotent-producer window after it opens
//! the log, takes the lead or is cut back (issue #18), since that window is kept in the log
//! itself (each idempotent message's first frame names its producer and sequence).

use zper_wire::Records;

use crate::{StoreError, TopicLog};

/// Bytes read per step of a tail scan.
const TAIL_CHUNK: u64 = 1 << 20;

/// One message met by [`TopicLog::scan_tail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailMessage<'a> {
    /// Offset of its first record.
    pub start: u64,
    /// Offset after its last record.
    pub end: u64,
    /// Payload of its first frame (a ZPER message id).
    pub first_frame: &'a [u8],
}

impl TopicLog {
    /// Calls `f` for every whole message written (flushed or not) from about `from` to the
    /// written end, oldest first. The scan starts at the newest indexed record start at or
    /// before `from` (at most 4 KiB before it) and skips the message it may have started
    /// inside, so a few messages before `from` may be met too; `from` below the oldest segment
    /// starts there; `from` at or past the written end meets nothing.
    ///
    /// Errors: I/O, and a damaged range (the messages before it were met).
    pub fn scan_tail(
        &self,
        from: u64,
        mut f: impl FnMut(TailMessage<'_>),
    ) -> Result<(), StoreError> {
        let (mut at, written_end, mid_message) = {
            let st = self.lock()?;
            let Some(first) = st.segments.first() else {
                return Ok(());
            };
            if from >= st.written_end {
                return Ok(());
            }
            if from <= first.start {
                (first.start, st.written_end, false)
            } else {
                let i = st.segments.partition_point(|s| s.start <= from) - 1;
                let seg = st.segments[i].clone();
                let end = st
                    .segments
                    .get(i + 1)
                    .map_or(st.written_end, |next| next.start);
                drop(st);
                let from = from.min(end);
                // Builds the segment's index when it was found on disk (the answer itself
                // does not matter).
                if from > seg.start && from < end {
                    self.is_boundary(&seg, from, end)?;
                }
                let floor = seg
                    .index
                    .lock()
                    .map_err(|_| StoreError::Poisoned(self.name.clone()))?
                    .floor(from)
                    .unwrap_or(seg.start);
                (floor, self.written_end()?, floor != seg.start)
            }
        };
        let mut skip = mid_message;
        while at < written_end {
            let chunk = self.read_for_replica(at, TAIL_CHUNK)?;
            if chunk.bytes.is_empty() {
                break;
            }
            let (mut pos, mut start, mut first) = (0usize, 0usize, None);
            for rec in Records::new(&chunk.bytes) {
                if first.is_none() {
                    first = Some(rec.payload);
                }
                pos += rec.stored_len();
                if !rec.more {
                    if !std::mem::take(&mut skip) {
                        f(TailMessage {
                            start: at + start as u64,
                            end: at + pos as u64,
                            first_frame: first.unwrap_or_default(),
                        });
                    }
                    first = None;
                    start = pos;
                }
            }
            at += chunk.bytes.len() as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Store, StoreConfig};

    fn record(payload: &[u8], more: bool) -> Vec<u8> {
        let mut out = vec![u8::from(more), payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    fn open(dir: &std::path::Path, segment_size: u64) -> std::sync::Arc<TopicLog> {
        let store = Store::open(StoreConfig {
            base_dir: dir.to_owned(),
            segment_size,
            ..StoreConfig::default()
        })
        .expect("store");
        store.topic_or_create("tail").expect("topic")
    }

    #[test]
    fn every_message_from_an_offset_is_met_once_with_its_first_frame_across_segments() {
        let dir = tempfile::tempdir().expect("dir");
        let log = open(dir.path(), 5000);
        let mut ends = Vec::new();
        for i in 0..2000u32 {
            let id = i.to_be_bytes();
            let mut bytes = record(&id, true);
            bytes.extend(record(b"body", false));
            ends.push(log.append(&bytes).expect("append"));
        }
        assert!(log.segment_starts().expect("segments").len() > 3);
        let mut met = Vec::new();
        log.scan_tail(0, |m| {
            met.push((
                m.start,
                m.end,
                u32::from_be_bytes(m.first_frame.try_into().expect("test value")),
            ))
        })
        .expect("scan");
        assert_eq!(met.len(), 2000);
        assert!(met
            .iter()
            .enumerate()
            .all(|(i, m)| m.2 == i as u32 && m.1 == ends[i]));
        // From the middle: every message ending after `from` is met, at most 4 KiB before it.
        let from = ends[1200] - 3;
        let mut met = Vec::new();
        log.scan_tail(from, |m| {
            met.push(u32::from_be_bytes(
                m.first_frame.try_into().expect("test value"),
            ))
        })
        .expect("scan");
        let first = met[0] as usize;
        assert!(first <= 1201 && ends[1200] - ends[first] <= 4096, "{first}");
        assert_eq!(*met.last().expect("test value"), 1999);
        assert!(met.windows(2).all(|w| w[1] == w[0] + 1));
        // Past the end: nothing.
        let mut n = 0;
        log.scan_tail(ends[1999] + 10, |_| n += 1).expect("scan");
        assert_eq!(n, 0);
    }
}
