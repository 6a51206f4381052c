//! The admin port over TLS (issue #19): accepts TCP connections, runs the TLS handshake (each
//! on its own task, with a deadline, so a client that never finishes it holds only its own
//! connection) and serves HTTP/1.1 with upgrades (the Raft stream) on the decrypted stream.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tracing::{debug, warn};

/// Longest a TLS handshake may take before its connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once, at most; past it the accept loop waits for one to end (further
/// clients wait in the kernel's backlog), so clients cannot grow the node's memory unbounded.
pub(crate) const MAX_CONNECTIONS: usize = 1024;

/// Accepts and serves connections until the task is aborted.
pub(crate) async fn serve(listener: TcpListener, app: Router, config: Arc<rustls::ServerConfig>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                warn!(error = %e, "admin port accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let served = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                .with_upgrades()
                .await;
            if let Err(e) = served {
                debug!(%peer, error = %e, "admin connection ended");
            }
        });
    }
}
