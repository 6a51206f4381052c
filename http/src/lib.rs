//! zper-http: the admin HTTP server of a node (axum). It serves the Raft RPCs of
//! [`zper_raft::network`] (`/raft/append`, `/raft/vote`, `/raft/snapshot`), the forwarded
//! proposals of followers, and the admin API (`/v1/...`, JSON; errors are 4xx/5xx with a JSON
//! `{code, message}` body). It never touches zmq or the segment store.

mod admin;
mod error;
pub mod metrics;
mod raft_rpc;

pub use error::ApiError;

use axum::Router;
use prometheus::Registry;
use zper_raft::ClusterNode;

/// The router of a node's HTTP server, with `/metrics` serving only the Raft gauges.
pub fn router(node: ClusterNode) -> Router {
    router_with_metrics(node, Registry::new())
}

/// The router with `/metrics` serving `registry` (the node's own collectors) plus the Raft
/// gauges of [`metrics::RaftCollector`].
pub fn router_with_metrics(node: ClusterNode, registry: Registry) -> Router {
    match metrics::RaftCollector::new(node.clone()) {
        Ok(c) => {
            if let Err(e) = registry.register(Box::new(c)) {
                tracing::warn!(error = %e, "raft metrics not registered");
            }
        }
        Err(e) => tracing::warn!(error = %e, "raft metrics unavailable"),
    }
    let metrics = Router::new()
        .route("/metrics", axum::routing::get(metrics::metrics))
        .with_state(registry);
    raft_rpc::routes()
        .merge(admin::routes())
        .with_state(node)
        .merge(metrics)
        .fallback(|| async {
            ApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                "not_found",
                "no such route",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method",
            )
        })
}

/// Serves [`router`] on an already bound listener (bind first, so the address can be
/// advertised in the Raft membership before Raft starts) until the returned task is aborted.
pub fn serve(listener: tokio::net::TcpListener, node: ClusterNode) -> tokio::task::JoinHandle<()> {
    serve_router(listener, router(node))
}

/// Serves any router (for example [`router_with_metrics`]) on a bound listener.
pub fn serve_router(listener: tokio::net::TcpListener, app: Router) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "http server stopped");
        }
    })
}
