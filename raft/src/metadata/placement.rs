//! Fragment placement: a pure, deterministic policy that spreads fragment leaders and replicas
//! evenly over the live nodes (leader counts within one of even).

use std::collections::BTreeMap;

use crate::metadata::{Fragment, TopicRecord};
use crate::NodeId;

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
        });
    }
    out
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
