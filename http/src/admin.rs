//! The admin API (issue #3): readiness, Raft state, brokers and topics. Reads are local by
//! default; `?consistent=true` first confirms leadership with a quorum (`ensure_linearizable`),
//! which only the leader can do (others answer 503 `not_leader`). Writes go through
//! [`ClusterNode::propose`], so any node accepts them.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Extension;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use zper_raft::metadata::views::{
    AddNodeRequest, AlterTopicRequest, BrokerView, CreateTopicRequest, FragmentView, LiveView,
    RaftView, ReadyView, TopicView, VotersView,
};
use zper_raft::metadata::{Applied, Command, CommandResult, Fragment, FragmentPolicy, TopicRecord};
use zper_raft::network::PROPOSE_PATH;
use zper_raft::{ClusterNode, NodeEndpoints, NodeId};

use crate::error::ApiError;
use crate::{FragmentOffsets, LocalLogs};

/// The node's local store, if it gave one (an axum extension).
#[derive(Clone, Default)]
pub(crate) struct Logs(pub(crate) Option<std::sync::Arc<dyn LocalLogs>>);

pub(crate) fn routes() -> Router<ClusterNode> {
    Router::new()
        .route("/v1/status/ready", get(ready))
        .route("/v1/status/live", get(live))
        .route("/v1/raft", get(raft_state))
        .route("/v1/cluster/health", get(health))
        .route("/v1/brokers", get(brokers))
        .route("/v1/topics", get(topics))
        .route(
            "/v1/topics/{name}",
            get(topic)
                .post(create_topic)
                .patch(alter_topic)
                .delete(delete_topic),
        )
        .route("/v1/topics/{name}/subscriptions", get(subscriptions))
        .route("/v1/cluster/nodes", post(add_node))
        .route("/v1/cluster/nodes/{id}", axum::routing::delete(remove_node))
        .route(PROPOSE_PATH, post(propose_local))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `?consistent=true|false`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ReadMode {
    #[serde(default)]
    pub(crate) consistent: bool,
}

pub(crate) async fn read_check(node: &ClusterNode, mode: &ReadMode) -> Result<(), ApiError> {
    use openraft::error::{CheckIsLeaderError, RaftError};
    if mode.consistent {
        node.raft.ensure_linearizable().await.map_err(|e| {
            let message = match e {
                RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => {
                    match (f.leader_id, f.leader_node) {
                        (Some(id), Some(n)) => format!(
                            "not the leader: a consistent read must go to the leader, node {id} at {}",
                            n.http
                        ),
                        _ => "not the leader, and no leader is known (election in progress?)"
                            .to_owned(),
                    }
                }
                RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q)) => {
                    format!("this leader cannot reach a quorum: {q}")
                }
                RaftError::Fatal(f) => format!("raft stopped: {f}"),
            };
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_leader", message)
        })?;
    }
    Ok(())
}

/// 200 when this node is a member (voter or learner), a leader is known, everything in this
/// node's log is applied and the metadata holds this node as a live broker; else 503. Before
/// issue #15 it said ready before the node had registered, and `topics create` right after
/// got `409 not_enough_nodes: 0 live`.
async fn ready(State(node): State<ClusterNode>) -> (StatusCode, Json<ReadyView>) {
    let m = node.raft.metrics().borrow().clone();
    let applied = m.last_applied.map(|l| l.index);
    let member = m.membership_config.membership().get_node(&m.id).is_some();
    let registered = node
        .state
        .cluster_metadata()
        .nodes
        .get(&m.id)
        .is_some_and(|n| n.lease_until_ms > now_ms());
    let ok = member && m.current_leader.is_some() && applied == m.last_log_index && registered;
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(ReadyView {
            ready: ok,
            member,
            leader: m.current_leader,
            last_log_index: m.last_log_index,
            last_applied: applied,
            registered,
        }),
    )
}

/// Liveness (issue #13): 200 while the Raft core runs; 503 once it has stopped (a storage
/// error such as a full disk), which is when a supervisor should restart the node.
async fn live(State(node): State<ClusterNode>) -> (StatusCode, Json<LiveView>) {
    let m = node.raft.metrics().borrow().clone();
    let error = match &m.running_state {
        Err(fatal) => Some(fatal.to_string()),
        Ok(()) if m.state == openraft::ServerState::Shutdown => Some("shut down".to_owned()),
        Ok(()) => None,
    };
    let status = if error.is_none() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(LiveView {
            live: error.is_none(),
            state: format!("{:?}", m.state),
            error,
        }),
    )
}

async fn raft_state(State(node): State<ClusterNode>) -> Json<RaftView> {
    let applied = node.state.state();
    let (metadata_applied, meta) = (applied.last_applied.map(|l| l.index), applied.metadata);
    let m = node.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    Json(RaftView {
        id: m.id,
        term: m.current_term,
        state: format!("{:?}", m.state),
        leader: m.current_leader,
        last_log_index: m.last_log_index,
        last_applied: m.last_applied.map(|l| l.index),
        voters: membership.voter_ids().collect(),
        learners: membership.learner_ids().collect(),
        metadata_applied,
        state_hash: format!("{:016x}", meta.state_hash()),
    })
}

async fn brokers(
    State(node): State<ClusterNode>,
    Query(mode): Query<ReadMode>,
) -> Result<Json<Vec<BrokerView>>, ApiError> {
    read_check(&node, &mode).await?;
    let meta = node.state.cluster_metadata();
    let now = now_ms();
    Ok(Json(
        meta.nodes
            .iter()
            .map(|(id, n)| BrokerView {
                id: *id,
                live: n.lease_until_ms > now,
                lease_until_ms: n.lease_until_ms,
                dolly_leader: meta.dolly_leader == Some(*id),
                endpoints: n.endpoints.clone(),
            })
            .collect(),
    ))
}

fn topic_view(name: String, topic: TopicRecord, logs: &Logs) -> TopicView {
    let fragments = topic
        .fragments
        .into_iter()
        .map(|f: Fragment| {
            let local: Option<FragmentOffsets> =
                logs.0.as_ref().and_then(|l| l.offsets(&name, f.id));
            FragmentView {
                id: f.id,
                leader: f.leader,
                leader_epoch: f.leader_epoch,
                replicas: f.replicas,
                isr: f.isr,
                last_change: f.last_change,
                start_offset: local.as_ref().map(|o| o.start_offset),
                end_offset: local.as_ref().map(|o| o.end_offset),
                high_water: local.as_ref().and_then(|o| o.high_water),
                messages: local.as_ref().and_then(|o| o.messages),
                epochs: local.map(|o| o.epochs).unwrap_or_default(),
            }
        })
        .collect();
    TopicView {
        replication_factor: topic.replication_factor,
        retain_hours: topic.retain_hours,
        policy: topic.policy,
        fragments,
        name,
    }
}

async fn topics(
    State(node): State<ClusterNode>,
    Extension(logs): Extension<Logs>,
    Query(mode): Query<ReadMode>,
) -> Result<Json<Vec<TopicView>>, ApiError> {
    read_check(&node, &mode).await?;
    Ok(Json(
        node.state
            .cluster_metadata()
            .topics
            .into_iter()
            .map(|(name, topic)| topic_view(name, topic, &logs))
            .collect(),
    ))
}

async fn topic(
    State(node): State<ClusterNode>,
    Extension(logs): Extension<Logs>,
    Path(name): Path<String>,
    Query(mode): Query<ReadMode>,
) -> Result<Json<TopicView>, ApiError> {
    read_check(&node, &mode).await?;
    match node.state.cluster_metadata().topics.remove(&name) {
        Some(topic) => Ok(Json(topic_view(name, topic, &logs))),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_topic",
            format!("unknown topic {name}"),
        )),
    }
}

/// `GET /v1/topics/{name}/subscriptions` (issue #7): the topic's subscription groups as this
/// node applied them, with the Raft index they reflect (equal indexes give equal groups on
/// every node).
#[derive(Debug, Serialize)]
pub(crate) struct SubscriptionsView {
    topic: String,
    policy: FragmentPolicy,
    applied_index: u64,
    groups: std::collections::BTreeMap<String, zper_raft::metadata::SubscriptionGroup>,
}

async fn subscriptions(
    State(node): State<ClusterNode>,
    Path(name): Path<String>,
    Query(mode): Query<ReadMode>,
) -> Result<Json<SubscriptionsView>, ApiError> {
    read_check(&node, &mode).await?;
    let view = node.state.with_applied(|m, applied_index| {
        m.topics.get(&name).map(|t| SubscriptionsView {
            topic: name.clone(),
            policy: t.policy,
            applied_index,
            groups: m.subscriptions.get(&name).cloned().unwrap_or_default(),
        })
    });
    match view.flatten() {
        Some(v) => Ok(Json(v)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_topic",
            format!("unknown topic {name}"),
        )),
    }
}

async fn create_topic(
    State(node): State<ClusterNode>,
    Extension(logs): Extension<Logs>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<TopicView>), ApiError> {
    let req: CreateTopicRequest = if body.iter().all(u8::is_ascii_whitespace) {
        CreateTopicRequest::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.to_string()))?
    };
    let command = Command::CreateTopic {
        name: name.clone(),
        fragments: req.fragments,
        replication_factor: req.replication_factor,
        retain_hours: req.retain_hours,
        policy: req.policy.unwrap_or_default(),
        now_ms: now_ms(),
    };
    match node.propose(command).await?? {
        Applied::Topic(topic) => Ok((StatusCode::CREATED, Json(topic_view(name, topic, &logs)))),
        other => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("unexpected result {other:?}"),
        )),
    }
}

/// `PATCH /v1/topics/{name}` `{"retain_hours": N}`: changes the retention through Raft;
/// 200 with the topic, 404 `unknown_topic`, 400 for a bad body or 0 hours.
async fn alter_topic(
    State(node): State<ClusterNode>,
    Extension(logs): Extension<Logs>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<TopicView>, ApiError> {
    let req: AlterTopicRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.to_string()))?;
    let command = Command::SetRetention {
        name: name.clone(),
        retain_hours: req.retain_hours,
    };
    match node.propose(command).await?? {
        Applied::Topic(topic) => Ok(Json(topic_view(name, topic, &logs))),
        other => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("unexpected result {other:?}"),
        )),
    }
}

async fn delete_topic(
    State(node): State<ClusterNode>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    node.propose(Command::DeleteTopic { name }).await??;
    Ok(StatusCode::NO_CONTENT)
}

/// A follower's forwarded proposal: applied here only if this node leads (no second hop).
async fn propose_local(
    State(node): State<ClusterNode>,
    Json(command): Json<Command>,
) -> Json<Result<CommandResult, String>> {
    Json(node.write(command).await.map_err(|e| e.to_string()))
}

fn voters(node: &ClusterNode) -> VotersView {
    let m = node.raft.metrics().borrow().clone();
    VotersView {
        voters: m.membership_config.membership().voter_ids().collect(),
    }
}

/// Adds a node as learner, then voter (leader only: others answer 503 `not_leader`).
async fn add_node(
    State(node): State<ClusterNode>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<VotersView>), ApiError> {
    let req: AddNodeRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.to_string()))?;
    if req.id == 0 || !zper_raft::valid_http_address(&req.http) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_argument",
            "id must be >= 1 and http a host:port (no scheme or path)",
        ));
    }
    let endpoints = NodeEndpoints {
        name: req.name.unwrap_or_else(|| format!("node{}", req.id)),
        http: req.http,
        ..Default::default()
    };
    node.add_voter(req.id, endpoints).await?;
    Ok((StatusCode::CREATED, Json(voters(&node))))
}

/// Removes a node from the voters and the metadata (leader only).
async fn remove_node(
    State(node): State<ClusterNode>,
    Path(id): Path<NodeId>,
) -> Result<StatusCode, ApiError> {
    let current = voters(&node).voters;
    if current == [id] {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "last_voter",
            format!("node {id} is the only voter: a cluster cannot remove its last voter"),
        ));
    }
    if !current.contains(&id) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_node",
            format!("node {id} is not a voter"),
        ));
    }
    // The node may never have registered its metadata: only Raft membership matters here.
    match node.remove_voter(id, now_ms()).await? {
        Ok(_) | Err(zper_raft::metadata::MetadataError::UnknownNode(_)) => {
            Ok(StatusCode::NO_CONTENT)
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Serialize)]
struct Health {
    healthy: bool,
    problems: Vec<String>,
    /// Worth knowing, but not a reason for 503.
    warnings: Vec<String>,
}

/// `?always_200=true`: answer 200 whatever the health; the body says it (the web console,
/// issue #20, reads the body and a browser logs every 503 as a console error).
#[derive(Debug, Default, Deserialize)]
struct HealthQuery {
    #[serde(default)]
    always_200: bool,
}

/// 200 when a Raft leader is known, every node's lease is current, every fragment is led by
/// a live node and none of this node's copies is damaged; otherwise 503 (200 with
/// `?always_200=true`) with the list of what is wrong. `warnings` lists what does not make the
/// node unhealthy.
async fn health(
    State(node): State<ClusterNode>,
    Extension(logs): Extension<Logs>,
    Query(query): Query<HealthQuery>,
) -> (StatusCode, Json<Health>) {
    let now = now_ms();
    let meta = node.state.cluster_metadata();
    let mut problems = logs.0.as_ref().map(|l| l.problems()).unwrap_or_default();
    if node.leader().is_none() {
        problems.push("no Raft leader".to_owned());
    }
    for (id, n) in &meta.nodes {
        if n.lease_until_ms <= now {
            problems.push(format!("node {id} lease expired"));
        }
    }
    for (name, t) in &meta.topics {
        for f in &t.fragments {
            let live = meta
                .nodes
                .get(&f.leader)
                .is_some_and(|n| n.lease_until_ms > now);
            if !live {
                problems.push(format!(
                    "{name}/{} led by node {} which is not live",
                    f.id, f.leader
                ));
            }
        }
    }
    let healthy = problems.is_empty();
    let status = if healthy || query.always_200 {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut warnings = logs.0.as_ref().map(|l| l.warnings()).unwrap_or_default();
    for peer in node.transport.peers_refusing_token() {
        warnings.push(format!(
            "node {peer} refuses this node's admin token (401 on the Raft stream): http.admin_token must be the same on every node"
        ));
    }
    (
        status,
        Json(Health {
            healthy,
            problems,
            warnings,
        }),
    )
}
