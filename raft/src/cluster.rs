//! Starting a node's Raft instance and forming the cluster: the initial voters come from the
//! config (`controller.quorum.N`); every node that starts with an empty log proposes the same
//! initial membership, which openraft accepts exactly once cluster-wide, so whichever node
//! starts first forms the cluster and a restarted node rejoins from its data dir.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{Config, Raft};
use thiserror::Error;
use tracing::info;

use crate::metadata::{Command, CommandResult, MetadataError};
use crate::network::HttpNetwork;
use crate::{NodeEndpoints, NodeId, StateMachineStore, TypeConfig};

/// Longest wait for a forwarded proposal, retries included.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for one forward to the leader: a frozen leader must not hold a proposal (a
/// lease renewal, say) for long while another node is being elected.
pub const FORWARD_REQUEST_TIMEOUT: Duration = Duration::from_millis(500);
/// Longest wait for a local proposal to commit (it may still commit later).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a new learner to replicate the log before it is promoted.
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// Shared secret sent as `Authorization: Bearer <token>` on every request to a peer (Raft
    /// RPCs, forwarded proposals); peers with an admin token set refuse mutating requests
    /// without it. `None`: no header.
    pub admin_token: Option<String>,
}

impl ClusterConfig {
    /// Defaults for `id` with `endpoints`, a single voter (itself), data under `dir`.
    pub fn single(id: NodeId, endpoints: NodeEndpoints, dir: PathBuf) -> Self {
        ClusterConfig {
            id,
            voters: BTreeMap::from([(id, endpoints.clone())]),
            endpoints,
            dir,
            heartbeat_ms: 50,
            election_timeout_ms: 300,
            snapshot_every: 1000,
            admin_token: None,
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
    #[error("not the leader; the leader is {}", leader.map_or("unknown (election in progress)".to_owned(), |l| format!("node {l}")))]
    NotLeader {
        /// Leader id, if known.
        leader: Option<NodeId>,
        /// Leader endpoints, if known.
        endpoints: Option<NodeEndpoints>,
    },
    /// The write did not commit (membership change in progress, timeout, or similar).
    #[error("write failed: {0}")]
    Write(String),
    /// The Raft data directory belongs to another node id (a changed `node.id`, or two nodes
    /// sharing a directory): starting would give this node another node's votes and log.
    #[error("raft dir {dir} belongs to node {stored}, not {configured}: keep node.id {stored}, or use another (empty) directory")]
    IdMismatch {
        /// The directory.
        dir: PathBuf,
        /// The id recorded in it.
        stored: NodeId,
        /// The configured id.
        configured: NodeId,
    },
    /// The node id file could not be read or written.
    #[error("raft dir {dir}: {source}")]
    Io {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A node to be added does not answer as the expected zper node.
    #[error("node {id} unreachable: {why}")]
    Unreachable {
        /// The node id.
        id: NodeId,
        /// What the probe found.
        why: String,
    },
}

/// Name of the file in the Raft directory that records which node id owns it.
pub const NODE_ID_FILE: &str = "NODE_ID";

/// Records `id` as the owner of `dir` on first use; later, refuses any other id.
fn claim_dir(dir: &std::path::Path, id: NodeId) -> Result<(), ClusterError> {
    let path = dir.join(NODE_ID_FILE);
    let io = |source| ClusterError::Io {
        dir: dir.to_owned(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => match text.trim().parse::<NodeId>() {
            Ok(stored) if stored == id => Ok(()),
            Ok(stored) => Err(ClusterError::IdMismatch {
                dir: dir.to_owned(),
                stored,
                configured: id,
            }),
            Err(_) => Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} does not hold a node id", path.display()),
            ))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let tmp = dir.join(format!("{NODE_ID_FILE}.tmp"));
            let mut f = std::fs::File::create(&tmp).map_err(io)?;
            std::io::Write::write_all(&mut f, format!("{id}\n").as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
            std::fs::rename(&tmp, &path).map_err(io)?;
            // The claim, and the Raft directory itself, survive a power loss only once their
            // directories are fsynced (RocksDB syncs its own files, not its parent).
            let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
            for d in [Some(dir), parent].into_iter().flatten() {
                std::fs::File::open(d)
                    .and_then(|d| d.sync_all())
                    .map_err(io)?;
            }
            Ok(())
        }
        Err(e) => Err(io(e)),
    }
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
    /// Latency and outcome of the proposals this node made as leader.
    pub proposals: Arc<ProposalStats>,
    /// This run of the node (boot time in µs, unique per [`ClusterNode::start`] in a
    /// process): it registers with it, and leads fragments only once the metadata shows it
    /// (a restarted leader leads in a new leader epoch, issue #13).
    pub incarnation: u64,
    http: reqwest::Client,
}

/// Upper bounds of the proposal latency buckets, seconds (250 µs to ~8 s, doubling).
pub const PROPOSAL_BUCKETS: [f64; 16] = [
    0.000_25, 0.000_5, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024,
    2.048, 4.096, 8.192,
];

/// Proposals written by this node as leader: time from `client_write` to applied, and counts.
#[derive(Debug)]
pub struct ProposalStats {
    /// Committed-and-applied latency, seconds (`zper_raft_proposal_duration_seconds`).
    pub seconds: prometheus::Histogram,
    /// Proposals that committed (whether the command was applied or refused).
    pub committed: std::sync::atomic::AtomicU64,
    /// Proposals that did not commit here (not leader, timeout, membership change).
    pub failed: std::sync::atomic::AtomicU64,
}

impl Default for ProposalStats {
    fn default() -> Self {
        #[allow(clippy::expect_used)] // static options: sorted buckets and a valid name
        let seconds = prometheus::Histogram::with_opts(
            prometheus::HistogramOpts::new(
                "zper_raft_proposal_duration_seconds",
                "Time from proposing a metadata command as leader to its being applied, seconds.",
            )
            .buckets(PROPOSAL_BUCKETS.to_vec()),
        )
        .expect("valid histogram options");
        ProposalStats {
            seconds,
            committed: Default::default(),
            failed: Default::default(),
        }
    }
}

/// A value no earlier run of this node used: the boot time in µs, and distinct for every call
/// in one process (test clusters start several nodes in one process).
fn new_incarnation() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64);
    let mut prev = LAST.load(Ordering::Relaxed);
    loop {
        let next = micros.max(prev + 1);
        match LAST.compare_exchange(prev, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(p) => prev = p,
        }
    }
}

impl ClusterNode {
    /// Opens the storage, starts Raft and, if this node's log is empty and it is one of the
    /// initial voters, proposes the initial membership.
    pub async fn start(config: &ClusterConfig) -> Result<ClusterNode, ClusterError> {
        let (log, sm) = crate::open(&config.dir)?;
        claim_dir(&config.dir, config.id)?;
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
            HttpNetwork::new(config.admin_token.as_deref()),
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
            proposals: Arc::default(),
            incarnation: new_incarnation(),
            http: crate::network::http_client(config.admin_token.as_deref()),
        })
    }

    /// Proposes `command` (this node must be the leader) and waits for it to be applied.
    ///
    /// Errors: `NotLeader` with the leader's id and endpoints; `Write` when the entry cannot
    /// commit; `Fatal` when Raft stopped.
    pub async fn write(&self, command: Command) -> Result<CommandResult, ClusterError> {
        if let Command::RegisterNode { id, endpoints, .. } = &command {
            if let Some(refused) = self.check_registration(*id, endpoints) {
                return Ok(Err(refused));
            }
        }
        if let Command::DollyPut {
            request: Some(_),
            deadline_ms,
            ..
        } = &command
        {
            // Its client has been answered (or is about to be) with an error: never log it.
            if crate::dolly::now_ms() > *deadline_ms {
                return Ok(Err(MetadataError::DollyPutExpired));
            }
        }
        let started = std::time::Instant::now();
        let written = tokio::time::timeout(WRITE_TIMEOUT, self.raft.client_write(command))
            .await
            .map_err(|_| {
                self.proposals.failed.fetch_add(1, Ordering::Relaxed);
                ClusterError::Write(format!(
                    "not committed within {} s (no quorum?); it may still commit later",
                    WRITE_TIMEOUT.as_secs()
                ))
            })?;
        match &written {
            Ok(_) => {
                self.proposals.committed.fetch_add(1, Ordering::Relaxed);
                self.proposals
                    .seconds
                    .observe(started.elapsed().as_secs_f64());
            }
            // Not a failure: the caller forwards to the leader.
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {}
            Err(_) => {
                self.proposals.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        match written {
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

    /// On the leader, before a `RegisterNode` is proposed: the id must be a member (voter or
    /// learner) whose membership entry has the same HTTP address, so a removed node cannot
    /// re-register and two processes cannot share an id. Followers leave the check to the
    /// leader (their write is refused as `NotLeader` anyway).
    fn check_registration(&self, id: NodeId, endpoints: &NodeEndpoints) -> Option<MetadataError> {
        let m = self.raft.metrics().borrow().clone();
        if m.current_leader != Some(self.id) {
            return None;
        }
        match m.membership_config.membership().get_node(&id) {
            None => Some(MetadataError::NotMember(id)),
            Some(member) if member.http != endpoints.http => Some(MetadataError::DuplicateNodeId {
                id,
                member_http: member.http.clone(),
                registering_http: endpoints.http.clone(),
            }),
            Some(_) => None,
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
            .timeout(FORWARD_REQUEST_TIMEOUT)
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
            let leader = self.leader();
            let endpoints = leader.and_then(|l| {
                self.raft
                    .metrics()
                    .borrow()
                    .membership_config
                    .membership()
                    .get_node(&l)
                    .cloned()
            });
            return Err(ClusterError::NotLeader { leader, endpoints });
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
        let url = format!("http://{http}{}", crate::network::RAFT_STATE_PATH);
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

    /// The current leader, if known.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    /// Whether this node is the Raft leader in openraft's own state (not only the last leader
    /// it knew of: a restarted former leader may name itself until it hears the current term).
    pub fn is_leader(&self) -> bool {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        m.state == openraft::ServerState::Leader && m.current_leader == Some(self.id)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raft_dir_belongs_to_one_node_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        claim_dir(dir.path(), 1).expect("first claim");
        claim_dir(dir.path(), 1).expect("same id again");
        match claim_dir(dir.path(), 5) {
            Err(ClusterError::IdMismatch {
                stored, configured, ..
            }) => assert_eq!((stored, configured), (1, 5)),
            other => panic!("expected IdMismatch, got {other:?}"),
        }
        std::fs::write(dir.path().join(NODE_ID_FILE), "garbage").expect("write");
        assert!(matches!(
            claim_dir(dir.path(), 1),
            Err(ClusterError::Io { .. })
        ));
    }
}
