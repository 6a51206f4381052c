//! When to fdatasync a topic (spec `zper.md` §4.3, fixed): when `flush_messages` messages are
//! pending, or `flush_interval` has passed since the first unflushed append (driven by a timer, not
//! only by appends), or at once when a producer waits for durability (group commit).

use std::time::{Duration, Instant};

/// The flush rule; a pure decision, tested without files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushPolicy {
    /// Pending-message threshold (`flush_messages`).
    pub flush_messages: u64,
    /// Age of the oldest unflushed append that forces a flush (`flush_interval`, ms).
    pub flush_interval: Duration,
}

impl FlushPolicy {
    /// True when a topic with `pending` unflushed messages, the oldest appended at
    /// `first_unflushed`, must be flushed at `now`. `waiters`: a producer waits for durability.
    pub fn due(
        &self,
        pending: u64,
        first_unflushed: Option<Instant>,
        waiters: bool,
        now: Instant,
    ) -> bool {
        if pending == 0 {
            return false;
        }
        waiters
            || pending >= self.flush_messages
            || first_unflushed
                .is_some_and(|t| now.saturating_duration_since(t) >= self.flush_interval)
    }

    /// When the timer must fire for a topic whose oldest unflushed append was at `first_unflushed`.
    pub fn deadline(&self, first_unflushed: Option<Instant>) -> Option<Instant> {
        first_unflushed.map(|t| t + self.flush_interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> FlushPolicy {
        FlushPolicy {
            flush_messages: 10,
            flush_interval: Duration::from_millis(100),
        }
    }

    #[test]
    fn flush_by_count_or_age_spec_4_3() {
        let p = policy();
        let t0 = Instant::now();
        assert!(!p.due(0, None, true, t0));
        assert!(!p.due(9, Some(t0), false, t0));
        assert!(p.due(10, Some(t0), false, t0));
        assert!(!p.due(1, Some(t0), false, t0 + Duration::from_millis(99)));
        assert!(p.due(1, Some(t0), false, t0 + Duration::from_millis(100)));
    }

    #[test]
    fn waiting_producer_forces_group_commit() {
        let p = policy();
        let t0 = Instant::now();
        assert!(p.due(1, Some(t0), true, t0));
    }

    #[test]
    fn deadline_is_first_unflushed_plus_interval() {
        let p = policy();
        let t0 = Instant::now();
        assert_eq!(p.deadline(Some(t0)), Some(t0 + Duration::from_millis(100)));
        assert_eq!(p.deadline(None), None);
    }
}
