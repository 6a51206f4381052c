//! Subscription group commands (issue #7, `pirius.md` §16.1): [`Command::Subscribe`],
//! [`Command::Unsubscribe`] (both reassigning the topic's fragments over the live members) and
//! [`Command::CommitOffset`].
//!
//! [`Command::Subscribe`]: crate::Command::Subscribe
//! [`Command::Unsubscribe`]: crate::Command::Unsubscribe
//! [`Command::CommitOffset`]: crate::Command::CommitOffset

use crate::subscription::assign;
use crate::{Applied, CommandResult, FragmentPolicy, Metadata, MetadataError, SubscriptionGroup};

/// Recomputes `g`'s assignment for its current members.
fn reassign(g: &mut SubscriptionGroup, policy: FragmentPolicy, fragments: u32) {
    let members = g.members.keys().cloned().collect();
    g.assignment = assign(policy, fragments, &members, &g.assignment);
}

impl Metadata {
    /// `topic`'s fragment policy and fragment count (what subscription assignment needs).
    fn fragment_shape(&self, topic: &str) -> Result<(FragmentPolicy, u32), MetadataError> {
        self.topics
            .get(topic)
            .map(|t| (t.policy, t.fragments.len() as u32))
            .ok_or_else(|| MetadataError::UnknownTopic(topic.to_owned()))
    }

    /// `subscriber` joins `group` of `topic` or renews its session; lapsed members leave.
    pub(super) fn apply_subscribe(
        &mut self,
        topic: &str,
        group: &str,
        subscriber: &str,
        now_ms: u64,
        lease_ms: u64,
        index: u64,
    ) -> CommandResult {
        let (policy, count) = self.fragment_shape(topic)?;
        for (what, name) in [("group", group), ("subscriber", subscriber)] {
            if name.is_empty() || name.len() > 64 || !name.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(MetadataError::InvalidArgument(format!(
                    "{what} {name:?}: 1-64 printable ASCII characters"
                )));
            }
        }
        let g = self
            .subscriptions
            .entry(topic.to_owned())
            .or_default()
            .entry(group.to_owned())
            .or_default();
        g.members.retain(|_, until| *until > now_ms);
        g.members
            .insert(subscriber.to_owned(), now_ms.saturating_add(lease_ms));
        reassign(g, policy, count);
        let fragments = g
            .assignment
            .iter()
            .filter(|(_, owners)| owners.iter().any(|o| o == subscriber))
            .map(|(f, _)| (*f, g.committed(policy, subscriber, *f)))
            .collect();
        Ok(Applied::Subscription {
            fragments,
            revision: index,
        })
    }

    /// `subscriber` leaves `group`; lapsed members leave too.
    pub(super) fn apply_unsubscribe(
        &mut self,
        topic: &str,
        group: &str,
        subscriber: &str,
        now_ms: u64,
    ) -> CommandResult {
        let (policy, count) = self.fragment_shape(topic)?;
        let Some(g) = self
            .subscriptions
            .get_mut(topic)
            .and_then(|gs| gs.get_mut(group))
            .filter(|g| g.members.contains_key(subscriber))
        else {
            return Err(MetadataError::NotAssigned {
                topic: topic.to_owned(),
                group: group.to_owned(),
                subscriber: subscriber.to_owned(),
                fragment: 0,
            });
        };
        g.members.remove(subscriber);
        g.members.retain(|_, until| *until > now_ms);
        reassign(g, policy, count);
        Ok(Applied::Done)
    }

    /// The group's progress on `fragment` moves up to `offset` (never back).
    pub(super) fn apply_commit_offset(
        &mut self,
        topic: &str,
        group: &str,
        subscriber: &str,
        fragment: u32,
        offset: u64,
    ) -> CommandResult {
        let (policy, _) = self.fragment_shape(topic)?;
        let g = self
            .subscriptions
            .get_mut(topic)
            .and_then(|gs| gs.get_mut(group));
        let owns = g
            .as_ref()
            .and_then(|g| g.assignment.get(&fragment))
            .is_some_and(|owners| owners.iter().any(|o| o == subscriber));
        match g {
            Some(g) if owns => {
                let offsets = match policy {
                    FragmentPolicy::Distribution => &mut g.offsets,
                    FragmentPolicy::Default => {
                        g.member_offsets.entry(subscriber.to_owned()).or_default()
                    }
                };
                let at = offsets.entry(fragment).or_default();
                *at = (*at).max(offset);
                Ok(Applied::Done)
            }
            _ => Err(MetadataError::NotAssigned {
                topic: topic.to_owned(),
                group: group.to_owned(),
                subscriber: subscriber.to_owned(),
                fragment,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_commands::register;
    use crate::{Applied, Command, CommandResult, FragmentPolicy, Metadata, MetadataError};

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
}
