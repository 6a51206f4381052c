//! The admin port over TLS (issue #19): accepts TCP connections, runs the TLS handshake (each
//! on its own task, with a deadline, so a client that never finishes it holds only its own
//! connection) and serves HTTP/1.1 with upgrades (the Raft stream) on the decrypted stream.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
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
/// Connections from one IP address at once, at most; more are closed as they come, so one
/// host cannot take every slot of [`MAX_CONNECTIONS`] (an attack did, with connections that
/// never start a handshake). A node's peers hold a few each; a CLI holds one.
pub(crate) const MAX_PER_ADDRESS: usize = 64;

/// The limits of [`serve_with`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Connections at once.
    pub(crate) connections: usize,
    /// Connections at once from one IP address.
    pub(crate) per_address: usize,
}

/// Accepts and serves connections until the task is aborted.
pub(crate) async fn serve(listener: TcpListener, app: Router, config: Arc<rustls::ServerConfig>) {
    let limits = Limits {
        connections: MAX_CONNECTIONS,
        per_address: MAX_PER_ADDRESS,
    };
    serve_with(listener, app, config, limits).await
}

/// One connection's place in the per-address count; given back when dropped.
struct AddressSlot {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    address: IpAddr,
}

impl AddressSlot {
    /// A place for `address`, or None when it holds `max` already.
    fn take(
        counts: &Arc<Mutex<HashMap<IpAddr, usize>>>,
        address: IpAddr,
        max: usize,
    ) -> Option<Self> {
        let mut map = counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(address).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(AddressSlot {
            counts: counts.clone(),
            address,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut map = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.address) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.address);
            }
        }
    }
}

/// [`serve`] with `limits`.
pub(crate) async fn serve_with(
    listener: TcpListener,
    app: Router,
    config: Arc<rustls::ServerConfig>,
    limits: Limits,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.connections));
    let per_address = Arc::new(Mutex::new(HashMap::new()));
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
        let Some(address_slot) = AddressSlot::take(&per_address, peer.ip(), limits.per_address)
        else {
            debug!(%peer, "admin port: too many connections from this address; closed");
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let _slots = (slot, address_slot);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_address_cannot_take_every_connection_slot() {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).expect("ca");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .expect("params")
            .signed_by(&key, &ca_cert, &ca_key)
            .expect("cert");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("c.pem"), cert.pem()).expect("write");
        std::fs::write(dir.path().join("k.pem"), key.serialize_pem()).expect("write");
        let config =
            zper_raft::tls::server_config(&dir.path().join("c.pem"), &dir.path().join("k.pem"))
                .expect("config");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let limits = Limits {
            connections: 16,
            per_address: 4,
        };
        let server = tokio::spawn(serve_with(listener, app, config, limits));
        // 16 connections from 127.0.0.1 that never start a handshake: only 4 are kept.
        let mut silent = Vec::new();
        for _ in 0..16 {
            silent.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
        }
        // A client from another address is answered at once, not after the 10 s handshake
        // deadline of the silent ones (without the per-address limit, it waited for that).
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(ca_cert.pem().as_bytes()).expect("pem"),
            )
            .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
            .timeout(Duration::from_secs(5))
            .build()
            .expect("client");
        let body = client
            .get(format!("https://{addr}/"))
            .send()
            .await
            .expect("answered")
            .text()
            .await
            .expect("body");
        assert_eq!(body, "ok");
        drop(silent);
        server.abort();
    }
}
