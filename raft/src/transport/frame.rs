//! Frames of zper's Raft transport (issue #16): a big-endian `u32` length, then a MessagePack
//! body, [`RpcRequest`] from the leader or candidate, [`RpcResponse`] back; and the serving side
//! of an upgraded connection ([`serve`]).

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::Raft;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufStream};
use tracing::debug;

use crate::metadata::{Command, CommandResult};
use crate::{ClusterNode, NodeId, TypeConfig};

/// Largest frame either side accepts, bytes (256 MiB): an AppendEntries of at most
/// `max_payload_entries` entries, each a command batch of a few MiB, or one snapshot chunk.
pub const MAX_FRAME_BYTES: u32 = 256 << 20;

/// One RPC from a leader or candidate.
#[derive(Debug, Serialize, Deserialize)]
pub enum RpcRequest {
    /// AppendEntries (also openraft's heartbeat).
    Append(AppendEntriesRequest<TypeConfig>),
    /// RequestVote.
    Vote(VoteRequest<NodeId>),
    /// One InstallSnapshot chunk.
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// A follower's proposal (a command or a batch) for the leader to write (issue #16: in
    /// place of JSON over `POST /v1/internal/propose`); applied only if the receiver leads.
    /// A node from before this variant answers `Refused`.
    Propose(Command),
}

/// The answer to the [`RpcRequest`] before it on the same connection.
#[derive(Debug, Serialize, Deserialize)]
pub enum RpcResponse {
    /// To `Append`.
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// To `Vote`.
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// To `Snapshot`.
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    /// To `Propose`: the leader's result, or why it was not written (as text, as the HTTP
    /// forward answers it).
    Proposed(Result<CommandResult, String>),
    /// The request could not be decoded (a peer of another version): the reason.
    Refused(String),
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The connection failed or closed.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// A frame over [`MAX_FRAME_BYTES`].
    #[error("frame of {0} bytes is over the limit of {MAX_FRAME_BYTES} bytes")]
    TooLarge(u64),
    /// The body is not MessagePack of the expected type.
    #[error("undecodable frame: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    /// The value could not be encoded.
    #[error("unencodable frame: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
}

/// Writes `value` as one frame and flushes.
///
/// Errors: `Encode`, `TooLarge`, `Io`.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    value: &T,
) -> Result<(), FrameError> {
    let body = rmp_serde::to_vec_named(value)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|l| *l <= MAX_FRAME_BYTES)
        .ok_or(FrameError::TooLarge(body.len() as u64))?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(&body).await?;
    w.flush().await?;
    Ok(())
}

/// Reads one frame; `Ok(None)` at a clean end of stream before a frame starts.
///
/// Errors: `TooLarge` (nothing of it is read into memory), `Io`, `Decode`.
pub async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(
    r: &mut R,
) -> Result<Option<T>, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len);
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len as u64));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).await?;
    Ok(Some(rmp_serde::from_slice(&body)?))
}

/// Resolves once the Raft of `metrics` has shut down (its state says so or its core is gone).
async fn stopped(
    mut metrics: tokio::sync::watch::Receiver<
        openraft::metrics::RaftServerMetrics<NodeId, crate::NodeEndpoints>,
    >,
) {
    loop {
        if metrics.borrow_and_update().state == openraft::ServerState::Shutdown {
            return;
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Serves one upgraded connection for `node`: answers each request in order until the peer
/// closes it or sends something undecodable (answered `Refused`, then closed). Returns the node
/// whose AppendEntries came last on it (a leader's replication stream), for
/// [`crate::ClusterNode::leader_stream_closed`].
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(io: S, node: &ClusterNode) -> Option<NodeId> {
    let raft: &Raft<TypeConfig> = &node.raft;
    let mut io = BufStream::new(io);
    let mut from = None;
    let stopped = stopped(raft.server_metrics());
    tokio::pin!(stopped);
    loop {
        // A stopped node lets go of its connections (and with them its storage): a follower
        // keeps idle forward connections open to the leader it knew.
        let next = tokio::select! {
            next = read_frame::<_, RpcRequest>(&mut io) => next,
            () = &mut stopped => return from,
        };
        let request = match next {
            Ok(Some(r)) => r,
            Ok(None) => return from,
            Err(e) => {
                debug!(error = %e, "raft stream closed");
                if matches!(e, FrameError::Decode(_) | FrameError::TooLarge(_)) {
                    let _ = write_frame(&mut io, &RpcResponse::Refused(e.to_string())).await;
                }
                return from;
            }
        };
        let response = match request {
            RpcRequest::Append(r) => {
                from = r.vote.leader_id().voted_for();
                RpcResponse::Append(raft.append_entries(r).await)
            }
            RpcRequest::Vote(r) => RpcResponse::Vote(raft.vote(r).await),
            RpcRequest::Snapshot(r) => RpcResponse::Snapshot(raft.install_snapshot(r).await),
            RpcRequest::Propose(c) => {
                RpcResponse::Proposed(node.write_forwarded(c).await.map_err(|e| e.to_string()))
            }
        };
        if let Err(e) = write_frame(&mut io, &response).await {
            debug!(error = %e, "raft stream answer not sent");
            return from;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Every entry kind, and endpoints with and without the optional peer addresses (a field
    /// serde skips when empty, which bincode could not decode), survive a frame; so do errors.
    #[tokio::test]
    async fn entries_of_every_kind_and_errors_survive_a_frame() {
        use crate::metadata::{Command, PeerEndpoints};
        use crate::NodeEndpoints;
        use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership};
        use std::collections::{BTreeMap, BTreeSet};
        let log_id = |i| LogId::new(CommittedLeaderId::new(2, 1), i);
        let plain = NodeEndpoints {
            name: "a".into(),
            http: "127.0.0.1:1".into(),
            ..Default::default()
        };
        let behind_nat = NodeEndpoints {
            name: "b".into(),
            peer: Some(PeerEndpoints {
                writer: "tcp://10.0.0.2:5555".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let membership = Membership::new(
            vec![BTreeSet::from([1, 2])],
            BTreeMap::from([(1, plain), (2, behind_nat)]),
        );
        let put = Command::DollyPut {
            key: b"k".to_vec(),
            value: (0..=255).collect(),
            request: None,
            deadline_ms: 7,
        };
        let entries = vec![
            Entry::<TypeConfig> {
                log_id: log_id(1),
                payload: EntryPayload::Blank,
            },
            Entry {
                log_id: log_id(2),
                payload: EntryPayload::Membership(membership),
            },
            Entry {
                log_id: log_id(3),
                payload: EntryPayload::Normal(Command::Batch(vec![put.clone(), put])),
            },
        ];
        let sent = AppendEntriesRequest {
            vote: openraft::Vote::new_committed(2, 1),
            prev_log_id: Some(log_id(0)),
            leader_commit: Some(log_id(1)),
            entries,
        };
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        write_frame(&mut a, &RpcRequest::Append(sent.clone()))
            .await
            .expect("write");
        match read_frame::<_, RpcRequest>(&mut b).await.expect("read") {
            Some(RpcRequest::Append(got)) => {
                assert_eq!(got.entries, sent.entries);
                assert_eq!(got.vote, sent.vote);
                assert_eq!(got.prev_log_id, sent.prev_log_id);
            }
            other => panic!("expected an append, got {other:?}"),
        }
        let refusal: RpcResponse =
            RpcResponse::Append(Err(RaftError::Fatal(openraft::error::Fatal::Stopped)));
        write_frame(&mut a, &refusal).await.expect("write");
        assert!(matches!(
            read_frame::<_, RpcResponse>(&mut b).await.expect("read"),
            Some(RpcResponse::Append(Err(RaftError::Fatal(
                openraft::error::Fatal::Stopped
            ))))
        ));
        let higher = RpcResponse::Vote(Ok(VoteResponse::new(
            openraft::Vote::new(5, 2),
            Some(log_id(9)),
            false,
        )));
        write_frame(&mut a, &higher).await.expect("write");
        match read_frame::<_, RpcResponse>(&mut b).await.expect("read") {
            Some(RpcResponse::Vote(Ok(v))) => {
                assert_eq!(v.vote, openraft::Vote::new(5, 2));
                assert!(!v.vote_granted);
            }
            other => panic!("expected a vote answer, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn frames_round_trip_and_oversized_lengths_are_refused_unread() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let vote = RpcRequest::Vote(VoteRequest::new(openraft::Vote::new(3, 1), None));
        write_frame(&mut a, &vote).await.expect("write");
        match read_frame::<_, RpcRequest>(&mut b).await.expect("read") {
            Some(RpcRequest::Vote(v)) => assert_eq!(v.vote, openraft::Vote::new(3, 1)),
            other => panic!("expected a vote, got {other:?}"),
        }
        a.write_all(&(MAX_FRAME_BYTES + 1).to_be_bytes())
            .await
            .expect("write");
        assert!(matches!(
            read_frame::<_, RpcRequest>(&mut b).await,
            Err(FrameError::TooLarge(_))
        ));
        drop(a);
        let (_a, mut b) = tokio::io::duplex(16);
        drop(_a);
        assert!(read_frame::<_, RpcRequest>(&mut b)
            .await
            .expect("clean end")
            .is_none());
    }
}
