//! zper's Raft transport (issue #16): one persistent TCP connection per peer and per openraft
//! replication stream, opened as an HTTP/1.1 upgrade on the peer's admin port (`POST
//! /raft/stream`, `Upgrade: zper-raft/1`, the admin token in `Authorization` as on every
//! mutating request), then length-prefixed binary frames: a big-endian `u32` length and a
//! MessagePack body ([`RpcRequest`] one way, [`RpcResponse`] the other). MessagePack rather than
//! bincode because it is self-describing: the metadata's optional fields
//! (`skip_serializing_if`) and openraft's error types decode as they do from JSON.
//!
//! Why: the JSON-over-HTTP transport ([`crate::network`]) paid a request, a JSON body with
//! every byte as a decimal number and an axum body limit (2 MiB: a large snapshot or Dolly
//! value was refused with 413) per RPC, and its per-request timeouts failed busy but healthy
//! peers. Here a connection carries one RPC at a time, in order (openraft calls each
//! connection sequentially), so a response always belongs to the request before it. A call
//! that is abandoned half way (openraft's own deadline dropped it) closes its connection; the
//! next call opens a new one. A peer that answers the upgrade with 404 (a node from before
//! this transport) is spoken to over [`crate::network::HttpConnection`] instead.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufStream};
use tracing::warn;

use crate::network::HttpConnection;
use crate::tls::{PeerStream, PeerTls};
use crate::{NodeEndpoints, NodeId, TypeConfig};

mod forward;
mod frame;

pub(crate) use forward::{Forwarded, Forwarder};
pub use frame::{
    read_frame, serve, write_frame, FrameError, RpcRequest, RpcResponse, MAX_FRAME_BYTES,
};

/// Path of the upgrade request on the admin port.
pub const STREAM_PATH: &str = "/raft/stream";
/// Value of the `Upgrade` header (protocol name and version).
pub const PROTOCOL: &str = "zper-raft/1";
/// Longest wait for a connection and its upgrade answer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest upgrade answer head, bytes.
const MAX_HEAD_BYTES: usize = 8192;

/// Counters of this node's outgoing Raft RPCs (`zper_raft_rpc_*` metrics).
#[derive(Debug, Default)]
pub struct TransportStats {
    /// RPCs sent (all kinds).
    pub sent: AtomicU64,
    /// RPCs abandoned before their answer came (openraft's deadline passed): `append`, `vote`,
    /// `snapshot`.
    pub timeouts: [AtomicU64; 3],
    /// RPCs that failed on the connection (refused, reset, undecodable answer).
    pub failures: AtomicU64,
    /// Connections opened.
    pub connects: AtomicU64,
    /// Proposals this node forwarded to the leader over the stream and got an answer to.
    pub forwarded: AtomicU64,
    /// Peers whose last stream upgrade refused this node's admin token (401), and when.
    refused_token: std::sync::Mutex<std::collections::BTreeMap<NodeId, std::time::Instant>>,
}

impl TransportStats {
    /// The peers that refused this node's admin token (401 to the Raft stream upgrade) and
    /// have not accepted a stream since: a token that differs between nodes (`http.admin_token`
    /// must be the same on every node).
    pub fn peers_refusing_token(&self) -> Vec<NodeId> {
        self.refused_token
            .lock()
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default()
    }

    fn token_refused(&self, peer: NodeId) {
        if let Ok(mut m) = self.refused_token.lock() {
            m.insert(peer, std::time::Instant::now());
        }
    }

    fn token_accepted(&self, peer: NodeId) {
        if let Ok(mut m) = self.refused_token.lock() {
            m.remove(&peer);
        }
    }
}

/// The RPC kinds, in the order of [`TransportStats::timeouts`].
pub const RPC_KINDS: [&str; 3] = ["append", "vote", "snapshot"];

/// Creates [`StreamConnection`]s to peers.
#[derive(Debug, Clone, Default)]
pub struct StreamNetwork {
    token: Option<Arc<str>>,
    tls: PeerTls,
    http: reqwest::Client,
    stats: Arc<TransportStats>,
}

impl StreamNetwork {
    /// A network whose upgrade requests carry `Authorization: Bearer <token>`, over TLS when
    /// `tls` says so, counting into `stats`.
    pub fn new(token: Option<&str>, tls: PeerTls, stats: Arc<TransportStats>) -> Self {
        StreamNetwork {
            token: token.map(Arc::from),
            http: crate::network::http_client(token, &tls),
            tls,
            stats,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for StreamNetwork {
    type Network = StreamConnection;

    async fn new_client(&mut self, target: NodeId, node: &NodeEndpoints) -> StreamConnection {
        StreamConnection {
            target,
            node: node.clone(),
            token: self.token.clone(),
            tls: self.tls.clone(),
            stats: self.stats.clone(),
            stream: None,
            fallback: None,
            http: self.http.clone(),
        }
    }
}

/// A connection to one peer (opened on first use, reopened after a failure).
#[derive(Debug)]
pub struct StreamConnection {
    target: NodeId,
    node: NodeEndpoints,
    token: Option<Arc<str>>,
    tls: PeerTls,
    stats: Arc<TransportStats>,
    stream: Option<BufStream<PeerStream>>,
    /// Set once the peer answered the upgrade with 404: it only speaks JSON over HTTP.
    fallback: Option<HttpConnection>,
    http: reqwest::Client,
}

/// Why opening a stream failed.
enum Open {
    /// No connection (refused, unreachable, no answer).
    Unreachable(std::io::Error),
    /// The peer does not know the stream path: use HTTP.
    NotSupported,
    /// The peer refused the admin token (401).
    Unauthorized(String),
    /// Anything else (a broken answer).
    Failed(String),
}

/// Counts an RPC as timed out when its future is dropped before it finished.
struct InFlight<'a> {
    stats: &'a TransportStats,
    kind: usize,
    done: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.stats.timeouts[self.kind].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The upgrade request for `host` (an HTTP/1.1 head, no body).
fn upgrade_request(host: &str, token: Option<&str>) -> String {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    format!(
        "POST {STREAM_PATH} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: {PROTOCOL}\r\n{auth}Content-Length: 0\r\n\r\n"
    )
}

/// The status code of an HTTP/1.1 status line.
fn status_of(line: &str) -> Option<u16> {
    let mut words = line.split_whitespace();
    words.next().filter(|v| v.starts_with("HTTP/1."))?;
    words.next()?.parse().ok()
}

/// Opens an upgraded stream to the admin address `http` (over TLS when `tls` says so), with
/// `token` in the upgrade request.
async fn open_stream(
    tls: &PeerTls,
    http: &str,
    token: Option<&str>,
) -> Result<BufStream<PeerStream>, Open> {
    let peer = tls.connect(http).await.map_err(Open::Unreachable)?;
    let mut io = BufStream::new(peer);
    io.write_all(upgrade_request(http, token).as_bytes())
        .await
        .map_err(Open::Unreachable)?;
    io.flush().await.map_err(Open::Unreachable)?;
    let mut head = Vec::new();
    let mut status = None;
    loop {
        let mut line = Vec::new();
        let n = (&mut io)
            .take((MAX_HEAD_BYTES - head.len().min(MAX_HEAD_BYTES)) as u64)
            .read_until(b'\n', &mut line)
            .await
            .map_err(Open::Unreachable)?;
        if n == 0 || !line.ends_with(b"\n") {
            return Err(Open::Failed("the peer closed during the upgrade".into()));
        }
        let text = String::from_utf8_lossy(&line);
        if status.is_none() {
            status = status_of(&text);
        }
        head.extend_from_slice(&line);
        if text.trim().is_empty() {
            break;
        }
    }
    match status {
        Some(101) => Ok(io),
        Some(404) | Some(405) => Err(Open::NotSupported),
        Some(401) => Err(Open::Unauthorized(format!(
            "upgrade to {PROTOCOL} answered 401: the peer refuses this node's admin token"
        ))),
        other => Err(Open::Failed(format!(
            "upgrade to {PROTOCOL} answered {}",
            other.map_or("garbage".to_owned(), |s| s.to_string())
        ))),
    }
}

impl StreamConnection {
    async fn open(&self) -> Result<BufStream<PeerStream>, Open> {
        match open_stream(&self.tls, &self.node.http, self.token.as_deref()).await {
            Ok(io) => {
                self.stats.connects.fetch_add(1, Ordering::Relaxed);
                self.stats.token_accepted(self.target);
                Ok(io)
            }
            Err(Open::Unauthorized(why)) => {
                self.stats.token_refused(self.target);
                Err(Open::Unauthorized(why))
            }
            Err(e) => Err(e),
        }
    }

    /// Sends `request` and reads its answer, opening the connection first if needed.
    async fn exchange(
        &mut self,
        request: &RpcRequest,
        kind: usize,
    ) -> Result<Option<RpcResponse>, RPCError<NodeId, NodeEndpoints, RaftError<NodeId>>> {
        let mut guard = InFlight {
            stats: &self.stats,
            kind,
            done: false,
        };
        self.stats.sent.fetch_add(1, Ordering::Relaxed);
        // Taken out for the call: a call dropped half way leaves no half-used connection.
        let mut io = match self.stream.take() {
            Some(io) => io,
            None => match tokio::time::timeout(CONNECT_TIMEOUT, self.open()).await {
                Ok(Ok(io)) => io,
                Ok(Err(Open::NotSupported)) => {
                    guard.done = true;
                    return Ok(None);
                }
                Ok(Err(Open::Unreachable(e))) => {
                    guard.done = true;
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    return Err(RPCError::Unreachable(Unreachable::new(&e)));
                }
                Ok(Err(Open::Failed(why) | Open::Unauthorized(why))) => {
                    guard.done = true;
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    // A refused upgrade (401: another admin token) will be refused again:
                    // Unreachable makes openraft back off instead of retrying at once (a
                    // retry every few ms, each a new connection and TLS handshake).
                    return Err(RPCError::Unreachable(Unreachable::new(
                        &std::io::Error::other(why),
                    )));
                }
                Err(_) => {
                    guard.done = true;
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    return Err(network_error(format!(
                        "no upgrade answer from {} within {} ms",
                        self.node.http,
                        CONNECT_TIMEOUT.as_millis()
                    )));
                }
            },
        };
        let answer = async {
            write_frame(&mut io, request).await?;
            read_frame::<_, RpcResponse>(&mut io).await
        }
        .await;
        guard.done = true;
        match answer {
            Ok(Some(RpcResponse::Refused(why))) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                Err(network_error(format!("peer refused the request: {why}")))
            }
            Ok(Some(r)) => {
                self.stream = Some(io);
                Ok(Some(r))
            }
            Ok(None) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                Err(network_error("the peer closed the connection".into()))
            }
            Err(e) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                Err(network_error(e.to_string()))
            }
        }
    }

    fn remote<E: std::error::Error>(
        &self,
        e: RaftError<NodeId, E>,
    ) -> RPCError<NodeId, NodeEndpoints, RaftError<NodeId, E>> {
        RPCError::RemoteError(RemoteError::new_with_node(
            self.target,
            self.node.clone(),
            e,
        ))
    }

    fn fallback(&mut self) -> &mut HttpConnection {
        let (target, node, http) = (self.target, self.node.clone(), self.http.clone());
        let tls = self.tls.clone();
        self.fallback.get_or_insert_with(|| {
            warn!(
                peer = target,
                "peer does not speak {PROTOCOL}; using JSON over HTTP"
            );
            HttpConnection::new(http, tls, target, node)
        })
    }
}

fn network_error<E: std::error::Error>(why: String) -> RPCError<NodeId, NodeEndpoints, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(why)))
}

/// Re-types an RPC error of the `RaftError<NodeId>` flavour for another remote error type
/// (only network-side errors come out of [`StreamConnection::exchange`]).
fn retype<E: std::error::Error>(
    e: RPCError<NodeId, NodeEndpoints, RaftError<NodeId>>,
) -> RPCError<NodeId, NodeEndpoints, RaftError<NodeId, E>> {
    match e {
        RPCError::Unreachable(u) => RPCError::Unreachable(u),
        RPCError::Timeout(t) => RPCError::Timeout(t),
        RPCError::PayloadTooLarge(p) => RPCError::PayloadTooLarge(p),
        other => network_error(other.to_string()),
    }
}

fn unexpected<E: std::error::Error>(what: &str) -> RPCError<NodeId, NodeEndpoints, E> {
    network_error(format!(
        "the peer answered {what} with another RPC's answer"
    ))
}

impl RaftNetwork<TypeConfig> for StreamConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeEndpoints, RaftError<NodeId>>>
    {
        if self.fallback.is_some() {
            return self.fallback().append_entries(rpc, option).await;
        }
        // openraft bounds this call by its heartbeat interval itself.
        let request = RpcRequest::Append(rpc);
        match self.exchange(&request, 0).await? {
            Some(RpcResponse::Append(r)) => r.map_err(|e| self.remote(e)),
            Some(_) => Err(unexpected("AppendEntries")),
            None => {
                let RpcRequest::Append(rpc) = request else {
                    return Err(unexpected("AppendEntries"));
                };
                self.fallback().append_entries(rpc, option).await
            }
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeEndpoints, RaftError<NodeId, InstallSnapshotError>>,
    > {
        if self.fallback.is_some() {
            return self.fallback().install_snapshot(rpc, option).await;
        }
        let request = RpcRequest::Snapshot(rpc);
        let answer = tokio::time::timeout(option.hard_ttl(), self.exchange(&request, 2)).await;
        match answer {
            Err(_) => Err(network_error(format!(
                "no InstallSnapshot answer within {} ms",
                option.hard_ttl().as_millis()
            ))),
            Ok(Err(e)) => Err(retype(e)),
            Ok(Ok(Some(RpcResponse::Snapshot(r)))) => r.map_err(|e| self.remote(e)),
            Ok(Ok(Some(_))) => Err(unexpected("InstallSnapshot")),
            Ok(Ok(None)) => {
                let RpcRequest::Snapshot(rpc) = request else {
                    return Err(unexpected("InstallSnapshot"));
                };
                self.fallback().install_snapshot(rpc, option).await
            }
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeEndpoints, RaftError<NodeId>>> {
        if self.fallback.is_some() {
            return self.fallback().vote(rpc, option).await;
        }
        let request = RpcRequest::Vote(rpc);
        let answer = tokio::time::timeout(option.hard_ttl(), self.exchange(&request, 1)).await;
        match answer {
            Err(_) => Err(network_error(format!(
                "no RequestVote answer within {} ms",
                option.hard_ttl().as_millis()
            ))),
            Ok(r) => match r? {
                Some(RpcResponse::Vote(r)) => r.map_err(|e| self.remote(e)),
                Some(_) => Err(unexpected("RequestVote")),
                None => {
                    let RpcRequest::Vote(rpc) = request else {
                        return Err(unexpected("RequestVote"));
                    };
                    self.fallback().vote(rpc, option).await
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_parse() {
        assert_eq!(status_of("HTTP/1.1 101 Switching Protocols\r\n"), Some(101));
        assert_eq!(status_of("HTTP/1.1 404 Not Found\r\n"), Some(404));
        assert_eq!(status_of("SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(status_of(""), None);
    }

    #[test]
    fn the_upgrade_request_carries_the_token_only_when_set() {
        let with = upgrade_request("127.0.0.1:9644", Some("s3cret"));
        assert!(with.starts_with("POST /raft/stream HTTP/1.1\r\n"));
        assert!(with.contains("Upgrade: zper-raft/1\r\n"));
        assert!(with.contains("Authorization: Bearer s3cret\r\n"));
        assert!(with.ends_with("\r\n\r\n"));
        assert!(!upgrade_request("h:1", None).contains("Authorization"));
    }
}
