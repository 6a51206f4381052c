//! Topic commands: [`Command::CreateTopic`] (placed over the live nodes) and
//! [`Command::DeleteTopic`] (with its subscription groups).
//!
//! [`Command::CreateTopic`]: crate::Command::CreateTopic
//! [`Command::DeleteTopic`]: crate::Command::DeleteTopic

use std::collections::BTreeMap;

use zper_wire::validate_topic;

use crate::placement::place;
use crate::{
    Applied, CommandResult, Fragment, FragmentPolicy, Metadata, MetadataError, TopicRecord,
};

/// Default retention when a topic is created without one, hours.
pub const DEFAULT_RETAIN_HOURS: u32 = 168;
/// Most fragments per topic: a reader names its fragment with the identity's mode byte (issue
/// #4), so 256.
pub const MAX_FRAGMENTS: u32 = 256;

impl Metadata {
    /// Creates a topic placed over the nodes live at `now_ms`.
    pub(super) fn apply_create_topic(
        &mut self,
        name: &str,
        fragments: Option<u32>,
        replication_factor: Option<u32>,
        retain_hours: Option<u32>,
        policy: FragmentPolicy,
        now_ms: u64,
    ) -> CommandResult {
        validate_topic(name.as_bytes()).map_err(|e| MetadataError::InvalidName {
            name: name.to_owned(),
            reason: e.to_string(),
        })?;
        if self.topics.contains_key(name) {
            return Err(MetadataError::TopicExists(name.to_owned()));
        }
        let live = self.live_nodes(now_ms);
        let fragments = fragments.unwrap_or(1);
        if fragments == 0 || fragments > MAX_FRAGMENTS {
            return Err(MetadataError::InvalidArgument(format!(
                "fragments must be 1..={MAX_FRAGMENTS}, not {fragments}"
            )));
        }
        if retain_hours == Some(0) {
            return Err(MetadataError::InvalidArgument(
                "retain_hours must be at least 1".into(),
            ));
        }
        if replication_factor == Some(0) {
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
            policy,
            fragments: place(&self.topics, &live, fragments, rf),
        };
        self.topics.insert(name.to_owned(), topic.clone());
        Ok(Applied::Topic(topic))
    }

    /// Sets a topic's retention.
    ///
    /// Errors: `UnknownTopic`; `InvalidArgument` for 0 hours.
    pub(super) fn apply_set_retention(&mut self, name: &str, retain_hours: u32) -> CommandResult {
        if retain_hours == 0 {
            return Err(MetadataError::InvalidArgument(
                "retain_hours must be at least 1".into(),
            ));
        }
        let topic = self
            .topics
            .get_mut(name)
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_owned()))?;
        topic.retain_hours = retain_hours;
        Ok(Applied::Topic(topic.clone()))
    }

    /// Deletes a topic and its subscription groups.
    pub(super) fn apply_delete_topic(&mut self, name: &str) -> CommandResult {
        match self.topics.remove(name) {
            Some(_) => {
                self.subscriptions.remove(name);
                Ok(Applied::Done)
            }
            None => Err(MetadataError::UnknownTopic(name.to_owned())),
        }
    }
}

/// Fragment `fragment` of `topic`.
///
/// Errors: `UnknownTopic`; `InvalidArgument` for a fragment the topic does not have.
pub(super) fn fragment_mut<'a>(
    topics: &'a mut BTreeMap<String, TopicRecord>,
    topic: &str,
    fragment: u32,
) -> Result<&'a mut Fragment, MetadataError> {
    let t = topics
        .get_mut(topic)
        .ok_or_else(|| MetadataError::UnknownTopic(topic.to_owned()))?;
    t.fragments
        .get_mut(fragment as usize)
        .ok_or_else(|| MetadataError::InvalidArgument(format!("no fragment {fragment} in {topic}")))
}

#[cfg(test)]
mod tests {
    use super::super::test_commands::{create, register};
    use crate::{Command, Metadata, MetadataError};

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

    #[test]
    fn retention_changes_after_creation_and_nothing_else_does() {
        let mut m = Metadata::default();
        m.apply(&register(1, 0)).expect("register");
        m.apply(&create("x", 2, 1)).expect("create");
        let before = m.topics["x"].clone();
        let set = |hours| Command::SetRetention {
            name: "x".into(),
            retain_hours: hours,
        };
        let Ok(crate::Applied::Topic(t)) = m.apply(&set(24)) else {
            panic!("SetRetention answers the topic");
        };
        assert_eq!(t.retain_hours, 24);
        assert_eq!(m.topics["x"].retain_hours, 24);
        assert_eq!(m.topics["x"].fragments, before.fragments);
        assert!(matches!(
            m.apply(&set(0)),
            Err(MetadataError::InvalidArgument(_))
        ));
        assert_eq!(
            m.apply(&Command::SetRetention {
                name: "nope".into(),
                retain_hours: 1
            }),
            Err(MetadataError::UnknownTopic("nope".into()))
        );
        assert_eq!(m.topics["x"].retain_hours, 24);
    }
}
