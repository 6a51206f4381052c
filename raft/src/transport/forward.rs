//! Forwarded proposals over the binary stream (issue #16): a follower sends the batches of its
//! proposer (`crate::batch`) to the leader as [`RpcRequest::Propose`] frames on upgraded
//! connections it keeps open, in place of one HTTP request with a JSON body (every Dolly byte a
//! decimal number) per batch. A connection carries one proposal at a time; up to
//! [`MAX_IDLE`] idle ones are kept per node for the next. A leader that does not know the
//! stream (404) or the request (`Refused`: a node from before it) is remembered, and the
//! caller forwards over HTTP instead.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::BufStream;
use tokio::net::TcpStream;

use crate::tls::{PeerStream, PeerTls};

use super::frame::{read_frame, write_frame, RpcRequest, RpcResponse};
use super::{open_stream, Open, TransportStats};
use crate::metadata::{Command, CommandResult};

/// Idle forward connections kept per leader address, at most.
pub const MAX_IDLE: usize = 8;

/// The outcome of one forward.
#[derive(Debug)]
pub(crate) enum Forwarded {
    /// The leader's answer: its result, or why it did not write the command.
    Answer(Result<CommandResult, String>),
    /// The leader does not speak this (a node from before it): use HTTP.
    NotSupported,
    /// The connection failed or the answer did not come in time: the outcome is unknown.
    Failed(String),
}

/// This node's forward connections to leaders (cheap to clone).
#[derive(Debug, Clone, Default)]
pub(crate) struct Forwarder {
    token: Option<Arc<str>>,
    tls: PeerTls,
    stats: Arc<TransportStats>,
    idle: Arc<Mutex<HashMap<String, Vec<BufStream<PeerStream>>>>>,
    /// Leaders (admin addresses) that only take forwards over HTTP.
    http_only: Arc<Mutex<HashSet<String>>>,
}

impl Forwarder {
    /// A forwarder whose upgrade requests carry `Authorization: Bearer <token>`, over TLS
    /// when `tls` says so, counting answered forwards into `stats`.
    pub(crate) fn new(token: Option<&str>, tls: PeerTls, stats: Arc<TransportStats>) -> Self {
        Forwarder {
            token: token.map(Arc::from),
            tls,
            stats,
            ..Forwarder::default()
        }
    }

    /// Sends `command` to the leader at admin address `http` and waits at most `timeout` for
    /// its answer (the connection is dropped on a timeout, so a late answer is never taken for
    /// the next proposal's).
    pub(crate) async fn forward(
        &self,
        http: &str,
        command: &Command,
        timeout: Duration,
    ) -> Forwarded {
        if self.http_only.lock().is_ok_and(|s| s.contains(http)) {
            return Forwarded::NotSupported;
        }
        let request = RpcRequest::Propose(command.clone());
        match tokio::time::timeout(timeout, self.exchange(http, &request)).await {
            Ok(outcome) => outcome,
            Err(_) => Forwarded::Failed(format!(
                "no answer from the leader at {http} within {} ms",
                timeout.as_millis()
            )),
        }
    }

    async fn exchange(&self, http: &str, request: &RpcRequest) -> Forwarded {
        let reused = self.idle.lock().ok().and_then(|mut idle| {
            let kept = idle.get_mut(http)?;
            // One the leader closed meanwhile (it stopped, or restarted) is dropped here
            // rather than failing the proposal.
            while let Some(io) = kept.pop() {
                if still_open(io.get_ref().tcp()) {
                    return Some(io);
                }
            }
            None
        });
        let mut io = match reused {
            Some(io) => io,
            None => match open_stream(&self.tls, http, self.token.as_deref()).await {
                Ok(io) => io,
                Err(Open::NotSupported) => return self.not_supported(http),
                Err(Open::Unreachable(e)) => {
                    return Forwarded::Failed(format!("forward to the leader at {http}: {e}"))
                }
                Err(Open::Failed(why) | Open::Unauthorized(why)) => {
                    return Forwarded::Failed(format!("forward to the leader at {http}: {why}"))
                }
            },
        };
        let answer = async {
            write_frame(&mut io, request).await?;
            read_frame::<_, RpcResponse>(&mut io).await
        }
        .await;
        match answer {
            Ok(Some(RpcResponse::Proposed(result))) => {
                self.stats
                    .forwarded
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if let Ok(mut idle) = self.idle.lock() {
                    let kept = idle.entry(http.to_owned()).or_default();
                    if kept.len() < MAX_IDLE {
                        kept.push(io);
                    }
                }
                Forwarded::Answer(result)
            }
            Ok(Some(RpcResponse::Refused(_))) => self.not_supported(http),
            Ok(Some(_)) => Forwarded::Failed(format!(
                "the leader at {http} answered a proposal with another RPC's answer"
            )),
            Ok(None) => Forwarded::Failed(format!("the leader at {http} closed the connection")),
            Err(e) => Forwarded::Failed(format!("forward to the leader at {http}: {e}")),
        }
    }

    fn not_supported(&self, http: &str) -> Forwarded {
        if let Ok(mut s) = self.http_only.lock() {
            s.insert(http.to_owned());
        }
        Forwarded::NotSupported
    }
}

/// Whether an idle connection is still open: nothing to read yet (an answer never comes
/// unasked), neither an end of stream nor an error.
fn still_open(tcp: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(tcp.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_idle_connection_the_peer_closed_is_not_reused() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        assert!(still_open(&client));
        drop(server);
        let mut closed = false;
        for _ in 0..100 {
            if !still_open(&client) {
                closed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(closed, "a closed connection still looks open");
    }
}
