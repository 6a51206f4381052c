//! The writer's ack book: which producers wait for which offset, and which replies are due.
//! A pure core (no sockets, no clocks), tested on its own; the worker sends what it returns.
//!
//! The promise (issue #13, "an ack is a promise"): a message is acknowledged only
//! once the offset it ends at is durable, on this node and (replicated topics) on every in-sync
//! replica with at least `min_insync` of them, that is at or below the high-water mark. When
//! that cannot hold, waiters are answered with a status instead (`zper.md` §4.5 frames; issue
//! #4 statuses): 104 when this node stopped leading or its log was cut back under them, 103
//! when fewer than `min_insync` replicas are in sync.

use std::collections::HashMap;

use zper_wire::Status;

/// A producer waiting for its message ending at `end` to be durable.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Waiter {
    end: u64,
    message_id: Vec<u8>,
}

/// One reply for a producer: an ack, or a refusal with a status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    /// The producer connection's routing id.
    pub(crate) routing_id: Vec<u8>,
    /// Mode 2 (REQ): the reply carries the empty envelope frame.
    pub(crate) envelope: bool,
    /// The id (first frame) of the message answered for.
    pub(crate) message_id: Vec<u8>,
    /// `None` for an ack, else the refusal.
    pub(crate) status: Option<Status>,
}

impl Reply {
    /// The ROUTER frames: `[routing id]([empty])[message id]([status])`.
    pub(crate) fn into_frames(self) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(4);
        out.push(self.routing_id);
        if self.envelope {
            out.push(Vec::new());
        }
        out.push(self.message_id);
        if let Some(s) = self.status {
            out.push(vec![s.byte()]);
        }
        out
    }
}

/// What the worker knows about a topic when it settles its waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Facts {
    /// This node may acknowledge writes of the topic (it leads it, or there is no cluster).
    pub(crate) leads: bool,
    /// The log was cut back since the waiters started waiting.
    pub(crate) truncated: bool,
    /// Offset durable where acks require it (the high-water mark, or the local flush with
    /// `acks = leader`), when it moved past what was last announced; `None` when it did not.
    pub(crate) advanced_to: Option<u64>,
    /// Replicated and led here: (replicas in sync, `min_insync` required); `None` otherwise or
    /// with `acks = leader`.
    pub(crate) in_sync: Option<(u64, u64)>,
}

/// The producers of one topic waiting for acks. Mode 1 keeps the newest message per
/// connection (one ack covers a connection's earlier messages); mode 2 keeps every message in
/// append order.
#[derive(Debug, Default)]
pub(crate) struct AckBook {
    per_flush: HashMap<Vec<u8>, Waiter>,
    per_message: Vec<(Vec<u8>, Waiter)>,
}

impl AckBook {
    /// True when a producer waits.
    pub(crate) fn has_waiters(&self) -> bool {
        !self.per_flush.is_empty() || !self.per_message.is_empty()
    }

    /// Producers (mode 1 connections and mode 2 messages) waiting.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> u64 {
        (self.per_flush.len() + self.per_message.len()) as u64
    }

    /// Mode 1: connection `routing_id` waits for `message_id` ending at `end` (replacing its
    /// older message: the newer ack covers it).
    pub(crate) fn wait_per_flush(&mut self, routing_id: &[u8], end: u64, message_id: &[u8]) {
        self.per_flush.insert(
            routing_id.to_vec(),
            Waiter {
                end,
                message_id: message_id.to_vec(),
            },
        );
    }

    /// Mode 1, a duplicate of an idempotent producer (issue #18): waits for `message_id`
    /// ending at `end` unless the connection already waits for a message ending later (whose
    /// ack covers this one: an idempotent producer's messages are stored in sequence order).
    pub(crate) fn wait_per_flush_at_least(
        &mut self,
        routing_id: &[u8],
        end: u64,
        message_id: &[u8],
    ) {
        if self.per_flush.get(routing_id).is_none_or(|w| w.end <= end) {
            self.wait_per_flush(routing_id, end, message_id);
        }
    }

    /// Mode 2: `message_id` of `routing_id` ending at `end` waits for its own reply.
    pub(crate) fn wait_per_message(&mut self, routing_id: &[u8], end: u64, message_id: &[u8]) {
        self.per_message.push((
            routing_id.to_vec(),
            Waiter {
                end,
                message_id: message_id.to_vec(),
            },
        ));
    }

    /// The replies due now, in order: refusals (104) when the node cannot answer for the
    /// waiters any more, acks of everything ending at or below a durable offset that moved,
    /// then refusals (103) of what still waits when fewer than `min_insync` replicas are in
    /// sync (the high-water mark cannot move, so nothing more can be promised).
    pub(crate) fn settle(&mut self, facts: Facts) -> Vec<Reply> {
        let mut out = Vec::new();
        if self.has_waiters() && (!facts.leads || facts.truncated) {
            out.extend(self.refuse_all(Status::NotLeader));
        }
        if let Some(durable) = facts.advanced_to {
            out.extend(self.acks_due(durable));
        }
        if let Some((in_sync, required)) = facts.in_sync {
            if self.has_waiters() && in_sync < required {
                out.extend(self.refuse_all(Status::NotEnoughReplicas));
            }
        }
        out
    }

    /// Acks of every waiter whose message ends at or below `durable`, forgotten once returned.
    pub(crate) fn acks_due(&mut self, durable: u64) -> Vec<Reply> {
        let mut out = Vec::new();
        self.per_flush.retain(|routing_id, w| {
            if w.end > durable {
                return true;
            }
            out.push(Reply {
                routing_id: routing_id.clone(),
                envelope: false,
                message_id: std::mem::take(&mut w.message_id),
                status: None,
            });
            false
        });
        let done = self.per_message.partition_point(|(_, w)| w.end <= durable);
        out.extend(self.per_message.drain(..done).map(|(routing_id, w)| Reply {
            routing_id,
            envelope: true,
            message_id: w.message_id,
            status: None,
        }));
        out
    }

    /// Refusals with `status` for every waiter, forgotten once returned.
    pub(crate) fn refuse_all(&mut self, status: Status) -> Vec<Reply> {
        let flush = self.per_flush.drain().map(|(routing_id, w)| Reply {
            routing_id,
            envelope: false,
            message_id: w.message_id,
            status: Some(status),
        });
        let message = self.per_message.drain(..).map(|(routing_id, w)| Reply {
            routing_id,
            envelope: true,
            message_id: w.message_id,
            status: Some(status),
        });
        flush.chain(message).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEADS: Facts = Facts {
        leads: true,
        truncated: false,
        advanced_to: None,
        in_sync: None,
    };

    fn ids(replies: &[Reply]) -> Vec<(&[u8], Option<Status>)> {
        let mut v: Vec<_> = replies
            .iter()
            .map(|r| (r.message_id.as_slice(), r.status))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn an_ack_waits_for_the_durable_offset_to_reach_its_end() {
        let mut book = AckBook::default();
        book.wait_per_message(b"p", 100, b"m1");
        book.wait_per_message(b"p", 200, b"m2");
        let facts = |d| Facts {
            advanced_to: Some(d),
            ..LEADS
        };
        assert!(
            book.settle(facts(99)).is_empty(),
            "one byte short is not durable"
        );
        assert_eq!(ids(&book.settle(facts(100))), [(&b"m1"[..], None)]);
        assert_eq!(ids(&book.settle(facts(250))), [(&b"m2"[..], None)]);
        assert!(!book.has_waiters());
    }

    #[test]
    fn a_mode_1_ack_names_the_newest_message_of_the_connection() {
        let mut book = AckBook::default();
        book.wait_per_flush(b"c", 10, b"a");
        book.wait_per_flush(b"c", 20, b"b");
        book.wait_per_flush(b"d", 30, b"x");
        assert_eq!(book.waiting(), 2);
        let replies = book.acks_due(25);
        assert_eq!(
            replies,
            [Reply {
                routing_id: b"c".to_vec(),
                envelope: false,
                message_id: b"b".to_vec(),
                status: None,
            }]
        );
        assert_eq!(
            replies[0].clone().into_frames(),
            [b"c".to_vec(), b"b".to_vec()]
        );
    }

    #[test]
    fn mode_2_replies_carry_the_envelope_and_keep_append_order() {
        let mut book = AckBook::default();
        for (i, id) in [b"1", b"2", b"3"].iter().enumerate() {
            book.wait_per_message(b"r", (i as u64 + 1) * 10, *id);
        }
        let replies = book.acks_due(30);
        let order: Vec<&[u8]> = replies.iter().map(|r| r.message_id.as_slice()).collect();
        assert_eq!(order, [&b"1"[..], b"2", b"3"]);
        assert_eq!(
            replies[0].clone().into_frames(),
            [b"r".to_vec(), vec![], b"1".to_vec()]
        );
    }

    #[test]
    fn below_min_insync_what_waits_is_refused_with_103_and_nothing_is_acked() {
        let mut book = AckBook::default();
        book.wait_per_flush(b"c", 10, b"a");
        book.wait_per_message(b"r", 20, b"b");
        // The high-water mark did not move (one replica in sync, two required).
        let replies = book.settle(Facts {
            in_sync: Some((1, 2)),
            ..LEADS
        });
        assert_eq!(
            ids(&replies),
            [
                (&b"a"[..], Some(Status::NotEnoughReplicas)),
                (&b"b"[..], Some(Status::NotEnoughReplicas))
            ]
        );
        assert_eq!(
            replies
                .iter()
                .find(|r| r.envelope)
                .map(|r| r.clone().into_frames()),
            Some(vec![b"r".to_vec(), vec![], b"b".to_vec(), vec![103]])
        );
        assert!(!book.has_waiters());
    }

    #[test]
    fn at_min_insync_the_hw_move_acks_and_what_is_above_it_keeps_waiting() {
        let mut book = AckBook::default();
        book.wait_per_message(b"r", 10, b"in");
        book.wait_per_message(b"r", 20, b"above");
        let replies = book.settle(Facts {
            advanced_to: Some(15),
            in_sync: Some((2, 2)),
            ..LEADS
        });
        assert_eq!(ids(&replies), [(&b"in"[..], None)]);
        assert_eq!(
            book.waiting(),
            1,
            "above the high-water mark: still waiting"
        );
    }

    #[test]
    fn the_hw_moving_while_the_isr_shrinks_acks_what_it_covers_then_refuses_the_rest() {
        let mut book = AckBook::default();
        book.wait_per_message(b"r", 10, b"covered");
        book.wait_per_message(b"r", 20, b"not");
        let replies = book.settle(Facts {
            advanced_to: Some(10),
            in_sync: Some((1, 2)),
            ..LEADS
        });
        assert_eq!(
            ids(&replies),
            [
                (&b"covered"[..], None),
                (&b"not"[..], Some(Status::NotEnoughReplicas))
            ]
        );
    }

    #[test]
    fn a_node_that_stops_leading_or_is_cut_back_answers_104_never_an_ack() {
        for facts in [
            Facts {
                leads: false,
                advanced_to: Some(100),
                ..LEADS
            },
            Facts {
                truncated: true,
                advanced_to: Some(100),
                ..LEADS
            },
        ] {
            let mut book = AckBook::default();
            book.wait_per_flush(b"c", 10, b"a");
            assert_eq!(
                ids(&book.settle(facts)),
                [(&b"a"[..], Some(Status::NotLeader))],
                "{facts:?}"
            );
        }
    }

    #[test]
    fn nothing_waits_nothing_is_sent() {
        let mut book = AckBook::default();
        assert!(book
            .settle(Facts {
                leads: false,
                truncated: true,
                advanced_to: Some(5),
                in_sync: Some((0, 2)),
            })
            .is_empty());
    }
}
