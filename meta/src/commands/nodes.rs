//! Node commands: [`Command::RegisterNode`], [`Command::Heartbeat`], [`Command::ExpireLeases`]
//! and [`Command::RemoveNode`], each re-running placement where nodes come or go.
//!
//! [`Command::RegisterNode`]: crate::Command::RegisterNode
//! [`Command::Heartbeat`]: crate::Command::Heartbeat
//! [`Command::ExpireLeases`]: crate::Command::ExpireLeases
//! [`Command::RemoveNode`]: crate::Command::RemoveNode

use crate::placement::{new_leader_epochs, rebalance, PlacementChange, PlacementReason};
use crate::{Applied, CommandResult, Metadata, MetadataError, NodeEndpoints, NodeId, NodeRecord};

impl Metadata {
    /// A node joins or re-registers; a new incarnation moves what it leads to a new epoch.
    pub(super) fn apply_register_node(
        &mut self,
        id: NodeId,
        endpoints: &NodeEndpoints,
        now_ms: u64,
        lease_ms: u64,
        incarnation: u64,
    ) -> CommandResult {
        let restarted = incarnation != 0
            && self
                .nodes
                .get(&id)
                .is_some_and(|n| n.incarnation != incarnation);
        self.nodes.insert(
            id,
            NodeRecord {
                endpoints: endpoints.clone(),
                lease_until_ms: now_ms.saturating_add(lease_ms),
                incarnation,
            },
        );
        let reason = PlacementReason::NodeJoined(id);
        let mut changes = if restarted {
            new_leader_epochs(&mut self.topics, id, reason)
        } else {
            Vec::new()
        };
        changes.extend(self.rerun_placement(now_ms, reason));
        Ok(Applied::Placement(changes))
    }

    /// A node renews its lease (never shortening it).
    pub(super) fn apply_heartbeat(
        &mut self,
        id: NodeId,
        now_ms: u64,
        lease_ms: u64,
    ) -> CommandResult {
        let node = self
            .nodes
            .get_mut(&id)
            .ok_or(MetadataError::UnknownNode(id))?;
        node.lease_until_ms = node.lease_until_ms.max(now_ms.saturating_add(lease_ms));
        Ok(Applied::Done)
    }

    /// Placement is re-run at `now_ms` over the nodes whose lease is current.
    pub(super) fn apply_expire_leases(&mut self, now_ms: u64) -> CommandResult {
        Ok(Applied::Placement(
            self.rerun_placement(now_ms, PlacementReason::LeasesExpired),
        ))
    }

    /// A node leaves the cluster (and the Dolly leadership, if it held it).
    pub(super) fn apply_remove_node(&mut self, id: NodeId, now_ms: u64) -> CommandResult {
        if self.nodes.remove(&id).is_none() {
            return Err(MetadataError::UnknownNode(id));
        }
        if self.dolly_leader == Some(id) {
            self.dolly_leader = None;
        }
        Ok(Applied::Placement(
            self.rerun_placement(now_ms, PlacementReason::NodeRemoved(id)),
        ))
    }

    /// Re-runs placement ([`rebalance`]) over the nodes registered and live at `now_ms`.
    fn rerun_placement(&mut self, now_ms: u64, reason: PlacementReason) -> Vec<PlacementChange> {
        let live = self.live_nodes(now_ms);
        let registered = self.nodes.keys().copied().collect();
        rebalance(&mut self.topics, &registered, &live, reason)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_commands::{create, register};
    use crate::placement::leader_counts;
    use crate::{
        Applied, Command, FragmentPolicy, Metadata, NodeEndpoints, NodeId, PlacementReason,
    };

    fn script() -> Vec<Command> {
        vec![
            register(1, 0),
            register(2, 0),
            register(3, 0),
            create("alpha", 3, 1),
            create("beta", 2, 2),
            Command::Heartbeat {
                id: 1,
                now_ms: 9_000,
                lease_ms: 10_000,
            },
            Command::Heartbeat {
                id: 3,
                now_ms: 9_000,
                lease_ms: 10_000,
            },
            Command::ExpireLeases { now_ms: 12_000 },
            create("gamma", 4, 12_001),
            Command::SetDollyLeader { id: 3 },
        ]
    }

    #[test]
    fn the_next_lease_end_is_the_earliest_one_still_to_come() {
        let mut m = Metadata::default();
        assert_eq!(m.next_lease_end(0), None);
        for c in [register(1, 0), register(2, 500), register(3, 2_000)] {
            m.apply(&c).expect("register");
        }
        // Leases of 10 s: ending at 10_000, 10_500 and 12_000.
        assert_eq!(m.next_lease_end(0), Some(10_000));
        assert_eq!(m.next_lease_end(10_000), Some(10_500));
        assert_eq!(m.next_lease_end(11_000), Some(12_000));
        assert_eq!(m.next_lease_end(12_000), None);
    }

    #[test]
    fn same_commands_give_the_same_state_on_every_node() {
        let run = || {
            let mut m = Metadata::default();
            for c in script() {
                let _ = m.apply(&c);
            }
            m
        };
        let (a, b) = (run(), run());
        assert_eq!(a, b);
        assert_eq!(a.state_hash(), b.state_hash());
        let mut c = run();
        let _ = c.apply(&Command::DeleteTopic {
            name: "beta".into(),
        });
        assert_ne!(a.state_hash(), c.state_hash());
    }

    #[test]
    fn expired_leader_moves_to_an_in_sync_replica_with_a_new_epoch() {
        let mut m = Metadata::default();
        for c in &script()[..7] {
            m.apply(c).expect("applies");
        }
        let led_by_2: Vec<(String, u32)> = m
            .topics
            .iter()
            .flat_map(|(n, t)| {
                t.fragments
                    .iter()
                    .filter(|f| f.leader == 2)
                    .map(|f| (n.clone(), f.id))
            })
            .collect();
        assert!(!led_by_2.is_empty());
        let moved = m
            .apply(&Command::ExpireLeases { now_ms: 12_000 })
            .expect("applies");
        let Applied::Placement(changes) = moved else {
            unreachable!("ExpireLeases answers with the placement changes");
        };
        let mut leaders_moved: Vec<(String, u32)> = changes
            .iter()
            .filter(|c| c.leader != c.old_leader)
            .map(|c| (c.topic.clone(), c.fragment))
            .collect();
        leaders_moved.sort();
        assert_eq!(leaders_moved, led_by_2);
        assert!(changes
            .iter()
            .all(|c| c.reason == PlacementReason::LeasesExpired && c.isr_removed == vec![2]));
        for (name, id) in led_by_2 {
            let f = &m.topics[&name].fragments[id as usize];
            assert_ne!(f.leader, 2);
            assert_eq!(f.leader_epoch, 1);
            assert_eq!(f.last_change, Some(PlacementReason::LeasesExpired));
            assert_eq!(f.isr[0], f.leader);
            assert_eq!(f.replicas[0], f.leader);
        }
        for f in m.topics.values().flat_map(|t| &t.fragments) {
            assert!(!f.isr.contains(&2), "an expired node leaves every ISR");
            assert!(f.replicas.contains(&2), "but keeps its assignments");
        }
        // New topics go to live nodes only.
        let Applied::Topic(t) = m.apply(&create("late", 4, 12_001)).expect("creates") else {
            unreachable!("CreateTopic answers with the topic");
        };
        assert!(t
            .fragments
            .iter()
            .all(|f| f.leader != 2 && !f.replicas.contains(&2)));
        assert_eq!(t.replication_factor, 2);
    }

    fn fragments(m: &Metadata) -> Vec<&crate::Fragment> {
        m.topics.values().flat_map(|t| &t.fragments).collect()
    }

    #[test]
    fn a_removed_node_loses_its_assignments_to_live_nodes_outside_the_isr() {
        let mut m = Metadata::default();
        for id in 1..=4 {
            m.apply(&register(id, 0)).expect("register");
        }
        m.apply(&Command::CreateTopic {
            name: "t".into(),
            fragments: Some(8),
            replication_factor: Some(2),
            retain_hours: None,
            policy: FragmentPolicy::Distribution,
            now_ms: 1,
        })
        .expect("create");
        let held_by_3: Vec<u32> = m.topics["t"]
            .fragments
            .iter()
            .filter(|f| f.replicas.contains(&3))
            .map(|f| f.id)
            .collect();
        assert!(!held_by_3.is_empty());
        let Applied::Placement(changes) = m
            .apply(&Command::RemoveNode { id: 3, now_ms: 2 })
            .expect("remove")
        else {
            unreachable!("RemoveNode answers with the placement changes");
        };
        let reassigned: Vec<u32> = changes
            .iter()
            .filter(|c| !c.replicas_removed.is_empty())
            .map(|c| c.fragment)
            .collect();
        assert_eq!(reassigned, held_by_3);
        for c in &changes {
            assert_eq!(c.reason, PlacementReason::NodeRemoved(3));
            if held_by_3.contains(&c.fragment) {
                assert_eq!(c.replicas_removed, vec![3]);
                assert_eq!(c.replicas_added.len(), 1);
            } else {
                assert_ne!(c.leader, c.old_leader, "others only rebalance leaders");
            }
        }
        let counts = leader_counts(&m.topics, &[1, 2, 4]);
        let (min, max) = (counts.values().min(), counts.values().max());
        assert!(max.zip(min).is_some_and(|(a, b)| a - b <= 1), "{counts:?}");
        for f in fragments(&m) {
            assert!(!f.replicas.contains(&3) && !f.isr.contains(&3));
            assert_eq!(f.replicas.len(), 2, "replication factor restored");
            assert_ne!(f.leader, 3);
            if held_by_3.contains(&f.id) {
                assert_eq!(f.isr, vec![f.leader], "the new replica must catch up first");
            }
        }
    }

    #[test]
    fn leaders_rebalance_over_in_sync_replicas_when_a_node_joins() {
        let mut m = Metadata::default();
        m.apply(&register(1, 0)).expect("register");
        m.apply(&create("t", 6, 1)).expect("create on one node");
        assert!(fragments(&m).iter().all(|f| f.leader == 1));
        // Nodes 2 and 3 join; simulate them having caught up (issue #4 adds them to the ISR).
        m.apply(&register(2, 2)).expect("register");
        m.apply(&register(3, 2)).expect("register");
        for t in m.topics.values_mut() {
            t.replication_factor = 3;
            for f in t.fragments.iter_mut() {
                f.replicas = vec![1, 2, 3];
                f.isr = vec![1, 2, 3];
            }
        }
        let Applied::Placement(changes) = m.apply(&register(2, 3)).expect("re-register") else {
            unreachable!("RegisterNode answers with the placement changes");
        };
        assert_eq!(changes.len(), 4, "{changes:?}");
        let counts = leader_counts(&m.topics, &[1, 2, 3]);
        assert_eq!(counts.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
        for f in fragments(&m) {
            assert_eq!(f.replicas[0], f.leader);
            assert_eq!(f.isr[0], f.leader);
            let moved = f.leader != 1;
            assert_eq!(f.leader_epoch, u64::from(moved));
        }
        // Already balanced: nothing more to do.
        assert_eq!(
            m.apply(&register(3, 4)).expect("re-register"),
            Applied::Placement(Vec::new())
        );
    }

    #[test]
    fn a_new_run_of_a_leader_leads_in_a_new_epoch_and_the_same_run_does_not() {
        // Issue #13: a leader restarted after a power loss lost bytes its replicas hold; in
        // the same epoch it wrote other messages at those offsets and nobody cut them.
        let run = |id: NodeId, incarnation: u64| Command::RegisterNode {
            id,
            endpoints: NodeEndpoints::default(),
            now_ms: 10,
            lease_ms: 10_000,
            incarnation,
        };
        let mut m = Metadata::default();
        for id in 1..=3 {
            m.apply(&run(id, 100 + id)).expect("register");
        }
        m.apply(&create("t", 3, 10)).expect("create");
        let before = m.topics["t"].fragments.clone();
        let led = before[0].leader;
        // The same run registering again (after a refusal): nothing moves.
        m.apply(&run(led, 100 + led)).expect("again");
        assert_eq!(m.topics["t"].fragments, before);
        // A new run: what it leads moves to the next epoch, led by it; nothing else changes.
        let Ok(Applied::Placement(changes)) = m.apply(&run(led, 500)) else {
            panic!("placement changes expected");
        };
        for (old, new) in before.iter().zip(&m.topics["t"].fragments) {
            assert_eq!((new.leader, &new.isr), (old.leader, &old.isr));
            let bump = u64::from(old.leader == led);
            assert_eq!(new.leader_epoch, old.leader_epoch + bump, "{old:?}");
        }
        let bumped = before.iter().filter(|f| f.leader == led).count();
        assert!(bumped >= 1);
        assert_eq!(changes.len(), bumped);
        assert!(changes
            .iter()
            .all(|c| c.old_leader == led && c.leader == led));
        assert_eq!(m.nodes[&led].incarnation, 500);
        // A node that predates incarnations (0) never moves anything.
        let now = m.topics["t"].fragments.clone();
        m.apply(&run(led, 0)).expect("old node");
        assert_eq!(m.topics["t"].fragments, now);
    }

    #[test]
    fn a_join_right_after_an_election_fences_nobody_only_the_lease_check_does() {
        // Issue #13 (found by the chaos suite): the fragment and Raft leader restarted, won
        // the election again and re-registered while the others' leases had lapsed in the
        // leaderless gap; the join dropped them from the ISR, leaving the restarted leader's
        // damaged copy the only in-sync one, and the healthy replicas truncated to it.
        let mut m = Metadata::default();
        for id in 1..=3 {
            m.apply(&register(id, 0)).expect("register");
        }
        m.apply(&create("t", 1, 1)).expect("create");
        let f = m.topics["t"].fragments[0].clone();
        assert_eq!(f.isr.len(), 3);
        // 20 s later (every lease of 10 s ended), the leader re-registers.
        m.apply(&register(f.leader, 20_000)).expect("rejoin");
        let g = &m.topics["t"].fragments[0];
        assert_eq!(g.isr, f.isr, "a join takes nobody out of the ISR");
        assert_eq!((g.leader, g.leader_epoch), (f.leader, f.leader_epoch));
        // The supervisor's check (after its grace) is what fences the silent nodes.
        m.apply(&Command::ExpireLeases { now_ms: 20_000 })
            .expect("expire");
        assert_eq!(m.topics["t"].fragments[0].isr, vec![f.leader]);
    }
}
