//! The relay's flow control and commit bookkeeping as a pure core (no sockets, no clocks passed
//! in only as values): what a stream may push, which ACK offsets are valid, and when a group's
//! committed offset is proposed through Raft, confirmed or retried (issue #7, `pirius.md` §11,
//! §16.2).

use std::collections::VecDeque;
use std::time::Instant;

/// A batch pushed and not yet acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pushed {
    /// Offset after its last message.
    end: u64,
    /// Where each of its messages starts (an ACK may stop inside a batch, at a message start).
    starts: Vec<u64>,
}

/// One stream's window: at most `size` messages pushed and not yet acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Window {
    size: u32,
    /// Highest offset acknowledged on this stream (or where it started).
    acked_upto: u64,
    /// Batches pushed and not acknowledged, in offset order.
    inflight: VecDeque<Pushed>,
    /// Messages in `inflight`.
    unacked: u32,
}

impl Window {
    /// A window of `size` messages for a stream starting at `from`.
    pub(crate) fn new(size: u32, from: u64) -> Self {
        Window {
            size,
            acked_upto: from,
            inflight: VecDeque::new(),
            unacked: 0,
        }
    }

    /// True when no more may be pushed until an ACK.
    pub(crate) fn full(&self) -> bool {
        self.unacked >= self.size
    }

    /// Messages the next batch may hold: `max_batch`, at most what the window has room for.
    pub(crate) fn room(&self, max_batch: u32) -> u32 {
        max_batch.min(self.size.saturating_sub(self.unacked))
    }

    /// A batch of messages starting at `starts` and ending at `end` was pushed.
    pub(crate) fn pushed(&mut self, starts: Vec<u64>, end: u64) {
        self.unacked += starts.len() as u32;
        self.inflight.push_back(Pushed { end, starts });
    }

    /// Whether `offset` is where an acknowledgement may stop: at or before what was already
    /// acknowledged, or a message start or batch end this stream pushed.
    pub(crate) fn ackable(&self, offset: u64) -> bool {
        offset <= self.acked_upto
            || self
                .inflight
                .iter()
                .any(|b| b.end == offset || b.starts.binary_search(&offset).is_ok())
    }

    /// Everything before `offset` is acknowledged: the window refills by those messages.
    pub(crate) fn acked(&mut self, offset: u64) {
        self.acked_upto = self.acked_upto.max(offset);
        while let Some(b) = self.inflight.front_mut() {
            if b.end <= offset {
                self.unacked -= b.starts.len() as u32;
                self.inflight.pop_front();
            } else {
                let before = b.starts.len();
                b.starts.retain(|s| *s >= offset);
                self.unacked -= (before - b.starts.len()) as u32;
                break;
            }
        }
    }
}

/// A group's commit of one fragment for one subscriber: at most one Raft proposal in flight,
/// later acknowledgements coalesced into the next one.
#[derive(Debug, Default)]
pub(crate) struct CommitState {
    /// Highest offset acknowledged.
    pub(crate) wanted: u64,
    /// Highest offset committed.
    pub(crate) committed: u64,
    in_flight: bool,
    retry_at: Option<Instant>,
    /// Connection to answer.
    pub(crate) routing_id: Vec<u8>,
}

/// What an acknowledgement leads to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum OnAck {
    /// Already committed at or past it (a repeated ACK): confirm `ACKED` at this offset now.
    Confirm(u64),
    /// Commit it (now, or when the proposal in flight or a retry allows).
    Commit,
}

impl CommitState {
    /// `routing_id` acknowledged up to `offset`.
    pub(crate) fn ack(&mut self, routing_id: &[u8], offset: u64) -> OnAck {
        self.wanted = self.wanted.max(offset);
        self.routing_id = routing_id.to_vec();
        if self.wanted <= self.committed && !self.in_flight {
            OnAck::Confirm(self.committed)
        } else {
            OnAck::Commit
        }
    }

    /// The offset to propose now, if one is due (none in flight, something uncommitted, no
    /// retry pending past `now`); the proposal is then in flight.
    pub(crate) fn propose(&mut self, now: Instant) -> Option<u64> {
        if self.in_flight || self.wanted <= self.committed {
            return None;
        }
        if self.retry_at.is_some_and(|t| t > now) {
            return None;
        }
        self.in_flight = true;
        self.retry_at = None;
        Some(self.wanted)
    }

    /// The proposal of `offset` committed.
    pub(crate) fn committed(&mut self, offset: u64) {
        self.in_flight = false;
        self.committed = self.committed.max(offset);
    }

    /// The proposal could not be made (no quorum, an election): retry at `at`.
    pub(crate) fn retry(&mut self, at: Instant) {
        self.in_flight = false;
        self.retry_at = Some(at);
    }

    /// True when a failed proposal is due again at `now`.
    pub(crate) fn retry_due(&self, now: Instant) -> bool {
        !self.in_flight && self.wanted > self.committed && self.retry_at.is_some_and(|t| t <= now)
    }

    /// True when nothing is pending (the state may be forgotten under memory pressure).
    pub(crate) fn settled(&self) -> bool {
        !self.in_flight && self.wanted <= self.committed
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_window_fills_with_pushed_messages_and_refills_with_acks() {
        let mut w = Window::new(3, 100);
        assert_eq!(w.room(10), 3);
        w.pushed(vec![100, 110], 120);
        assert_eq!(w.room(10), 1);
        w.pushed(vec![120], 130);
        assert!(w.full());
        assert_eq!(w.room(10), 0);
        w.acked(110); // inside the first batch, at a message start
        assert!(!w.full());
        assert_eq!(w.room(10), 1);
        w.acked(130);
        assert_eq!(w.room(2), 2);
    }

    #[test]
    fn only_message_starts_and_batch_ends_pushed_here_can_be_acknowledged() {
        let mut w = Window::new(10, 100);
        w.pushed(vec![100, 110], 120);
        for ok in [50, 100, 110, 120] {
            assert!(w.ackable(ok), "{ok}");
        }
        for bad in [105, 121, 200] {
            assert!(!w.ackable(bad), "{bad}: inside a message or never pushed");
        }
        w.acked(120);
        assert!(w.ackable(115), "at or before what was acknowledged");
    }

    #[test]
    fn one_commit_in_flight_later_acks_coalesce_and_a_repeat_is_confirmed_at_once() {
        let now = Instant::now();
        let mut c = CommitState::default();
        assert_eq!(c.ack(b"conn", 10), OnAck::Commit);
        assert_eq!(c.propose(now), Some(10));
        assert_eq!(c.ack(b"conn", 20), OnAck::Commit);
        assert_eq!(c.propose(now), None, "one proposal in flight");
        c.committed(10);
        assert_eq!(c.propose(now), Some(20), "the coalesced ack goes next");
        c.committed(20);
        assert!(c.settled());
        assert_eq!(c.ack(b"conn", 15), OnAck::Confirm(20));
    }

    #[test]
    fn a_failed_proposal_waits_for_its_retry_time() {
        let now = Instant::now();
        let mut c = CommitState::default();
        c.ack(b"conn", 10);
        assert_eq!(c.propose(now), Some(10));
        c.retry(now + Duration::from_millis(500));
        assert!(!c.retry_due(now));
        assert_eq!(c.propose(now), None);
        let later = now + Duration::from_millis(600);
        assert!(c.retry_due(later));
        assert_eq!(c.propose(later), Some(10));
    }
}
