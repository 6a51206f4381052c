//! Which replicas the leader's high-water mark waits for (issue #13): the in-sync replicas as
//! the metadata has them, plus every replica the leader has proposed to add and the metadata
//! does not show yet (Kafka's "maximal ISR", KIP-497's rule for a pending `AlterPartition`).
//!
//! Without the second part, a replica proposed for the ISR counted for elections from the
//! moment Raft committed the change, but for the mark only once this node's view showed it
//! (a Raft round trip plus a view refresh later, 10-300 ms under load). Messages acknowledged
//! in between could be missing from it; when the leader then lost power or was cut off, the
//! metadata could elect that replica and the others truncated to its shorter log, erasing
//! acknowledged messages (seen in the randomized nemesis after "power loss of all").
//!
//! Pure bookkeeping: the proposal's outcome is reported through an [`Outcome`] slot that the
//! proposing task fills; nothing here blocks or does I/O.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zper_raft::NodeId;

/// How long a proposal that committed (or whose fate is unknown) keeps its replicas counted
/// when the view still does not show them: by then a later change removed them again, or it
/// never applied.
pub(crate) const SETTLE: Duration = Duration::from_secs(5);

/// What became of a proposed ISR change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Raft committed and applied it.
    Committed,
    /// The state machine refused it: it never applies.
    Refused,
    /// The proposal failed in transport or timed out: it may still apply.
    Unknown,
}

/// Where the proposing task reports the outcome, with when it did.
pub(crate) type OutcomeSlot = Arc<Mutex<Option<(Outcome, Instant)>>>;

struct Expansion {
    epoch: u64,
    added: Vec<NodeId>,
    outcome: OutcomeSlot,
}

/// Replicas proposed for the ISR of each led fragment (by store key) and not yet shown by the
/// view.
#[derive(Default)]
pub(crate) struct Expansions {
    by_topic: HashMap<String, Vec<Expansion>>,
    /// When each topic last reported that an expansion held its mark back.
    reported_hold: HashMap<String, Instant>,
}

/// Least time between two reports that an expansion holds a topic's mark back.
const HOLD_REPORT_EVERY: Duration = Duration::from_secs(2);

impl Expansions {
    /// Records that `next` was proposed as the ISR of `topic` in leader epoch `epoch` while the
    /// view had `current`; returns the slot to report the outcome in.
    pub(crate) fn proposed(
        &mut self,
        topic: &str,
        epoch: u64,
        current: &[NodeId],
        next: &[NodeId],
    ) -> OutcomeSlot {
        let outcome = OutcomeSlot::default();
        let added: Vec<NodeId> = next
            .iter()
            .copied()
            .filter(|n| !current.contains(n))
            .collect();
        if !added.is_empty() {
            self.by_topic
                .entry(topic.to_owned())
                .or_default()
                .push(Expansion {
                    epoch,
                    added,
                    outcome: outcome.clone(),
                });
        }
        outcome
    }

    /// The replicas `topic`'s mark must wait for in `epoch`: the view's `isr` and every
    /// replica still being added. Drops expansions that are settled: another epoch, refused,
    /// shown by the view, or committed or unknown for longer than [`SETTLE`] at `now`.
    pub(crate) fn counted(
        &mut self,
        topic: &str,
        epoch: u64,
        isr: &[NodeId],
        now: Instant,
    ) -> Vec<NodeId> {
        let mut out = isr.to_vec();
        let Some(list) = self.by_topic.get_mut(topic) else {
            return out;
        };
        list.retain(|e| {
            if e.epoch != epoch || e.added.iter().all(|n| isr.contains(n)) {
                return false;
            }
            match e.outcome.lock().ok().and_then(|o| *o) {
                None => true,
                Some((Outcome::Refused, _)) => false,
                Some((_, at)) => now.saturating_duration_since(at) < SETTLE,
            }
        });
        for e in list.iter() {
            for n in &e.added {
                if !out.contains(n) {
                    out.push(*n);
                }
            }
        }
        if list.is_empty() {
            self.by_topic.remove(topic);
        }
        out
    }

    /// True when a hold of `topic`'s mark by a replica still being added should be logged
    /// now (at most once per [`HOLD_REPORT_EVERY`]), so an operator can tell why acks wait.
    pub(crate) fn report_hold(&mut self, topic: &str, now: Instant) -> bool {
        let due = self
            .reported_hold
            .get(topic)
            .is_none_or(|at| now.saturating_duration_since(*at) >= HOLD_REPORT_EVERY);
        if due {
            self.reported_hold.insert(topic.to_owned(), now);
        }
        due
    }
}

/// Reports `outcome` in `slot` (called by the task that proposed the change).
pub(crate) fn report(slot: &OutcomeSlot, outcome: Outcome) {
    if let Ok(mut s) = slot.lock() {
        *s = Some((outcome, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::high_water::next_high_water;

    #[test]
    fn a_replica_proposed_for_the_isr_holds_the_mark_before_the_view_shows_it() {
        // Leader 1 with replica 2 in sync; replica 3 caught up to 100 and is proposed.
        let mut ex = Expansions::default();
        let now = Instant::now();
        let _slot = ex.proposed("t", 7, &[1, 2], &[1, 2, 3]);
        let durable = |r: NodeId| Some([0, 500, 500, 100][r as usize]);
        let counted = ex.counted("t", 7, &[1, 2], now);
        assert_eq!(counted, vec![1, 2, 3]);
        // The view still says [1, 2]: with it alone the mark would pass what 3 holds, and 3
        // may be elected as soon as Raft applies the change.
        assert_eq!(next_high_water(&[1, 2], durable, 2, Some(100)), Some(500));
        assert_eq!(next_high_water(&counted, durable, 2, Some(100)), None);
    }

    #[test]
    fn an_expansion_ends_when_the_view_shows_it_or_it_is_refused_or_the_epoch_moves() {
        let now = Instant::now();
        let mut ex = Expansions::default();
        ex.proposed("t", 7, &[1], &[1, 3]);
        assert_eq!(ex.counted("t", 7, &[1, 3], now), vec![1, 3]);
        assert_eq!(ex.counted("t", 7, &[1], now), vec![1], "settled once shown");

        let slot = ex.proposed("t", 7, &[1], &[1, 3]);
        report(&slot, Outcome::Refused);
        assert_eq!(
            ex.counted("t", 7, &[1], now),
            vec![1],
            "refused: never applies"
        );

        ex.proposed("t", 7, &[1], &[1, 3]);
        assert_eq!(ex.counted("t", 8, &[1], now), vec![1], "another epoch");
        assert_eq!(ex.counted("t", 7, &[1], now), vec![1], "and it is gone");
    }

    #[test]
    fn a_committed_or_unknown_expansion_the_view_never_shows_is_dropped_after_settle() {
        let mut ex = Expansions::default();
        let slot = ex.proposed("t", 7, &[1, 2], &[1, 2, 3]);
        report(&slot, Outcome::Unknown);
        let now = Instant::now();
        assert_eq!(ex.counted("t", 7, &[1, 2], now), vec![1, 2, 3]);
        assert_eq!(ex.counted("t", 7, &[1, 2], now + SETTLE), vec![1, 2]);
        // Without an outcome it stays counted however long it takes.
        ex.proposed("t", 7, &[1, 2], &[1, 2, 3]);
        assert_eq!(
            ex.counted("t", 7, &[1, 2], now + SETTLE * 10),
            vec![1, 2, 3]
        );
        // A shrink adds nobody and is not recorded.
        ex.proposed("u", 7, &[1, 2], &[1]);
        assert_eq!(ex.counted("u", 7, &[1], now), vec![1]);
    }

    #[test]
    fn a_hold_is_reported_at_most_every_two_seconds_per_topic() {
        let mut ex = Expansions::default();
        let now = Instant::now();
        assert!(ex.report_hold("t", now));
        assert!(!ex.report_hold("t", now + Duration::from_millis(1999)));
        assert!(ex.report_hold("u", now));
        assert!(ex.report_hold("t", now + HOLD_REPORT_EVERY));
    }
}
