//! Answers for producers whose messages are not stored (issue #4, #13): a status instead of an
//! ack, in the writer reply layout of `zper.md` §4.5 (mode 1 `[id][status]`, mode 2
//! `[empty][id][status]`); below `min_insync`, acked messages are refused with 103 while
//! fire-and-forget ones are still stored.

use std::sync::Arc;

use tracing::error;
use zper_wire::AckMode;

use super::worker::Worker;
use super::Append;
use crate::metrics::Counters;

impl Worker {
    /// Counts `runs` as append errors and refuses each with `status`.
    pub(super) fn refuse_all(&self, runs: &[Append], status: u8) {
        for a in runs {
            Counters::add(&self.counters.append_errors, a.messages);
            self.refuse(a, status);
        }
    }

    /// Answers a producer that waits for acks with `status` instead of an ack: mode 1
    /// `[message id][status]`, mode 2 `[empty][message id][status]`; mode 0 gets nothing.
    pub(super) fn refuse(&self, a: &Append, status: u8) {
        let reply = match a.producer.mode {
            AckMode::None => return,
            AckMode::PerMessage => vec![
                a.producer.routing_id.clone(),
                Vec::new(),
                a.last_id.clone(),
                vec![status],
            ],
            AckMode::PerFlush => vec![
                a.producer.routing_id.clone(),
                a.last_id.clone(),
                vec![status],
            ],
        };
        let _ = self.acks.send_multipart(reply, 0);
    }

    /// Below `min_insync`: producers that wait for acks get status 103 instead and their
    /// messages are not stored; fire-and-forget (mode 0) messages are stored as usual.
    pub(super) fn refuse_acked(
        &mut self,
        topic: &Arc<str>,
        epoch: u64,
        run: &[Append],
        bytes: &[u8],
        base: usize,
    ) {
        let mut kept = Vec::new();
        let mut kept_appends = Vec::new();
        let mut start = base;
        for a in run {
            let slice = &bytes[start - base..a.bytes_end - base];
            match a.producer.mode {
                AckMode::None => {
                    kept.extend_from_slice(slice);
                    kept_appends.push(Append {
                        producer: a.producer.clone(),
                        bytes_end: base + kept.len(),
                        messages: a.messages,
                        last_id: a.last_id.clone(),
                    });
                }
                _ => {
                    Counters::add(&self.counters.not_enough_replicas, a.messages);
                    self.refuse(a, zper_wire::WRITER_NOT_ENOUGH_REPLICAS);
                }
            }
            start = a.bytes_end;
        }
        if !kept.is_empty() {
            let messages = kept_appends.iter().map(|a| a.messages).sum();
            // The view still says leader with too few in sync: append as leader (no acks wait).
            let Some(work) = self.topic(topic) else {
                Counters::add(&self.counters.append_errors, messages);
                return;
            };
            let appended = crate::replication::claim_epoch(&work.log, epoch)
                .and_then(|()| work.log.append(&kept));
            match appended {
                Ok(end) => {
                    if let Some(last) = kept_appends.last() {
                        work.notice_ids.appended(end, &last.last_id);
                    }
                    Counters::add(&self.counters.messages_stored, messages);
                    Counters::add(&self.counters.bytes_stored, kept.len() as u64);
                }
                Err(e) => {
                    error!(topic = %topic, error = %e, "append failed");
                    Counters::add(&self.counters.append_errors, messages);
                }
            }
        }
    }
}
