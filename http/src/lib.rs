//! zper-http: the admin HTTP server of a node (axum). It serves the Raft RPCs of
//! [`zper_raft::network`] (`/raft/append`, `/raft/vote`, `/raft/snapshot`), the forwarded
//! proposals of followers, and the admin API (`/v1/...`, JSON; errors are 4xx/5xx with a JSON
//! `{code, message}` body). It never touches zmq or the segment store.

mod admin;
mod error;
mod raft_rpc;

pub use error::ApiError;

use axum::Router;
use zper_raft::ClusterNode;

/// The router of a node's HTTP server.
pub fn router(node: ClusterNode) -> Router {
    raft_rpc::routes().merge(admin::routes()).with_state(node)
}

/// Serves [`router`] on an already bound listener (bind first, so the address can be
/// advertised in the Raft membership before Raft starts) until the returned task is aborted.
pub fn serve(listener: tokio::net::TcpListener, node: ClusterNode) -> tokio::task::JoinHandle<()> {
    let app = router(node);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "http server stopped");
        }
    })
}
