//! Batched proposals (issue #16): every [`crate::ClusterNode::propose`] goes through one proposer task
//! per node, which puts the commands waiting at that moment into one [`Command::Batch`] entry:
//! one log write (one fsync) on each voter and one forward to the leader for many concurrent
//! proposals, instead of one each. Up to [`MAX_IN_FLIGHT`] batches are on their way at once;
//! while they are, new proposals gather into the next batch, so batches grow with load and a
//! lone proposal goes out at once, alone (as a plain command, the form older nodes read).
//!
//! Every command keeps its own result. The queue is bounded ([`QUEUE`]): a proposer past it
//! waits for room (the callers are already bounded themselves: Dolly's in-progress limit, the
//! admin API's connections).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};
use tracing::Instrument;

use crate::error::ClusterError;
use crate::metadata::{Applied, Command, CommandResult};

/// Commands waiting for a batch, at most.
pub const QUEUE: usize = 16_384;
/// Commands in one batch, at most.
pub const MAX_COMMANDS: usize = 1024;
/// Bytes of Dolly keys and values in one batch, at most (a single larger Put goes alone).
pub const MAX_BYTES: usize = 2 << 20;
/// Batches proposed and not yet answered, at most.
pub const MAX_IN_FLIGHT: usize = 4;

/// One proposal waiting for its batch.
pub(crate) struct Pending {
    command: Command,
    reply: oneshot::Sender<Result<CommandResult, ClusterError>>,
}

/// The sending half of a node's proposer.
#[derive(Clone, Debug)]
pub(crate) struct Proposer {
    tx: mpsc::Sender<Pending>,
}

/// Bytes a command adds to a batch (its Dolly key and value; others count 64).
fn weight(c: &Command) -> usize {
    match c {
        Command::DollyPut { key, value, .. } => 64 + key.len() + value.len(),
        _ => 64,
    }
}

/// An error for each of several waiters (ClusterError is not `Clone`: the leader hint is kept,
/// anything else becomes `Write` with the same text).
fn share(e: &ClusterError) -> ClusterError {
    match e {
        ClusterError::NotLeader { leader, endpoints } => ClusterError::NotLeader {
            leader: *leader,
            endpoints: endpoints.clone(),
        },
        other => ClusterError::Write(other.to_string()),
    }
}

/// Splits a batch's outcome into one result per command (`n` of them).
pub(crate) fn split(
    outcome: Result<CommandResult, ClusterError>,
    n: usize,
) -> Vec<Result<CommandResult, ClusterError>> {
    match outcome {
        Ok(Ok(Applied::Batch(results))) if results.len() == n => {
            results.into_iter().map(Ok).collect()
        }
        Ok(Ok(other)) => (0..n)
            .map(|_| {
                Err(ClusterError::Write(format!(
                    "a batch of {n} was answered {other:?}"
                )))
            })
            .collect(),
        Ok(Err(refused)) => (0..n).map(|_| Ok(Err(refused.clone()))).collect(),
        Err(e) => (0..n).map(|_| Err(share(&e))).collect(),
    }
}

impl Proposer {
    /// Starts the proposer task of `node` on the current tokio runtime.
    pub(crate) fn start() -> (Proposer, mpsc::Receiver<Pending>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (Proposer { tx }, rx)
    }

    /// A proposer whose queue is closed (every proposal fails with `Write`).
    pub(crate) fn closed() -> Proposer {
        Proposer {
            tx: mpsc::channel(1).0,
        }
    }

    /// Queues `command` and waits for its result.
    ///
    /// Errors: `Write` when the proposer has stopped (the node is shutting down).
    pub(crate) async fn propose(&self, command: Command) -> Result<CommandResult, ClusterError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Pending { command, reply })
            .await
            .map_err(|_| ClusterError::Write("the proposer stopped".into()))?;
        answer
            .await
            .map_err(|_| ClusterError::Write("the proposer dropped the proposal".into()))?
    }
}

/// The proposer loop: takes what is queued (up to the limits) once a batch may go, proposes it
/// through `propose` (the node's unbatched `propose_now`) and answers each waiter. Ends when
/// every sender is gone.
pub(crate) async fn run<P, F>(propose: P, mut rx: mpsc::Receiver<Pending>)
where
    P: Fn(Command) -> F + Clone + Send + 'static,
    F: Future<Output = Result<CommandResult, ClusterError>> + Send,
{
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let mut bytes = weight(&first.command);
        let mut batch = vec![first];
        while batch.len() < MAX_COMMANDS && bytes < MAX_BYTES {
            match rx.try_recv() {
                Ok(p) => {
                    bytes += weight(&p.command);
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        let propose = propose.clone();
        let span = tracing::debug_span!("proposal_batch", commands = batch.len());
        tokio::spawn(
            async move {
                let _permit = permit;
                let (commands, replies): (Vec<Command>, Vec<_>) =
                    batch.into_iter().map(|p| (p.command, p.reply)).unzip();
                let results = if commands.len() == 1 {
                    let command = commands.into_iter().next();
                    match command {
                        Some(c) => vec![propose(c).await],
                        None => Vec::new(),
                    }
                } else {
                    let n = commands.len();
                    split(propose(Command::Batch(commands)).await, n)
                };
                for (reply, result) in replies.into_iter().zip(results) {
                    let _ = reply.send(result);
                }
            }
            .instrument(span),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::MetadataError;

    #[test]
    fn a_batch_outcome_gives_each_command_its_own_result() {
        let ok = Ok(Ok(Applied::Batch(vec![
            Ok(Applied::Done),
            Err(MetadataError::NestedBatch),
        ])));
        let parts = split(ok, 2);
        assert!(matches!(parts[0], Ok(Ok(Applied::Done))));
        assert!(matches!(parts[1], Ok(Err(MetadataError::NestedBatch))));
        let refused = split(Ok(Err(MetadataError::DollyPutExpired)), 3);
        assert_eq!(refused.len(), 3);
        assert!(refused
            .iter()
            .all(|r| matches!(r, Ok(Err(MetadataError::DollyPutExpired)))));
        let not_leader = split(
            Err(ClusterError::NotLeader {
                leader: Some(2),
                endpoints: None,
            }),
            2,
        );
        assert!(not_leader.iter().all(|r| matches!(
            r,
            Err(ClusterError::NotLeader {
                leader: Some(2),
                ..
            })
        )));
        // A wrong-sized answer is an error for everyone, never a misattributed result.
        let short = split(Ok(Ok(Applied::Batch(vec![Ok(Applied::Done)]))), 2);
        assert!(short
            .iter()
            .all(|r| matches!(r, Err(ClusterError::Write(_)))));
    }
}
