//! Raft RPCs between nodes as older nodes speak them (the fallback of [`crate::transport`],
//! which nodes use between themselves since issue #16): JSON over HTTP POST to the peer's admin address (`NodeEndpoints::http`),
//! at `/raft/append`, `/raft/vote` and `/raft/snapshot`; the `zper-http` crate serves them. The
//! remote answers `Result<Response, RaftError>` as JSON. Every call is bounded by openraft's
//! per-RPC deadline, so a dead peer never blocks the Raft core (nor, being async on the tokio
//! runtime, the ZMQ data path).

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{NodeEndpoints, NodeId, TypeConfig};

/// Path of the AppendEntries RPC.
pub const APPEND_PATH: &str = "/raft/append";
/// Path of the RequestVote RPC.
pub const VOTE_PATH: &str = "/raft/vote";
/// Path of the InstallSnapshot RPC.
pub const SNAPSHOT_PATH: &str = "/raft/snapshot";
/// Path of a node's Raft state (served by `zper-http`); `add_voter` probes it to check that the
/// node being added runs and has the expected id.
pub const RAFT_STATE_PATH: &str = "/v1/raft";
/// Path where a follower forwards a metadata command to the leader: JSON [`crate::metadata::Command`]
/// in, JSON `Result<CommandResult, String>` out.
pub const PROPOSE_PATH: &str = "/v1/internal/propose";

/// Creates connections to peers (one shared HTTP client with pooled connections).
#[derive(Debug, Clone, Default)]
pub struct HttpNetwork {
    client: reqwest::Client,
    tls: crate::tls::PeerTls,
}

/// An HTTP client for peer requests, sending `Authorization: Bearer <token>` on each when a
/// token is given (a token that is not a valid header value is not sent, and peers will refuse
/// this node's mutating requests with 401).
/// Over TLS when `tls` says so (trusting only its CA).
pub fn http_client(token: Option<&str>, tls: &crate::tls::PeerTls) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(t) = token {
        match reqwest::header::HeaderValue::from_str(&format!("Bearer {t}")) {
            Ok(mut v) => {
                v.set_sensitive(true);
                headers.insert(reqwest::header::AUTHORIZATION, v);
            }
            Err(e) => tracing::warn!(error = %e, "admin token is not a valid header value"),
        }
    }
    tls.reqwest()
        .default_headers(headers)
        .build()
        .unwrap_or_default()
}

impl HttpNetwork {
    /// A network whose requests carry `token`, over TLS when `tls` says so (see
    /// [`http_client`]).
    pub fn new(token: Option<&str>, tls: crate::tls::PeerTls) -> Self {
        HttpNetwork {
            client: http_client(token, &tls),
            tls,
        }
    }
}

/// A connection to one peer.
#[derive(Debug, Clone)]
pub struct HttpConnection {
    client: reqwest::Client,
    tls: crate::tls::PeerTls,
    target: NodeId,
    node: NodeEndpoints,
}

impl HttpConnection {
    /// A connection to `target` at `node` over `client` (built for `tls`).
    pub fn new(
        client: reqwest::Client,
        tls: crate::tls::PeerTls,
        target: NodeId,
        node: NodeEndpoints,
    ) -> Self {
        HttpConnection {
            client,
            tls,
            target,
            node,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for HttpNetwork {
    type Network = HttpConnection;

    async fn new_client(&mut self, target: NodeId, node: &NodeEndpoints) -> HttpConnection {
        HttpConnection {
            client: self.client.clone(),
            tls: self.tls.clone(),
            target,
            node: node.clone(),
        }
    }
}

impl HttpConnection {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, NodeEndpoints, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let url = format!("{}{path}", self.tls.base_url(&self.node.http));
        let sent = self
            .client
            .post(&url)
            .timeout(option.hard_ttl())
            .json(req)
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() {
                    RPCError::Unreachable(Unreachable::new(&e))
                } else {
                    RPCError::Network(NetworkError::new(&e))
                }
            })?;
        let result: Result<Resp, RaftError<NodeId, E>> = sent
            .json()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.node.clone(),
                e,
            ))
        })
    }
}

impl RaftNetwork<TypeConfig> for HttpConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeEndpoints, RaftError<NodeId>>>
    {
        self.call(APPEND_PATH, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeEndpoints, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(SNAPSHOT_PATH, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeEndpoints, RaftError<NodeId>>> {
        self.call(VOTE_PATH, &rpc, &option).await
    }
}
