//! The admin API's JSON views and request bodies (docs/operations.md "Admin API"), shared by
//! the server (`zper-http` builds them) and the client (`zper-client` reads them), so both
//! sides agree on every field by construction.

use serde::{Deserialize, Serialize};

use crate::{FragmentPolicy, NodeEndpoints, NodeId, PlacementReason};

/// `GET /v1/status/ready`: 200 when this node is a member, a leader is known, its log is
/// applied and the metadata holds this node's registration with a current lease (so topics can
/// be created and placed on it: issue #15); 503 otherwise (same body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyView {
    /// The three conditions hold.
    pub ready: bool,
    /// This node is a voter or learner.
    pub member: bool,
    /// The Raft leader this node knows of.
    pub leader: Option<NodeId>,
    /// Last index in this node's Raft log.
    pub last_log_index: Option<u64>,
    /// Last index applied to the metadata.
    pub last_applied: Option<u64>,
    /// The applied metadata lists this node as a live broker (its lease is current).
    #[serde(default)]
    pub registered: bool,
}

/// `GET /v1/status/live`: 200 while the Raft core runs, 503 once it stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveView {
    /// The Raft core runs.
    pub live: bool,
    /// openraft's server state (`Leader`, `Follower`, ...).
    pub state: String,
    /// Why the Raft core stopped, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /v1/raft`: this node's Raft state and the metadata it applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftView {
    /// This node's id.
    pub id: NodeId,
    /// Current term.
    pub term: u64,
    /// openraft's server state (`Leader`, `Follower`, `Candidate`, `Learner`, `Shutdown`).
    pub state: String,
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// Last index in this node's log.
    pub last_log_index: Option<u64>,
    /// Last index applied.
    pub last_applied: Option<u64>,
    /// Voters of the membership.
    pub voters: Vec<NodeId>,
    /// Learners of the membership.
    pub learners: Vec<NodeId>,
    /// The metadata's applied index, read together with `state_hash`.
    pub metadata_applied: Option<u64>,
    /// FNV-1a of the metadata's canonical JSON, 16 hex digits: equal on every node at the
    /// same applied index.
    pub state_hash: String,
}

/// One entry of `GET /v1/brokers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerView {
    /// Node id.
    pub id: NodeId,
    /// Its lease has not lapsed.
    pub live: bool,
    /// Lease end, ms since the epoch.
    pub lease_until_ms: u64,
    /// It serves Dolly's updates and snapshots.
    pub dolly_leader: bool,
    /// What it advertises.
    pub endpoints: NodeEndpoints,
}

/// One fragment in a topic view: its placement plus the answering node's copy (offsets `null`
/// when that node holds none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FragmentView {
    /// Fragment id.
    pub id: u32,
    /// Node that accepts writes.
    pub leader: NodeId,
    /// Leader epoch.
    pub leader_epoch: u64,
    /// Nodes holding a copy, leader first.
    pub replicas: Vec<NodeId>,
    /// In-sync replicas, leader first.
    pub isr: Vec<NodeId>,
    /// Why the placement last changed.
    pub last_change: Option<PlacementReason>,
    /// First offset of the answering node's copy.
    pub start_offset: Option<u64>,
    /// End offset (bytes) of the answering node's copy.
    pub end_offset: Option<u64>,
    /// That copy's high-water mark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_water: Option<u64>,
    /// That copy's leader-epoch history, `[epoch, start offset]` pairs (empty: no copy there
    /// or never replicated).
    #[serde(default)]
    pub epochs: Vec<(u64, u64)>,
    /// Messages readable in that copy (issue #15); absent while the node is still counting
    /// (it reads a bounded amount per request) or when it holds no copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<u64>,
}

/// A topic as the admin API shows it (`GET /v1/topics`, `GET /v1/topics/{name}`, and the 201
/// of `POST /v1/topics/{name}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicView {
    /// Topic name.
    pub name: String,
    /// Copies of each fragment.
    pub replication_factor: u32,
    /// Retention, hours.
    pub retain_hours: u32,
    /// How messages map to fragments (`pirius.md` §7).
    pub policy: FragmentPolicy,
    /// Its fragments.
    pub fragments: Vec<FragmentView>,
}

/// Body of `POST /v1/topics/{name}`; every field optional (the node's defaults apply).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTopicRequest {
    /// Fragments (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fragments: Option<u32>,
    /// Copies of each fragment (default min(3, live nodes)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<u32>,
    /// Retention, hours (default 168).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retain_hours: Option<u32>,
    /// `default` or `distribution` (default `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<FragmentPolicy>,
}

/// Body of `PATCH /v1/topics/{name}`: what changes after creation (issue #15).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlterTopicRequest {
    /// New retention, hours (>= 1).
    pub retain_hours: u32,
}

/// Body of `POST /v1/cluster/nodes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddNodeRequest {
    /// The new node's id.
    pub id: NodeId,
    /// Its HTTP address, `host:port`.
    pub http: String,
    /// Its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The answer of `POST /v1/cluster/nodes`: the voters afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VotersView {
    /// Voter ids.
    pub voters: Vec<NodeId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_body_holds_only_what_was_given_and_refuses_unknown_fields() {
        let body = serde_json::to_string(&CreateTopicRequest {
            fragments: Some(3),
            ..CreateTopicRequest::default()
        })
        .expect("serializes");
        assert_eq!(body, r#"{"fragments":3}"#);
        let parsed: CreateTopicRequest =
            serde_json::from_str(r#"{"policy":"distribution"}"#).expect("parses");
        assert_eq!(parsed.policy, Some(FragmentPolicy::Distribution));
        assert!(serde_json::from_str::<CreateTopicRequest>(r#"{"fragmens":3}"#).is_err());
    }

    #[test]
    fn a_topic_view_reads_what_older_nodes_wrote() {
        // Before issue #13 a fragment view had no high_water or epochs.
        let v: TopicView = serde_json::from_str(
            r#"{"name":"t","replication_factor":3,"retain_hours":168,"policy":"default",
                "fragments":[{"id":0,"leader":1,"leader_epoch":2,"replicas":[1,2,3],
                "isr":[1,2],"last_change":null,"start_offset":0,"end_offset":109}]}"#,
        )
        .expect("parses");
        assert_eq!(v.fragments[0].isr, [1, 2]);
        assert_eq!(v.fragments[0].high_water, None);
        assert!(v.fragments[0].epochs.is_empty());
    }
}
