//! Starting a node's Raft instance and forming the cluster: the initial voters come from the
//! config (`controller.quorum.N`); every node that starts with an empty log proposes the same
//! initial membership, which openraft accepts exactly once cluster-wide, so whichever node
//! starts first forms the cluster and a restarted node rejoins from its data dir.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{Config, Raft};
use thiserror::Error;
use tracing::info;

use crate::metadata::{Command, CommandResult};
use crate::network::HttpNetwork;
use crate::{NodeEndpoints, NodeId, StateMachineStore, TypeConfig};

/// Longest wait for a forwarded proposal.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

/// Raft settings of one node.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This node's id.
    pub id: NodeId,
    /// What this node advertises.
    pub endpoints: NodeEndpoints,
    /// The initial voters (including this node for a voter), by id.
    pub voters: BTreeMap<NodeId, NodeEndpoints>,
    /// Directory of the RocksDB holding the log, vote and snapshot.
    pub dir: PathBuf,
    /// Leader heartbeat interval, ms.
    pub heartbeat_ms: u64,
    /// Election timeout range start, ms (the end is twice this).
    pub election_timeout_ms: u64,
    /// Log entries between snapshots (the log is purged behind them).
    pub snapshot_every: u64,
}

impl ClusterConfig {
    /// Defaults for `id` with `endpoints`, a single voter (itself), data under `dir`.
    pub fn single(id: NodeId, endpoints: NodeEndpoints, dir: PathBuf) -> Self {
        ClusterConfig {
            id,
            voters: BTreeMap::from([(id, endpoints.clone())]),
            endpoints,
            dir,
            heartbeat_ms: 100,
            election_timeout_ms: 500,
            snapshot_every: 1000,
        }
    }
}

/// Why a node's Raft could not start or a command could not commit.
#[derive(Debug, Error)]
pub enum ClusterError {
    /// Storage failed to open.
    #[error("raft storage: {0}")]
    Storage(#[from] openraft::StorageError<NodeId>),
    /// Invalid Raft timing settings.
    #[error("raft config: {0}")]
    Config(#[from] openraft::ConfigError),
    /// The Raft core stopped.
    #[error("raft stopped: {0}")]
    Fatal(#[from] openraft::error::Fatal<NodeId>),
    /// Initialization failed for another reason than "already initialized".
    #[error("initialize: {0}")]
    Initialize(String),
    /// This node is not the leader; the leader is `leader` (if known), at `endpoints`.
    #[error("not the leader; the leader is {leader:?}")]
    NotLeader {
        /// Leader id, if known.
        leader: Option<NodeId>,
        /// Leader endpoints, if known.
        endpoints: Option<NodeEndpoints>,
    },
    /// The write did not commit (membership change in progress, or similar).
    #[error("write failed: {0}")]
    Write(String),
}

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

/// A running Raft member: the openraft handle and its state machine.
#[derive(Clone)]
pub struct ClusterNode {
    /// The openraft handle.
    pub raft: Raft<TypeConfig>,
    /// The state machine (read the metadata from it).
    pub state: StateMachineStore,
    /// This node's id.
    pub id: NodeId,
    http: reqwest::Client,
}

impl ClusterNode {
    /// Opens the storage, starts Raft and, if this node's log is empty and it is one of the
    /// initial voters, proposes the initial membership.
    pub async fn start(config: &ClusterConfig) -> Result<ClusterNode, ClusterError> {
        let (log, sm) = crate::open(&config.dir)?;
        let raft_config = Config {
            cluster_name: "zper".into(),
            heartbeat_interval: config.heartbeat_ms,
            election_timeout_min: config.election_timeout_ms,
            election_timeout_max: config.election_timeout_ms * 2,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(config.snapshot_every),
            max_in_snapshot_log_to_keep: config.snapshot_every / 2,
            ..Default::default()
        }
        .validate()?;
        let raft = Raft::new(
            config.id,
            Arc::new(raft_config),
            HttpNetwork::default(),
            log,
            sm.clone(),
        )
        .await?;
        if config.voters.contains_key(&config.id) && !raft.is_initialized().await? {
            match raft.initialize(config.voters.clone()).await {
                Ok(()) => info!(
                    id = config.id,
                    voters = config.voters.len(),
                    "cluster initialized"
                ),
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                Err(e) => return Err(ClusterError::Initialize(e.to_string())),
            }
        }
        Ok(ClusterNode {
            raft,
            state: sm,
            id: config.id,
            http: reqwest::Client::new(),
        })
    }

    /// Proposes `command` (this node must be the leader) and waits for it to be applied.
    ///
    /// Errors: `NotLeader` with the leader's id and endpoints; `Write` when the entry cannot
    /// commit; `Fatal` when Raft stopped.
    pub async fn write(&self, command: Command) -> Result<CommandResult, ClusterError> {
        match self.raft.client_write(command).await {
            Ok(resp) => Ok(resp.data),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(ClusterError::NotLeader {
                    leader: f.leader_id,
                    endpoints: f.leader_node,
                })
            }
            Err(RaftError::APIError(e)) => Err(ClusterError::Write(e.to_string())),
            Err(RaftError::Fatal(f)) => Err(ClusterError::Fatal(f)),
        }
    }

    /// Proposes `command` through the leader: locally when this node leads, else forwarded to
    /// the leader's HTTP address (`PROPOSE_PATH`). While no leader is known (an election), it
    /// retries every 100 ms for up to `FORWARD_TIMEOUT`.
    ///
    /// Errors: as [`ClusterNode::write`]; `NotLeader` when no leader emerges in time; `Write`
    /// when the forward fails.
    pub async fn propose(&self, command: Command) -> Result<CommandResult, ClusterError> {
        let deadline = tokio::time::Instant::now() + FORWARD_TIMEOUT;
        loop {
            let result = match self.write(command.clone()).await {
                Err(ClusterError::NotLeader {
                    endpoints: Some(leader),
                    ..
                }) => self.forward(&leader, &command).await,
                other => other,
            };
            let retry = matches!(
                &result,
                Err(ClusterError::NotLeader { .. }) | Err(ClusterError::Write(_))
            );
            if !retry || tokio::time::Instant::now() >= deadline {
                return result;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn forward(
        &self,
        leader: &NodeEndpoints,
        command: &Command,
    ) -> Result<CommandResult, ClusterError> {
        let url = format!("http://{}{}", leader.http, crate::network::PROPOSE_PATH);
        let resp = self
            .http
            .post(&url)
            .timeout(FORWARD_TIMEOUT)
            .json(command)
            .send()
            .await
            .map_err(|e| ClusterError::Write(format!("forward to leader at {url}: {e}")))?;
        let result: Result<CommandResult, String> = resp
            .json()
            .await
            .map_err(|e| ClusterError::Write(format!("leader reply: {e}")))?;
        result.map_err(ClusterError::Write)
    }

    /// Adds node `id` as a learner (waiting until it has caught up with the log), then promotes
    /// it to voter. Must run on the leader.
    ///
    /// Errors: `NotLeader` on a follower; `Write` when a membership change is already in
    /// progress or the learner cannot be reached.
    pub async fn add_voter(
        &self,
        id: NodeId,
        endpoints: NodeEndpoints,
    ) -> Result<(), ClusterError> {
        self.raft
            .add_learner(id, endpoints, true)
            .await
            .map_err(membership_error)?;
        self.raft
            .change_membership(openraft::ChangeMembers::AddVoterIds([id].into()), false)
            .await
            .map_err(membership_error)?;
        info!(id, "node added as voter");
        Ok(())
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

    /// The current leader, if known.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    /// Waits up to `timeout` for a leader to be known.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Option<NodeId> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rx = self.raft.metrics();
        loop {
            if let Some(l) = rx.borrow().current_leader {
                return Some(l);
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return None;
            }
        }
    }
}
