//! Fragment assignment for subscription groups (issue #7 groundwork; `pirius.md` §7, §16):
//! which members of a group read which fragments of a topic, computed inside Raft's apply, so
//! it must be a pure function of the replicated state.
//!
//! - `default` policy (Pirius option 0, §7.1): every member gets every fragment.
//! - `distribution` policy (UNIQUE_PER_FRAGMENT, §7.2), made deterministic and without the
//!   original's quirks (ids colliding across publishers, counting fragments as publishers,
//!   stale entries): each fragment goes to exactly one member; members hold ⌊F/n⌋ or ⌈F/n⌉
//!   fragments; a fragment keeps its owner whenever that owner is still a member and not over
//!   its share, so a join or a leave moves as few fragments as balance allows; ties go to the
//!   smallest member id.

use std::collections::{BTreeMap, BTreeSet};

use super::FragmentPolicy;

/// A subscriber's id within its group (chosen by the subscriber).
pub type MemberId = String;

/// Fragment id -> the members that read it.
pub type Assignment = BTreeMap<u32, Vec<MemberId>>;

/// The assignment of `fragments` fragments (ids `0..fragments`) to `members` under `policy`,
/// keeping what it can of `previous` (the last assignment). Empty when there are no members.
pub fn assign(
    policy: FragmentPolicy,
    fragments: u32,
    members: &BTreeSet<MemberId>,
    previous: &Assignment,
) -> Assignment {
    if members.is_empty() {
        return Assignment::new();
    }
    match policy {
        FragmentPolicy::Default => (0..fragments)
            .map(|f| (f, members.iter().cloned().collect()))
            .collect(),
        FragmentPolicy::Distribution => distribute(fragments, members, previous),
    }
}

fn distribute(fragments: u32, members: &BTreeSet<MemberId>, previous: &Assignment) -> Assignment {
    let n = members.len() as u32;
    let (base, extra) = (fragments / n, fragments % n);
    // The members allowed one fragment more than the base share: those that already hold the
    // most (stickiness), ties by id.
    let held = |m: &MemberId| {
        previous
            .iter()
            .filter(|(f, owners)| **f < fragments && owners.first() == Some(m))
            .count() as u32
    };
    let mut by_held: Vec<&MemberId> = members.iter().collect();
    by_held.sort_by(|a, b| held(b).cmp(&held(a)).then(a.cmp(b)));
    let quota: BTreeMap<&MemberId, u32> = by_held
        .iter()
        .enumerate()
        .map(|(i, m)| (*m, base + u32::from((i as u32) < extra)))
        .collect();
    let mut count: BTreeMap<&MemberId, u32> = members.iter().map(|m| (m, 0)).collect();
    let mut out = Assignment::new();
    // Keep previous owners within their quota, fragments in order.
    for f in 0..fragments {
        let Some(owner) = previous.get(&f).and_then(|o| o.first()) else {
            continue;
        };
        let Some(member) = members.get(owner) else {
            continue;
        };
        if count[member] < quota[member] {
            *count.entry(member).or_default() += 1;
            out.insert(f, vec![member.clone()]);
        }
    }
    // The rest to whoever is furthest below quota, ties by id.
    for f in 0..fragments {
        if out.contains_key(&f) {
            continue;
        }
        let Some(member) = members
            .iter()
            .filter(|m| count[m] < quota[m])
            .max_by(|a, b| {
                (quota[a] - count[a])
                    .cmp(&(quota[b] - count[b]))
                    .then(b.cmp(a))
            })
        else {
            continue;
        };
        *count.entry(member).or_default() += 1;
        out.insert(f, vec![member.clone()]);
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn members(ids: &[&str]) -> BTreeSet<MemberId> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    fn owners(a: &Assignment) -> Vec<&str> {
        a.values().map(|o| o[0].as_str()).collect()
    }

    #[test]
    fn default_gives_every_member_every_fragment() {
        let a = assign(
            FragmentPolicy::Default,
            3,
            &members(&["a", "b"]),
            &Assignment::new(),
        );
        assert_eq!(a.len(), 3);
        assert!(a.values().all(|o| o == &["a", "b"]));
    }

    #[test]
    fn distribution_spreads_keeps_owners_and_moves_little() {
        let d = FragmentPolicy::Distribution;
        let one = assign(d, 4, &members(&["a"]), &Assignment::new());
        assert_eq!(owners(&one), ["a", "a", "a", "a"]);
        // b joins: two fragments move to it, a keeps the first two.
        let two = assign(d, 4, &members(&["a", "b"]), &one);
        assert_eq!(owners(&two), ["a", "a", "b", "b"]);
        // c joins: each gives up what is over its share.
        let three = assign(d, 4, &members(&["a", "b", "c"]), &two);
        assert_eq!(owners(&three).iter().filter(|o| **o == "c").count(), 1);
        let moved = (0..4).filter(|f| two[f] != three[f]).count();
        assert_eq!(moved, 1, "one fragment moves to the newcomer");
        // a leaves: only a's fragments move.
        let left = assign(d, 4, &members(&["b", "c"]), &three);
        for f in 0..4 {
            if three[&f][0] != "a" {
                assert_eq!(left[&f], three[&f], "fragment {f} stays");
            }
        }
        assert!(assign(d, 4, &BTreeSet::new(), &left).is_empty());
    }

    proptest! {
        /// Any sequence of joins and leaves: every fragment has exactly one owner who is a
        /// member, shares differ by at most one, the same inputs give the same assignment
        /// (every node computes it in apply), and a leave moves only the leaver's fragments.
        #[test]
        fn distribution_is_exact_balanced_and_deterministic(
            fragments in 0u32..12,
            script in proptest::collection::vec((any::<bool>(), 0u8..6), 1..30),
        ) {
            let d = FragmentPolicy::Distribution;
            let mut set = BTreeSet::new();
            let mut a = Assignment::new();
            for (join, who) in script {
                let id = format!("m{who}");
                let leaving = !join && set.contains(&id);
                if join { set.insert(id.clone()); } else { set.remove(&id); }
                let next = assign(d, fragments, &set, &a);
                prop_assert_eq!(&next, &assign(d, fragments, &set, &a), "deterministic");
                if set.is_empty() {
                    prop_assert!(next.is_empty());
                } else {
                    prop_assert_eq!(next.len() as u32, fragments, "every fragment owned");
                    let mut share: BTreeMap<&str, u32> = set.iter().map(|m| (m.as_str(), 0)).collect();
                    for o in next.values() {
                        prop_assert_eq!(o.len(), 1);
                        prop_assert!(set.contains(&o[0]), "owner is a member");
                        *share.entry(o[0].as_str()).or_default() += 1;
                    }
                    let (lo, hi) = (share.values().min().copied().unwrap_or(0), share.values().max().copied().unwrap_or(0));
                    prop_assert!(hi - lo <= 1, "balanced: {:?}", share);
                    if leaving {
                        for (f, o) in &a {
                            if o[0] != id {
                                prop_assert_eq!(&next[f], o, "a leave moves only the leaver's fragments");
                            }
                        }
                    }
                }
                a = next;
            }
        }
    }
}
