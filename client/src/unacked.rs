//! A mode-1 idempotent producer's messages sent and not yet acknowledged (issue #18), kept in
//! one byte buffer: no allocation per message once the buffer has grown, where a `Vec` per
//! message and per frame cost the producer a tenth of its throughput.
//!
//! Layout: each message's frames (after its id) as `[len:4 LE][bytes]`; an entry per message
//! holds its sequence, where its frames start and how many there are. Acknowledged messages
//! leave from the front; their bytes are dropped in bulk once they are half the buffer.

use std::collections::VecDeque;

/// One unacknowledged message.
#[derive(Debug, Clone, Copy)]
struct Entry {
    sequence: u64,
    /// Where its frames start, counted from the first byte ever pushed.
    start: usize,
    frames: u32,
}

/// Unacknowledged messages, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Unacked {
    bytes: Vec<u8>,
    /// Bytes dropped from the front of `bytes` so far (entries' `start` minus this is the
    /// index in `bytes`).
    dropped: usize,
    entries: VecDeque<Entry>,
}

impl Unacked {
    /// Messages held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The oldest message's sequence.
    pub(crate) fn first(&self) -> Option<u64> {
        self.entries.front().map(|e| e.sequence)
    }

    /// Keeps a copy of `frames` as message `sequence` (after every one held).
    pub(crate) fn push(&mut self, sequence: u64, frames: &[&[u8]]) {
        let start = self.dropped + self.bytes.len();
        for f in frames {
            self.bytes
                .extend_from_slice(&(f.len() as u32).to_le_bytes());
            self.bytes.extend_from_slice(f);
        }
        self.entries.push_back(Entry {
            sequence,
            start,
            frames: frames.len() as u32,
        });
    }

    /// Forgets every message up to and including `sequence` (an ack covers every earlier one).
    pub(crate) fn ack(&mut self, sequence: u64) {
        while self.entries.front().is_some_and(|e| e.sequence <= sequence) {
            self.entries.pop_front();
        }
        let live = match self.entries.front() {
            Some(e) => e.start - self.dropped,
            None => self.bytes.len(),
        };
        if live >= self.bytes.len() / 2 {
            self.bytes.drain(..live);
            self.dropped += live;
        }
    }

    /// Numbers the messages held from 0 (a new producer id takes them over).
    pub(crate) fn renumber(&mut self) {
        for (seq, e) in self.entries.iter_mut().enumerate() {
            e.sequence = seq as u64;
        }
    }

    /// Each message held: its sequence and its frames.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, Frames<'_>)> {
        self.entries.iter().map(|e| {
            (
                e.sequence,
                Frames {
                    bytes: &self.bytes[e.start - self.dropped..],
                    left: e.frames,
                },
            )
        })
    }
}

/// One held message's frames, in order.
#[derive(Debug, Clone)]
pub(crate) struct Frames<'a> {
    bytes: &'a [u8],
    left: u32,
}

impl<'a> Iterator for Frames<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The layout is ours (written by `push`), so the lengths are there.
        let (len, rest) = self.bytes.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let (frame, rest) = rest.split_at_checked(len)?;
        self.bytes = rest;
        Some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(u: &Unacked) -> Vec<(u64, Vec<Vec<u8>>)> {
        u.iter()
            .map(|(s, f)| (s, f.map(<[u8]>::to_vec).collect()))
            .collect()
    }

    #[test]
    fn messages_come_back_in_order_until_acknowledged() {
        let mut u = Unacked::default();
        u.push(0, &[b"a", b""]);
        u.push(1, &[b"bb"]);
        u.push(2, &[]);
        assert_eq!(u.len(), 3);
        assert_eq!(u.first(), Some(0));
        assert_eq!(
            held(&u),
            [
                (0, vec![b"a".to_vec(), vec![]]),
                (1, vec![b"bb".to_vec()]),
                (2, vec![])
            ]
        );
        u.ack(1);
        assert_eq!(held(&u), [(2, vec![])]);
        u.push(3, &[b"c"]);
        u.renumber();
        assert_eq!(held(&u), [(0, vec![]), (1, vec![b"c".to_vec()])]);
        u.ack(5);
        assert_eq!(u.len(), 0);
        assert_eq!(u.first(), None);
        assert!(u.bytes.is_empty(), "all dropped");
    }

    #[test]
    fn the_buffer_stays_bounded_by_what_is_held() {
        let mut u = Unacked::default();
        for seq in 0..100_000u64 {
            u.push(seq, &[&seq.to_be_bytes(), b"payload"]);
            if seq >= 10 {
                u.ack(seq - 10);
            }
        }
        assert_eq!(u.len(), 10);
        assert!(u.bytes.len() <= 3 * 10 * 23, "{} bytes", u.bytes.len());
        let (seq, frames) = u.iter().next().expect("held");
        assert_eq!(seq, 99_990);
        assert_eq!(
            frames.collect::<Vec<_>>(),
            [&99_990u64.to_be_bytes()[..], b"payload"]
        );
    }
}
