//! Server side of the Raft RPCs: JSON in, `Result<Response, RaftError>` JSON out (the client is
//! `zper_raft::network::HttpConnection`).

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use zper_raft::network::{APPEND_PATH, SNAPSHOT_PATH, VOTE_PATH};
use zper_raft::{ClusterNode, NodeId, TypeConfig};

pub(crate) fn routes() -> Router<ClusterNode> {
    Router::new()
        .route(APPEND_PATH, post(append))
        .route(VOTE_PATH, post(vote))
        .route(SNAPSHOT_PATH, post(snapshot))
}

async fn append(
    State(node): State<ClusterNode>,
    Json(req): Json<AppendEntriesRequest<TypeConfig>>,
) -> Json<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>> {
    Json(node.raft.append_entries(req).await)
}

async fn vote(
    State(node): State<ClusterNode>,
    Json(req): Json<VoteRequest<NodeId>>,
) -> Json<Result<VoteResponse<NodeId>, RaftError<NodeId>>> {
    Json(node.raft.vote(req).await)
}

async fn snapshot(
    State(node): State<ClusterNode>,
    Json(req): Json<InstallSnapshotRequest<TypeConfig>>,
) -> Json<Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>> {
    Json(node.raft.install_snapshot(req).await)
}
