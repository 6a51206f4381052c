//! How many mode-2 messages each producer has handed to the workers without a reply yet, and
//! whether its connection may be read further (issue #17, "every queue has a bound"). A pure
//! core: the engine counts what it sends and what comes back; no sockets, the clock passed in.
//!
//! Every mode-2 message gets exactly one reply (an ack or a status, `zper.md` §4.5), so the
//! count per producer is what the worker's ack book, the forwarder and the ack queue between
//! the threads hold for it. Bounding it bounds them: a producer that pipelines faster than its
//! messages become durable is simply not read (TCP backpressure) until its replies catch up.
//! Counts are kept by routing id, not by connection, so reconnecting does not reset them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Mode-2 messages one producer (routing id) may have unanswered before its connection is no
/// longer read.
pub(crate) const MAX_UNANSWERED: u32 = 4096;
/// Mode-2 messages all producers together may have unanswered; past this only a producer with
/// none unanswered is read (one message at a time), so none is locked out.
pub(crate) const MAX_UNANSWERED_TOTAL: u64 = 65_536;
/// A producer whose count did not move for this long is forgiven its count: a reply went
/// missing (no path should lose one, but a stuck connection would be worse than a loose bound).
pub(crate) const FORGIVE_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
struct Owed {
    count: u32,
    changed: Instant,
}

/// The unanswered mode-2 messages of every producer.
#[derive(Debug, Default)]
pub(crate) struct Credit {
    owed: HashMap<Vec<u8>, Owed>,
    total: u64,
}

impl Credit {
    /// Whether producer `routing_id` may hand one more message to the workers.
    pub(crate) fn may_send(&self, routing_id: &[u8]) -> bool {
        match self.owed.get(routing_id) {
            None => true,
            Some(o) => o.count < MAX_UNANSWERED && self.total < MAX_UNANSWERED_TOTAL,
        }
    }

    /// Whether producer `routing_id` has messages unanswered.
    pub(crate) fn owes(&self, routing_id: &[u8]) -> bool {
        self.owed.contains_key(routing_id)
    }

    /// Producer `routing_id` handed one message that will be answered.
    pub(crate) fn sent(&mut self, routing_id: &[u8], now: Instant) {
        self.total += 1;
        if let Some(o) = self.owed.get_mut(routing_id) {
            o.count += 1;
            o.changed = now;
            return;
        }
        self.owed.insert(
            routing_id.to_vec(),
            Owed {
                count: 1,
                changed: now,
            },
        );
    }

    /// A reply for producer `routing_id` went out (or could not: its connection is gone).
    /// Unknown ids (mode 0 and 1 producers, forgiven counts) are ignored.
    pub(crate) fn answered(&mut self, routing_id: &[u8], now: Instant) {
        let Some(o) = self.owed.get_mut(routing_id) else {
            return;
        };
        o.count -= 1;
        o.changed = now;
        self.total -= 1;
        if o.count == 0 {
            self.owed.remove(routing_id);
        }
    }

    /// Forgives every count unchanged since `now - FORGIVE_AFTER`; returns the messages
    /// forgiven.
    pub(crate) fn forgive_stale(&mut self, now: Instant) -> u64 {
        let mut forgiven = 0;
        self.owed.retain(|_, o| {
            let stale = now.saturating_duration_since(o.changed) >= FORGIVE_AFTER;
            if stale {
                forgiven += u64::from(o.count);
            }
            !stale
        });
        self.total -= forgiven;
        forgiven
    }

    /// Unanswered messages of all producers.
    #[cfg(test)]
    pub(crate) fn total(&self) -> u64 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_producer_stops_at_its_bound_and_resumes_when_answered() {
        let now = Instant::now();
        let mut c = Credit::default();
        for _ in 0..MAX_UNANSWERED {
            assert!(c.may_send(b"p"));
            c.sent(b"p", now);
        }
        assert!(!c.may_send(b"p"));
        assert!(c.may_send(b"q"), "another producer is not held back");
        c.answered(b"p", now);
        assert!(c.may_send(b"p"));
        assert_eq!(c.total(), u64::from(MAX_UNANSWERED) - 1);
        c.answered(b"nobody", now);
        assert_eq!(c.total(), u64::from(MAX_UNANSWERED) - 1);
    }

    #[test]
    fn past_the_total_only_a_producer_owing_nothing_is_read() {
        let now = Instant::now();
        let mut c = Credit::default();
        let producers = MAX_UNANSWERED_TOTAL / u64::from(MAX_UNANSWERED);
        for p in 0..producers {
            for _ in 0..MAX_UNANSWERED {
                c.sent(&p.to_be_bytes(), now);
            }
        }
        assert_eq!(c.total(), MAX_UNANSWERED_TOTAL);
        c.answered(&0u64.to_be_bytes(), now);
        c.sent(b"fresh", now);
        assert!(!c.may_send(b"fresh"), "one at a time past the total");
        assert!(c.may_send(b"other"));
        assert!(!c.may_send(&1u64.to_be_bytes()));
    }

    #[test]
    fn stale_counts_are_forgiven_and_answers_after_that_are_ignored() {
        let start = Instant::now();
        let mut c = Credit::default();
        c.sent(b"lost", start);
        c.sent(b"lost", start);
        c.sent(b"alive", start + FORGIVE_AFTER);
        assert_eq!(c.forgive_stale(start + FORGIVE_AFTER), 2);
        assert_eq!(c.total(), 1);
        c.answered(b"lost", start + FORGIVE_AFTER);
        assert_eq!(c.total(), 1);
        assert!(c.may_send(b"lost"));
    }
}
