//! How many messages a log holds (issue #15: `zper topics list/describe` show message counts
//! next to byte sizes). Offsets are byte positions (spec `zper.md` §6), so counting reads the
//! records; each segment is read once and then only its new bytes, with at most a budget of
//! bytes per call, so the first count of a large store is spread over several calls instead of
//! stalling one.

use std::collections::HashMap;

use zper_wire::Records;

use crate::{StoreError, TopicLog};

/// Per segment start: how far it is counted (absolute offset, a message boundary) and the
/// messages before that.
#[derive(Debug, Default)]
pub(crate) struct Counted(HashMap<u64, (u64, u64)>);

/// Largest read while counting, bytes (doubled for a message that is larger).
const CHUNK: u64 = 1 << 20;

impl TopicLog {
    /// Messages readers can see (from the first segment to the readable end), or `None` while
    /// the count is not complete: at most `budget` bytes are read per call, and the next call
    /// goes on from there. Segments deleted by retention drop out; a segment cut back (a
    /// replica truncating) is counted again.
    ///
    /// Errors: I/O, or damaged bytes (a checksum mismatch).
    pub fn message_count(&self, budget: u64) -> Result<Option<u64>, StoreError> {
        let (segments, visible) = {
            let st = self.lock()?;
            (st.segments.clone(), st.visible_end())
        };
        let mut counted = self
            .counted
            .lock()
            .map_err(|_| StoreError::Poisoned(self.name.clone()))?;
        counted
            .0
            .retain(|start, _| segments.iter().any(|s| s.start == *start));
        let (mut total, mut left) = (0u64, budget);
        for (i, seg) in segments.iter().enumerate() {
            let end = segments
                .get(i + 1)
                .map_or(visible, |next| next.start)
                .min(visible);
            let entry = counted.0.entry(seg.start).or_insert((seg.start, 0));
            if entry.0 > end.max(seg.start) {
                *entry = (seg.start, 0);
            }
            let mut chunk = CHUNK;
            while entry.0 < end {
                if left == 0 {
                    return Ok(None);
                }
                let want = (end - entry.0).min(chunk);
                let buf =
                    self.read_stored(seg, usize::try_from(want).unwrap_or(usize::MAX), entry.0)?;
                let (mut pos, mut through, mut messages) = (0usize, 0usize, 0u64);
                for rec in Records::new(&buf) {
                    pos += rec.stored_len();
                    if !rec.more {
                        messages += 1;
                        through = pos;
                    }
                }
                if through == 0 {
                    if want == end - entry.0 {
                        break; // a partial message at the readable end: nothing more to count
                    }
                    chunk = want.saturating_mul(2); // one message larger than the read
                    continue;
                }
                entry.0 += through as u64;
                entry.1 += messages;
                left = left.saturating_sub(through as u64);
            }
            total += entry.1;
        }
        Ok(Some(total))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use zper_wire::encode_record;

    use crate::{FlushPolicy, Store, StoreConfig};

    /// A one-frame message as stored (spec §6.2).
    fn message(payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        encode_record(payload, false, &mut m);
        m
    }

    /// A two-frame message (MORE on the first frame).
    fn two_frames(a: &[u8], b: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        encode_record(a, true, &mut m);
        encode_record(b, false, &mut m);
        m
    }

    #[test]
    fn counts_messages_over_segments_within_a_budget_and_then_only_new_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(StoreConfig {
            base_dir: dir.path().to_owned(),
            segment_size: 40,
            flush: FlushPolicy {
                flush_messages: 1,
                flush_interval: Duration::from_millis(1),
            },
            retain: Duration::from_secs(3600),
            allow_empty_message: true,
        })
        .expect("open");
        let t = s.topic_or_create("count").expect("topic");
        for i in 0..10u8 {
            t.append(&two_frames(&[i], b"payload")).expect("append");
        }
        t.flush().expect("flush");
        assert!(
            t.segment_starts().expect("starts").len() >= 3,
            "several segments"
        );
        // 14 bytes per message; a budget of 30 bytes counts two or three messages a call.
        let mut calls = 0;
        let total = loop {
            calls += 1;
            if let Some(n) = t.message_count(30).expect("count") {
                break n;
            }
            assert!(calls < 20, "the count progresses");
        };
        assert_eq!(total, 10);
        assert!(calls > 2, "spread over calls: {calls}");
        assert_eq!(
            t.message_count(0).expect("count"),
            Some(10),
            "nothing new to read"
        );
        t.append(&message(b"x")).expect("append");
        assert_eq!(
            t.message_count(0).expect("count"),
            Some(10),
            "unflushed is not counted"
        );
        t.flush().expect("flush");
        assert_eq!(t.message_count(1 << 20).expect("count"), Some(11));
    }
}
