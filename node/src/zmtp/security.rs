//! CURVE on the own engine's endpoints (issue #19): the server's key pair and the client keys
//! it admits, read from files and re-read while the node runs.
//!
//! The authorised client keys come from a directory (every file in it holding a public key:
//! czmq's `*.key` certificates or a bare Z85 key; hidden files and `*_secret` files are
//! skipped) or from one file (one key per line, or `public-key = "..."` lines). Adding or
//! removing a key takes effect within [`RESCAN`]: the source is read again, at most that often,
//! when a client's handshake reaches the check. A source that cannot be read keeps the last
//! keys read (logged); a key file that cannot be parsed is skipped (logged).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::warn;
use zper_wire::zmtp::curve::{
    decode_key, encode_key, parse_key_file, parse_secret_key_file, Authorizer, CurveKeyPair,
    CurveServer,
};
use zper_wire::zmtp::{Null, Security};

/// How often, at most, the client keys are read again.
pub const RESCAN: Duration = Duration::from_secs(1);

/// Why the CURVE settings could not be loaded at start.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// The server's key file is unreadable or holds no secret key.
    #[error("CURVE secret key file {path}: {why}")]
    SecretKey {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The client keys' file or directory cannot be read.
    #[error("CURVE client keys {path}: {why}")]
    ClientKeys {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// The server's key pair read from `path`: czmq's certificate (`secret-key = "..."`) or a bare
/// 40-character Z85 secret key.
///
/// Errors: [`SecurityError::SecretKey`].
pub fn read_secret_key(path: &Path) -> Result<CurveKeyPair, SecurityError> {
    let fail = |why: String| SecurityError::SecretKey {
        path: path.to_path_buf(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    parse_secret_key_file(&text).map_err(|e| fail(e.to_string()))
}

/// The public keys held by the file or directory `path`.
///
/// Errors: `path` cannot be read (a single key file that cannot be parsed is skipped and
/// logged).
fn read_client_keys(path: &Path) -> Result<HashSet<[u8; 32]>, String> {
    let mut keys = HashSet::new();
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.is_file() {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        for (number, line) in text.lines().map(str::trim).enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // A bare key first: Z85's alphabet has `=` in it.
            let key = match line.split_once('=') {
                _ if line.len() == 40 && !line.contains(' ') => decode_key(line),
                Some((name, value)) if name.trim() == "public-key" => {
                    decode_key(value.trim().trim_matches('"'))
                }
                // czmq's certificate structure: its sections and `name = "value"` metadata.
                _ if line == "metadata" || line == "curve" => continue,
                Some((name, value))
                    if name
                        .trim()
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                        && value.trim().starts_with('"') =>
                {
                    continue
                }
                _ => {
                    warn!(file = %path.display(), line = number + 1,
                        "skipped a line that is neither a 40-character Z85 public key nor `public-key = \"...\"`");
                    continue;
                }
            };
            match key {
                Ok(k) => {
                    keys.insert(k);
                }
                Err(e) => warn!(file = %path.display(), error = %e, "skipped a client key line"),
            }
        }
        return Ok(keys);
    }
    for entry in std::fs::read_dir(path).map_err(|e| e.to_string())? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name.ends_with("_secret") {
            continue;
        }
        let file = entry.path();
        if !file.is_file() {
            continue;
        }
        match std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_key_file(&t).map_err(|e| e.to_string()))
        {
            Ok(parsed) => {
                if let Some(k) = parsed.public {
                    keys.insert(k);
                }
            }
            Err(e) => warn!(file = %file.display(), error = %e, "skipped a client key file"),
        }
    }
    Ok(keys)
}

/// The client keys a CURVE endpoint admits, re-read at most every [`RESCAN`], and the
/// node's own public key: the node forwards to its peers' writers and readers as a CURVE
/// client with its own key pair (every node of a cluster has the same one).
#[derive(Debug)]
pub struct ClientKeys {
    /// `None`: any client key (encryption without authorisation, `curve.clients = *`).
    path: Option<PathBuf>,
    cache: Mutex<(Instant, HashSet<[u8; 32]>)>,
    /// The node's own public key, always admitted.
    own: Option<[u8; 32]>,
    /// Keys refused so far: the refusal is logged at every power of two, so a stranger's
    /// handshakes cannot flood the log.
    refused: std::sync::atomic::AtomicU64,
}

impl ClientKeys {
    /// The keys of `path` (a file or a directory; `None` admits any client key), and `own`
    /// (the node's public key), always admitted.
    ///
    /// Errors: [`SecurityError::ClientKeys`] when `path` cannot be read now.
    pub fn load(path: Option<&Path>, own: Option<[u8; 32]>) -> Result<Self, SecurityError> {
        let keys = match path {
            Some(p) => read_client_keys(p).map_err(|why| SecurityError::ClientKeys {
                path: p.to_path_buf(),
                why,
            })?,
            None => HashSet::new(),
        };
        Ok(ClientKeys {
            path: path.map(Path::to_path_buf),
            cache: Mutex::new((Instant::now(), keys)),
            own,
            refused: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// How many keys were read last.
    pub fn len(&self) -> usize {
        self.cache.lock().map(|c| c.1.len()).unwrap_or(0)
    }
}

impl Authorizer for ClientKeys {
    fn allows(&self, client: &[u8; 32]) -> bool {
        let Some(path) = &self.path else {
            return true;
        };
        if self.own.as_ref() == Some(client) {
            return true;
        }
        let Ok(mut cache) = self.cache.lock() else {
            return false;
        };
        if cache.0.elapsed() >= RESCAN {
            match read_client_keys(path) {
                Ok(keys) => cache.1 = keys,
                Err(e) => warn!(path = %path.display(), error = %e,
                    "could not read the CURVE client keys again; the last ones stay"),
            }
            cache.0 = Instant::now();
        }
        let allowed = cache.1.contains(client);
        if !allowed {
            let n = self
                .refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            if n.is_power_of_two() {
                warn!(client = %encode_key(client), refused_so_far = n, "refused a CURVE client key");
            }
        }
        allowed
    }
}

/// CURVE on one endpoint: the server's key pair and the client keys it admits.
#[derive(Debug, Clone)]
pub struct CurveEndpoint {
    /// The server's permanent key pair.
    pub keys: Arc<CurveKeyPair>,
    /// The client keys admitted.
    pub clients: Arc<ClientKeys>,
}

impl CurveEndpoint {
    /// Makes `socket` (libzmq) a CURVE client of a peer node's endpoint: the node's own key
    /// pair as the client's, and as the server's public key (one key pair per cluster).
    ///
    /// Errors: libzmq refused the keys (a libzmq built without CURVE).
    pub(crate) fn apply_to_peer_link(&self, socket: &zmq::Socket) -> Result<(), zmq::Error> {
        socket.set_curve_serverkey(&self.keys.public())?;
        socket.set_curve_publickey(&self.keys.public())?;
        socket.set_curve_secretkey(&self.keys.secret())
    }
}

/// The mechanism a new connection's handshake runs: CURVE when `curve` is set, else NULL.
pub(crate) fn mechanism(curve: Option<&CurveEndpoint>) -> Security {
    match curve {
        None => Security::Null(Null),
        Some(c) => Security::Curve(Box::new(CurveServer::new(
            c.keys.clone(),
            c.clients.clone(),
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_keys_are_read_from_a_directory_and_again_after_a_change() {
        let dir = tempfile::tempdir().expect("tmp");
        let a = CurveKeyPair::generate();
        let b = CurveKeyPair::generate();
        std::fs::write(
            dir.path().join("a.key"),
            format!("curve\n    public-key = \"{}\"\n", encode_key(&a.public())),
        )
        .expect("write");
        std::fs::write(dir.path().join("a.key_secret"), "not a public key").expect("write");
        std::fs::write(dir.path().join("junk.key"), "nothing here").expect("write");
        let keys = ClientKeys::load(Some(dir.path()), None).expect("load");
        assert_eq!(keys.len(), 1);
        assert!(keys.allows(&a.public()));
        assert!(!keys.allows(&b.public()));
        // A new key file is admitted after the rescan interval; a removed one is not.
        std::fs::write(dir.path().join("b.key"), encode_key(&b.public())).expect("write");
        std::fs::remove_file(dir.path().join("a.key")).expect("rm");
        std::thread::sleep(RESCAN + Duration::from_millis(50));
        assert!(keys.allows(&b.public()));
        assert!(!keys.allows(&a.public()));
        // The node's own key (its links to its peers) is admitted without a file.
        let own = CurveKeyPair::generate().public();
        let with_own = ClientKeys::load(Some(dir.path()), Some(own)).expect("load");
        assert!(with_own.allows(&own));
        assert!(!keys.allows(&own));
    }

    #[test]
    fn client_keys_are_read_from_one_file_and_any_key_passes_without_a_source() {
        let dir = tempfile::tempdir().expect("tmp");
        let a = CurveKeyPair::generate();
        let b = CurveKeyPair::generate();
        let file = dir.path().join("clients");
        std::fs::write(
            &file,
            format!(
                "# producers\n{}\npublic-key = \"{}\"\n",
                encode_key(&a.public()),
                encode_key(&b.public())
            ),
        )
        .expect("write");
        let keys = ClientKeys::load(Some(&file), None).expect("load");
        assert_eq!(keys.len(), 2);
        assert!(ClientKeys::load(None, None)
            .expect("any")
            .allows(&a.public()));
        assert!(ClientKeys::load(Some(&dir.path().join("missing")), None).is_err());
    }

    #[test]
    fn the_secret_key_file_must_hold_a_matching_secret_key() {
        let dir = tempfile::tempdir().expect("tmp");
        let pair = CurveKeyPair::generate();
        let other = CurveKeyPair::generate();
        let path = dir.path().join("server.key_secret");
        std::fs::write(&path, encode_key(&pair.secret())).expect("write");
        assert_eq!(
            read_secret_key(&path).expect("bare").public(),
            pair.public()
        );
        std::fs::write(
            &path,
            format!(
                "curve\n    public-key = \"{}\"\n    secret-key = \"{}\"\n",
                encode_key(&pair.public()),
                encode_key(&pair.secret())
            ),
        )
        .expect("write");
        assert_eq!(
            read_secret_key(&path).expect("cert").public(),
            pair.public()
        );
        std::fs::write(
            &path,
            format!(
                "public-key = \"{}\"\nsecret-key = \"{}\"\n",
                encode_key(&other.public()),
                encode_key(&pair.secret())
            ),
        )
        .expect("write");
        assert!(read_secret_key(&path).is_err(), "mismatched pair");
        std::fs::write(
            &path,
            format!("public-key = \"{}\"\n", encode_key(&pair.public())),
        )
        .expect("write");
        assert!(read_secret_key(&path).is_err(), "public only");
    }
}
