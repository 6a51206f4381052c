//! zper-meta: the replicated cluster metadata that zper's Raft group agrees on (issue #3), and
//! the commands that change it: nodes with leader-granted leases, topics, fragment placement
//! (Pirius "default"/"distribution" policies, `pirius.md` §7, in [`placement`]), the Dolly
//! leader and key/value map, and subscription groups with their fragment assignment
//! ([`subscription`]).
//!
//! Apply is deterministic: no clocks, no randomness, sorted maps only. Times (`now_ms`) and ids
//! are chosen by the proposer and carried in the command, so every node that applies the same
//! log reaches the same state (compare [`Metadata::state_hash`]).
//!
//! The crate is serde-only (no openraft, no storage, no async runtime): the Raft log stores
//! [`Command`]s and the snapshots store [`Metadata`] as JSON, so clients and tools can read
//! them with this crate alone. `zper-raft` holds the openraft glue and re-exports this crate as
//! `zper_raft::metadata`.

mod bytes;
mod commands;
mod endpoints;
pub mod placement;
pub mod subscription;
pub mod views;

use std::collections::BTreeMap;

pub use placement::{PlacementChange, PlacementReason};

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use endpoints::{valid_http_address, NodeEndpoints, NodeId, PeerEndpoints};

/// A node known to the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// What the node advertises.
    pub endpoints: NodeEndpoints,
    /// The node is live while the applying command's `now_ms` is below this (ms since the epoch).
    pub lease_until_ms: u64,
    /// The run of the node that registered last ([`Command::RegisterNode`]); 0 for nodes that
    /// predate it.
    #[serde(default)]
    pub incarnation: u64,
}

/// How a topic's messages map to fragments (`pirius.md` §7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FragmentPolicy {
    /// Pirius "default": every fragment receives the broadcast.
    #[default]
    Default,
    /// Pirius "distribution": each message goes to one fragment.
    Distribution,
}

/// One fragment of a topic: its leader and replicas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fragment {
    /// Fragment id, 0-based.
    pub id: u32,
    /// Node that accepts writes for it.
    pub leader: NodeId,
    /// Bumped at every leader change (Kafka's leader epoch, KIP-101).
    pub leader_epoch: u64,
    /// Every node holding a copy, leader first.
    pub replicas: Vec<NodeId>,
    /// Replicas caught up with the leader (in-sync replicas), leader first.
    pub isr: Vec<NodeId>,
    /// Why the placement last changed.
    #[serde(default)]
    pub last_change: Option<PlacementReason>,
}

/// A topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    /// Copies of each fragment.
    pub replication_factor: u32,
    /// Retention in hours.
    pub retain_hours: u32,
    /// Fragment policy.
    pub policy: FragmentPolicy,
    /// Its fragments, by id.
    pub fragments: Vec<Fragment>,
}

/// Everything the Raft group agrees on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// Known nodes by id.
    pub nodes: BTreeMap<NodeId, NodeRecord>,
    /// Topics by name.
    pub topics: BTreeMap<String, TopicRecord>,
    /// The node whose Dolly endpoints serve updates and snapshots.
    pub dolly_leader: Option<NodeId>,
    /// Dolly's key/value map (issue #5): key -> the record of its last Put. (Serialized as a
    /// list of `[key, record]` pairs: JSON map keys must be strings, Dolly keys are bytes.)
    #[serde(default, with = "entries")]
    pub dolly: BTreeMap<Vec<u8>, DollyRecord>,
    /// Sequence of the newest Dolly Put (the Raft index that applied it; 0 before any).
    #[serde(default)]
    pub dolly_sequence: u64,
    /// Outcomes of recent Dolly Puts that carry a request id, by origin node then serial: a
    /// retried Put applies once, and a cancelled one never applies (see
    /// [`Command::DollyCancel`]). Entries are dropped [`DOLLY_REQUEST_RETAIN_MS`] after their
    /// deadline, measured by the clocks carried in later Dolly commands.
    #[serde(default)]
    pub dolly_requests: BTreeMap<NodeId, BTreeMap<u64, DollyOutcome>>,
    /// Subscription groups by topic, then group name (issue #7, `pirius.md` §16.1).
    #[serde(default)]
    pub subscriptions: BTreeMap<String, BTreeMap<String, SubscriptionGroup>>,
}

/// One subscription group of a topic: its live members, which fragments each reads, and the
/// group's committed progress (`pirius.md` §16.1, replacing ZooKeeper's subscription map).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionGroup {
    /// Member id -> its session lease end, ms since the epoch (renewed by re-subscribing).
    pub members: BTreeMap<subscription::MemberId, u64>,
    /// Fragment -> the members that read it ([`subscription::assign`]).
    pub assignment: subscription::Assignment,
    /// Fragment -> the offset up to which the group has acknowledged records (bytes), under
    /// the `distribution` policy (one owner per fragment).
    pub offsets: BTreeMap<u32, u64>,
    /// Under the `default` policy every member reads every fragment, so each member's progress
    /// is its own: member -> fragment -> acknowledged offset (kept after it leaves, so a member
    /// that rejoins resumes where it stopped).
    #[serde(default)]
    pub member_offsets: BTreeMap<subscription::MemberId, BTreeMap<u32, u64>>,
}

impl SubscriptionGroup {
    /// Where `member` resumes `fragment` under `policy`: the committed offset (0 when none).
    pub fn committed(&self, policy: FragmentPolicy, member: &str, fragment: u32) -> u64 {
        let offsets = match policy {
            FragmentPolicy::Distribution => Some(&self.offsets),
            FragmentPolicy::Default => self.member_offsets.get(member),
        };
        offsets.and_then(|o| o.get(&fragment)).copied().unwrap_or(0)
    }
}

/// How long a Dolly request's outcome is kept after its deadline, ms: longer than any clock
/// skew between the proposer and the Raft leader (which refuses a Put past its deadline).
pub const DOLLY_REQUEST_RETAIN_MS: u64 = 60_000;

/// Names one Dolly Put attempt across retries and forwards: the node that took it from the
/// client and that node's serial for it (unique per node incarnation: it starts from the boot
/// time in microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DollyRequest {
    /// The node that proposed it.
    pub origin: NodeId,
    /// That node's serial for it.
    pub serial: u64,
}

/// What became of one Dolly request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DollyOutcome {
    /// The Put's deadline, ms since the epoch (the proposer's clock).
    pub deadline_ms: u64,
    /// `Some(sequence)`: applied with that sequence; `None`: cancelled, never to apply.
    pub sequence: Option<u64>,
}

/// Serde for a map with non-string keys as a list of `[key, value]` pairs.
mod entries {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<K: Serialize, V: Serialize, S: Serializer>(
        map: &BTreeMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.iter())
    }

    pub fn deserialize<'de, K, V, D>(d: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}

/// The last Put of one Dolly key (`dolly.md` §4: a stored record is that Put message).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DollyRecord {
    /// The sequence that Put got: the Raft log index that applied it, so sequences grow over
    /// the cluster's whole life, across restarts and leader changes (`dolly.md` §10).
    pub sequence: u64,
    /// The value.
    pub value: Vec<u8>,
}

/// A metadata change, proposed by the Raft leader with its clock reading in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)] // a few commands per second: size does not matter
pub enum Command {
    /// A node joins (or re-registers with new endpoints) with a lease of `lease_ms`; placement
    /// is re-run (reason [`PlacementReason::NodeJoined`]).
    RegisterNode {
        /// Node id.
        id: NodeId,
        /// Its endpoints.
        endpoints: NodeEndpoints,
        /// Proposer's clock, ms since the epoch.
        now_ms: u64,
        /// Lease length, ms.
        lease_ms: u64,
        /// The registering run of the node (its boot time in µs; 0 from nodes that predate
        /// it). A new value means the node restarted: every fragment it leads moves to a new
        /// leader epoch, led by it, so replicas holding bytes its previous run wrote and lost
        /// (never flushed before a power loss) cut back to where the new epoch starts instead
        /// of keeping them under different bytes at the same offsets (issue #13).
        #[serde(default)]
        incarnation: u64,
    },
    /// A node renews its lease.
    Heartbeat {
        /// Node id.
        id: NodeId,
        /// Proposer's clock, ms.
        now_ms: u64,
        /// Lease length, ms.
        lease_ms: u64,
    },
    /// Placement is re-run at `now_ms` (reason [`PlacementReason::LeasesExpired`]): fragments led
    /// by nodes whose lease ended move to a live in-sync replica, such nodes leave the ISRs.
    ExpireLeases {
        /// Proposer's clock, ms.
        now_ms: u64,
    },
    /// A node leaves the cluster; placement is re-run (reason [`PlacementReason::NodeRemoved`]):
    /// its leaderships move to in-sync replicas and its replicas are reassigned.
    RemoveNode {
        /// Node id.
        id: NodeId,
        /// Proposer's clock, ms.
        now_ms: u64,
    },
    /// Creates a topic placed over the live nodes.
    CreateTopic {
        /// Topic name (ZPER spec §3: 1-64 ASCII letters or digits).
        name: String,
        /// Fragment count (default 1).
        fragments: Option<u32>,
        /// Copies per fragment (default min(3, live nodes)).
        replication_factor: Option<u32>,
        /// Retention, hours (default 168).
        retain_hours: Option<u32>,
        /// Fragment policy.
        policy: FragmentPolicy,
        /// Proposer's clock, ms.
        now_ms: u64,
    },
    /// Deletes a topic.
    DeleteTopic {
        /// Topic name.
        name: String,
    },
    /// Records the Dolly leader (the Raft leader, when leadership moves).
    SetDollyLeader {
        /// Node id.
        id: NodeId,
    },
    /// A Dolly Put (issue #5): `key` takes `value`, with the applying entry's Raft index as
    /// its sequence. With a `request` id it applies at most once (a repeat answers the first
    /// sequence) and never after a [`Command::DollyCancel`] of that id; the Raft leader refuses
    /// to propose it once `deadline_ms` has passed on its clock.
    DollyPut {
        /// Key (raw bytes).
        #[serde(with = "bytes")]
        key: Vec<u8>,
        /// Value (raw bytes).
        #[serde(with = "bytes")]
        value: Vec<u8>,
        /// The attempt's id (none: a plain, unguarded Put).
        #[serde(default)]
        request: Option<DollyRequest>,
        /// Until when the client waits, ms since the epoch (0: no deadline).
        #[serde(default)]
        deadline_ms: u64,
    },
    /// Gives up a Dolly Put whose reply timed out: if the Put was applied before this entry
    /// the result is its sequence ([`Applied::DollyPut`]), else [`Applied::DollyCancelled`]
    /// and the Put never applies later (`dolly.md` §9 W2: a timed-out write must be neither
    /// lost after a success reply nor applied after an error reply).
    DollyCancel {
        /// The Put's id.
        request: DollyRequest,
        /// The proposer's clock, ms.
        now_ms: u64,
    },
    /// A subscriber joins `group` of `topic`, or renews its session (issue #7): members whose
    /// lease ended by `now_ms` leave, and the fragments are reassigned
    /// ([`subscription::assign`] with the topic's policy). Answers [`Applied::Subscription`].
    Subscribe {
        /// Topic name.
        topic: String,
        /// Group name (1-64 printable ASCII characters).
        group: String,
        /// Subscriber id within the group (1-64 printable ASCII characters).
        subscriber: String,
        /// Proposer's clock, ms.
        now_ms: u64,
        /// Session lease, ms.
        lease_ms: u64,
    },
    /// A subscriber leaves its group; its fragments are reassigned.
    Unsubscribe {
        /// Topic name.
        topic: String,
        /// Group name.
        group: String,
        /// Subscriber id.
        subscriber: String,
        /// Proposer's clock, ms.
        now_ms: u64,
    },
    /// The group acknowledges `fragment` up to `offset` (bytes). Only a member the fragment is
    /// assigned to may commit; offsets never go back (a late, lower commit changes nothing).
    CommitOffset {
        /// Topic name.
        topic: String,
        /// Group name.
        group: String,
        /// The committing subscriber.
        subscriber: String,
        /// Fragment id.
        fragment: u32,
        /// Offset after the last acknowledged record.
        offset: u64,
    },
    /// The fragment's leader changes its in-sync replica set (issue #4): a replica that fell
    /// behind for `replica.lag_ms` leaves, one that caught up rejoins. Applied only in the
    /// epoch it names (a deposed leader's late proposal is refused).
    SetIsr {
        /// Topic name.
        topic: String,
        /// Fragment id.
        fragment: u32,
        /// The proposer's leader epoch.
        leader_epoch: u64,
        /// The new in-sync replicas (a subset of the replicas, with the leader).
        isr: Vec<NodeId>,
    },
    /// A replica found its copy of the fragment damaged (issue #13: a checksum mismatch, or
    /// recovery cut below what it had acknowledged) and leaves the in-sync replicas, so it
    /// is never elected with missing data and never makes others truncate; it repairs by
    /// fetching from the leader and rejoins once caught up. When it leads, leadership moves
    /// first to the next in-sync replica (leader epoch + 1). Refused for the only in-sync
    /// replica (there is nothing to repair from); a replica already out changes nothing.
    LeaveIsr {
        /// Topic name.
        topic: String,
        /// Fragment id.
        fragment: u32,
        /// The replica whose copy is damaged.
        node: NodeId,
    },
    /// Changes a topic's retention after creation (issue #15; `PATCH /v1/topics/{name}`):
    /// every node's retention uses it from the next check. Answers [`Applied::Topic`].
    SetRetention {
        /// Topic name.
        name: String,
        /// Retention, hours (>= 1).
        retain_hours: u32,
    },
    /// Several commands in one Raft entry (issue #16: one log write and one round trip for
    /// many concurrent proposals), applied in order as if each had its own entry at this
    /// index; each has its own result ([`Applied::Batch`]). A batch inside a batch is refused.
    Batch(Vec<Command>),
}

/// What applying a command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Applied {
    /// Nothing to report (blank and membership entries, heartbeats, deletes).
    Done,
    /// The topic as placed.
    Topic(TopicRecord),
    /// Fragments whose placement changed, and how.
    Placement(Vec<PlacementChange>),
    /// A Dolly Put was applied with this sequence.
    DollyPut {
        /// The sequence (Raft log index).
        sequence: u64,
    },
    /// A Dolly Put was cancelled before it applied; it never will.
    DollyCancelled,
    /// A subscriber's fragments after a Subscribe, with the group's committed offsets for them.
    Subscription {
        /// Fragment -> committed offset (0 when none), for the fragments this subscriber reads.
        fragments: BTreeMap<u32, u64>,
        /// The Raft index that applied it (relays judge assignment once they applied it).
        #[serde(default)]
        revision: u64,
    },
    /// The results of a [`Command::Batch`], one per command in its order.
    Batch(Vec<CommandResult>),
}

/// Why a command was refused; the state is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum MetadataError {
    /// CreateTopic of an existing name.
    #[error("topic {0} exists")]
    TopicExists(String),
    /// A topic that does not exist.
    #[error("unknown topic {0}")]
    UnknownTopic(String),
    /// A node id that is not registered.
    #[error("unknown node {0}")]
    UnknownNode(NodeId),
    /// A topic name that ZPER's identity cannot carry.
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A node that is not a voter or learner of the Raft group tried to register (a node
    /// not yet added, or removed).
    #[error("node {0} is not a member of the Raft group: add it first (zper cluster add-node)")]
    NotMember(NodeId),
    /// A node registered with an id whose Raft membership entry names another address: two
    /// processes share one `node.id`, or `http.advertise` is not the address the voters list.
    #[error("node id {id} belongs to the node at {member_http}, but {registering_http} registered with it: duplicate node.id, or http.advertise differs from controller.quorum.{id}")]
    DuplicateNodeId {
        /// The id.
        id: NodeId,
        /// The address in the Raft membership.
        member_http: String,
        /// The address the registering node advertises.
        registering_http: String,
    },
    /// A command for an older leader epoch than the fragment's.
    #[error("stale leader epoch {given} for {topic}/{fragment}: it is {current}")]
    StaleEpoch {
        /// Topic name.
        topic: String,
        /// Fragment id.
        fragment: u32,
        /// The fragment's epoch.
        current: u64,
        /// The command's epoch.
        given: u64,
    },
    /// A [`Command::Batch`] inside a batch.
    #[error("a batch cannot hold a batch")]
    NestedBatch,
    /// A Dolly Put arrived at the Raft leader after its deadline (it was not proposed).
    #[error("dolly put arrived after its deadline")]
    DollyPutExpired,
    /// A Dolly Put whose request was cancelled (its client got an error reply).
    #[error("dolly put was cancelled after its deadline")]
    DollyPutCancelled,
    /// A subscriber that is not a member of the group, or a fragment not assigned to it.
    #[error("{subscriber} does not read {topic}/{fragment} in group {group}")]
    NotAssigned {
        /// Topic name.
        topic: String,
        /// Group name.
        group: String,
        /// Subscriber id.
        subscriber: String,
        /// Fragment id.
        fragment: u32,
    },
    /// A count out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No live node to place a topic on, or fewer than its replication factor.
    #[error("not enough live nodes: {live} live, {needed} needed")]
    NotEnoughNodes {
        /// Live nodes.
        live: usize,
        /// Nodes needed.
        needed: usize,
    },
}

/// The response of every applied entry.
pub type CommandResult = Result<Applied, MetadataError>;

impl Metadata {
    /// Ids of the nodes whose lease is current at `now_ms`, ascending.
    pub fn live_nodes(&self, now_ms: u64) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.lease_until_ms > now_ms)
            .map(|(id, _)| *id)
            .collect()
    }

    /// When the next lease after `now_ms` ends, ms since the epoch: the smallest
    /// `lease_until_ms` above `now_ms` (`None` when no lease is current). The Raft leader's
    /// supervisor wakes then, so a dead node's fragments move as its lease ends.
    pub fn next_lease_end(&self, now_ms: u64) -> Option<u64> {
        self.nodes
            .values()
            .map(|n| n.lease_until_ms)
            .filter(|until| *until > now_ms)
            .min()
    }

    /// A stable 64-bit FNV-1a hash of the canonical JSON encoding: equal on every node that
    /// applied the same commands.
    pub fn state_hash(&self) -> u64 {
        let mut h = fnv::FnvHasher::default();
        std::hash::Hasher::write(&mut h, &serde_json::to_vec(self).unwrap_or_default());
        std::hash::Hasher::finish(&h)
    }
}
