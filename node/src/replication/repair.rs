//! Damaged copies repair themselves (issue #13, defect 3). A log found damaged (a checksum
//! mismatch at recovery or on a read, or recovery cut below the high-water mark it had
//! recorded) must neither lead nor make others truncate, and must not count as in sync:
//!
//! 1. while this node is in the fragment's ISR with others, it proposes `LeaveIsr` for itself
//!    (leadership moves first when it leads); meanwhile its writer refuses appends and its
//!    replication endpoint answers "not leader", so no follower cuts its log to the damage;
//! 2. once out of the ISR it cuts its log back to where the damage starts and the replica
//!    fetcher copies the rest again from the leader; the leader takes it back into the ISR
//!    when it has caught up;
//! 3. the only copy (or the only in-sync one) has nothing to repair from: it says so in the
//!    log and in `/v1/cluster/health`, and damaged bytes stay unreadable (never served).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{error, info, warn};
use zper_store::Store;

use super::view::PlacementView;
use crate::metrics::Counters;

/// How often damaged logs are reviewed.
const REVIEW: Duration = Duration::from_millis(100);
/// How long a proposed `LeaveIsr` is given to apply before it is proposed again.
const RETRY: Duration = Duration::from_secs(1);

/// What to do with one damaged copy (pure; issue #13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Propose leaving the ISR.
    LeaveIsr,
    /// Out of the ISR: cut back and fetch the rest again.
    Repair,
    /// Nothing to repair from (the only copy, or the only one in sync): report and keep
    /// serving what is intact.
    Report,
}

/// The step for a damaged copy on node `me` given the fragment's replicas and ISR.
pub(crate) fn step(me: u64, replicas: &[u64], isr: &[u64]) -> Step {
    let others_in_sync = isr.iter().any(|n| *n != me);
    if replicas.len() <= 1 || !others_in_sync {
        Step::Report
    } else if isr.contains(&me) {
        Step::LeaveIsr
    } else {
        Step::Repair
    }
}

/// The review state kept by the replication leader thread.
#[derive(Default)]
pub(crate) struct Repairs {
    last_review: Option<Instant>,
    proposed: HashMap<String, Instant>,
    reported: HashMap<String, u64>,
    corruptions: HashMap<String, u64>,
    /// Logs whose missing checksum sidecars (found when opened) were counted.
    unchecked_counted: std::collections::HashSet<String>,
}

impl Repairs {
    /// Reviews every damaged log of `store` (at most every [`REVIEW`]).
    pub(crate) fn review(
        &mut self,
        store: &Store,
        view: &PlacementView,
        cluster: &zper_raft::ClusterNode,
        runtime: &tokio::runtime::Handle,
        counters: &Arc<Counters>,
    ) {
        if self.last_review.is_some_and(|t| t.elapsed() < REVIEW) {
            return;
        }
        self.last_review = Some(Instant::now());
        for log in store.topics() {
            let key = log.name().to_owned();
            let seen = log.corruptions().unwrap_or(0);
            let before = self.corruptions.insert(key.clone(), seen).unwrap_or(0);
            if seen > before {
                Counters::add(&counters.integrity.corruption_detected, seen - before);
            }
            if !self.unchecked_counted.contains(&key) {
                self.unchecked_counted.insert(key.clone());
                let missing = log.unchecked_segments().map_or(0, |u| u.len() as u64);
                Counters::add(&counters.integrity.checksums_missing, missing);
            }
            let Ok(Some(damage)) = log.damage() else {
                continue;
            };
            let Some(frag) = view.fragment(&key) else {
                // Not (yet) in this node's metadata: wait for it.
                continue;
            };
            match step(view.me(), &frag.replicas, &frag.isr) {
                Step::LeaveIsr => {
                    if self.proposed.get(&key).is_some_and(|t| t.elapsed() < RETRY) {
                        continue;
                    }
                    self.proposed.insert(key.clone(), Instant::now());
                    warn!(topic = %key, at = damage.at, "damaged copy leaves the in-sync replicas");
                    Counters::add(&counters.integrity.isr_left, 1);
                    let node = cluster.clone();
                    let command = zper_raft::metadata::Command::LeaveIsr {
                        topic: frag.topic.clone(),
                        fragment: frag.id,
                        node: view.me(),
                    };
                    runtime.spawn(async move {
                        if let Err(e) = node.propose(command).await {
                            tracing::debug!(error = %e, "LeaveIsr not committed");
                        }
                    });
                }
                Step::Repair => match log.repaired() {
                    Ok(()) => {
                        info!(topic = %key, at = damage.at, "damaged copy cut back: fetching the rest from the leader");
                        Counters::add(&counters.integrity.copy_repaired, 1);
                        self.proposed.remove(&key);
                    }
                    Err(e) => error!(topic = %key, error = %e, "cannot cut back a damaged copy"),
                },
                Step::Report => {
                    if self.reported.get(&key) != Some(&damage.at) {
                        self.reported.insert(key.clone(), damage.at);
                        error!(
                            topic = %key,
                            at = damage.at,
                            "damaged copy with no in-sync replica to repair from: damaged bytes are not served"
                        );
                    }
                    // Only the one and only copy accepts its cut: what is left is intact and
                    // there is nothing to repair from. A damaged copy that other replicas may
                    // hold more of stays damaged: it neither serves them nor makes them
                    // truncate (leader.rs, produce/worker.rs) until an in-sync replica is back.
                    if damage.cut && frag.replicas.len() <= 1 {
                        let _ = log.repaired();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_copy_leaves_the_isr_then_repairs_and_a_lone_one_reports() {
        assert_eq!(step(1, &[1, 2, 3], &[1, 2, 3]), Step::LeaveIsr);
        assert_eq!(step(2, &[1, 2, 3], &[1, 3]), Step::Repair);
        assert_eq!(
            step(1, &[1, 2, 3], &[1]),
            Step::Report,
            "the only one in sync"
        );
        assert_eq!(step(1, &[1], &[1]), Step::Report, "the only copy");
        assert_eq!(
            step(3, &[1, 2, 3], &[]),
            Step::Report,
            "nobody to fetch from"
        );
    }
}
