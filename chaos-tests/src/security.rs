//! Security for a chaos cluster (issue #19): one CURVE key pair for the nodes, one for the
//! workload's clients, and an admin token, written to a host directory that every container
//! mounts read-only at [`KEYS`]. With it every ZMQ endpoint requires CURVE (replication only
//! the cluster's key) and every mutating HTTP request, Raft's included, needs the token.

use std::path::Path;
use std::sync::Arc;

use zper_client::ClientCurve;
use zper_wire::zmtp::curve::{encode_key, CurveKeyPair};

/// Where the containers see the keys.
pub const KEYS: &str = "/keys";

/// What the workload's clients present; [`Security::default`] is none (plain sockets, no
/// token).
#[derive(Clone, Default)]
pub struct Security {
    /// The client's CURVE keys for every ZMQ socket.
    pub curve: Option<ClientCurve>,
    /// The admin token for mutating HTTP requests.
    pub token: Option<String>,
    /// The host directory holding the keys (mounted at [`KEYS`]), kept while the cluster runs.
    pub dir: Option<Arc<tempfile::TempDir>>,
}

impl Security {
    /// New keys and a token in a fresh host directory.
    ///
    /// Panics: the directory or a file cannot be written (a test set-up failure).
    pub fn generate() -> Security {
        let dir = tempfile::tempdir().expect("keys dir");
        let cluster = CurveKeyPair::generate();
        let app = CurveKeyPair::generate();
        let write = |name: &str, text: String| {
            std::fs::write(dir.path().join(name), text).expect("write key");
        };
        write("cluster.key_secret", encode_key(&cluster.secret()));
        write("cluster.key", encode_key(&cluster.public()));
        std::fs::create_dir(dir.path().join("clients")).expect("clients dir");
        write("clients/app.key", encode_key(&app.public()));
        let token = format!("chaos-{}", encode_key(&CurveKeyPair::generate().public()));
        write("token", token.clone());
        write("app.key_secret", encode_key(&app.secret()));
        // The containers run as root, but the mount keeps the host's modes.
        let curve = ClientCurve::load(
            &encode_key(&cluster.public()),
            &dir.path().join("app.key_secret"),
        )
        .expect("client keys");
        Security {
            curve: Some(curve),
            token: Some(token),
            dir: Some(Arc::new(dir)),
        }
    }

    /// The host directory to mount at [`KEYS`], when there are keys.
    pub fn host_dir(&self) -> Option<&Path> {
        self.dir.as_deref().map(tempfile::TempDir::path)
    }

    /// The node settings (`key=value`) that turn security on, when there are keys.
    pub fn node_settings(&self) -> Vec<String> {
        if self.dir.is_none() {
            return Vec::new();
        }
        vec![
            format!("curve.secret_key_file={KEYS}/cluster.key_secret"),
            format!("curve.clients={KEYS}/clients"),
            format!("http.admin_token_file={KEYS}/token"),
        ]
    }

    /// Makes a raw libzmq `socket` a CURVE client, when there are keys (before it connects).
    pub fn apply(&self, socket: &zmq::Socket) {
        if let Some(c) = &self.curve {
            let _ = c.set_on(socket);
        }
    }
}
