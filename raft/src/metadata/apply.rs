//! Applying commands to [`Metadata`]: pure and deterministic.

use zper_wire::validate_topic;

use super::placement::place;
use super::{Applied, Command, CommandResult, Metadata, MetadataError, NodeRecord, TopicRecord};
use crate::NodeId;

/// Default retention when a topic is created without one, hours.
pub const DEFAULT_RETAIN_HOURS: u32 = 168;
/// Most fragments per topic.
pub const MAX_FRAGMENTS: u32 = 1024;

impl Metadata {
    /// Applies one command. A refused command leaves the state unchanged.
    pub fn apply(&mut self, command: &Command) -> CommandResult {
        match command {
            Command::RegisterNode {
                id,
                endpoints,
                now_ms,
                lease_ms,
            } => {
                self.nodes.insert(
                    *id,
                    NodeRecord {
                        endpoints: endpoints.clone(),
                        lease_until_ms: now_ms.saturating_add(*lease_ms),
                    },
                );
                Ok(Applied::Done)
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
            Command::ExpireLeases { now_ms } => Ok(Applied::LeadersMoved(self.fail_over(*now_ms))),
            Command::RemoveNode { id, now_ms } => {
                if self.nodes.remove(id).is_none() {
                    return Err(MetadataError::UnknownNode(*id));
                }
                if self.dolly_leader == Some(*id) {
                    self.dolly_leader = None;
                }
                Ok(Applied::LeadersMoved(self.fail_over(*now_ms)))
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
                Some(_) => Ok(Applied::Done),
                None => Err(MetadataError::UnknownTopic(name.clone())),
            },
            Command::SetDollyLeader { id } => {
                if !self.nodes.contains_key(id) {
                    return Err(MetadataError::UnknownNode(*id));
                }
                self.dolly_leader = Some(*id);
                Ok(Applied::Done)
            }
        }
    }

    /// Moves the leadership of every fragment whose leader is not live at `now_ms` to the first
    /// live member of its in-sync replicas, bumping the leader epoch; dead nodes leave the ISR.
    /// A fragment with no live in-sync replica keeps its leader (it is offline until one
    /// returns: never elect a replica that may miss acknowledged data).
    fn fail_over(&mut self, now_ms: u64) -> Vec<(String, u32)> {
        let live = self.live_nodes(now_ms);
        let is_live = |n: &NodeId| live.binary_search(n).is_ok();
        let mut moved = Vec::new();
        for (name, topic) in self.topics.iter_mut() {
            for f in topic.fragments.iter_mut() {
                if is_live(&f.leader) {
                    continue;
                }
                let Some(next) = f.isr.iter().copied().find(|n| is_live(n)) else {
                    continue;
                };
                f.isr.retain(|n| is_live(n));
                f.leader = next;
                f.leader_epoch += 1;
                moved.push((name.clone(), f.id));
            }
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::FragmentPolicy;
    use crate::NodeEndpoints;

    fn register(id: NodeId, now_ms: u64) -> Command {
        Command::RegisterNode {
            id,
            endpoints: NodeEndpoints {
                name: format!("n{id}"),
                ..Default::default()
            },
            now_ms,
            lease_ms: 10_000,
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
        assert_eq!(moved, Applied::LeadersMoved(led_by_2.clone()));
        for (name, id) in led_by_2 {
            let f = &m.topics[&name].fragments[id as usize];
            assert_ne!(f.leader, 2);
            assert_eq!(f.leader_epoch, 1);
            assert!(!f.isr.contains(&2));
            assert!(f.isr.contains(&f.leader));
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
