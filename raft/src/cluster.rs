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
use tracing::info;

pub use crate::error::ClusterError;
use crate::metadata::{Applied, Command, CommandResult, MetadataError};
use crate::transport::{StreamNetwork, TransportStats};
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
    /// How peers' admin ports are reached: plain HTTP, or TLS trusting a CA
    /// (`http.tls_ca`, issue #19).
    pub tls: crate::tls::PeerTls,
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
            tls: crate::tls::PeerTls::plain(),
        }
    }
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
    /// Counters of this node's outgoing Raft RPCs ([`crate::transport`]).
    pub transport: Arc<TransportStats>,
    /// Times the leader this node knows changed since it started (to another node or to
    /// none): a healthy cluster under load has none after its first election.
    pub leader_changes: Arc<AtomicU64>,
    /// How close this node's liveness lease came to ending ([`crate::lease`]).
    pub lease: Arc<crate::lease::LeaseStats>,
    proposer: crate::batch::Proposer,
    forwarder: crate::transport::Forwarder,
    pub(crate) http: reqwest::Client,
    /// How peers' admin ports are reached (the scheme of `http`'s URLs).
    pub(crate) tls: crate::tls::PeerTls,
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

/// Counts leader changes until the Raft instance stops: each time this node learns of a leader
/// (or the same leader in a new term) after having known another one. The first leader it
/// learns of after starting is not a change; an election in progress (no leader) is not
/// counted until it ends.
async fn count_leader_changes(
    mut rx: tokio::sync::watch::Receiver<openraft::RaftMetrics<NodeId, NodeEndpoints>>,
    changes: Arc<AtomicU64>,
) {
    let mut last: Option<(NodeId, u64)> = None;
    loop {
        let (leader, term) = {
            let m = rx.borrow_and_update();
            (m.current_leader, m.current_term)
        };
        if let Some(leader) = leader {
            if last.is_some_and(|l| l != (leader, term)) {
                changes.fetch_add(1, Ordering::Relaxed);
            }
            last = Some((leader, term));
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// How long a leader waits for a follower to take and install a snapshot, ms. openraft's
/// default (200 ms) was too short for a follower on a loaded 2-core machine: the leader
/// gave up and sent the snapshot again for over a minute, so the follower never caught up
/// (chaos suite, randomized nemesis, CI of 2026-12-05).
pub const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 5_000;

/// openraft's settings for `config`.
///
/// Errors: [`ClusterError::Config`] when openraft refuses them (e.g. an election timeout not
/// above the heartbeat).
fn raft_config(config: &ClusterConfig) -> Result<Config, ClusterError> {
    Ok(Config {
        cluster_name: "zper".into(),
        heartbeat_interval: config.heartbeat_ms,
        election_timeout_min: config.election_timeout_ms,
        election_timeout_max: config.election_timeout_ms * 2,
        install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(config.snapshot_every),
        max_in_snapshot_log_to_keep: config.snapshot_every / 2,
        // Bounds an AppendEntries frame (transport::MAX_FRAME_BYTES) when entries are
        // command batches of up to a few MiB.
        max_payload_entries: 64,
        ..Default::default()
    }
    .validate()?)
}

impl ClusterNode {
    /// Opens the storage, starts Raft and, if this node's log is empty and it is one of the
    /// initial voters, proposes the initial membership.
    pub async fn start(config: &ClusterConfig) -> Result<ClusterNode, ClusterError> {
        let (log, sm) = crate::open(&config.dir)?;
        claim_dir(&config.dir, config.id)?;
        let raft_config = raft_config(config)?;
        let transport = Arc::new(TransportStats::default());
        let raft = Raft::new(
            config.id,
            Arc::new(raft_config),
            StreamNetwork::new(
                config.admin_token.as_deref(),
                config.tls.clone(),
                transport.clone(),
            ),
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
        let leader_changes = Arc::new(AtomicU64::new(0));
        tokio::spawn(count_leader_changes(raft.metrics(), leader_changes.clone()));
        let (proposer, queue) = crate::batch::Proposer::start();
        let forwarder = crate::transport::Forwarder::new(
            config.admin_token.as_deref(),
            config.tls.clone(),
            transport.clone(),
        );
        let node = ClusterNode {
            leader_changes,
            lease: Arc::default(),
            raft,
            state: sm,
            id: config.id,
            proposals: Arc::default(),
            incarnation: new_incarnation(),
            transport,
            proposer: crate::batch::Proposer::closed(),
            http: crate::network::http_client(config.admin_token.as_deref(), &config.tls),
            tls: config.tls.clone(),
            forwarder,
        };
        // The proposer task's own handle has a closed proposer, so the task ends once every
        // other handle is dropped.
        let proposer_node = node.clone();
        tokio::spawn(crate::batch::run(
            move |command, here_only| {
                let node = proposer_node.clone();
                async move {
                    if here_only {
                        node.write(command).await
                    } else {
                        node.propose_now(command).await
                    }
                }
            },
            queue,
        ));
        Ok(ClusterNode { proposer, ..node })
    }

    /// Proposes `command` (this node must be the leader) and waits for it to be applied.
    ///
    /// Errors: `NotLeader` with the leader's id and endpoints; `Write` when the entry cannot
    /// commit; `Fatal` when Raft stopped.
    pub async fn write(&self, command: Command) -> Result<CommandResult, ClusterError> {
        let Command::Batch(commands) = command else {
            return match self.refusal(&command) {
                Some(refused) => Ok(Err(refused)),
                None => self.write_entry(command).await,
            };
        };
        // Commands refused before proposing keep their place in the answer.
        let mut results: Vec<Option<CommandResult>> =
            commands.iter().map(|c| self.refusal(c).map(Err)).collect();
        let mut send: Vec<Command> = commands
            .into_iter()
            .zip(&results)
            .filter(|(_, r)| r.is_none())
            .map(|(c, _)| c)
            .collect();
        let n = send.len();
        let mut applied = match n {
            0 => Vec::new(),
            1 => vec![self.write_entry(send.remove(0)).await?],
            _ => crate::batch::split(Ok(self.write_entry(Command::Batch(send)).await?), n)
                .into_iter()
                .collect::<Result<Vec<_>, _>>()?,
        }
        .into_iter();
        for slot in results.iter_mut().filter(|r| r.is_none()) {
            *slot = applied.next();
        }
        Ok(Ok(Applied::Batch(
            results
                .into_iter()
                .map(|r| r.unwrap_or(Err(MetadataError::NestedBatch)))
                .collect(),
        )))
    }

    /// Why `command` is refused before it is proposed, if it is: a registration the
    /// membership does not allow, a guarded Dolly Put past its deadline, a nested batch.
    fn refusal(&self, command: &Command) -> Option<MetadataError> {
        match command {
            Command::RegisterNode { id, endpoints, .. } => self.check_registration(*id, endpoints),
            // Its client has been answered (or is about to be) with an error: never log it.
            Command::DollyPut {
                request: Some(_),
                deadline_ms,
                ..
            } if crate::dolly::now_ms() > *deadline_ms => Some(MetadataError::DollyPutExpired),
            // Only reached for a command inside a batch (`write` takes a batch apart): refused
            // here too when it would be written alone, as the entry it would unwrap into.
            Command::Batch(_) => Some(MetadataError::NestedBatch),
            _ => None,
        }
    }

    /// Proposes one entry and waits for it to be applied (see [`ClusterNode::write`]).
    async fn write_entry(&self, command: Command) -> Result<CommandResult, ClusterError> {
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

    /// Proposes `command` through the leader, batched with the other proposals of this node
    /// that wait at the same moment ([`crate::batch`]): locally when this node leads, else
    /// forwarded to the leader over the binary Raft stream (or to its `PROPOSE_PATH` over
    /// HTTP, for a leader from before it). While no leader is known (an election), it retries
    /// every 100 ms for up to `FORWARD_TIMEOUT`.
    ///
    /// Errors: as [`ClusterNode::write`]; `NotLeader` when no leader emerges in time; `Write`
    /// when the forward fails.
    ///
    /// Lease renewals and registrations skip the batch queue (they go alone, at once): a
    /// renewal must not wait behind a burst of Dolly Puts until its lease has run out.
    pub async fn propose(&self, command: Command) -> Result<CommandResult, ClusterError> {
        match command {
            Command::Heartbeat { .. } | Command::RegisterNode { .. } => {
                self.propose_now(command).await
            }
            other => self.proposer.propose(other).await,
        }
    }

    /// A proposal forwarded to this node by a follower (over the Raft stream). On the leader
    /// it joins this node's next batch ([`crate::batch`]), so the proposals of every member
    /// share one log entry; lease renewals and registrations are written at once, as in
    /// [`ClusterNode::propose`]. Elsewhere it is refused as `NotLeader`, never forwarded again.
    ///
    /// Errors: as [`ClusterNode::write`].
    pub(crate) async fn write_forwarded(
        &self,
        command: Command,
    ) -> Result<CommandResult, ClusterError> {
        match command {
            Command::Heartbeat { .. } | Command::RegisterNode { .. } => self.write(command).await,
            _ if self.leader() != Some(self.id) => self.write(command).await,
            other => self.proposer.propose_forwarded(other).await,
        }
    }

    /// [`ClusterNode::propose`] without batching: this one command (or batch) now.
    pub(crate) async fn propose_now(
        &self,
        command: Command,
    ) -> Result<CommandResult, ClusterError> {
        let deadline = tokio::time::Instant::now() + FORWARD_TIMEOUT;
        loop {
            // A follower that knows its leader forwards at once: asking its own Raft core
            // first (which answers `ForwardToLeader`) costs a copy of the batch and a trip
            // through the core per proposal.
            let result = match self.other_leader() {
                Some(leader) => self.forward(&leader, &command).await,
                None => match self.write(command.clone()).await {
                    Err(ClusterError::NotLeader {
                        endpoints: Some(leader),
                        ..
                    }) => self.forward(&leader, &command).await,
                    other => other,
                },
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

    /// Sends `command` to `leader` over the binary stream ([`crate::transport::Forwarder`]),
    /// or as JSON over HTTP to a leader from before it.
    async fn forward(
        &self,
        leader: &NodeEndpoints,
        command: &Command,
    ) -> Result<CommandResult, ClusterError> {
        use crate::transport::Forwarded;
        match self
            .forwarder
            .forward(&leader.http, command, FORWARD_REQUEST_TIMEOUT)
            .await
        {
            Forwarded::Answer(result) => return result.map_err(ClusterError::Write),
            Forwarded::Failed(why) => return Err(ClusterError::Write(why)),
            Forwarded::NotSupported => {}
        }
        let url = format!(
            "{}{}",
            self.tls.base_url(&leader.http),
            crate::network::PROPOSE_PATH
        );
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

    /// The endpoints of the current leader when it is known and is not this node.
    pub(crate) fn other_leader(&self) -> Option<NodeEndpoints> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let leader = m.current_leader.filter(|&l| l != self.id)?;
        m.membership_config.membership().get_node(&leader).cloned()
    }

    /// How this node reaches peers' admin ports (plain HTTP or TLS, `http.tls_ca`).
    pub fn peer_tls(&self) -> &crate::tls::PeerTls {
        &self.tls
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
#[path = "cluster_tests.rs"]
mod tests;
