//! `ACK`: refill the stream's window and commit the group's offset through Raft, one proposal
//! in flight per (group, subscriber, fragment) (`pirius.md` §16.2).

use std::time::Instant;

use tracing::debug;
use zper_raft::metadata::Command;
use zper_wire::relay::{AckRequest, RelayReply};

use super::window::OnAck;
use super::{refusal, CommitDone, CommitKey, Relay, COMMIT_RETRY};
use crate::metrics::Counters;

impl Relay {
    pub(super) fn ack(&mut self, routing_id: &[u8], a: AckRequest) {
        // Only what this connection's stream pushed can be acknowledged: an offset inside a
        // message, past the high-water mark or never delivered would make the group skip
        // records or resume mid-message.
        let refusal =
            match self
                .streams
                .get_mut(&(routing_id.to_vec(), a.topic.clone(), a.fragment))
            {
                None => Some(format!(
                    "ACK of fragment {}: no stream of it on this connection (send STREAM first)",
                    a.fragment
                )),
                Some(s) if s.group != a.group || s.subscriber != a.subscriber => Some(format!(
                    "ACK names {}/{} but the stream is {}/{}",
                    a.group, a.subscriber, s.group, s.subscriber
                )),
                Some(s) if !s.window.ackable(a.offset) => Some(format!(
                    "ACK offset {} is not the start or end of a message pushed on this stream",
                    a.offset
                )),
                Some(s) => {
                    s.window.acked(a.offset);
                    None
                }
            };
        if let Some(reason) = refusal {
            Counters::add(&self.ctx.counters.relay.bad_request, 1);
            let _ = self.send(routing_id, RelayReply::Error(reason));
            return;
        }
        let key = (a.topic, a.group, a.subscriber, a.fragment);
        let c = self.commits.entry(key.clone()).or_default();
        if let OnAck::Confirm(offset) = c.ack(routing_id, a.offset) {
            // Already committed (a repeated ack): confirm at once.
            let _ = self.send(
                routing_id,
                RelayReply::Acked {
                    topic: key.0,
                    fragment: key.3,
                    offset,
                },
            );
            return;
        }
        self.start_commit(&key);
    }

    pub(super) fn start_commit(&mut self, key: &CommitKey) {
        let Some(c) = self.commits.get_mut(key) else {
            return;
        };
        let Some(offset) = c.propose(Instant::now()) else {
            return;
        };
        let (cluster, tx, key) = (self.ctx.cluster.clone(), self.done_tx.clone(), key.clone());
        let command = Command::CommitOffset {
            topic: key.0.clone(),
            group: key.1.clone(),
            subscriber: key.2.clone(),
            fragment: key.3,
            offset,
        };
        self.ctx.runtime.spawn(async move {
            let result = match cluster.propose(command).await {
                Ok(Ok(_)) => Ok(Ok(())),
                Ok(Err(e)) => Ok(Err(refusal(&e))),
                Err(e) => Err(e.to_string()),
            };
            let _ = tx.post(CommitDone {
                key,
                offset,
                result,
            });
        });
    }

    pub(super) fn settle_commits(&mut self) {
        let done: Vec<CommitDone> = self.mailbox.drain();
        for d in done {
            let Some(c) = self.commits.get_mut(&d.key) else {
                continue;
            };
            let routing_id = c.routing_id.clone();
            match d.result {
                Ok(Ok(())) => {
                    c.committed(d.offset);
                    Counters::add(&self.ctx.counters.relay.commit_ok, 1);
                    let _ = self.send(
                        &routing_id,
                        RelayReply::Acked {
                            topic: d.key.0.clone(),
                            fragment: d.key.3,
                            offset: d.offset,
                        },
                    );
                    self.start_commit(&d.key);
                }
                Ok(Err(reason)) => {
                    // Not this subscriber's (any more): end its stream; forget the commit.
                    self.commits.remove(&d.key);
                    let (topic, fragment) = (d.key.0.clone(), d.key.3);
                    self.streams.retain(|(_, t, f), s| {
                        !(*t == topic && *f == fragment && s.subscriber == d.key.2)
                    });
                    Counters::add(&self.ctx.counters.relay.revoked, 1);
                    let _ = self.send(
                        &routing_id,
                        RelayReply::Revoked {
                            topic,
                            fragment,
                            reason,
                        },
                    );
                }
                Err(e) => {
                    debug!(error = %e, "commit not proposed; retrying");
                    c.retry(Instant::now() + COMMIT_RETRY);
                }
            }
        }
        // Commits waiting for a retry.
        let now = Instant::now();
        let due: Vec<CommitKey> = self
            .commits
            .iter()
            .filter(|(_, c)| c.retry_due(now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.start_commit(&key);
        }
        if self.commits.len() > 100_000 {
            self.commits.retain(|_, c| !c.settled());
        }
    }
}
