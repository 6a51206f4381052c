//! Idempotent producers on the write path (issue #18): the worker admits each idempotent
//! message through its fragment's [`Window`] before appending, rebuilds that window from the
//! log's tail when the log was opened, changed leader epoch or was cut back, and the reader
//! answers `PRODUCED` by reading the same tail. The decisions are in [`super::dedupe`]; this
//! module joins them to the batch and the log.

use std::sync::Arc;
use std::time::Instant;

use tracing::warn;
use zper_store::{StoreError, TopicLog};
use zper_wire::{AckMode, Status};

use crate::metrics::Counters;

use super::dedupe::{parse_id, Bounds, FragmentWindow, Verdict, Window};
use super::{Append, Producer};

/// Bytes of a fragment's newest messages read back to rebuild its window and to answer
/// `PRODUCED`: a message older than this is "too old to tell".
pub(crate) const SCAN_BYTES: u64 = 64 << 20;

/// The window of `log` for leader `epoch`, rebuilt from the log's tail when `slot` is empty
/// or was built for another epoch or before a truncation.
pub(crate) fn window<'a>(
    slot: &'a mut Option<FragmentWindow>,
    log: &TopicLog,
    epoch: u64,
    bounds: Bounds,
) -> &'a mut Window {
    let key = (epoch, log.truncations().unwrap_or(0));
    if slot.as_ref().is_none_or(|w| w.built_for != key) {
        *slot = Some(FragmentWindow {
            window: rebuild(log, bounds, Instant::now()),
            built_for: key,
        });
    }
    &mut slot.as_mut().expect("just filled").window
}

/// A window holding the idempotent messages of the newest [`SCAN_BYTES`] of `log`.
fn rebuild(log: &TopicLog, bounds: Bounds, now: Instant) -> Window {
    let mut w = Window::new(bounds);
    let from = log.written_end().unwrap_or(0).saturating_sub(SCAN_BYTES);
    let scanned = log.scan_tail(from, |m| {
        if let Some((pid, seq)) = parse_id(m.first_frame) {
            w.found(&pid, seq, m.end, now);
        }
    });
    if let Err(e) = scanned {
        // What was read before the error is kept: messages past it may be stored twice.
        warn!(topic = %log.name(), error = %e, "idempotent window rebuilt only in part");
    }
    w
}

/// One idempotent message that is not appended: answered from the window.
#[derive(Debug)]
pub(crate) struct NotAppended {
    pub(crate) producer: Arc<Producer>,
    pub(crate) message_id: Vec<u8>,
    pub(crate) outcome: Outcome,
}

/// How a message that is not appended is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A duplicate of the message ending here (`None`: not known): acknowledged once that
    /// is durable.
    Duplicate(Option<u64>),
    /// Refused: `[id][status]`, with the expected sequence for 106.
    Refused(Status, Option<u64>),
}

/// A run after admission: what to append, and what to answer without appending.
#[derive(Debug)]
pub(crate) struct Admitted {
    /// `None`: every message is kept, append the run as it came. `Some`: the kept bytes and
    /// their appends (`bytes_end` relative to these bytes, base 0).
    pub(crate) compacted: Option<(Vec<u8>, Vec<Append>)>,
    /// Messages taken out: answered from the window.
    pub(crate) not_appended: Vec<NotAppended>,
}

/// Admits the run `run` (its bytes `bytes` start at batch offset `base`): each message of an
/// idempotent producer (read from the records, so the front may join them into runs) that is
/// new is kept, duplicates and out-of-sequence ones are taken out, and so is one whose id is
/// not an idempotent producer's (102). Other producers' messages are kept as they are. When
/// all are kept (the common case) nothing is copied. `at` is the log offset the kept bytes
/// will be appended at: each new message's end is noted in the window as it is admitted (if
/// the append fails, the caller drops the window).
pub(crate) fn admit(
    window: &mut Window,
    run: &[Append],
    bytes: &[u8],
    base: usize,
    at: u64,
    now: Instant,
) -> Admitted {
    let mut not_appended = Vec::new();
    // Ranges (relative to `bytes`) of the messages taken out, in order, and their bytes.
    let mut dropped: Vec<(usize, usize)> = Vec::new();
    let mut dropped_bytes = 0;
    let mut start = 0;
    for a in run {
        let end = a.bytes_end - base;
        let run_start = start;
        start = end;
        if !a.producer.idempotent {
            continue;
        }
        for (range, message_id) in messages(&bytes[run_start..end], run_start) {
            let outcome = match parse_id(message_id) {
                None => Outcome::Refused(Status::InvalidCommand, None),
                Some((pid, seq)) => {
                    let end = at + (range.1 - dropped_bytes) as u64;
                    match window.admit_at(&pid, seq, now, Some(end)) {
                        Verdict::New => continue,
                        Verdict::Duplicate(end) => Outcome::Duplicate(end),
                        Verdict::OutOfSequence { expected } => {
                            Outcome::Refused(Status::OutOfSequence, Some(expected))
                        }
                    }
                }
            };
            dropped.push(range);
            dropped_bytes += range.1 - range.0;
            not_appended.push(NotAppended {
                producer: a.producer.clone(),
                message_id: message_id.to_vec(),
                outcome,
            });
        }
    }
    if dropped.is_empty() {
        return Admitted {
            compacted: None,
            not_appended,
        };
    }
    // Some were taken out: copy the rest, and move each taken end back by the bytes dropped
    // before it.
    let mut kept = Kept {
        bytes: Vec::with_capacity(bytes.len()),
        appends: Vec::with_capacity(run.len()),
    };
    let mut drops = dropped.iter().peekable();
    let mut start = 0;
    for a in run {
        let end = a.bytes_end - base;
        let slice = &bytes[start..end];
        let run_start = start;
        start = end;
        if !a.producer.idempotent {
            kept.keep(a, slice, a.messages, &a.last_id);
            continue;
        }
        for (range, message_id) in messages(slice, run_start) {
            let message = &bytes[range.0..range.1];
            if drops.peek() == Some(&&range) {
                drops.next();
                continue;
            }
            kept.keep(a, message, 1, message_id);
        }
    }
    Admitted {
        compacted: Some((kept.bytes, kept.appends)),
        not_appended,
    }
}

/// The whole messages of `slice` (stored records): each one's range, offset by `at`, and its
/// first frame (the message id).
fn messages(slice: &[u8], at: usize) -> impl Iterator<Item = ((usize, usize), &[u8])> {
    let mut records = zper_wire::Records::new(slice);
    let mut start = 0;
    std::iter::from_fn(move || {
        let mut id = None;
        let mut end = start;
        for rec in records.by_ref() {
            id.get_or_insert(rec.payload);
            end += rec.stored_len();
            if !rec.more {
                let range = (at + start, at + end);
                start = end;
                return Some((range, id.unwrap_or_default()));
            }
        }
        None
    })
}

/// The bytes and appends kept of a run some messages were taken out of.
struct Kept {
    bytes: Vec<u8>,
    appends: Vec<Append>,
}

impl Kept {
    /// Appends `bytes` (`messages` messages of `a`'s producer, the newest with id `last_id`):
    /// consecutive kept messages of one per-flush producer form one run (one waiter, its ack
    /// naming the newest), as the front joins them.
    fn keep(&mut self, a: &Append, bytes: &[u8], messages: u64, last_id: &[u8]) {
        self.bytes.extend_from_slice(bytes);
        let end = self.bytes.len();
        match self.appends.last_mut() {
            Some(last)
                if Arc::ptr_eq(&last.producer, &a.producer)
                    && a.producer.mode != AckMode::PerMessage =>
            {
                last.bytes_end = end;
                last.messages += messages;
                last.last_id.clear();
                last.last_id.extend_from_slice(last_id);
            }
            _ => self.appends.push(Append {
                producer: a.producer.clone(),
                bytes_end: end,
                messages,
                last_id: last_id.to_vec(),
            }),
        }
    }
}

/// What became of an idempotent message, as far as the newest [`SCAN_BYTES`] of a log tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// Stored at `start..end` (durable or not: the caller compares with the high-water mark).
    Stored { start: u64, end: u64 },
    /// Not stored: the producer's newest message in the log is an earlier one, or nothing of
    /// it is in a log read whole.
    NotStored,
    /// A later message of the producer is there but this one is not in what was read: it is
    /// older than the scan.
    Unknown,
}

/// Looks for message `id` (`[producer id:16][sequence:8]`) in the tail of `log`.
///
/// Errors: reading the log failed.
pub(crate) fn lookup(log: &TopicLog, id: &[u8; 24]) -> Result<Found, StoreError> {
    let Some((pid, seq)) = parse_id(id) else {
        return Ok(Found::Unknown);
    };
    let from = log.written_end()?.saturating_sub(SCAN_BYTES);
    let whole = from <= log.segment_starts()?.first().copied().unwrap_or(0);
    let (mut hit, mut earlier, mut later) = (None, false, false);
    log.scan_tail(from, |m| {
        if m.first_frame == id {
            hit.get_or_insert((m.start, m.end));
        } else if let Some((p, s)) = parse_id(m.first_frame) {
            earlier |= p == pid && s < seq;
            later |= p == pid && s > seq;
        }
    })?;
    // Sequences are stored in order: with a later message there and this one not, it is
    // older than what was read; with only earlier ones (or a log read whole), it is not
    // stored.
    Ok(match hit {
        Some((start, end)) => Found::Stored { start, end },
        None if later => Found::Unknown,
        None if earlier || whole => Found::NotStored,
        None => Found::Unknown,
    })
}

impl super::worker::Worker {
    /// Appends a run holding idempotent messages (issue #18): admits each through the
    /// fragment's window (rebuilt for leader `epoch` when needed), appends what is new, and
    /// answers duplicates with their first outcome (an ack once that message is durable) and
    /// gaps with 106.
    pub(super) fn append_idempotent(
        &mut self,
        topic: &Arc<str>,
        epoch: u64,
        run: &[Append],
        bytes: &[u8],
        base: usize,
    ) {
        let bounds = self.idempotence;
        let Some(work) = self.topic(topic) else {
            let messages = run.iter().map(|a| a.messages).sum();
            self.store_run(topic, run, bytes, base, messages);
            return;
        };
        let log = work.log.clone();
        // Where this run will be appended: the window notes each new message's end now.
        let at = log.written_end().unwrap_or(0);
        let admitted = admit(
            window(&mut work.window, &log, epoch, bounds),
            run,
            bytes,
            base,
            at,
            Instant::now(),
        );
        let appended = match &admitted.compacted {
            None => {
                let messages = run.iter().map(|a| a.messages).sum();
                Some(self.store_run(topic, run, bytes, base, messages))
            }
            Some((_, appends)) if appends.is_empty() => None,
            Some((kept, appends)) => {
                let messages = appends.iter().map(|a| a.messages).sum();
                Some(self.store_run(topic, appends, kept, 0, messages))
            }
        };
        let durable = if self.acks_leader {
            log.flushed_end()
        } else {
            log.visible_end()
        }
        .unwrap_or(0);
        let counters = self.counters.clone();
        let Some(work) = self.topics.get_mut(topic) else {
            return;
        };
        // The append failed, or went elsewhere than foreseen: the ends the window noted for
        // this run are wrong. Forget the window (rebuilt from the log on next use), and
        // answer duplicates of this run's messages with an error (they are sent again).
        let failed = appended.is_some_and(|start| start != Some(at));
        if failed {
            warn!(topic = %topic, "idempotent window dropped after a failed append");
            work.window = None;
        }
        let mut replies = Vec::new();
        for n in admitted.not_appended {
            let (status, expected) = match n.outcome {
                Outcome::Refused(status, expected) => (Some(status), expected),
                Outcome::Duplicate(end) => {
                    Counters::add(&counters.idempotent_duplicates, 1);
                    // A duplicate of a message of this run whose append failed: unknown.
                    let end = end.filter(|e| !failed || *e <= at);
                    match end {
                        // Its first copy was in this run and failed to append.
                        None => (Some(Status::InternalError), None),
                        Some(end) if end <= durable => (None, None),
                        Some(end) => {
                            match n.producer.mode {
                                AckMode::PerMessage => work.waiting.wait_per_message(
                                    &n.producer.routing_id,
                                    end,
                                    &n.message_id,
                                ),
                                _ => work.waiting.wait_per_flush_at_least(
                                    &n.producer.routing_id,
                                    end,
                                    &n.message_id,
                                ),
                            }
                            continue;
                        }
                    }
                }
            };
            if status == Some(Status::OutOfSequence) {
                Counters::add(&counters.out_of_sequence, 1);
            }
            if n.producer.mode == AckMode::None {
                continue;
            }
            let mut frames = super::acks::Reply {
                routing_id: n.producer.routing_id.clone(),
                envelope: n.producer.mode == AckMode::PerMessage,
                message_id: n.message_id,
                status,
            }
            .into_frames();
            if let Some(next) = expected {
                frames.push(next.to_be_bytes().to_vec());
            }
            replies.push(frames);
        }
        for frames in replies {
            let _ = self.acks.send_multipart(frames, 0);
        }
    }
}

/// The reader's answer to `PRODUCED message_id` (issue #18) from a client with reader
/// identity `identity`: looked up in the fragment a writer with that identity's UUID writes
/// to, on its leader. `[100][start][end]` stored and visible to readers (at or below the
/// high-water mark), `[101]` not stored, `[105]` stored but not yet durable, `[104]` not led
/// here, `[106]` too old to tell, `[0xFF]` the log could not be read.
pub(crate) fn produced(
    store: &zper_store::Store,
    view: Option<&crate::replication::PlacementView>,
    identity: &zper_wire::Identity,
    message_id: &[u8; 24],
) -> zper_wire::ReaderReply {
    use crate::replication::Role;
    use zper_wire::ReaderReply;
    let topic = identity.topic.as_str();
    let key = match view.map_or(1, |v| v.fragment_count(topic)) {
        n if n <= 1 => topic.to_owned(),
        n => match crate::replication::fragment_for(&identity.uuid, n) {
            0 => topic.to_owned(),
            k => zper_store::log_key(topic, k),
        },
    };
    if let Some(v) = view {
        if !matches!(v.role(&key), Role::Leader { .. } | Role::Local) {
            return ReaderReply::Status(Status::NotLeader);
        }
    }
    let Some(log) = store.topic(&key) else {
        return ReaderReply::Status(Status::InvalidOffset);
    };
    match lookup(&log, message_id) {
        Ok(Found::Stored { start, end }) if end <= log.visible_end().unwrap_or(0) => {
            ReaderReply::Offsets(vec![start, end])
        }
        Ok(Found::Stored { .. }) => ReaderReply::Status(Status::Unavailable),
        Ok(Found::NotStored) => ReaderReply::Status(Status::InvalidOffset),
        Ok(Found::Unknown) => ReaderReply::Status(Status::OutOfSequence),
        Err(e) => {
            warn!(topic = %key, error = %e, "PRODUCED lookup failed");
            ReaderReply::Status(Status::InternalError)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::produce::dedupe::{Bounds, Lookup, ProducerId};

    const P: ProducerId = zper_wire::idempotent::producer_id([5; 16]);

    fn producer(idempotent: bool) -> Arc<Producer> {
        Arc::new(Producer {
            routing_id: b"r".to_vec(),
            topic: Arc::from("t"),
            mode: AckMode::PerFlush,
            idempotent,
            worker: 0,
        })
    }

    /// `[id][body]` of sequence `seq`, encoded as stored.
    fn message(seq: u64, body: &[u8], out: &mut Vec<u8>) -> Vec<u8> {
        let mut id = P.to_vec();
        id.extend_from_slice(&seq.to_be_bytes());
        zper_wire::encode_record(&id, true, out);
        zper_wire::encode_record(body, false, out);
        id
    }

    #[test]
    fn a_run_of_new_messages_is_appended_as_it_came() {
        let mut w = Window::new(Bounds::default());
        let p = producer(true);
        let mut bytes = b"xx".to_vec(); // the batch before this run (base 2)
        for seq in 0..3 {
            message(seq, b"m", &mut bytes);
        }
        let run = [Append {
            producer: p,
            bytes_end: bytes.len(),
            messages: 3,
            last_id: vec![],
        }];
        let a = admit(&mut w, &run, &bytes[2..], 2, 1000, Instant::now());
        assert!(a.compacted.is_none(), "nothing copied");
        let len = ((bytes.len() - 2) / 3) as u64;
        let ends: Vec<Lookup> = (0..3).map(|seq| w.lookup(&P, seq)).collect();
        let end = |k: u64| Lookup::Stored {
            end: 1000 + k * len,
        };
        assert_eq!(
            ends,
            [end(1), end(2), end(3)],
            "where each will end in the log"
        );
        assert!(a.not_appended.is_empty());
    }

    #[test]
    fn duplicates_and_gaps_are_taken_out_and_the_rest_keeps_its_order_and_ends() {
        let mut w = Window::new(Bounds::default());
        let now = Instant::now();
        assert_eq!(w.admit(&P, 0, now), Verdict::New);
        w.stored(&P, 0, 10);
        let (idem, plain) = (producer(true), producer(false));
        // Run 1 (idempotent): 0 (duplicate), 1, 5 (gap), 2. Run 2 (plain): one message.
        let mut bytes = Vec::new();
        message(0, b"dup", &mut bytes);
        let one_at = bytes.len();
        message(1, b"a", &mut bytes);
        let one_end = bytes.len();
        message(5, b"gap", &mut bytes);
        let two_at = bytes.len();
        let two = message(2, b"b", &mut bytes);
        let run1_end = bytes.len();
        zper_wire::encode_record(b"plain", false, &mut bytes);
        let run = [
            Append {
                producer: idem.clone(),
                bytes_end: run1_end,
                messages: 4,
                last_id: two.clone(),
            },
            Append {
                producer: plain,
                bytes_end: bytes.len(),
                messages: 1,
                last_id: b"plain".to_vec(),
            },
        ];
        let a = admit(&mut w, &run, &bytes, 0, 500, now);
        let (kept, appends) = a.compacted.expect("copied without the two");
        let mut expected = bytes[one_at..one_end].to_vec();
        expected.extend_from_slice(&bytes[two_at..]);
        assert_eq!(kept, expected);
        let shape: Vec<(usize, u64, Vec<u8>)> = appends
            .iter()
            .map(|a| (a.bytes_end, a.messages, a.last_id.clone()))
            .collect();
        let first_run = one_end - one_at + run1_end - two_at;
        assert_eq!(
            shape,
            [(first_run, 2, two), (kept.len(), 1, b"plain".to_vec())]
        );
        let at = |k: usize| Lookup::Stored {
            end: 500 + k as u64,
        };
        assert_eq!(
            w.lookup(&P, 1),
            at(one_end - one_at),
            "ends in the bytes kept"
        );
        assert_eq!(w.lookup(&P, 2), at(first_run));
        let outcomes: Vec<Outcome> = a.not_appended.iter().map(|n| n.outcome).collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Duplicate(Some(10)),
                Outcome::Refused(Status::OutOfSequence, Some(2))
            ]
        );
    }
}
