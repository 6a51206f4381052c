//! Server side of the Raft RPCs: the binary stream of `zper_raft::transport` (an HTTP/1.1
//! upgrade on `/raft/stream`, issue #16), and JSON in, `Result<Response, RaftError>` JSON out
//! for peers from before it (their client is `zper_raft::network::HttpConnection`).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use zper_raft::network::{APPEND_PATH, SNAPSHOT_PATH, VOTE_PATH};
use zper_raft::transport::{PROTOCOL, STREAM_PATH};
use zper_raft::{ClusterNode, NodeId, TypeConfig};

pub(crate) fn routes() -> Router<ClusterNode> {
    Router::new()
        .route(APPEND_PATH, post(append))
        .route(VOTE_PATH, post(vote))
        .route(SNAPSHOT_PATH, post(snapshot))
        .route(STREAM_PATH, post(stream))
}

/// Switches the connection to the binary Raft stream (`Upgrade: zper-raft/1`); anything else
/// gets 400 with a JSON body.
async fn stream(State(node): State<ClusterNode>, mut req: Request) -> Response {
    let asked = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(PROTOCOL));
    if !asked {
        return crate::ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("{STREAM_PATH} needs Connection: Upgrade and Upgrade: {PROTOCOL}"),
        )
        .into_response();
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let io = hyper_util::rt::TokioIo::new(upgraded);
                if let Some(from) = zper_raft::transport::serve(io, &node).await {
                    node.leader_stream_closed(from).await;
                }
            }
            Err(e) => tracing::debug!(error = %e, "raft stream upgrade failed"),
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, PROTOCOL)
        .body(Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
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
