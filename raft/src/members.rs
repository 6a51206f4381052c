//! Membership changes of a running cluster: adding a node (as a learner, then a voter once it
//! caught up) and removing one (from the voters, then from the metadata).

use openraft::error::{ClientWriteError, RaftError};
use tracing::info;

use crate::cluster::{ClusterError, CATCH_UP_TIMEOUT};
use crate::metadata::{Command, CommandResult};
use crate::{ClusterNode, NodeEndpoints, NodeId};
use std::time::Duration;

fn membership_error(e: RaftError<NodeId, ClientWriteError<NodeId, NodeEndpoints>>) -> ClusterError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => ClusterError::NotLeader {
            leader: f.leader_id,
            endpoints: f.leader_node,
        },
        RaftError::APIError(e) => ClusterError::Write(e.to_string()),
        RaftError::Fatal(f) => ClusterError::Fatal(f),
    }
}

impl ClusterNode {
    /// Adds node `id` as a learner, waits (at most `CATCH_UP_TIMEOUT`) until it has replicated
    /// the whole log, then promotes it to voter. Before touching the membership it checks that
    /// a zper node with that id answers at `endpoints.http`, so a typo never makes a dead voter.
    /// Must run on the leader.
    ///
    /// Errors: `Unreachable` when no such node answers (membership unchanged); `Write` when the
    /// learner does not catch up in time (it is removed again) or a membership change is
    /// already in progress; `NotLeader` on a follower.
    pub async fn add_voter(
        &self,
        id: NodeId,
        endpoints: NodeEndpoints,
    ) -> Result<(), ClusterError> {
        if self.leader() != Some(self.id) {
            return Err(ClusterError::NotLeader {
                leader: self.leader(),
                endpoints: self.other_leader(),
            });
        }
        self.probe(id, &endpoints.http).await?;
        self.raft
            .add_learner(id, endpoints, false)
            .await
            .map_err(membership_error)?;
        let target = self.raft.metrics().borrow().last_log_index.unwrap_or(0);
        let mut rx = self.raft.metrics();
        let caught_up = tokio::time::timeout(CATCH_UP_TIMEOUT, async {
            loop {
                let matched = rx
                    .borrow()
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&id).cloned().flatten())
                    .map(|l| l.index);
                if matched.is_some_and(|m| m >= target) {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        if caught_up.is_err() {
            let _ = self
                .raft
                .change_membership(openraft::ChangeMembers::RemoveNodes([id].into()), false)
                .await;
            return Err(ClusterError::Write(format!(
                "node {id} did not catch up within {} s; not added",
                CATCH_UP_TIMEOUT.as_secs()
            )));
        }
        self.raft
            .change_membership(openraft::ChangeMembers::AddVoterIds([id].into()), false)
            .await
            .map_err(membership_error)?;
        info!(id, "node added as voter");
        Ok(())
    }

    /// Checks that the node at `http` answers and is node `id`.
    async fn probe(&self, id: NodeId, http: &str) -> Result<(), ClusterError> {
        let url = format!(
            "{}{}",
            self.tls.base_url(http),
            crate::network::RAFT_STATE_PATH
        );
        let unreachable = |why: String| ClusterError::Unreachable { id, why };
        let resp = self
            .http
            .get(&url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .map_err(|e| unreachable(format!("no zper node answers at {http}: {e}")))?;
        let state: serde_json::Value = resp
            .json()
            .await
            .map_err(|e| unreachable(format!("{http} is not a zper admin API: {e}")))?;
        match state["id"].as_u64() {
            Some(found) if found == id => Ok(()),
            found => Err(unreachable(format!(
                "the node at {http} has id {}, not {id}",
                found.map_or("unknown".into(), |f| f.to_string())
            ))),
        }
    }

    /// Removes node `id` from the voters and learners, then from the metadata (its fragments
    /// fail over). Must run on the leader.
    ///
    /// Errors: as [`ClusterNode::add_voter`].
    pub async fn remove_voter(
        &self,
        id: NodeId,
        now_ms: u64,
    ) -> Result<CommandResult, ClusterError> {
        self.raft
            .change_membership(openraft::ChangeMembers::RemoveVoters([id].into()), false)
            .await
            .map_err(membership_error)?;
        info!(id, "node removed from the voters");
        self.write(Command::RemoveNode { id, now_ms }).await
    }
}
