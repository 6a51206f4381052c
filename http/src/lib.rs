//! zper-http: the admin HTTP server of a node (axum). It serves the Raft RPCs of
//! [`zper_raft::network`] (`/raft/append`, `/raft/vote`, `/raft/snapshot`), the forwarded
//! proposals of followers, and the admin API (`/v1/...`, JSON; errors are 4xx/5xx with a JSON
//! `{code, message}` body). It never touches zmq or the segment store.

mod admin;
mod auth;
mod error;
pub mod forward;
mod kv;
pub mod metrics;
mod raft_rpc;
mod tls;
pub mod ui;

pub use error::ApiError;

use axum::Router;
use prometheus::Registry;
use zper_raft::ClusterNode;

/// This node's copy of a fragment, as its segment store has it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FragmentOffsets {
    /// Offset of the first byte still stored (the first segment's start), bytes.
    pub start_offset: u64,
    /// Offset just past the last byte written here (flushed; ZPER spec §6), bytes.
    pub end_offset: u64,
    /// This copy's high-water mark (readers stop there), bytes; `None` for a log that was
    /// never replicated.
    pub high_water: Option<u64>,
    /// This copy's leader-epoch history, `(epoch, start offset)` ascending: which leader
    /// epoch wrote which bytes (what replicas compare to find where copies diverge).
    pub epochs: Vec<(u64, u64)>,
    /// Messages readable in this copy; `None` while the count is not complete yet.
    pub messages: Option<u64>,
}

/// The node's segment store as the admin API sees it (implemented by the `zper` node; the http
/// crate never touches the store itself).
pub trait LocalLogs: Send + Sync {
    /// This node's offsets of `topic`'s fragment `fragment`, or `None` when it holds no copy.
    fn offsets(&self, topic: &str, fragment: u32) -> Option<FragmentOffsets>;

    /// What is wrong with this node's own copies (damaged logs, a failing disk), one line
    /// each, for `/v1/cluster/health` (issue #13). None by default.
    fn problems(&self) -> Vec<String> {
        Vec::new()
    }

    /// What an operator should know that does not stop this node doing its job (segments
    /// whose checksums are missing), one line each, for `/v1/cluster/health`'s `warnings`.
    /// None by default.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What the node adds to the admin API beyond Raft state.
#[derive(Clone, Default)]
pub struct AdminOptions {
    /// Registry served by `/metrics` (the node's own collectors); the Raft gauges are added.
    pub registry: Registry,
    /// When set, mutating requests (every method but GET/HEAD/OPTIONS, on every route) need
    /// `Authorization: Bearer <token>`, else 401 `{"code": "unauthorized"}`.
    pub admin_token: Option<String>,
    /// The local segment store, for per-fragment offsets in topic views.
    pub logs: Option<std::sync::Arc<dyn LocalLogs>>,
    /// How long `PUT /v1/kv/{key}` waits to commit before cancelling (None: 2 s, as the
    /// node's `dolly.put_timeout_ms` default).
    pub dolly_put_timeout: Option<std::time::Duration>,
}

/// The router of a node's HTTP server, with `/metrics` serving only the Raft gauges.
pub fn router(node: ClusterNode) -> Router {
    router_with(node, AdminOptions::default())
}

/// The router with `/metrics` serving `registry` (the node's own collectors) plus the Raft
/// gauges of [`metrics::RaftCollector`].
pub fn router_with_metrics(node: ClusterNode, registry: Registry) -> Router {
    router_with(
        node,
        AdminOptions {
            registry,
            ..Default::default()
        },
    )
}

/// The full router: Raft RPCs, admin API, `/metrics`, with `options`.
pub fn router_with(node: ClusterNode, options: AdminOptions) -> Router {
    let registry = options.registry.clone();
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
    let token = auth::Token(options.admin_token.clone().map(std::sync::Arc::from));
    let leader_forward = axum::middleware::from_fn_with_state(node.clone(), forward::to_leader);
    raft_rpc::routes()
        .merge(admin::routes())
        .merge(kv::routes())
        .layer(axum::Extension(admin::Logs(options.logs.clone())))
        .layer(axum::Extension(kv::PutTimeout(
            options
                .dolly_put_timeout
                .unwrap_or(std::time::Duration::from_secs(2)),
        )))
        .with_state(node)
        .merge(metrics)
        .merge(ui::routes())
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
        .layer(leader_forward)
        .layer(axum::middleware::from_fn_with_state(token, auth::require))
        .layer(axum::middleware::map_response(error::json_errors))
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

/// Serves `app` on a bound listener over TLS with `tls` (issue #19; see
/// [`zper_raft::tls::server_config`]), or plain as [`serve_router`] when `tls` is None.
pub fn serve_router_tls(
    listener: tokio::net::TcpListener,
    app: Router,
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
) -> tokio::task::JoinHandle<()> {
    match tls {
        None => serve_router(listener, app),
        Some(config) => tokio::spawn(tls::serve(listener, app, config)),
    }
}
