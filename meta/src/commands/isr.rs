//! In-sync replica commands: [`Command::SetIsr`] (the fragment leader, in its epoch) and
//! [`Command::LeaveIsr`] (a replica that found its copy damaged).
//!
//! [`Command::SetIsr`]: crate::Command::SetIsr
//! [`Command::LeaveIsr`]: crate::Command::LeaveIsr

use super::topics::fragment_mut;
use crate::placement::{set_leader, PlacementReason};
use crate::{Applied, CommandResult, Metadata, MetadataError, NodeId};

impl Metadata {
    /// The fragment leader sets the in-sync replicas, in the epoch it names.
    pub(super) fn apply_set_isr(
        &mut self,
        topic: &str,
        fragment: u32,
        leader_epoch: u64,
        isr: &[NodeId],
    ) -> CommandResult {
        let f = fragment_mut(&mut self.topics, topic, fragment)?;
        if f.leader_epoch != leader_epoch {
            return Err(MetadataError::StaleEpoch {
                topic: topic.to_owned(),
                fragment,
                current: f.leader_epoch,
                given: leader_epoch,
            });
        }
        if !isr.contains(&f.leader) || isr.iter().any(|n| !f.replicas.contains(n)) {
            return Err(MetadataError::InvalidArgument(format!(
                "isr {isr:?} must hold the leader {} and only replicas {:?}",
                f.leader, f.replicas
            )));
        }
        // Replica order, leader first: the same list on every node whatever the order given.
        let next: Vec<NodeId> = f
            .replicas
            .iter()
            .copied()
            .filter(|n| isr.contains(n))
            .collect();
        if next != f.isr {
            f.isr = next;
            f.last_change = Some(PlacementReason::IsrChanged);
        }
        Ok(Applied::Done)
    }

    /// A replica with a damaged copy leaves the in-sync replicas, handing over first if it leads.
    pub(super) fn apply_leave_isr(
        &mut self,
        topic: &str,
        fragment: u32,
        node: NodeId,
    ) -> CommandResult {
        let f = fragment_mut(&mut self.topics, topic, fragment)?;
        if !f.isr.contains(&node) {
            return Ok(Applied::Done);
        }
        let Some(&next) = f.isr.iter().find(|n| **n != node) else {
            return Err(MetadataError::InvalidArgument(format!(
                "node {node} is the only in-sync replica of {topic} fragment {fragment}: \
                 there is no copy to repair from"
            )));
        };
        if f.leader == node {
            set_leader(f, next);
        }
        f.isr.retain(|n| *n != node);
        f.last_change = Some(PlacementReason::DamagedCopy(node));
        Ok(Applied::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_commands::{create, register};
    use crate::{Command, Metadata, MetadataError, NodeId, PlacementReason};

    #[test]
    fn isr_changes_apply_only_in_the_leaders_epoch_and_within_the_replicas() {
        let mut m = Metadata::default();
        for id in 1..=3 {
            m.apply(&register(id, 0)).expect("register");
        }
        m.apply(&create("t", 1, 1)).expect("create");
        let f = m.topics["t"].fragments[0].clone();
        let (leader, epoch) = (f.leader, f.leader_epoch);
        let other = f.replicas[1];
        let set = |isr: Vec<NodeId>, leader_epoch: u64| Command::SetIsr {
            topic: "t".into(),
            fragment: 0,
            leader_epoch,
            isr,
        };
        m.apply(&set(vec![leader], epoch)).expect("shrink");
        assert_eq!(m.topics["t"].fragments[0].isr, vec![leader]);
        assert_eq!(
            m.topics["t"].fragments[0].last_change,
            Some(PlacementReason::IsrChanged)
        );
        let before = m.clone();
        assert!(matches!(
            m.apply(&set(vec![leader, other], epoch + 1)),
            Err(MetadataError::StaleEpoch { .. })
        ));
        assert!(matches!(
            m.apply(&set(vec![other], epoch)),
            Err(MetadataError::InvalidArgument(_))
        ));
        assert!(matches!(
            m.apply(&set(vec![leader, 9], epoch)),
            Err(MetadataError::InvalidArgument(_))
        ));
        assert_eq!(m, before);
        // Rejoining: given in any order, stored in replica order, leader first.
        m.apply(&set(vec![other, leader], epoch)).expect("expand");
        assert_eq!(m.topics["t"].fragments[0].isr, vec![leader, other]);
    }

    #[test]
    fn a_damaged_replica_leaves_the_isr_and_a_damaged_leader_hands_over_first() {
        let mut m = Metadata::default();
        for id in 1..=3 {
            m.apply(&register(id, 0)).expect("register");
        }
        m.apply(&create("t", 1, 1)).expect("create");
        let f = m.topics["t"].fragments[0].clone();
        let leave = |node: NodeId| Command::LeaveIsr {
            topic: "t".into(),
            fragment: 0,
            node,
        };
        // A follower leaves; the leader and epoch stay.
        let follower = f.replicas[2];
        m.apply(&leave(follower)).expect("leave");
        let g = &m.topics["t"].fragments[0];
        assert_eq!((g.leader, g.leader_epoch), (f.leader, f.leader_epoch));
        assert!(!g.isr.contains(&follower));
        assert_eq!(g.last_change, Some(PlacementReason::DamagedCopy(follower)));
        let before = m.clone();
        m.apply(&leave(follower))
            .expect("already out: nothing changes");
        assert_eq!(m, before);
        // The leader leaves: the next in-sync replica leads in a new epoch.
        m.apply(&leave(f.leader)).expect("leader leaves");
        let g = &m.topics["t"].fragments[0];
        assert_eq!(g.leader, f.replicas[1]);
        assert_eq!(g.leader_epoch, f.leader_epoch + 1);
        assert_eq!(g.isr, vec![f.replicas[1]]);
        // The last in-sync replica cannot leave.
        let before = m.clone();
        assert!(matches!(
            m.apply(&leave(f.replicas[1])),
            Err(MetadataError::InvalidArgument(_))
        ));
        assert_eq!(m, before);
    }
}
