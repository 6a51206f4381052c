//! Client-side helpers shared by the CLI tools: identities, endpoints, reader requests.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use anyhow::{anyhow, bail, Context, Result};
use zper_wire::{Identity, ReaderReply, ReaderRequest, Status, Timestamp};

/// A fresh random 16-byte UUID part for an identity (spec §3).
pub fn random_uuid() -> [u8; 16] {
    let mut out = [0u8; 16];
    for chunk in out.chunks_mut(8) {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        chunk.copy_from_slice(&h.finish().to_be_bytes());
    }
    out
}

/// The identity bytes a ZPER client uses for `topic` in `mode`.
pub fn identity(topic: &str, mode: u8) -> Result<Vec<u8>> {
    Ok(Identity::new(topic, mode, &random_uuid())
        .map_err(|e| anyhow!("topic {topic:?}: {e}"))?
        .to_bytes())
}

/// Where the CLI connects when `-w`/`-r` are not given: the endpoints of `--config FILE` (with
/// `*` and `0.0.0.0` replaced by 127.0.0.1), else the defaults 127.0.0.1:5555 / 5556.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets {
    /// Writer endpoint.
    pub writer: String,
    /// Reader endpoint.
    pub reader: String,
    /// HTTP admin address, `host:port`.
    pub admin: String,
    /// The config's `http.admin_token`, sent by the admin commands.
    pub admin_token: Option<String>,
    /// Dolly requests endpoint.
    pub dolly: String,
    /// Controller endpoint.
    pub controller: String,
}

impl Targets {
    /// From an optional node config file.
    pub fn from_config(config: Option<&std::path::Path>) -> Result<Self> {
        match config {
            None => Ok(Targets {
                writer: "tcp://127.0.0.1:5555".into(),
                reader: "tcp://127.0.0.1:5556".into(),
                admin: "127.0.0.1:9644".into(),
                admin_token: None,
                dolly: "tcp://127.0.0.1:3266".into(),
                controller: "tcp://127.0.0.1:5558".into(),
            }),
            Some(path) => {
                let c = crate::NodeConfig::from_file(path)?;
                Ok(Targets {
                    writer: connectable(&c.writer_bind),
                    reader: connectable(&c.reader_bind),
                    admin: c
                        .cluster
                        .http_advertise
                        .clone()
                        .unwrap_or_else(|| c.cluster.http_bind.replace("0.0.0.0:", "127.0.0.1:")),
                    admin_token: c.cluster.admin_token.clone(),
                    dolly: connectable(&c.dolly_requests_bind),
                    controller: connectable(&c.controller_bind),
                })
            }
        }
    }
}

/// A bind endpoint turned into one a local client can connect to.
pub fn connectable(bind: &str) -> String {
    bind.replace("://*:", "://127.0.0.1:")
        .replace("://0.0.0.0:", "://127.0.0.1:")
}

/// Accepts `tcp://host:port` or the original tools' `host:port`.
pub fn endpoint(s: &str) -> String {
    if s.contains("://") {
        s.to_owned()
    } else {
        format!("tcp://{s}")
    }
}

/// A DEALER connected to a reader with a ZPER identity and a receive timeout.
pub struct ReaderClient {
    socket: zmq::Socket,
    endpoint: String,
}

impl ReaderClient {
    /// Connects (lazily, as zmq does) to `endpoint` for `topic`.
    pub fn connect(
        ctx: &zmq::Context,
        endpoint: &str,
        topic: &str,
        timeout_ms: i32,
    ) -> Result<Self> {
        let socket = ctx.socket(zmq::DEALER)?;
        socket.set_identity(&identity(topic, 0)?)?;
        socket.set_rcvtimeo(timeout_ms)?;
        socket.set_linger(0)?;
        socket.set_rcvbuf(4 << 20)?;
        socket
            .connect(endpoint)
            .with_context(|| format!("connect to reader {endpoint}"))?;
        Ok(ReaderClient {
            socket,
            endpoint: endpoint.to_owned(),
        })
    }

    /// Sends one request and decodes its reply.
    pub fn request(&self, req: &ReaderRequest) -> Result<ReaderReply> {
        self.socket.send_multipart(req.encode(), 0)?;
        let frames = match self.socket.recv_multipart(0) {
            Ok(f) => f,
            Err(zmq::Error::EAGAIN) => bail!("no reply from reader {} (timed out)", self.endpoint),
            Err(e) => return Err(e.into()),
        };
        ReaderReply::decode(req, &frames).ok_or_else(|| anyhow!("malformed reply: {frames:?}"))
    }

    /// OFFSET -2 (earliest) or -1 (latest, second value = flushed end).
    pub fn offset(&self, timestamp: Timestamp) -> Result<u64> {
        match self.request(&ReaderRequest::Offset {
            timestamp,
            max_entries: None,
        })? {
            ReaderReply::Offsets(o) if !o.is_empty() => Ok(o[o.len() - 1]),
            other => bail!("OFFSET failed: {other:?}"),
        }
    }

    /// FETCH; `Ok(None)` for 101 (offset not readable).
    pub fn fetch(&self, offset: u64, max_bytes: u64) -> Result<Option<Vec<u8>>> {
        let req = ReaderRequest::Fetch {
            offset: offset as i64,
            max_bytes: max_bytes as i64,
        };
        match self.request(&req)? {
            ReaderReply::Data(d) => Ok(Some(d)),
            ReaderReply::Status(Status::InvalidOffset) => Ok(None),
            other => bail!("FETCH failed: {other:?}"),
        }
    }
}

/// A writer reply after its envelope: an ack of `id`, or a refusal with a status (issue #4).
///
/// Errors: a refusal (103 not enough in-sync replicas, 104 not the leader) or a reply that
/// does not name `id`, as a message for the user.
pub fn check_writer_reply(reply: &[Vec<u8>], id: &[u8]) -> Result<()> {
    match reply {
        [ack] if ack.as_slice() == id => Ok(()),
        [ack, status] if ack.as_slice() == id && status.len() == 1 => match status[0] {
            zper_wire::WRITER_NOT_ENOUGH_REPLICAS => bail!(
                "message refused: fewer in-sync replicas than min_insync (status 103); not stored"
            ),
            zper_wire::WRITER_NOT_LEADER => bail!(
                "message refused: this node does not lead the topic (status 104); write to the \
                 leader (zper topics describe)"
            ),
            other => bail!("message refused with status {other}"),
        },
        other => bail!("unexpected writer reply {other:?}"),
    }
}
