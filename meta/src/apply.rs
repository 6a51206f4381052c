//! Applying commands to [`Metadata`]: pure and deterministic.

use zper_wire::validate_topic;

use super::placement::{place, rebalance, PlacementChange, PlacementReason};
use super::subscription::assign;
use super::{
    Applied, Command, CommandResult, DollyOutcome, DollyRequest, Metadata, MetadataError,
    NodeRecord, SubscriptionGroup, TopicRecord, DOLLY_REQUEST_RETAIN_MS,
};
use crate::NodeId;

/// Default retention when a topic is created without one, hours.
pub const DEFAULT_RETAIN_HOURS: u32 = 168;
/// Most fragments per topic: a reader names its fragment with the identity's mode byte (issue
/// #4), so 256.
pub const MAX_FRAGMENTS: u32 = 256;

/// Recomputes `g`'s assignment for its current members.
fn reassign(g: &mut SubscriptionGroup, policy: super::FragmentPolicy, fragments: u32) {
    let members = g.members.keys().cloned().collect();
    g.assignment = assign(policy, fragments, &members, &g.assignment);
}

impl Metadata {
    /// `topic`'s fragment policy and fragment count (what subscription assignment needs).
    fn fragment_shape(&self, topic: &str) -> Result<(super::FragmentPolicy, u32), MetadataError> {
        self.topics
            .get(topic)
            .map(|t| (t.policy, t.fragments.len() as u32))
            .ok_or_else(|| MetadataError::UnknownTopic(topic.to_owned()))
    }

    fn dolly_outcome(&self, r: &DollyRequest) -> Option<DollyOutcome> {
        self.dolly_requests
            .get(&r.origin)
            .and_then(|m| m.get(&r.serial))
            .copied()
    }

    /// Drops request outcomes whose deadline is more than [`DOLLY_REQUEST_RETAIN_MS`] before
    /// `clock_ms` (a clock carried in the applying command, so every node drops the same).
    /// Serials grow with time per origin, so each origin's map is trimmed from its front.
    fn prune_dolly_requests(&mut self, clock_ms: u64) {
        let horizon = clock_ms.saturating_sub(DOLLY_REQUEST_RETAIN_MS);
        for outcomes in self.dolly_requests.values_mut() {
            while let Some(entry) = outcomes.first_entry() {
                if entry.get().deadline_ms >= horizon {
                    break;
                }
                entry.remove();
            }
        }
        self.dolly_requests.retain(|_, m| !m.is_empty());
    }

    /// Applies one command. A refused command leaves the state unchanged. (A Dolly Put
    /// applied this way gets sequence 0; the state machine uses [`Metadata::apply_at`].)
    pub fn apply(&mut self, command: &Command) -> CommandResult {
        self.apply_at(command, 0)
    }

    /// Applies one command carried by the Raft entry at `index`.
    pub fn apply_at(&mut self, command: &Command, index: u64) -> CommandResult {
        match command {
            Command::DollyPut {
                key,
                value,
                request,
                deadline_ms,
            } => {
                if let Some(r) = request {
                    // Looked up before pruning: a refused Put changes nothing.
                    match self.dolly_outcome(r) {
                        Some(DollyOutcome {
                            sequence: Some(sequence),
                            ..
                        }) => return Ok(Applied::DollyPut { sequence }),
                        Some(DollyOutcome { sequence: None, .. }) => {
                            return Err(MetadataError::DollyPutCancelled)
                        }
                        None => {}
                    }
                }
                if request.is_some() {
                    self.prune_dolly_requests(*deadline_ms);
                }
                let sequence = index.max(self.dolly_sequence + 1);
                self.dolly.insert(
                    key.clone(),
                    super::DollyRecord {
                        sequence,
                        value: value.clone(),
                    },
                );
                self.dolly_sequence = sequence;
                if let Some(r) = request {
                    self.dolly_requests.entry(r.origin).or_default().insert(
                        r.serial,
                        DollyOutcome {
                            deadline_ms: *deadline_ms,
                            sequence: Some(sequence),
                        },
                    );
                }
                Ok(Applied::DollyPut { sequence })
            }
            Command::DollyCancel { request, now_ms } => {
                self.prune_dolly_requests(*now_ms);
                match self.dolly_outcome(request) {
                    Some(DollyOutcome {
                        sequence: Some(sequence),
                        ..
                    }) => Ok(Applied::DollyPut { sequence }),
                    Some(DollyOutcome { sequence: None, .. }) => Ok(Applied::DollyCancelled),
                    None => {
                        self.dolly_requests
                            .entry(request.origin)
                            .or_default()
                            .insert(
                                request.serial,
                                DollyOutcome {
                                    deadline_ms: *now_ms,
                                    sequence: None,
                                },
                            );
                        Ok(Applied::DollyCancelled)
                    }
                }
            }
            Command::RegisterNode {
                id,
                endpoints,
                now_ms,
                lease_ms,
                incarnation,
            } => {
                let restarted = *incarnation != 0
                    && self
                        .nodes
                        .get(id)
                        .is_some_and(|n| n.incarnation != *incarnation);
                self.nodes.insert(
                    *id,
                    NodeRecord {
                        endpoints: endpoints.clone(),
                        lease_until_ms: now_ms.saturating_add(*lease_ms),
                        incarnation: *incarnation,
                    },
                );
                let reason = PlacementReason::NodeJoined(*id);
                let mut changes = if restarted {
                    super::placement::new_leader_epochs(&mut self.topics, *id, reason)
                } else {
                    Vec::new()
                };
                changes.extend(self.rerun_placement(*now_ms, reason));
                Ok(Applied::Placement(changes))
            }
            Command::Heartbeat {
                id,
                now_ms,
                lease_ms,
            } => {
                let node = self
                    .nodes
                    .get_mut(id)
                    .ok_or(MetadataError::UnknownNode(*id))?;
                node.lease_until_ms = node.lease_until_ms.max(now_ms.saturating_add(*lease_ms));
                Ok(Applied::Done)
            }
            Command::ExpireLeases { now_ms } => Ok(Applied::Placement(
                self.rerun_placement(*now_ms, PlacementReason::LeasesExpired),
            )),
            Command::RemoveNode { id, now_ms } => {
                if self.nodes.remove(id).is_none() {
                    return Err(MetadataError::UnknownNode(*id));
                }
                if self.dolly_leader == Some(*id) {
                    self.dolly_leader = None;
                }
                Ok(Applied::Placement(self.rerun_placement(
                    *now_ms,
                    PlacementReason::NodeRemoved(*id),
                )))
            }
            Command::CreateTopic {
                name,
                fragments,
                replication_factor,
                retain_hours,
                policy,
                now_ms,
            } => {
                validate_topic(name.as_bytes()).map_err(|e| MetadataError::InvalidName {
                    name: name.clone(),
                    reason: e.to_string(),
                })?;
                if self.topics.contains_key(name) {
                    return Err(MetadataError::TopicExists(name.clone()));
                }
                let live = self.live_nodes(*now_ms);
                let fragments = fragments.unwrap_or(1);
                if fragments == 0 || fragments > MAX_FRAGMENTS {
                    return Err(MetadataError::InvalidArgument(format!(
                        "fragments must be 1..={MAX_FRAGMENTS}, not {fragments}"
                    )));
                }
                if *retain_hours == Some(0) {
                    return Err(MetadataError::InvalidArgument(
                        "retain_hours must be at least 1".into(),
                    ));
                }
                if *replication_factor == Some(0) {
                    return Err(MetadataError::InvalidArgument(
                        "replication_factor must be at least 1".into(),
                    ));
                }
                let rf = replication_factor.unwrap_or_else(|| live.len().min(3) as u32);
                if rf == 0 || rf as usize > live.len() {
                    return Err(MetadataError::NotEnoughNodes {
                        live: live.len(),
                        needed: rf.max(1) as usize,
                    });
                }
                let topic = TopicRecord {
                    replication_factor: rf,
                    retain_hours: retain_hours.unwrap_or(DEFAULT_RETAIN_HOURS),
                    policy: *policy,
                    fragments: place(&self.topics, &live, fragments, rf),
                };
                self.topics.insert(name.clone(), topic.clone());
                Ok(Applied::Topic(topic))
            }
            Command::DeleteTopic { name } => match self.topics.remove(name) {
                Some(_) => {
                    self.subscriptions.remove(name);
                    Ok(Applied::Done)
                }
                None => Err(MetadataError::UnknownTopic(name.clone())),
            },
            Command::Subscribe {
                topic,
                group,
                subscriber,
                now_ms,
                lease_ms,
            } => {
                let (policy, count) = self.fragment_shape(topic)?;
                for (what, name) in [("group", group), ("subscriber", subscriber)] {
                    if name.is_empty()
                        || name.len() > 64
                        || !name.bytes().all(|b| b.is_ascii_graphic())
                    {
                        return Err(MetadataError::InvalidArgument(format!(
                            "{what} {name:?}: 1-64 printable ASCII characters"
                        )));
                    }
                }
                let g = self
                    .subscriptions
                    .entry(topic.clone())
                    .or_default()
                    .entry(group.clone())
                    .or_default();
                g.members.retain(|_, until| *until > *now_ms);
                g.members
                    .insert(subscriber.clone(), now_ms.saturating_add(*lease_ms));
                reassign(g, policy, count);
                let fragments = g
                    .assignment
                    .iter()
                    .filter(|(_, owners)| owners.contains(subscriber))
                    .map(|(f, _)| (*f, g.committed(policy, subscriber, *f)))
                    .collect();
                Ok(Applied::Subscription {
                    fragments,
                    revision: index,
                })
            }
            Command::Unsubscribe {
                topic,
                group,
                subscriber,
                now_ms,
            } => {
                let (policy, count) = self.fragment_shape(topic)?;
                let Some(g) = self
                    .subscriptions
                    .get_mut(topic)
                    .and_then(|gs| gs.get_mut(group))
                    .filter(|g| g.members.contains_key(subscriber))
                else {
                    return Err(MetadataError::NotAssigned {
                        topic: topic.clone(),
                        group: group.clone(),
                        subscriber: subscriber.clone(),
                        fragment: 0,
                    });
                };
                g.members.remove(subscriber);
                g.members.retain(|_, until| *until > *now_ms);
                reassign(g, policy, count);
                Ok(Applied::Done)
            }
            Command::CommitOffset {
                topic,
                group,
                subscriber,
                fragment,
                offset,
            } => {
                let (policy, _) = self.fragment_shape(topic)?;
                let g = self
                    .subscriptions
                    .get_mut(topic)
                    .and_then(|gs| gs.get_mut(group));
                let owns = g
                    .as_ref()
                    .and_then(|g| g.assignment.get(fragment))
                    .is_some_and(|owners| owners.contains(subscriber));
                match g {
                    Some(g) if owns => {
                        let offsets = match policy {
                            super::FragmentPolicy::Distribution => &mut g.offsets,
                            super::FragmentPolicy::Default => {
                                g.member_offsets.entry(subscriber.clone()).or_default()
                            }
                        };
                        let at = offsets.entry(*fragment).or_default();
                        *at = (*at).max(*offset);
                        Ok(Applied::Done)
                    }
                    _ => Err(MetadataError::NotAssigned {
                        topic: topic.clone(),
                        group: group.clone(),
                        subscriber: subscriber.clone(),
                        fragment: *fragment,
                    }),
                }
            }
            Command::SetDollyLeader { id } => {
                if !self.nodes.contains_key(id) {
                    return Err(MetadataError::UnknownNode(*id));
                }
                self.dolly_leader = Some(*id);
                Ok(Applied::Done)
            }
            Command::SetIsr {
                topic,
                fragment,
                leader_epoch,
                isr,
            } => {
                let f = fragment_mut(&mut self.topics, topic, *fragment)?;
                if f.leader_epoch != *leader_epoch {
                    return Err(MetadataError::StaleEpoch {
                        topic: topic.clone(),
                        fragment: *fragment,
                        current: f.leader_epoch,
                        given: *leader_epoch,
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
            Command::LeaveIsr {
                topic,
                fragment,
                node,
            } => {
                let f = fragment_mut(&mut self.topics, topic, *fragment)?;
                if !f.isr.contains(node) {
                    return Ok(Applied::Done);
                }
                let Some(&next) = f.isr.iter().find(|n| *n != node) else {
                    return Err(MetadataError::InvalidArgument(format!(
                        "node {node} is the only in-sync replica of {topic} fragment {fragment}: \
                         there is no copy to repair from"
                    )));
                };
                if f.leader == *node {
                    super::placement::set_leader(f, next);
                }
                f.isr.retain(|n| n != node);
                f.last_change = Some(PlacementReason::DamagedCopy(*node));
                Ok(Applied::Done)
            }
        }
    }

    /// Re-runs placement ([`rebalance`]) over the nodes registered and live at `now_ms`.
    fn rerun_placement(&mut self, now_ms: u64, reason: PlacementReason) -> Vec<PlacementChange> {
        let live = self.live_nodes(now_ms);
        let registered = self.nodes.keys().copied().collect();
        rebalance(&mut self.topics, &registered, &live, reason)
    }
}

/// Fragment `fragment` of `topic`.
///
/// Errors: `UnknownTopic`; `InvalidArgument` for a fragment the topic does not have.
fn fragment_mut<'a>(
    topics: &'a mut std::collections::BTreeMap<String, super::TopicRecord>,
    topic: &str,
    fragment: u32,
) -> Result<&'a mut super::Fragment, MetadataError> {
    let t = topics
        .get_mut(topic)
        .ok_or_else(|| MetadataError::UnknownTopic(topic.to_owned()))?;
    t.fragments
        .get_mut(fragment as usize)
        .ok_or_else(|| MetadataError::InvalidArgument(format!("no fragment {fragment} in {topic}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FragmentPolicy, PlacementReason};
    use crate::{NodeEndpoints, NodeId};

    fn register(id: NodeId, now_ms: u64) -> Command {
        Command::RegisterNode {
            id,
            endpoints: NodeEndpoints {
                name: format!("n{id}"),
                ..Default::default()
            },
            now_ms,
            lease_ms: 10_000,
            incarnation: 0,
        }
    }

    fn create(name: &str, fragments: u32, now_ms: u64) -> Command {
        Command::CreateTopic {
            name: name.into(),
            fragments: Some(fragments),
            replication_factor: None,
            retain_hours: None,
            policy: FragmentPolicy::Default,
            now_ms,
        }
    }

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
        let counts = super::super::placement::leader_counts(&m.topics, &[1, 2, 4]);
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
        let counts = super::super::placement::leader_counts(&m.topics, &[1, 2, 3]);
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

    #[test]
    fn dolly_puts_take_the_raft_index_as_a_strictly_increasing_sequence() {
        let mut m = Metadata::default();
        let put = |k: &[u8], v: &[u8]| Command::DollyPut {
            key: k.to_vec(),
            value: v.to_vec(),
            request: None,
            deadline_ms: 0,
        };
        assert_eq!(
            m.apply_at(&put(b"color", b"blue"), 7),
            Ok(Applied::DollyPut { sequence: 7 })
        );
        assert_eq!(
            m.apply_at(&put(b"empty", b""), 12),
            Ok(Applied::DollyPut { sequence: 12 })
        );
        assert_eq!(
            m.apply_at(&put(b"color", b"red"), 13),
            Ok(Applied::DollyPut { sequence: 13 })
        );
        assert_eq!(m.dolly[&b"color".to_vec()].value, b"red");
        assert_eq!(m.dolly[&b"color".to_vec()].sequence, 13);
        assert_eq!(m.dolly[&b"empty".to_vec()].sequence, 12);
        assert_eq!(m.dolly_sequence, 13);
        // Never backwards, whatever index it is given.
        assert_eq!(
            m.apply(&put(b"x", b"1")),
            Ok(Applied::DollyPut { sequence: 14 })
        );
    }

    fn guarded_put(serial: u64, key: &[u8], deadline_ms: u64) -> Command {
        Command::DollyPut {
            key: key.to_vec(),
            value: format!("v{serial}").into_bytes(),
            request: Some(DollyRequest { origin: 2, serial }),
            deadline_ms,
        }
    }

    fn cancel(serial: u64, now_ms: u64) -> Command {
        Command::DollyCancel {
            request: DollyRequest { origin: 2, serial },
            now_ms,
        }
    }

    #[test]
    fn a_repeated_dolly_put_applies_once_and_a_cancel_tells_what_happened() {
        let mut m = Metadata::default();
        // A forwarded Put retried after a lost reply: the second copy answers the first
        // sequence and writes nothing.
        assert_eq!(
            m.apply_at(&guarded_put(1, b"k", 5_000), 10),
            Ok(Applied::DollyPut { sequence: 10 })
        );
        let before = m.clone();
        assert_eq!(
            m.apply_at(&guarded_put(1, b"k", 5_000), 11),
            Ok(Applied::DollyPut { sequence: 10 })
        );
        assert_eq!(m.dolly, before.dolly);
        assert_eq!(m.dolly_sequence, 10);
        // A cancel after the Put applied reports its sequence (the client gets a success).
        assert_eq!(
            m.apply_at(&cancel(1, 6_000), 12),
            Ok(Applied::DollyPut { sequence: 10 })
        );
        // A cancel first: the Put, arriving later, never applies.
        assert_eq!(
            m.apply_at(&cancel(2, 6_000), 13),
            Ok(Applied::DollyCancelled)
        );
        let before = m.clone();
        assert_eq!(
            m.apply_at(&guarded_put(2, b"late", 5_500), 14),
            Err(MetadataError::DollyPutCancelled)
        );
        assert_eq!(m, before);
        assert!(!m.dolly.contains_key(b"late".as_slice()));
        // Cancelling twice is answered the same.
        assert_eq!(
            m.apply_at(&cancel(2, 6_100), 15),
            Ok(Applied::DollyCancelled)
        );
    }

    #[test]
    fn dolly_request_outcomes_are_dropped_a_minute_after_their_deadline() {
        let mut m = Metadata::default();
        m.apply_at(&guarded_put(1, b"a", 1_000), 1).expect("put");
        m.apply_at(&cancel(2, 2_000), 2).expect("cancel");
        assert_eq!(m.dolly_requests[&2].len(), 2);
        // A command whose clock is within the retention keeps both.
        m.apply_at(&guarded_put(3, b"b", 1_000 + DOLLY_REQUEST_RETAIN_MS), 3)
            .expect("put");
        assert_eq!(m.dolly_requests[&2].len(), 3);
        // Past it, the old ones go (in order), the values stay.
        m.apply_at(&guarded_put(4, b"c", 2_001 + DOLLY_REQUEST_RETAIN_MS), 4)
            .expect("put");
        assert_eq!(
            m.dolly_requests[&2].keys().copied().collect::<Vec<_>>(),
            vec![3, 4]
        );
        assert_eq!(m.dolly[&b"a".to_vec()].value, b"v1");
    }

    #[test]
    fn metadata_with_dolly_keys_round_trips_through_json_and_changes_the_hash() {
        let mut m = Metadata::default();
        let empty_hash = m.state_hash();
        m.apply_at(&guarded_put(1, b"\x00bin\xff", 9_000), 3)
            .expect("put");
        m.apply_at(&cancel(2, 9_000), 4).expect("cancel");
        let json = serde_json::to_vec(&m).expect("a Dolly map serializes");
        let back: Metadata = serde_json::from_slice(&json).expect("and parses back");
        assert_eq!(back, m);
        assert_ne!(m.state_hash(), empty_hash);
    }

    fn subscribe(group: &str, who: &str, now_ms: u64) -> Command {
        Command::Subscribe {
            topic: "t".into(),
            group: group.into(),
            subscriber: who.into(),
            now_ms,
            lease_ms: 1000,
        }
    }

    fn fragments_of(result: CommandResult) -> Vec<u32> {
        match result {
            Ok(Applied::Subscription { fragments, .. }) => fragments.keys().copied().collect(),
            other => panic!("not a subscription: {other:?}"),
        }
    }

    #[test]
    fn subscription_groups_split_fragments_expire_sessions_and_keep_offsets() {
        let mut m = Metadata::default();
        m.apply(&register(1, 0)).expect("register");
        m.apply(&Command::CreateTopic {
            name: "t".into(),
            fragments: Some(4),
            replication_factor: Some(1),
            retain_hours: None,
            policy: FragmentPolicy::Distribution,
            now_ms: 0,
        })
        .expect("topic");
        assert_eq!(fragments_of(m.apply(&subscribe("g", "a", 0))), [0, 1, 2, 3]);
        assert_eq!(fragments_of(m.apply(&subscribe("g", "b", 10))), [2, 3]);
        // Another group is independent.
        assert_eq!(
            fragments_of(m.apply(&subscribe("h", "x", 10))),
            [0, 1, 2, 3]
        );
        // Only the owner commits; offsets never go back.
        let commit = |who: &str, fragment, offset| Command::CommitOffset {
            topic: "t".into(),
            group: "g".into(),
            subscriber: who.into(),
            fragment,
            offset,
        };
        m.apply(&commit("b", 2, 500)).expect("b owns 2");
        m.apply(&commit("b", 2, 300))
            .expect("a lower commit is harmless");
        assert!(matches!(
            m.apply(&commit("a", 2, 900)),
            Err(MetadataError::NotAssigned { .. })
        ));
        assert_eq!(m.subscriptions["t"]["g"].offsets[&2], 500);
        // b's session ends (no renewal within its lease): a's next renewal takes fragment 2
        // back with the group's offset.
        let renewed = m.apply(&subscribe("g", "a", 2_000));
        match renewed {
            Ok(Applied::Subscription { fragments, .. }) => {
                assert_eq!(fragments.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
                assert_eq!(fragments[&2], 500, "resumes from the committed offset");
            }
            other => panic!("{other:?}"),
        }
        // Leaving gives the fragments up; deleting the topic drops its groups.
        m.apply(&Command::Unsubscribe {
            topic: "t".into(),
            group: "g".into(),
            subscriber: "a".into(),
            now_ms: 2_001,
        })
        .expect("leave");
        assert!(m.subscriptions["t"]["g"].assignment.is_empty());
        assert!(matches!(
            m.apply(&subscribe("g", "bad name", 0)),
            Err(MetadataError::InvalidArgument(_))
        ));
        m.apply(&Command::DeleteTopic { name: "t".into() })
            .expect("delete");
        assert!(!m.subscriptions.contains_key("t"));
        assert!(matches!(
            m.apply(&subscribe("g", "a", 3_000)),
            Err(MetadataError::UnknownTopic(_))
        ));
    }

    #[test]
    fn default_policy_members_each_keep_their_own_offsets_and_revisions_are_indexes() {
        let mut m = Metadata::default();
        m.apply(&register(1, 0)).expect("register");
        m.apply(&Command::CreateTopic {
            name: "t".into(),
            fragments: Some(2),
            replication_factor: Some(1),
            retain_hours: None,
            policy: FragmentPolicy::Default,
            now_ms: 0,
        })
        .expect("topic");
        match m.apply_at(&subscribe("g", "a", 0), 77) {
            Ok(Applied::Subscription {
                fragments,
                revision,
            }) => {
                assert_eq!(fragments.keys().copied().collect::<Vec<_>>(), [0, 1]);
                assert_eq!(revision, 77);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(fragments_of(m.apply(&subscribe("g", "b", 0))), [0, 1]);
        let commit = |who: &str, offset| Command::CommitOffset {
            topic: "t".into(),
            group: "g".into(),
            subscriber: who.into(),
            fragment: 1,
            offset,
        };
        m.apply(&commit("a", 700)).expect("a reads 1");
        m.apply(&commit("b", 20)).expect("b reads 1 too");
        let g = &m.subscriptions["t"]["g"];
        assert_eq!(g.committed(FragmentPolicy::Default, "a", 1), 700);
        assert_eq!(g.committed(FragmentPolicy::Default, "b", 1), 20);
        match m.apply(&subscribe("g", "b", 1)) {
            Ok(Applied::Subscription { fragments, .. }) => assert_eq!(fragments[&1], 20),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refused_commands_are_typed_and_change_nothing() {
        let mut m = Metadata::default();
        assert_eq!(
            m.apply(&create("x", 1, 0)),
            Err(MetadataError::NotEnoughNodes { live: 0, needed: 1 })
        );
        m.apply(&register(1, 0)).expect("register");
        let before = m.clone();
        assert!(matches!(
            m.apply(&create("bad-name", 1, 1)),
            Err(MetadataError::InvalidName { .. })
        ));
        assert!(matches!(
            m.apply(&create("x", 0, 1)),
            Err(MetadataError::InvalidArgument(_))
        ));
        assert_eq!(
            m.apply(&Command::SetDollyLeader { id: 9 }),
            Err(MetadataError::UnknownNode(9))
        );
        assert_eq!(
            m.apply(&Command::DeleteTopic { name: "x".into() }),
            Err(MetadataError::UnknownTopic("x".into()))
        );
        assert_eq!(m, before);
        m.apply(&create("x", 1, 1)).expect("create");
        assert_eq!(
            m.apply(&create("x", 1, 1)),
            Err(MetadataError::TopicExists("x".into()))
        );
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::NodeEndpoints;
    use crate::{Fragment, FragmentPolicy};

    fn command() -> impl Strategy<Value = Command> {
        let t = 0u64..100;
        prop_oneof![
            (1u64..=5, t.clone()).prop_map(|(id, s)| Command::RegisterNode {
                id,
                endpoints: NodeEndpoints::default(),
                now_ms: s * 1000,
                lease_ms: 10_000,
                incarnation: 0,
            }),
            (1u64..=5, t.clone()).prop_map(|(id, s)| Command::Heartbeat {
                id,
                now_ms: s * 1000,
                lease_ms: 10_000,
            }),
            t.clone()
                .prop_map(|s| Command::ExpireLeases { now_ms: s * 1000 }),
            (1u64..=5, t.clone()).prop_map(|(id, s)| Command::RemoveNode {
                id,
                now_ms: s * 1000
            }),
            (0u8..4, 1u32..6, proptest::option::of(1u32..4), t.clone()).prop_map(
                |(n, f, rf, s)| {
                    Command::CreateTopic {
                        name: format!("t{n}"),
                        fragments: Some(f),
                        replication_factor: rf,
                        retain_hours: None,
                        policy: FragmentPolicy::Default,
                        now_ms: s * 1000,
                    }
                }
            ),
            (0u8..4).prop_map(|n| Command::DeleteTopic {
                name: format!("t{n}")
            }),
            (0u64..8, 0u8..4, t.clone()).prop_map(|(serial, k, s)| Command::DollyPut {
                key: vec![k],
                value: serial.to_le_bytes().to_vec(),
                request: Some(crate::DollyRequest { origin: 1, serial }),
                deadline_ms: s * 1000,
            }),
            (0u8..4, 0u8..2, 0u8..4, t.clone()).prop_map(|(n, g, m, s)| Command::Subscribe {
                topic: format!("t{n}"),
                group: format!("g{g}"),
                subscriber: format!("m{m}"),
                now_ms: s * 1000,
                lease_ms: 5_000,
            }),
            (0u8..4, 0u8..2, 0u8..4, t.clone()).prop_map(|(n, g, m, s)| Command::Unsubscribe {
                topic: format!("t{n}"),
                group: format!("g{g}"),
                subscriber: format!("m{m}"),
                now_ms: s * 1000,
            }),
            (0u64..8, t).prop_map(|(serial, s)| Command::DollyCancel {
                request: crate::DollyRequest { origin: 1, serial },
                now_ms: s * 1000,
            }),
        ]
    }

    fn check(f: &Fragment) -> Result<(), TestCaseError> {
        let mut distinct = f.replicas.clone();
        distinct.sort_unstable();
        distinct.dedup();
        prop_assert_eq!(distinct.len(), f.replicas.len(), "replicas distinct");
        prop_assert_eq!(f.replicas.first(), Some(&f.leader), "leader first");
        prop_assert_eq!(f.isr.first(), Some(&f.leader), "leader in sync");
        prop_assert!(
            f.isr.iter().all(|n| f.replicas.contains(n)),
            "isr in replicas"
        );
        Ok(())
    }

    proptest! {
        #[test]
        fn placement_stays_safe_deterministic_and_settled(script in proptest::collection::vec(command(), 1..40)) {
            let mut m = Metadata::default();
            let mut twin = Metadata::default();
            for c in &script {
                let before = m.clone();
                let result = m.apply(c);
                prop_assert_eq!(&result, &twin.apply(c), "same result on every node");
                prop_assert_eq!(m.state_hash(), twin.state_hash());
                if let Ok(Applied::Placement(changes)) = &result {
                    for ch in changes {
                        if ch.leader != ch.old_leader {
                            let old = &before.topics[&ch.topic].fragments[ch.fragment as usize];
                            prop_assert!(old.isr.contains(&ch.leader), "new leader was in sync: {:?}", ch);
                            prop_assert_eq!(ch.leader_epoch, old.leader_epoch + 1);
                        }
                    }
                    // A settled placement: running it again at the same time changes nothing
                    // (only the lease check fences, so a join is settled against itself).
                    if let Command::ExpireLeases { now_ms } = c {
                        let again = m.clone().apply(&Command::ExpireLeases { now_ms: *now_ms });
                        prop_assert_eq!(again, Ok(Applied::Placement(Vec::new())));
                    }
                    if let Command::RegisterNode { .. } = c {
                        prop_assert_eq!(m.clone().apply(c), Ok(Applied::Placement(Vec::new())));
                    }
                }
                if result.is_err() {
                    prop_assert_eq!(&m, &before, "a refused command changes nothing");
                }
                for f in m.topics.values().flat_map(|t| &t.fragments) {
                    check(f)?;
                }
            }
        }
    }
}
