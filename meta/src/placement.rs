//! Fragment placement: a pure, deterministic policy that spreads fragment leaders and replicas
//! evenly over the live nodes (leader counts within one of even), and re-runs it when nodes
//! join, leave or expire ([`rebalance`]).
//!
//! Safety rules (Kafka's, KIP-101 and the ISR model): leadership only ever moves to a live
//! member of the fragment's in-sync replicas; a replica added to restore the replication factor
//! starts outside the ISR (it must catch up first); a node whose lease ended leaves the ISR but
//! keeps its replica assignment (it comes back); a removed node loses its assignments.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::NodeId;
use crate::{Fragment, TopicRecord};

/// Why placement was re-run; carried by the command that re-ran it and recorded on every
/// fragment it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "node")]
pub enum PlacementReason {
    /// The fragment was placed when its topic was created.
    Created,
    /// A node registered (started, restarted or returned).
    NodeJoined(NodeId),
    /// A node was removed from the cluster.
    NodeRemoved(NodeId),
    /// One or more nodes' leases ended.
    LeasesExpired,
    /// The leader changed the in-sync replica set (a replica fell behind or caught up).
    IsrChanged,
    /// A replica found its copy damaged and left the in-sync replicas (issue #13).
    DamagedCopy(NodeId),
}

impl std::fmt::Display for PlacementReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlacementReason::Created => write!(f, "topic created"),
            PlacementReason::NodeJoined(n) => write!(f, "node {n} joined"),
            PlacementReason::NodeRemoved(n) => write!(f, "node {n} removed"),
            PlacementReason::LeasesExpired => write!(f, "leases expired"),
            PlacementReason::IsrChanged => write!(f, "in-sync replicas changed"),
            PlacementReason::DamagedCopy(n) => write!(f, "node {n} found its copy damaged"),
        }
    }
}

/// One fragment's placement change made by [`rebalance`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementChange {
    /// Topic name.
    pub topic: String,
    /// Fragment id.
    pub fragment: u32,
    /// Leader before.
    pub old_leader: NodeId,
    /// Leader after.
    pub leader: NodeId,
    /// Leader epoch after (bumped when the leader changed).
    pub leader_epoch: u64,
    /// Replicas assigned by this change (outside the ISR until they catch up).
    pub replicas_added: Vec<NodeId>,
    /// Replicas unassigned (removed nodes).
    pub replicas_removed: Vec<NodeId>,
    /// Nodes that left the in-sync replica set (not live).
    pub isr_removed: Vec<NodeId>,
    /// Why.
    pub reason: PlacementReason,
}

/// Leader count per live node over `topics` (nodes without a fragment count 0).
pub fn leader_counts(
    topics: &BTreeMap<String, TopicRecord>,
    live: &[NodeId],
) -> BTreeMap<NodeId, usize> {
    let mut counts: BTreeMap<NodeId, usize> = live.iter().map(|n| (*n, 0)).collect();
    for t in topics.values() {
        for f in &t.fragments {
            if let Some(c) = counts.get_mut(&f.leader) {
                *c += 1;
            }
        }
    }
    counts
}

/// Places `fragments` new fragments with `rf` copies each over `live` (ascending, non-empty,
/// `rf <= live.len()`): each leader is the live node leading the fewest fragments so far (lowest
/// id on ties); its replicas are the next `rf - 1` nodes after it in id order.
pub fn place(
    topics: &BTreeMap<String, TopicRecord>,
    live: &[NodeId],
    fragments: u32,
    rf: u32,
) -> Vec<Fragment> {
    let mut counts = leader_counts(topics, live);
    let mut out = Vec::with_capacity(fragments as usize);
    for id in 0..fragments {
        let Some((&leader, _)) = counts.iter().min_by_key(|(n, c)| (**c, **n)) else {
            break;
        };
        if let Some(c) = counts.get_mut(&leader) {
            *c += 1;
        }
        let at = live.iter().position(|n| *n == leader).unwrap_or(0);
        let replicas: Vec<NodeId> = (0..rf as usize)
            .map(|k| live[(at + k) % live.len()])
            .collect();
        out.push(Fragment {
            id,
            leader,
            leader_epoch: 0,
            isr: replicas.clone(),
            replicas,
            last_change: Some(PlacementReason::Created),
        });
    }
    out
}

/// Makes `to` the leader of `f`: first in `replicas` and `isr`, leader epoch bumped.
pub(crate) fn set_leader(f: &mut Fragment, to: NodeId) {
    f.leader = to;
    f.leader_epoch += 1;
    for list in [&mut f.replicas, &mut f.isr] {
        if let Some(at) = list.iter().position(|n| *n == to) {
            let n = list.remove(at);
            list.insert(0, n);
        }
    }
}

/// Moves every fragment `node` leads to the next leader epoch, still led by `node`, and
/// reports each as a change for `reason`: `node` restarted (a new run registered), and its
/// previous run may have lost bytes it wrote but never flushed that replicas already copied.
/// In a new epoch those replicas cut back to where it begins (KIP-101); in the same epoch
/// the restarted leader would write different messages at offsets they already hold, and
/// nobody would cut (issue #13: copies of equal length differing in the middle).
pub(crate) fn new_leader_epochs(
    topics: &mut BTreeMap<String, TopicRecord>,
    node: NodeId,
    reason: PlacementReason,
) -> Vec<PlacementChange> {
    let mut changes = Vec::new();
    for (name, topic) in topics.iter_mut() {
        for f in topic.fragments.iter_mut().filter(|f| f.leader == node) {
            f.leader_epoch += 1;
            f.last_change = Some(reason);
            changes.push(PlacementChange {
                topic: name.clone(),
                fragment: f.id,
                old_leader: node,
                leader: node,
                leader_epoch: f.leader_epoch,
                replicas_added: Vec::new(),
                replicas_removed: Vec::new(),
                isr_removed: Vec::new(),
                reason,
            });
        }
    }
    changes
}

/// Re-runs placement over every fragment of `topics`, given the `registered` nodes and the
/// `live` ones (ascending), in four deterministic passes (topics by name, fragments by id):
///
/// 1. a fragment whose leader is fenced moves to the first live in-sync replica (leader
///    epoch + 1); with none it keeps its leader and stays offline (never elect a replica that
///    may miss acknowledged data);
/// 2. fenced nodes leave the ISR (except an offline fragment's leader); unregistered
///    (removed) nodes leave the replicas too;
///
/// where a node is fenced when it is not registered, or, only when `reason` is
/// [`PlacementReason::LeasesExpired`] (the supervisor's check), not live;
/// 3. a fragment with fewer replicas than its topic's replication factor gets live nodes
///    holding the fewest replicas (lowest id on ties), outside the ISR;
/// 4. leaders are balanced: while a fragment's leader leads at least two more fragments than
///    one of its live in-sync replicas, leadership moves there, so leader counts end within
///    one of even wherever the ISRs allow.
///
/// Returns one [`PlacementChange`] per changed fragment; a second run with the same inputs
/// changes nothing.
pub fn rebalance(
    topics: &mut BTreeMap<String, TopicRecord>,
    registered: &BTreeSet<NodeId>,
    live: &[NodeId],
    reason: PlacementReason,
) -> Vec<PlacementChange> {
    let is_live = |n: &NodeId| live.binary_search(n).is_ok();
    // Only the supervisor's lease check fences a node whose lease ended (issue #13): it waits
    // half a lease after a Raft election, during which no lease could be renewed. A join or a
    // removal applied right after an election must not take the other nodes out of the ISRs
    // (a restarted leader with a damaged copy was left the only in-sync replica that way, and
    // made the healthy replicas truncate to it).
    let fence = matches!(reason, PlacementReason::LeasesExpired);
    let fenced = |n: &NodeId| !registered.contains(n) || (fence && !is_live(n));
    let before: BTreeMap<(String, u32), Fragment> = topics
        .iter()
        .flat_map(|(name, t)| {
            t.fragments
                .iter()
                .map(|f| ((name.clone(), f.id), f.clone()))
        })
        .collect();
    // 1 and 2: fail over, shrink the ISR, drop removed nodes.
    for topic in topics.values_mut() {
        for f in topic.fragments.iter_mut() {
            if fenced(&f.leader) {
                if let Some(next) = f.isr.iter().copied().find(|n| is_live(n) && !fenced(n)) {
                    set_leader(f, next);
                }
            }
            let leader = f.leader;
            f.isr.retain(|n| !fenced(n) || *n == leader);
            f.replicas
                .retain(|n| registered.contains(n) || *n == leader);
        }
    }
    // 3: restore the replication factor.
    let mut held: BTreeMap<NodeId, usize> = live.iter().map(|n| (*n, 0)).collect();
    for f in topics.values().flat_map(|t| &t.fragments) {
        for r in &f.replicas {
            if let Some(c) = held.get_mut(r) {
                *c += 1;
            }
        }
    }
    for topic in topics.values_mut() {
        let rf = topic.replication_factor as usize;
        for f in topic.fragments.iter_mut() {
            while f.replicas.len() < rf {
                let Some((&n, _)) = held
                    .iter()
                    .filter(|(n, _)| !f.replicas.contains(n))
                    .min_by_key(|(n, c)| (**c, **n))
                else {
                    break;
                };
                f.replicas.push(n);
                if let Some(c) = held.get_mut(&n) {
                    *c += 1;
                }
            }
        }
    }
    // 4: balance leaders among live in-sync replicas.
    let mut counts = leader_counts(topics, live);
    loop {
        let mut moved = false;
        for topic in topics.values_mut() {
            for f in topic.fragments.iter_mut() {
                let Some(&from) = counts.get(&f.leader) else {
                    continue;
                };
                let best = f
                    .isr
                    .iter()
                    .filter(|n| **n != f.leader)
                    .filter_map(|n| counts.get(n).map(|c| (*c, *n)))
                    .min();
                if let Some((to_count, to)) = best {
                    if from >= to_count + 2 {
                        if let Some(c) = counts.get_mut(&f.leader) {
                            *c -= 1;
                        }
                        if let Some(c) = counts.get_mut(&to) {
                            *c += 1;
                        }
                        set_leader(f, to);
                        moved = true;
                    }
                }
            }
        }
        if !moved {
            break;
        }
    }
    // Report and stamp what changed.
    let mut changes = Vec::new();
    for (name, topic) in topics.iter_mut() {
        for f in topic.fragments.iter_mut() {
            let Some(old) = before.get(&(name.clone(), f.id)) else {
                continue;
            };
            if old.leader == f.leader && old.replicas == f.replicas && old.isr == f.isr {
                continue;
            }
            let leader_epoch = if old.leader == f.leader {
                old.leader_epoch
            } else {
                old.leader_epoch + 1
            };
            f.leader_epoch = leader_epoch;
            f.last_change = Some(reason);
            changes.push(PlacementChange {
                topic: name.clone(),
                fragment: f.id,
                old_leader: old.leader,
                leader: f.leader,
                leader_epoch,
                replicas_added: f
                    .replicas
                    .iter()
                    .filter(|n| !old.replicas.contains(n))
                    .copied()
                    .collect(),
                replicas_removed: old
                    .replicas
                    .iter()
                    .filter(|n| !f.replicas.contains(n))
                    .copied()
                    .collect(),
                isr_removed: old
                    .isr
                    .iter()
                    .filter(|n| !f.isr.contains(n))
                    .copied()
                    .collect(),
                reason,
            });
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaders_spread_within_one_of_even() {
        let live = [1, 2, 3];
        let mut topics = BTreeMap::new();
        for (i, frags) in [1u32, 4, 2, 5, 3].iter().enumerate() {
            let placed = place(&topics, &live, *frags, 3);
            topics.insert(
                format!("t{i}"),
                TopicRecord {
                    replication_factor: 3,
                    retain_hours: 1,
                    policy: Default::default(),
                    fragments: placed,
                },
            );
        }
        let counts = leader_counts(&topics, &live);
        let (min, max) = (
            counts.values().min().copied().unwrap_or(0),
            counts.values().max().copied().unwrap_or(0),
        );
        assert!(max - min <= 1, "{counts:?}");
        assert_eq!(counts.values().sum::<usize>(), 15);
        for f in topics.values().flat_map(|t| &t.fragments) {
            assert_eq!(f.replicas[0], f.leader);
            let mut r = f.replicas.clone();
            r.sort_unstable();
            r.dedup();
            assert_eq!(r.len(), 3, "replicas on distinct nodes");
        }
    }
}
