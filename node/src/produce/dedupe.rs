//! Idempotent producers (issue #18): a fragment leader's memory of which (producer id,
//! sequence) it stored where, so a retried message is stored once and a client can ask what
//! became of a message answered 104. A pure core: no clock of its own (callers pass `now`), no
//! I/O; the worker feeds it and rebuilds it from the log's tail (`zper_store::TailMessage`).
//!
//! An idempotent message's first frame (its message id) is `[producer id:16][sequence:8]`,
//! sequence big-endian (docs/protocol.md "Idempotent producers"). A producer's sequences
//! are stored in order without gaps: the next one after `s` must be `s + 1`, so an ack naming
//! `s` covers every earlier message of that producer, whichever connection carried it.
//!
//! The window is bounded three ways: the newest `per_producer` messages of a producer, those
//! younger than `max_age`, and `max_producers` producers per fragment (when it is full, the
//! eighth unused the longest is pushed out: "use" is counted, not timed, so a window rebuilt
//! from the log, where every message is found at the same instant, pushes out by log
//! position, oldest first).
//!
//! What the window forgets is summed up, not lost: a producer keeps its next sequence and the
//! end of its newest forgotten message, so a retry of a message older than the window is still
//! a duplicate (acknowledged once everything up to that end is durable), never stored twice. A
//! producer pushed out by `max_producers` is summed up the same way in [`Forgotten`] (about 40
//! bytes, for the newest `max_producers` to `2 * max_producers` producers forgotten), and goes on
//! at its next sequence when it comes back. A producer the window does not know at all (new, or
//! forgotten beyond that) must start at sequence 0, so a producer whose first messages were lost
//! in flight is told so instead of having a later message stored over the gap (an ack for it
//! would cover the lost ones).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Bytes of a producer id.
pub(crate) const PRODUCER_ID_LEN: usize = zper_wire::idempotent::PRODUCER_ID_LEN;

/// A producer id (16 bytes with zper's fixed bits: `zper_wire::idempotent::producer_id`).
pub(crate) type ProducerId = [u8; PRODUCER_ID_LEN];

/// Splits an idempotent message id into producer id and sequence; None unless it is
/// `[producer id:16][sequence:8]` with a producer id of zper's (so a plain producer's
/// 24-byte message id is not taken for one) and a sequence below `u64::MAX`.
pub(crate) fn parse_id(frame: &[u8]) -> Option<(ProducerId, u64)> {
    zper_wire::idempotent::parse_message_id(frame)
}

/// The window's bounds (`idempotence.*` config keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// Newest messages remembered per producer.
    pub(crate) per_producer: usize,
    /// Messages older than this are forgotten.
    pub(crate) max_age: Duration,
    /// Producers remembered per fragment.
    pub(crate) max_producers: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            per_producer: 4096,
            max_age: Duration::from_secs(120),
            max_producers: 1024,
        }
    }
}

/// What to do with an arriving idempotent message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Store it (its sequence is now taken; report the outcome with [`Window::stored`] or
    /// [`Window::failed`]).
    New,
    /// Stored before, ending at this offset (`None`: earlier in the same batch, not appended
    /// yet): answer with that message's outcome, store nothing.
    Duplicate(Option<u64>),
    /// Not the next sequence of this producer (a gap, or older than the window): refuse,
    /// telling the producer which sequence comes next.
    OutOfSequence { expected: u64 },
}

/// What the window knows of one (producer, sequence) (tests; `PRODUCED` reads the log).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Stored, ending at this offset (it may not be durable yet: compare with the high-water
    /// mark).
    Stored { end: u64 },
    /// Not stored: the producer's next sequence is at or below it.
    NotStored,
    /// Outside the window (the producer or that sequence was forgotten): cannot tell.
    Unknown,
}

/// One producer's newest messages: sequences `first..first + ends.len()`.
#[derive(Debug)]
struct Seen {
    first: u64,
    /// End offset (`None` while appending) and when each was admitted.
    ends: VecDeque<(Option<u64>, Instant)>,
    /// The window's use count when this producer was last admitted or found.
    used: u64,
    /// End of the newest message before `first` the window knows to be stored (forgotten by
    /// age or count, or found in the log before `first`): a retry of any sequence below
    /// `first` is a duplicate acknowledged once this is durable. `None`: nothing before
    /// `first` is known (a producer that started here).
    before_end: Option<u64>,
}

impl Seen {
    fn next(&self) -> u64 {
        // Cannot overflow: every sequence taken is below u64::MAX (`parse_id`).
        self.first.saturating_add(self.ends.len() as u64)
    }

    /// Forgets the messages beyond the count and age bounds; `next` stays.
    fn forget_old(&mut self, bounds: &Bounds, now: Instant) {
        while self.ends.len() > bounds.per_producer
            || self
                .ends
                .front()
                .is_some_and(|(end, at)| end.is_some() && now.duration_since(*at) > bounds.max_age)
        {
            if let Some((Some(end), _)) = self.ends.pop_front() {
                self.before_end = Some(self.before_end.map_or(end, |b| b.max(end)));
            }
            self.first += 1;
        }
    }

    /// End of the producer's newest message (`None`: not known).
    fn newest_end(&self) -> Option<u64> {
        match self.ends.back() {
            Some((end, _)) => *end,
            None => self.before_end,
        }
    }
}

/// A producer pushed out of the window by `max_producers`: its next sequence and the end of
/// its newest message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Summary {
    next: u64,
    newest_end: Option<u64>,
}

/// Producers pushed out of the window, summed up: two generations of at most `cap` each (the
/// older one dropped whole when the newer fills), so between `cap` and `2 * cap` of the
/// producers forgotten last are remembered. Keyed by the whole producer id: a summary taken
/// for another producer would acknowledge a message never stored.
#[derive(Debug, Default)]
struct Forgotten {
    newer: IdMap<Summary>,
    older: IdMap<Summary>,
}

impl Forgotten {
    fn insert(&mut self, pid: ProducerId, summary: Summary, cap: usize) {
        if self.newer.len() >= cap.max(1) {
            self.older = std::mem::take(&mut self.newer);
        }
        self.older.remove(&pid);
        self.newer.insert(pid, summary);
    }

    fn get(&self, pid: &ProducerId) -> Option<Summary> {
        self.newer.get(pid).or_else(|| self.older.get(pid)).copied()
    }

    fn remove(&mut self, pid: &ProducerId) -> Option<Summary> {
        let newer = self.newer.remove(pid);
        let older = self.older.remove(pid);
        newer.or(older)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.newer.len() + self.older.len()
    }
}

/// Hashes a producer id with one multiply per 8 bytes (SipHash over all 16 bytes was a tenth
/// of the writer's time with idempotent producers). Every byte counts, and `finish` folds the high
/// half of the product into the low one, where the hash table takes its bucket: before, only
/// the first 8 bytes counted, and their low 16 bits are zper's fixed "zp", so every producer
/// landed in the same bucket group and a rebuild of a log with 400k producers took 26 s. A client
/// choosing colliding ids on purpose only slows lookups among the producers of its own
/// fragment (at most `max_producers`, and as many summed up).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(29) ^ u64::from_le_bytes(b))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
}

type IdMap<V> = HashMap<ProducerId, V, std::hash::BuildHasherDefault<IdHasher>>;

/// A fragment's idempotent-producer window.
#[derive(Debug, Default)]
pub(crate) struct Window {
    bounds: Bounds,
    producers: IdMap<Seen>,
    /// Producers pushed out by `max_producers`, summed up.
    forgotten: Forgotten,
    /// Admissions and finds so far: orders producers by last use.
    uses: u64,
}

impl Window {
    /// An empty window with these bounds.
    pub(crate) fn new(bounds: Bounds) -> Self {
        Window {
            bounds,
            producers: IdMap::default(),
            forgotten: Forgotten::default(),
            uses: 0,
        }
    }

    /// Producers pushed out by `max_producers` and still summed up.
    #[cfg(test)]
    pub(crate) fn forgotten(&self) -> usize {
        self.forgotten.len()
    }

    /// Producers remembered.
    #[cfg(test)]
    pub(crate) fn producers(&self) -> usize {
        self.producers.len()
    }

    /// Decides on message `seq` of `pid`; a [`Verdict::New`] takes the sequence (its end
    /// offset not known yet: [`Window::stored`] tells it). A producer the window does not
    /// know starts at 0.
    #[cfg(test)]
    pub(crate) fn admit(&mut self, pid: &ProducerId, seq: u64, now: Instant) -> Verdict {
        self.admit_at(pid, seq, now, None)
    }

    /// As [`Window::admit`], a new message taking `end` (the offset it will end at once the
    /// batch is appended; `None`: not known yet). The writer knows where a batch will go, so
    /// it notes each end here, at no extra lookup; if the append fails it drops the window,
    /// which is rebuilt from the log.
    pub(crate) fn admit_at(
        &mut self,
        pid: &ProducerId,
        seq: u64,
        now: Instant,
        end: Option<u64>,
    ) -> Verdict {
        let bounds = self.bounds;
        self.uses += 1;
        let Some(seen) = self.producers.get_mut(pid) else {
            if let Some(summary) = self.forgotten.get(pid) {
                // Pushed out by other producers, not new: its sequences go on.
                if seq < summary.next {
                    return Verdict::Duplicate(summary.newest_end);
                }
                if seq > summary.next {
                    return Verdict::OutOfSequence {
                        expected: summary.next,
                    };
                }
                self.forgotten.remove(pid);
                self.start(pid, seq, now, end, summary.newest_end);
                return Verdict::New;
            }
            if seq != 0 {
                return Verdict::OutOfSequence { expected: 0 };
            }
            self.start(pid, seq, now, end, None);
            return Verdict::New;
        };
        seen.used = self.uses;
        seen.forget_old(&bounds, now);
        let next = seen.next();
        if seq == next {
            seen.ends.push_back((end, now));
            seen.forget_old(&bounds, now);
            return Verdict::New;
        }
        if seq >= seen.first && seq < next {
            return Verdict::Duplicate(seen.ends[(seq - seen.first) as usize].0);
        }
        if seq < seen.first {
            if let Some(end) = seen.before_end {
                // Older than the window, but stored: sequences are stored in order.
                return Verdict::Duplicate(Some(end));
            }
        }
        Verdict::OutOfSequence { expected: next }
    }

    /// Remembers `pid` afresh with `seq` taken (its first message, the first found in the
    /// log's tail, or the next of a producer pushed out before); `before_end` bounds the ends
    /// of its earlier messages known to be stored.
    fn start(
        &mut self,
        pid: &ProducerId,
        seq: u64,
        now: Instant,
        end: Option<u64>,
        before_end: Option<u64>,
    ) {
        self.make_room();
        self.uses += 1;
        let mut ends = VecDeque::new();
        ends.push_back((end, now));
        self.producers.insert(
            *pid,
            Seen {
                first: seq,
                ends,
                used: self.uses,
                before_end,
            },
        );
    }

    /// The message admitted as `seq` was stored, ending at `end`.
    #[cfg(test)]
    pub(crate) fn stored(&mut self, pid: &ProducerId, seq: u64, end: u64) {
        if let Some(seen) = self.producers.get_mut(pid) {
            if seq >= seen.first && seq < seen.next() {
                seen.ends[(seq - seen.first) as usize].0 = Some(end);
            }
        }
    }

    /// The message admitted as `seq` was not stored (refused, or the append failed): it and
    /// every later sequence of the producer are free again (`seq` is the producer's next).
    #[cfg(test)]
    pub(crate) fn failed(&mut self, pid: &ProducerId, seq: u64) {
        if let Some(seen) = self.producers.get_mut(pid) {
            if seq < seen.first {
                self.producers.remove(pid);
            } else if seq < seen.next() {
                seen.ends.truncate((seq - seen.first) as usize);
            }
        }
    }

    /// Notes a message found in the log (rebuilding after open, lead change or truncation):
    /// a sequence that does not follow the producer's newest starts its memory afresh.
    pub(crate) fn found(&mut self, pid: &ProducerId, seq: u64, end: u64, now: Instant) {
        let contiguous = self.producers.get(pid).is_some_and(|s| s.next() == seq);
        if contiguous {
            self.admit_at(pid, seq, now, Some(end));
            return;
        }
        self.producers.remove(pid);
        let before_end = match self.forgotten.remove(pid) {
            // Pushed out earlier in this rebuild: it goes on where it was.
            Some(s) if s.next == seq => s.newest_end,
            // Found first past its sequence 0: the earlier ones are before the scan, and end
            // before this one.
            _ if seq > 0 => Some(end),
            _ => None,
        };
        self.start(pid, seq, now, Some(end), before_end);
    }

    /// What became of `seq` of `pid`.
    #[cfg(test)]
    pub(crate) fn lookup(&self, pid: &ProducerId, seq: u64) -> Lookup {
        let Some(seen) = self.producers.get(pid) else {
            return Lookup::Unknown;
        };
        if seq >= seen.next() {
            Lookup::NotStored
        } else if seq < seen.first {
            Lookup::Unknown
        } else {
            match seen.ends[(seq - seen.first) as usize].0 {
                Some(end) => Lookup::Stored { end },
                None => Lookup::Unknown,
            }
        }
    }

    /// When the window is full, pushes out the eighth of its producers unused the longest
    /// (at least one), summing each up: one pass over the window for many producers pushed
    /// out, so rebuilding from a log of many producers costs O(messages), not
    /// O(messages * max_producers) (a 400k-producer log took 26 s to rebuild, one pass per
    /// producer).
    fn make_room(&mut self) {
        let max = self.bounds.max_producers.max(1);
        if self.producers.len() < max {
            return;
        }
        let count = (max / 8).max(1).min(self.producers.len());
        let mut by_use: Vec<(u64, ProducerId)> = self
            .producers
            .iter()
            .map(|(pid, s)| (s.used, *pid))
            .collect();
        by_use.select_nth_unstable(count - 1);
        for (_, pid) in by_use.into_iter().take(count) {
            if let Some(seen) = self.producers.remove(&pid) {
                let summary = Summary {
                    next: seen.next(),
                    newest_end: seen.newest_end(),
                };
                self.forgotten.insert(pid, summary, max);
            }
        }
    }
}

/// A fragment's window and what it was built for.
#[derive(Debug)]
pub(crate) struct FragmentWindow {
    pub(crate) window: Window,
    /// (leader epoch, truncation count) when built: either changing means the log may hold
    /// other messages than the window says, so it is rebuilt.
    pub(crate) built_for: (u64, u64),
}

#[cfg(test)]
#[path = "dedupe_tests.rs"]
mod tests;
