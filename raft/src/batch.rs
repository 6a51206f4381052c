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

/// Where a proposal's result goes.
type Reply = oneshot::Sender<Result<CommandResult, ClusterError>>;

/// One proposal waiting for its batch.
pub(crate) struct Pending {
    command: Command,
    /// Forwarded to this node by a follower: written here or refused, never forwarded again.
    forwarded: bool,
    reply: Reply,
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
        self.queue(command, false).await
    }

    /// Queues `command`, forwarded to this (leading) node by a follower: the entry that carries
    /// it is written here or not at all. Should this node have lost the lead by then, it is
    /// answered `NotLeader` (and the follower tries the new leader itself) rather than forwarded
    /// a second time, where it could be in flight twice.
    pub(crate) async fn propose_forwarded(
        &self,
        command: Command,
    ) -> Result<CommandResult, ClusterError> {
        self.queue(command, true).await
    }

    async fn queue(
        &self,
        command: Command,
        forwarded: bool,
    ) -> Result<CommandResult, ClusterError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Pending {
                command,
                forwarded,
                reply,
            })
            .await
            .map_err(|_| ClusterError::Write("the proposer stopped".into()))?;
        answer
            .await
            .map_err(|_| ClusterError::Write("the proposer dropped the proposal".into()))?
    }
}

/// How many commands `c` brings to a batch: a forwarded batch brings each of its own.
fn count(c: &Command) -> usize {
    match c {
        Command::Batch(commands) => commands.len(),
        _ => 1,
    }
}

/// Bytes `c` adds to a batch ([`weight`] of each command of a forwarded batch).
fn bytes(c: &Command) -> usize {
    match c {
        Command::Batch(commands) => commands.iter().map(weight).sum(),
        other => weight(other),
    }
}

/// Each waiter's own result from the outcome of the one entry that carried all their
/// commands, in order: a waiter that proposed a batch (one forwarded by a follower) gets the
/// results of its commands as one [`Applied::Batch`], the others their command's result.
fn answers(
    outcome: Result<CommandResult, ClusterError>,
    sizes: &[(usize, bool)],
) -> Vec<Result<CommandResult, ClusterError>> {
    let total = sizes.iter().map(|(n, _)| n).sum();
    let mut each = split(outcome, total).into_iter();
    sizes
        .iter()
        .map(|&(n, grouped)| {
            let mine: Vec<_> = each.by_ref().take(n).collect();
            if !grouped {
                return mine.into_iter().next().unwrap_or_else(|| {
                    Err(ClusterError::Write("a batch answer was missing".into()))
                });
            }
            mine.into_iter()
                .collect::<Result<Vec<CommandResult>, ClusterError>>()
                .map(|results| Ok(Applied::Batch(results)))
        })
        .collect()
}

/// The commands of `batch` in one list, a forwarded [`Command::Batch`] taken apart; with each
/// waiter's share of it ([`answers`]) and reply, in the same order.
fn merge(batch: Vec<Pending>) -> (Vec<Command>, Vec<(usize, bool)>, Vec<Reply>) {
    let mut all = Vec::new();
    let mut sizes = Vec::with_capacity(batch.len());
    let mut replies = Vec::with_capacity(batch.len());
    for p in batch {
        match p.command {
            Command::Batch(inner) => {
                sizes.push((inner.len(), true));
                all.extend(inner);
            }
            other => {
                sizes.push((1, false));
                all.push(other);
            }
        }
        replies.push(p.reply);
    }
    (all, sizes, replies)
}

/// The proposer loop: takes what is queued (up to the limits) once a batch may go, proposes it
/// through `propose(entry, here_only)` and answers each waiter.
///
/// A queued [`Command::Batch`] (a follower's batch forwarded to this leader) is merged command
/// by command into the entry, so the leader writes one entry for its own proposals and every
/// follower's (issue #16: openraft 0.9 writes and fsyncs each entry before the next, so
/// entries, not commands, bound the rate).
///
/// `here_only` is true when the entry carries a forwarded proposal: the node then writes it
/// only if it still leads (its `write`); otherwise anywhere (its `propose_now`, which forwards
/// to the leader). Should the node have lost the lead, its own proposals in such an entry are
/// answered `NotLeader` as well. Ends when every sender is gone.
pub(crate) async fn run<P, F>(propose: P, mut rx: mpsc::Receiver<Pending>)
where
    P: Fn(Command, bool) -> F + Clone + Send + 'static,
    F: Future<Output = Result<CommandResult, ClusterError>> + Send,
{
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    // A proposal that did not fit the batch before: it starts the next one.
    let mut carried: Option<Pending> = None;
    loop {
        let first = match carried.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let (mut commands, mut weight_sum) = (count(&first.command), bytes(&first.command));
        let mut batch = vec![first];
        while let Ok(p) = rx.try_recv() {
            let (n, w) = (count(&p.command), bytes(&p.command));
            if commands + n > MAX_COMMANDS || weight_sum + w > MAX_BYTES {
                carried = Some(p);
                break;
            }
            commands += n;
            weight_sum += w;
            batch.push(p);
        }
        let propose = propose.clone();
        let span = tracing::debug_span!("proposal_batch", commands, proposals = batch.len());
        tokio::spawn(
            async move {
                let _permit = permit;
                let here_only = batch.iter().any(|p| p.forwarded);
                if batch.len() == 1 {
                    // One proposal (a command, or a forwarded batch) goes as it came.
                    for p in batch {
                        let _ = p.reply.send(propose(p.command, here_only).await);
                    }
                    return;
                }
                let (all, sizes, replies) = merge(batch);
                let outcome = propose(Command::Batch(all), here_only).await;
                for (reply, result) in replies.into_iter().zip(answers(outcome, &sizes)) {
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

    /// A command that names itself in its key, so an answer shows whose it was.
    fn put(key: &str) -> Command {
        Command::DollyPut {
            key: key.as_bytes().to_vec(),
            value: Vec::new(),
            request: None,
            deadline_ms: u64::MAX,
        }
    }

    #[tokio::test]
    async fn a_forwarded_batch_joins_the_leaders_entry_and_gets_its_own_results_back() {
        let (proposer, rx) = Proposer::start();
        let entries = Arc::new(std::sync::Mutex::new(Vec::new()));
        // A fake leader: every command's result is a sequence, its position in the entry.
        let seen = entries.clone();
        let fake = move |c: Command, here_only: bool| {
            let seen = seen.clone();
            async move {
                let n = count(&c);
                seen.lock().expect("lock").push((c, here_only));
                let results = (0..n as u64)
                    .map(|sequence| Ok(Applied::DollyPut { sequence }))
                    .collect();
                Ok(Ok(Applied::Batch(results)))
            }
        };
        // Queued before the loop runs: they all wait at the same moment.
        let waiters = vec![
            tokio::spawn({
                let p = proposer.clone();
                async move { p.propose(put("own-0")).await }
            }),
            tokio::spawn({
                let p = proposer.clone();
                async move {
                    p.propose_forwarded(Command::Batch(vec![put("f-1"), put("f-2")]))
                        .await
                }
            }),
            tokio::spawn({
                let p = proposer.clone();
                async move { p.propose(put("own-3")).await }
            }),
        ];
        tokio::task::yield_now().await;
        drop(proposer);
        tokio::spawn(run(fake, rx));
        let mut got = Vec::new();
        for w in waiters {
            got.push(w.await.expect("join").expect("answered"));
        }
        let entries = entries.lock().expect("lock").clone();
        assert_eq!(entries.len(), 1, "one entry for all three: {entries:?}");
        let (Command::Batch(inner), here_only) = &entries[0] else {
            panic!("not a batch: {:?}", entries[0]);
        };
        assert!(
            here_only,
            "an entry with a forwarded proposal is never forwarded again"
        );
        assert_eq!(
            inner.len(),
            4,
            "the forwarded batch is merged command by command"
        );
        let seq = |r: &CommandResult| match r {
            Ok(Applied::DollyPut { sequence }) => *sequence,
            other => panic!("{other:?}"),
        };
        // Each waiter gets the results at its own place in the entry.
        let order: Vec<u64> = inner
            .iter()
            .map(|c| match c {
                Command::DollyPut { key, .. } => u64::from(key[key.len() - 1] - b'0'),
                other => panic!("{other:?}"),
            })
            .collect();
        let pos = |k: u64| order.iter().position(|o| *o == k).expect("in the entry") as u64;
        assert_eq!(seq(&got[0]), pos(0));
        let Ok(Applied::Batch(forwarded)) = &got[1] else {
            panic!("the forwarded batch is answered as a batch: {:?}", got[1]);
        };
        assert_eq!(
            forwarded.iter().map(seq).collect::<Vec<_>>(),
            vec![pos(1), pos(2)]
        );
        assert_eq!(seq(&got[2]), pos(3));
    }
}
