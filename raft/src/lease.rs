//! How close this node's liveness lease came to ending (issue #16): each renewal that commits
//! is compared with the lease it extends. The margin is what was left of the old lease when
//! the renewal was applied; a renewal that commits after the old lease ended is a lapse, during
//! which this node fenced itself (it led no fragment) and the Raft leader may have moved its
//! fragments away. Under load the margin shows how much delay the lease still absorbs.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Lease renewal counters (`zper_node_lease_*` metrics).
#[derive(Debug)]
pub struct LeaseStats {
    /// Renewals committed in time.
    pub renewed: AtomicU64,
    /// Renewals committed after the lease they extend had ended.
    pub lapsed: AtomicU64,
    /// Smallest margin seen, ms (`i64::MAX` before the first renewal; negative after a lapse).
    pub min_margin_ms: AtomicI64,
}

impl Default for LeaseStats {
    fn default() -> Self {
        LeaseStats {
            renewed: AtomicU64::new(0),
            lapsed: AtomicU64::new(0),
            min_margin_ms: AtomicI64::new(i64::MAX),
        }
    }
}

impl LeaseStats {
    /// Records a renewal applied at `now_ms` (ms since the epoch) of a lease that ran until
    /// `until_ms`; returns the margin, ms (negative: it lapsed).
    pub fn record(&self, until_ms: u64, now_ms: u64) -> i64 {
        let margin = until_ms as i64 - now_ms as i64;
        if margin >= 0 {
            self.renewed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.lapsed.fetch_add(1, Ordering::Relaxed);
        }
        self.min_margin_ms.fetch_min(margin, Ordering::Relaxed);
        margin
    }

    /// The smallest margin seen, ms, if any renewal was recorded.
    pub fn min_margin(&self) -> Option<i64> {
        Some(self.min_margin_ms.load(Ordering::Relaxed)).filter(|m| *m != i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margins_count_renewals_and_lapses_and_keep_the_smallest() {
        let s = LeaseStats::default();
        assert_eq!(s.min_margin(), None);
        assert_eq!(s.record(1_000, 600), 400);
        assert_eq!(s.record(1_500, 1_450), 50);
        assert_eq!(s.record(2_000, 2_100), -100);
        assert_eq!(s.renewed.load(Ordering::Relaxed), 2);
        assert_eq!(s.lapsed.load(Ordering::Relaxed), 1);
        assert_eq!(s.min_margin(), Some(-100));
    }
}
