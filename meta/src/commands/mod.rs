//! Applying commands to [`Metadata`]: pure and deterministic. [`Metadata::apply_at`] dispatches
//! each [`Command`] to its family's module: [`nodes`] (registration, leases, removal), [`topics`]
//! (create, delete), [`isr`] (in-sync replica changes), [`dolly`] (the Dolly leader and
//! key/value map) and [`groups`] (subscription groups and their offsets).

mod dolly;
mod groups;
mod isr;
mod nodes;
#[cfg(test)]
mod properties;
mod topics;

use crate::{Command, CommandResult, Metadata};

impl Metadata {
    /// Applies one command. A refused command leaves the state unchanged. (A Dolly Put
    /// applied this way gets sequence 0; the state machine uses [`Metadata::apply_at`].)
    pub fn apply(&mut self, command: &Command) -> CommandResult {
        self.apply_at(command, 0)
    }

    /// Applies one command carried by the Raft entry at `index`.
    pub fn apply_at(&mut self, command: &Command, index: u64) -> CommandResult {
        match command {
            Command::Batch(commands) => Ok(crate::Applied::Batch(
                commands
                    .iter()
                    .map(|c| match c {
                        Command::Batch(_) => Err(crate::MetadataError::NestedBatch),
                        c => self.apply_at(c, index),
                    })
                    .collect(),
            )),
            Command::DollyPut {
                key,
                value,
                request,
                deadline_ms,
            } => self.apply_dolly_put(key, value, request.as_ref(), *deadline_ms, index),
            Command::DollyCancel { request, now_ms } => self.apply_dolly_cancel(request, *now_ms),
            Command::RegisterNode {
                id,
                endpoints,
                now_ms,
                lease_ms,
                incarnation,
            } => self.apply_register_node(*id, endpoints, *now_ms, *lease_ms, *incarnation),
            Command::Heartbeat {
                id,
                now_ms,
                lease_ms,
            } => self.apply_heartbeat(*id, *now_ms, *lease_ms),
            Command::ExpireLeases { now_ms } => self.apply_expire_leases(*now_ms),
            Command::RemoveNode { id, now_ms } => self.apply_remove_node(*id, *now_ms),
            Command::CreateTopic {
                name,
                fragments,
                replication_factor,
                retain_hours,
                policy,
                now_ms,
            } => self.apply_create_topic(
                name,
                *fragments,
                *replication_factor,
                *retain_hours,
                *policy,
                *now_ms,
            ),
            Command::DeleteTopic { name } => self.apply_delete_topic(name),
            Command::SetRetention { name, retain_hours } => {
                self.apply_set_retention(name, *retain_hours)
            }
            Command::Subscribe {
                topic,
                group,
                subscriber,
                now_ms,
                lease_ms,
            } => self.apply_subscribe(topic, group, subscriber, *now_ms, *lease_ms, index),
            Command::Unsubscribe {
                topic,
                group,
                subscriber,
                now_ms,
            } => self.apply_unsubscribe(topic, group, subscriber, *now_ms),
            Command::CommitOffset {
                topic,
                group,
                subscriber,
                fragment,
                offset,
            } => self.apply_commit_offset(topic, group, subscriber, *fragment, *offset),
            Command::SetDollyLeader { id } => self.apply_set_dolly_leader(*id),
            Command::SetIsr {
                topic,
                fragment,
                leader_epoch,
                isr,
            } => self.apply_set_isr(topic, *fragment, *leader_epoch, isr),
            Command::LeaveIsr {
                topic,
                fragment,
                node,
            } => self.apply_leave_isr(topic, *fragment, *node),
        }
    }
}

/// Commands the unit tests of several families build.
#[cfg(test)]
mod test_commands {
    use crate::{Command, FragmentPolicy, NodeEndpoints, NodeId};

    /// Node `id` registers at `now_ms` with a 10 s lease.
    pub(super) fn register(id: NodeId, now_ms: u64) -> Command {
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

    /// Creates topic `name` with `fragments` fragments and the default replication factor.
    pub(super) fn create(name: &str, fragments: u32, now_ms: u64) -> Command {
        Command::CreateTopic {
            name: name.into(),
            fragments: Some(fragments),
            replication_factor: None,
            retain_hours: None,
            policy: FragmentPolicy::Default,
            now_ms,
        }
    }
}
