//! The node's ZAP handler (RFC 27, issue #19): libzmq asks it whether a CURVE client's public
//! key may connect to an endpoint libzmq serves (ack, controller, relay, replication, Dolly,
//! and the writer and reader under `*.engine = libzmq`). zper's own engine asks
//! [`super::security::ClientKeys`] directly and does not come here.
//!
//! Two ZAP domains, set on each CURVE socket ([`CLIENTS_DOMAIN`], [`CLUSTER_DOMAIN`]): client
//! endpoints admit `curve.clients` and the cluster's own key; replication admits only the
//! cluster's key (every node of a cluster holds the same key pair), so a process without it
//! can neither fetch a replica nor report a replica's progress.
//!
//! The handler binds `inproc://zeromq.zap.01` in the node's zmq context before any endpoint is
//! bound: libzmq admits every key when no handler is bound, so it must be there first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tracing::warn;
use zper_wire::zmtp::curve::{encode_key, Authorizer};

use super::security::ClientKeys;
use crate::error::NodeError;
use crate::metrics::Counters;

/// The address libzmq sends ZAP requests to (RFC 27).
pub const ZAP_ENDPOINT: &str = "inproc://zeromq.zap.01";
/// The ZAP domain of client endpoints: `curve.clients` and the cluster's key.
pub const CLIENTS_DOMAIN: &str = "zper-clients";
/// The ZAP domain of replication: the cluster's key only.
pub const CLUSTER_DOMAIN: &str = "zper-cluster";

/// Who may connect where.
pub(crate) struct ZapPolicy {
    /// The keys client endpoints admit (the cluster's own key among them).
    pub(crate) clients: Arc<ClientKeys>,
    /// The cluster's public key: the only one replication admits.
    pub(crate) cluster: [u8; 32],
}

/// A ZAP answer: the reply frames and whether it refused the client.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ZapAnswer {
    /// The reply (RFC 27 §"ZAP reply": version, request id, status code and text, user id,
    /// metadata).
    pub(crate) frames: Vec<Vec<u8>>,
    /// True for any status but 200.
    pub(crate) refused: bool,
}

fn reply(request_id: &[u8], code: &str, text: &str, user: &str) -> ZapAnswer {
    ZapAnswer {
        frames: vec![
            b"1.0".to_vec(),
            request_id.to_vec(),
            code.as_bytes().to_vec(),
            text.as_bytes().to_vec(),
            user.as_bytes().to_vec(),
            Vec::new(),
        ],
        refused: code != "200",
    }
}

/// The answer to one ZAP request `frames` (RFC 27 §"ZAP request": version "1.0", request id,
/// domain, address, identity, mechanism, credentials...). CURVE's one credential is the
/// client's 32-byte public key. Anything malformed, another mechanism on a zper domain, or an
/// unknown domain is refused (status 400 or 500), never admitted.
pub(crate) fn answer(policy: &ZapPolicy, frames: &[Vec<u8>]) -> ZapAnswer {
    let id = frames.get(1).map_or(&[][..], Vec::as_slice);
    if frames.len() < 6 || frames[0] != b"1.0" {
        return reply(id, "500", "malformed ZAP request", "");
    }
    let (domain, mechanism) = (frames[2].as_slice(), frames[5].as_slice());
    if mechanism != b"CURVE" {
        // A NULL socket of the same context with no domain set is not ours to judge.
        return if domain.is_empty() && mechanism == b"NULL" {
            reply(id, "200", "OK", "")
        } else {
            reply(id, "400", "zper endpoints require CURVE", "")
        };
    }
    let Some(key) = frames
        .get(6)
        .and_then(|k| <[u8; 32]>::try_from(k.as_slice()).ok())
    else {
        return reply(id, "500", "CURVE request without a 32-byte key", "");
    };
    let allowed = match domain {
        d if d == CLUSTER_DOMAIN.as_bytes() => key == policy.cluster,
        d if d == CLIENTS_DOMAIN.as_bytes() => policy.clients.allows(&key),
        _ => false,
    };
    if allowed {
        reply(id, "200", "OK", &encode_key(&key))
    } else {
        reply(id, "400", "key not authorised", "")
    }
}

/// Binds the ZAP handler's socket in `zmq` (before any CURVE endpoint is bound).
///
/// Errors: the socket cannot be created or bound (another handler is bound in this context).
pub(crate) fn bind(zmq: &zmq::Context) -> Result<zmq::Socket, NodeError> {
    let s = zmq.socket(zmq::REP)?;
    s.set_linger(0)?;
    s.bind(ZAP_ENDPOINT).map_err(|source| NodeError::Bind {
        endpoint: ZAP_ENDPOINT.to_owned(),
        source,
    })?;
    Ok(s)
}

/// Serves ZAP requests on `socket` (from [`bind`]) until `stop` or until the zmq context
/// ends, counting refusals in `counters.curve_refused` and logging them at every power of two.
///
/// Errors: the thread cannot be started.
pub(crate) fn spawn(
    socket: zmq::Socket,
    policy: ZapPolicy,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, NodeError> {
    let name = "zper-zap";
    let serve = move || {
        while !stop.load(Ordering::Relaxed) {
            match socket.poll(zmq::POLLIN, 100) {
                Ok(0) => continue,
                Ok(_) => {}
                // The context ends (the node failed to start, or stops): so does the handler.
                Err(zmq::Error::ETERM) => break,
                Err(e) => {
                    warn!(error = %e, "ZAP poll failed");
                    continue;
                }
            }
            let Ok(frames) = socket.recv_multipart(zmq::DONTWAIT) else {
                continue;
            };
            let a = answer(&policy, &frames);
            if a.refused {
                let n = counters.curve_refused.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    let domain = frames
                        .get(2)
                        .map(|d| String::from_utf8_lossy(d).into_owned());
                    let why = a
                        .frames
                        .get(3)
                        .map(|d| String::from_utf8_lossy(d).into_owned());
                    warn!(domain = ?domain, reason = ?why, refused_so_far = n, "ZAP refused a client");
                }
            }
            if let Err(e) = socket.send_multipart(a.frames, 0) {
                warn!(error = %e, "ZAP reply failed");
            }
        }
    };
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(serve)
        .map_err(|source| NodeError::Thread {
            name: name.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use zper_wire::zmtp::curve::CurveKeyPair;

    fn request(domain: &str, mechanism: &str, key: Option<&[u8]>) -> Vec<Vec<u8>> {
        let mut f = vec![
            b"1.0".to_vec(),
            b"7".to_vec(),
            domain.as_bytes().to_vec(),
            b"127.0.0.1".to_vec(),
            Vec::new(),
            mechanism.as_bytes().to_vec(),
        ];
        f.extend(key.map(<[u8]>::to_vec));
        f
    }

    fn policy(admitted: &[u8; 32], cluster: [u8; 32]) -> ZapPolicy {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("clients");
        std::fs::write(&file, encode_key(admitted)).expect("write");
        ZapPolicy {
            clients: Arc::new(ClientKeys::load(Some(&file), Some(cluster)).expect("keys")),
            cluster,
        }
    }

    #[test]
    fn replication_admits_only_the_cluster_key_and_clients_admit_theirs_too() {
        let (client, cluster, stranger) = (
            CurveKeyPair::generate().public(),
            CurveKeyPair::generate().public(),
            CurveKeyPair::generate().public(),
        );
        let p = policy(&client, cluster);
        let ok = |d: &str, k: &[u8; 32]| !answer(&p, &request(d, "CURVE", Some(k))).refused;
        assert!(ok(CLUSTER_DOMAIN, &cluster));
        assert!(!ok(CLUSTER_DOMAIN, &client));
        assert!(!ok(CLUSTER_DOMAIN, &stranger));
        assert!(ok(CLIENTS_DOMAIN, &client));
        assert!(ok(CLIENTS_DOMAIN, &cluster));
        assert!(!ok(CLIENTS_DOMAIN, &stranger));
        assert!(!ok("another", &cluster));
        let a = answer(&p, &request(CLIENTS_DOMAIN, "CURVE", Some(&client)));
        assert_eq!(a.frames[0], b"1.0");
        assert_eq!(a.frames[1], b"7");
        assert_eq!(a.frames[2], b"200");
        assert_eq!(a.frames[4], encode_key(&client).as_bytes());
        assert_eq!(a.frames.len(), 6);
    }

    #[test]
    fn malformed_requests_and_other_mechanisms_are_refused() {
        let cluster = CurveKeyPair::generate().public();
        let p = policy(&cluster, cluster);
        for (frames, code) in [
            (vec![], "500"),
            (vec![b"1.0".to_vec(), b"1".to_vec()], "500"),
            (request(CLIENTS_DOMAIN, "CURVE", None), "500"),
            (request(CLIENTS_DOMAIN, "CURVE", Some(&[1u8; 31])), "500"),
            (request(CLIENTS_DOMAIN, "PLAIN", Some(b"user")), "400"),
            (request(CLUSTER_DOMAIN, "NULL", None), "400"),
        ] {
            let a = answer(&p, &frames);
            assert!(a.refused);
            assert_eq!(a.frames[2], code.as_bytes(), "{frames:?}");
            assert_eq!(a.frames.len(), 6);
        }
        let mut v2 = request(CLUSTER_DOMAIN, "CURVE", Some(&cluster));
        v2[0] = b"2.0".to_vec();
        assert!(answer(&p, &v2).refused);
        assert!(!answer(&p, &request("", "NULL", None)).refused);
    }

    #[test]
    fn libzmq_refuses_a_stranger_and_admits_the_cluster_through_the_handler() {
        // The handler bound in a context decides libzmq's CURVE handshakes on that context.
        let ctx = zmq::Context::new();
        let cluster = CurveKeyPair::generate();
        let p = policy(&cluster.public(), cluster.public());
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let zap = bind(&ctx).expect("zap");
        let t = spawn(zap, p, counters.clone(), stop.clone()).expect("spawn");
        let server = ctx.socket(zmq::ROUTER).expect("router");
        server.set_curve_server(true).expect("server");
        server.set_curve_secretkey(&cluster.secret()).expect("key");
        server.set_zap_domain(CLUSTER_DOMAIN).expect("domain");
        server.bind("tcp://127.0.0.1:*").expect("bind");
        let endpoint = server.get_last_endpoint().expect("ep").expect("utf8");
        let client = |keys: &CurveKeyPair| {
            let s = ctx.socket(zmq::DEALER).expect("dealer");
            s.set_linger(0).expect("linger");
            s.set_curve_serverkey(&cluster.public()).expect("sk");
            s.set_curve_publickey(&keys.public()).expect("pk");
            s.set_curve_secretkey(&keys.secret()).expect("sk");
            s.connect(&endpoint).expect("connect");
            s.send("hello", 0).expect("send");
            s
        };
        let stranger = client(&CurveKeyPair::generate());
        let member = client(&cluster);
        server.set_rcvtimeo(5_000).expect("timeout");
        let got = server.recv_multipart(0).expect("the member gets through");
        assert_eq!(got[1], b"hello");
        // The stranger is refused (counted) and its message never arrives.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while counters.curve_refused.load(Ordering::Relaxed) == 0
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(counters.curve_refused.load(Ordering::Relaxed), 1);
        assert_eq!(server.poll(zmq::POLLIN, 100).expect("poll"), 0);
        drop((stranger, member));
        stop.store(true, Ordering::Relaxed);
        t.join().expect("join");
    }
}
