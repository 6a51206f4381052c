//! `STREAM`: push one fragment of this node's copy in batches up to the high-water mark, within
//! the subscriber's window, and end streams whose fragment is no longer the subscriber's.

use std::time::{Duration, Instant};

use tracing::warn;
use zper_store::{log_key, StoreError};
use zper_wire::relay::{RelayReply, StreamRequest};

use super::window::Window;
use super::{
    message_start, Ownership, Pumped, Relay, Sent, Stream, StreamKey, BATCH_BYTES, HEARTBEAT,
};
use crate::metrics::Counters;

impl Relay {
    pub(super) fn stream(&mut self, routing_id: &[u8], s: StreamRequest) {
        let _span =
            tracing::debug_span!("relay_stream", topic = %s.topic, fragment = s.fragment).entered();
        // A fragment this node holds no copy of cannot be served here.
        let me = self.ctx.cluster.id;
        let held = self
            .ctx
            .cluster
            .state
            .with_metadata(|m| {
                m.topics.get(&s.topic).map(|t| {
                    t.fragments
                        .iter()
                        .any(|f| f.id == s.fragment && f.replicas.contains(&me))
                })
            })
            .flatten();
        if held != Some(true) {
            let reason = match held {
                None => "unknown topic".to_owned(),
                Some(_) => format!("node {me} holds no copy of fragment {}", s.fragment),
            };
            Counters::add(&self.ctx.counters.relay.revoked, 1);
            let _ = self.send(
                routing_id,
                RelayReply::Revoked {
                    topic: s.topic,
                    fragment: s.fragment,
                    reason,
                },
            );
            return;
        }
        // Offsets before the oldest segment (retention) start at the oldest record.
        let mut next = s.offset;
        if let Some(log) = self.ctx.store.topic(&log_key(&s.topic, s.fragment)) {
            if let Ok(starts) = log.segment_starts() {
                if let Some(first) = starts.first() {
                    next = next.max(*first);
                }
            }
        }
        // Never below what the group acknowledged (delivered once, done); the committed offset
        // is a message start, so it needs no check.
        let committed = self.committed(&s.topic, &s.group, &s.subscriber, s.fragment);
        let verified = next <= committed;
        next = next.max(committed);
        Counters::add(&self.ctx.counters.relay.stream_started, 1);
        self.streams.insert(
            (routing_id.to_vec(), s.topic.clone(), s.fragment),
            Stream {
                group: s.group,
                subscriber: s.subscriber,
                next,
                verified,
                max_batch: s.max_batch,
                flush_ms: s.flush_ms,
                window: Window::new(s.window, next),
                revision: s.revision,
                log: None,
                partial: None,
                stalled: false,
                last_sent: Instant::now(),
            },
        );
    }

    /// Pushes what every stream may send; true when anything was sent (or a partial batch
    /// waits for its flush time).
    pub(super) fn pump_all(&mut self) -> bool {
        // Streams paused on a full window are skipped without work (an ACK reopens them).
        let keys: Vec<StreamKey> = self
            .streams
            .iter()
            .filter(|(_, s)| !(s.stalled && s.window.full()))
            .map(|(k, _)| k.clone())
            .collect();
        let mut busy = false;
        for key in keys {
            // Several batches per turn when the subscriber keeps up.
            for _ in 0..16 {
                match self.pump(&key) {
                    Pumped::Sent => busy = true,
                    Pumped::Idle => break,
                    Pumped::Drop => {
                        self.streams.remove(&key);
                        break;
                    }
                }
            }
        }
        busy
    }

    pub(super) fn pump(&mut self, key: &StreamKey) -> Pumped {
        let (routing_id, topic, fragment) = key;
        let Some(s) = self.streams.get_mut(key) else {
            return Pumped::Idle;
        };
        if s.window.full() {
            if !s.stalled {
                s.stalled = true;
                Counters::add(&self.ctx.counters.relay.window_full, 1);
            }
            return Pumped::Idle;
        }
        s.stalled = false;
        if s.log.is_none() {
            s.log = self.ctx.store.topic(&log_key(topic, *fragment));
        }
        let Some(log) = s.log.clone() else {
            return Pumped::Idle; // this copy has nothing yet
        };
        let Ok(end) = log.visible_end() else {
            return Pumped::Idle;
        };
        if end <= s.next {
            s.partial = None;
            return Pumped::Idle;
        }
        if !s.verified {
            // The STREAM offset is past the committed one: walk there message by message.
            let (group, subscriber, target) = (s.group.clone(), s.subscriber.clone(), s.next);
            let from = self.committed(topic, &group, &subscriber, *fragment);
            match message_start(&log, from, target) {
                Ok(true) => {
                    if let Some(s) = self.streams.get_mut(key) {
                        s.verified = true;
                    }
                }
                Ok(false) | Err(_) => {
                    let reason = format!(
                        "STREAM offset {target} is not the start of a message of fragment {fragment} at or after the committed offset {from}"
                    );
                    Counters::add(&self.ctx.counters.relay.bad_request, 1);
                    let _ = self.send(routing_id, RelayReply::Error(reason));
                    return Pumped::Drop;
                }
            }
            return Pumped::Sent; // pump again
        }
        let room = s.window.room(s.max_batch) as usize;
        if let Some((since, seen_end)) = s.partial {
            // Waiting for a partial batch to fill: nothing new and not yet due.
            if end == seen_end && since.elapsed() < Duration::from_millis(u64::from(s.flush_ms)) {
                return Pumped::Idle;
            }
        }
        let raw = match log.raw_messages(s.next, room, BATCH_BYTES) {
            Ok(m) => m,
            Err(StoreError::InvalidOffset { .. }) => {
                let reason = format!("offset {} is not a record boundary of this copy", s.next);
                let _ = self.send(routing_id, RelayReply::Error(reason));
                return Pumped::Drop;
            }
            Err(StoreError::Corrupt { start, end, .. }) => {
                // Issue #13: damaged bytes are never served; say where intact data resumes
                // rather than retrying (and logging) every pass.
                let reason = format!(
                    "offset {} is in a damaged range [{start}, {end}) of this copy: resume at {end}",
                    s.next
                );
                let _ = self.send(routing_id, RelayReply::Error(reason));
                return Pumped::Drop;
            }
            Err(e) => {
                warn!(error = %e, "relay read failed");
                return Pumped::Idle;
            }
        };
        if raw.starts.is_empty() {
            return Pumped::Idle;
        }
        let full = raw.starts.len() >= room;
        if !full && s.flush_ms > 0 {
            match s.partial {
                None => {
                    s.partial = Some((Instant::now(), end));
                    return Pumped::Idle;
                }
                Some((since, _))
                    if since.elapsed() < Duration::from_millis(u64::from(s.flush_ms)) =>
                {
                    s.partial = Some((since, end));
                    return Pumped::Idle;
                }
                Some(_) => {}
            }
        }
        // Push only while the fragment is still this subscriber's (as far as this node has
        // applied): a member that lost it gets nothing more.
        let (group, subscriber, revision, first) =
            (s.group.clone(), s.subscriber.clone(), s.revision, s.next);
        match self.owns(topic, &group, *fragment, &subscriber, revision) {
            Ownership::Owns => {}
            Ownership::NotYet => return Pumped::Idle,
            Ownership::NotOwned => {
                self.revoke(key);
                return Pumped::Drop;
            }
        }
        let (starts, after) = (raw.starts, raw.end);
        let count = starts.len() as u32;
        let batch = RelayReply::Records {
            topic: topic.clone(),
            fragment: *fragment,
            offset: first,
            end: after,
            records: raw.bytes,
        };
        match self.send(routing_id, batch) {
            Sent::Ok => {
                let counters = self.ctx.counters.clone();
                if let Some(s) = self.streams.get_mut(key) {
                    s.next = after;
                    s.partial = None;
                    s.last_sent = Instant::now();
                    s.window.pushed(starts, after);
                }
                Counters::add(&counters.relay.batch_pushed, 1);
                Counters::add(&counters.relay.message_pushed, u64::from(count));
                Pumped::Sent
            }
            Sent::Full => {
                Counters::add(&self.ctx.counters.relay.push_deferred, 1);
                Pumped::Idle
            }
            Sent::Gone => Pumped::Drop,
        }
    }

    /// Whether `subscriber` reads `fragment` in this node's applied metadata. Before this node
    /// has applied `revision` (the assignment the subscriber was given) it is taken on trust.
    pub(super) fn owns(
        &self,
        topic: &str,
        group: &str,
        fragment: u32,
        subscriber: &str,
        revision: u64,
    ) -> Ownership {
        self.ctx
            .cluster
            .state
            .with_applied(|m, applied| {
                if applied < revision {
                    return Ownership::NotYet;
                }
                let owns = m
                    .subscriptions
                    .get(topic)
                    .and_then(|gs| gs.get(group))
                    .and_then(|g| g.assignment.get(&fragment))
                    .is_some_and(|owners| owners.iter().any(|o| o == subscriber));
                if owns {
                    Ownership::Owns
                } else {
                    Ownership::NotOwned
                }
            })
            .unwrap_or(Ownership::NotYet)
    }

    /// The committed offset `subscriber` resumes `fragment` from (0 when none).
    pub(super) fn committed(
        &self,
        topic: &str,
        group: &str,
        subscriber: &str,
        fragment: u32,
    ) -> u64 {
        self.ctx
            .cluster
            .state
            .with_metadata(|m| {
                let policy = m.topics.get(topic).map(|t| t.policy).unwrap_or_default();
                m.subscriptions
                    .get(topic)
                    .and_then(|gs| gs.get(group))
                    .map_or(0, |g| g.committed(policy, subscriber, fragment))
            })
            .unwrap_or(0)
    }

    /// Ends a stream with REVOKED.
    pub(super) fn revoke(&mut self, key: &StreamKey) {
        self.streams.remove(key);
        Counters::add(&self.ctx.counters.relay.revoked, 1);
        let _ = self.send(
            &key.0,
            RelayReply::Revoked {
                topic: key.1.clone(),
                fragment: key.2,
                reason: "not assigned to this subscriber".into(),
            },
        );
    }

    /// Ends idle streams whose fragment is no longer their subscriber's (streams with data
    /// are checked before every push).
    pub(super) fn check_assignments(&mut self) {
        let revoked: Vec<StreamKey> = self
            .streams
            .iter()
            .filter(|(key, s)| {
                self.owns(&key.1, &s.group, key.2, &s.subscriber, s.revision) == Ownership::NotOwned
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in revoked {
            self.revoke(&key);
        }
        // Streams that sent nothing for a while: a heartbeat finds members that have gone.
        let quiet: Vec<StreamKey> = self
            .streams
            .iter()
            .filter(|(_, s)| s.last_sent.elapsed() >= HEARTBEAT)
            .map(|(key, _)| key.clone())
            .collect();
        for key in quiet {
            let beat = RelayReply::Heartbeat {
                topic: key.1.clone(),
                fragment: key.2,
            };
            match self.send(&key.0, beat) {
                Sent::Gone => {
                    self.streams.remove(&key);
                }
                Sent::Ok | Sent::Full => {
                    if let Some(s) = self.streams.get_mut(&key) {
                        s.last_sent = Instant::now();
                    }
                }
            }
        }
    }
}
