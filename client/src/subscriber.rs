//! A subscriber client for zper's subscription groups (issue #7): joins a group through the
//! controller (`SUBSCRIBE`, then `KEEPALIVE` every third of the lease), opens one push stream
//! per assigned fragment on a relay holding it, and follows assignment changes. Used by
//! `zper subscribe`, the perf tool and the tests; any client speaking the frames of
//! `zper_wire::controller` and `zper_wire::relay` does the same.
//!
//! Delivery contract (docs/protocol.md "Subscriptions"): records come per fragment in offset
//! order; the application acknowledges with [`Subscriber::ack`] after processing, and a record
//! counts as done for the group once the relay answers `ACKED` ([`Event::Acked`]). Records not
//! acknowledged when a fragment moves are delivered again to its new owner.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use zper_wire::controller::{ControllerReply, ControllerRequest, Member, SubscriptionInfo};
use zper_wire::relay::{
    split_messages, AckRequest, PushedMessage, RelayReply, RelayRequest, ResultMessage,
    StreamRequest,
};
use zper_wire::Status;

pub use crate::error::SubscriberError;

/// How a subscriber joins and what it asks of its streams.
#[derive(Debug, Clone)]
pub struct SubscriberOptions {
    /// Controller endpoints (any node's; requests go to whichever answers).
    pub controllers: Vec<String>,
    /// Topic.
    pub topic: String,
    /// Subscription group.
    pub group: String,
    /// This subscriber's id within the group.
    pub id: String,
    /// Messages per pushed batch (Pirius `max_batch_size`).
    pub max_batch: u32,
    /// How long a partial batch may wait for more, ms (Pirius `flush_interval`).
    pub flush_ms: u32,
    /// Messages pushed and not yet acknowledged before the relay pauses.
    pub window: u32,
    /// How long to wait for the controller's first answer.
    pub timeout: Duration,
    /// Deliver batches as stored bytes ([`Event::RawBatch`]) instead of split messages: no
    /// per-message allocation, for consumers that parse records themselves (the perf tool).
    pub raw: bool,
    /// CURVE keys for the controllers and relays, when the nodes require CURVE there
    /// (`curve.endpoints`, issue #19).
    pub curve: Option<crate::ClientCurve>,
}

impl SubscriberOptions {
    /// Options with batch 1, flush 0, window 1000 and a 10 s timeout.
    pub fn new(controllers: Vec<String>, topic: &str, group: &str, id: &str) -> Self {
        SubscriberOptions {
            controllers,
            topic: topic.into(),
            group: group.into(),
            id: id.into(),
            max_batch: 1,
            flush_ms: 0,
            window: 1000,
            timeout: Duration::from_secs(10),
            raw: false,
            curve: None,
        }
    }
}

/// What [`Subscriber::poll`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A batch of one fragment's messages, in offset order, none seen before by this
    /// subscriber; acknowledge with `ack(fragment, end)` once processed.
    Batch {
        /// Fragment.
        fragment: u32,
        /// The messages.
        messages: Vec<PushedMessage>,
        /// Offset after the last message.
        end: u64,
    },
    /// With [`SubscriberOptions::raw`]: a batch as stored records (`zper.md` §6.2) of whole
    /// messages from `offset` to `end`, none seen before by this subscriber.
    RawBatch {
        /// Fragment.
        fragment: u32,
        /// Offset of the first message.
        offset: u64,
        /// Offset after the last message.
        end: u64,
        /// The stored records.
        records: Vec<u8>,
    },
    /// The group's offset in `fragment` is committed up to `offset`.
    Acked {
        /// Fragment.
        fragment: u32,
        /// Offset.
        offset: u64,
    },
    /// The subscriber's fragments changed (the new list).
    Assigned(Vec<u32>),
    /// A fragment was taken away (rebalance): its unacknowledged messages go to another
    /// member.
    Revoked {
        /// Fragment.
        fragment: u32,
        /// Why.
        reason: String,
    },
    /// A result for a producer (only after [`Subscriber::register_results`]).
    Result(ResultMessage),
    /// A relay refused a request (the reason); the request changed nothing.
    Error(String),
}

struct FragmentState {
    relays: Vec<String>,
    /// Which relay of the list streams it now.
    using: usize,
    /// Next offset not yet received.
    next: u64,
    last_heard: Instant,
}

/// A member of a subscription group. Not `Sync` (zmq sockets); use from one thread.
pub struct Subscriber {
    ctx: zmq::Context,
    opts: SubscriberOptions,
    controller: zmq::Socket,
    relays: HashMap<String, zmq::Socket>,
    fragments: BTreeMap<u32, FragmentState>,
    revision: u64,
    lease: Duration,
    next_keepalive: Instant,
    keepalive_sent: Option<Instant>,
    /// Per fragment, the highest offset acked and not yet confirmed (`ACKED`; leaving waits).
    unconfirmed: BTreeMap<u32, u64>,
}

/// Re-send STREAM for a fragment nothing has come from for this long (a relay that restarted
/// forgot the stream; a repeated STREAM only restarts it from the same offset).
const REFRESH: Duration = Duration::from_secs(3);

impl Subscriber {
    /// Joins the group and starts the streams of the fragments assigned.
    ///
    /// Errors: `Timeout` when no controller answers within `opts.timeout`; `Refused` with the
    /// controller's status (101 unknown topic).
    pub fn subscribe(opts: SubscriberOptions) -> Result<Subscriber, SubscriberError> {
        let ctx = zmq::Context::new();
        let controller = ctx.socket(zmq::DEALER)?;
        controller.set_linger(0)?;
        // Requests go only to controllers actually connected: one that is down (or just died)
        // is skipped instead of holding a request forever.
        controller.set_immediate(true)?;
        controller.set_sndtimeo(opts.timeout.as_millis() as i32)?;
        if let Some(curve) = &opts.curve {
            curve.set_on(&controller)?;
        }
        for c in &opts.controllers {
            controller.connect(c)?;
        }
        let mut s = Subscriber {
            ctx,
            controller,
            relays: HashMap::new(),
            fragments: BTreeMap::new(),
            revision: 0,
            lease: Duration::from_secs(10),
            next_keepalive: Instant::now(),
            keepalive_sent: None,
            unconfirmed: BTreeMap::new(),
            opts,
        };
        let request = ControllerRequest::Subscribe(s.member());
        match s.controller.send_multipart(request.encode(), 0) {
            Err(zmq::Error::EAGAIN) => return Err(SubscriberError::Timeout(s.opts.timeout)),
            other => other?,
        }
        let wait = s.opts.timeout.as_millis() as i64;
        if s.controller.poll(zmq::POLLIN, wait)? == 0 {
            return Err(SubscriberError::Timeout(s.opts.timeout));
        }
        let frames = s.controller.recv_multipart(0)?;
        match ControllerReply::decode(&request, &frames) {
            Some(ControllerReply::Subscription(info)) => {
                s.apply(info);
                s.connect_all_controllers()?;
                Ok(s)
            }
            Some(ControllerReply::Status(status)) => Err(SubscriberError::Refused {
                status: status.byte(),
            }),
            _ => Err(SubscriberError::Refused {
                status: Status::InvalidCommand.byte(),
            }),
        }
    }

    /// Connects the controller socket to every node's controller as well (from `NODES`), so
    /// keep-alives still reach the cluster when the node first asked goes away.
    fn connect_all_controllers(&mut self) -> Result<(), SubscriberError> {
        let request = ControllerRequest::Nodes;
        self.controller.send_multipart(request.encode(), 0)?;
        if self.controller.poll(zmq::POLLIN, 2000)? == 0 {
            return Ok(()); // keep the ones given
        }
        let frames = self.controller.recv_multipart(0)?;
        if let Some(ControllerReply::Nodes(nodes)) = ControllerReply::decode(&request, &frames) {
            for n in nodes {
                let endpoint = &n.endpoints[3];
                if !endpoint.is_empty() && !self.opts.controllers.contains(endpoint) {
                    self.controller.connect(endpoint)?;
                    self.opts.controllers.push(endpoint.clone());
                }
            }
        }
        Ok(())
    }

    fn member(&self) -> Member {
        Member {
            topic: self.opts.topic.clone(),
            group: self.opts.group.clone(),
            subscriber: self.opts.id.clone(),
        }
    }

    /// The fragments this subscriber holds now.
    pub fn fragments(&self) -> Vec<u32> {
        self.fragments.keys().copied().collect()
    }

    /// The options it was made with.
    pub fn options(&self) -> &SubscriberOptions {
        &self.opts
    }

    /// Applies a SUBSCRIBE/KEEPALIVE answer; true when the fragments changed.
    fn apply(&mut self, info: SubscriptionInfo) -> bool {
        self.lease = Duration::from_millis(info.lease_ms.max(300));
        self.next_keepalive = Instant::now() + self.lease / 3;
        self.keepalive_sent = None;
        if info.revision < self.revision {
            return false; // an older answer overtaken by a newer one
        }
        self.revision = info.revision;
        let before = self.fragments();
        let now: BTreeMap<u32, _> = info.fragments.into_iter().map(|f| (f.id, f)).collect();
        self.fragments.retain(|id, _| now.contains_key(id));
        for (id, f) in now {
            match self.fragments.get_mut(&id) {
                Some(st) => {
                    // Kept: follow the leader when it moved (re-STREAM from where we are).
                    let moved = st.relays.get(st.using) != f.relays.first();
                    st.relays = f.relays;
                    if moved {
                        st.using = 0;
                        let _ = self.stream(id);
                    }
                }
                None => {
                    self.fragments.insert(
                        id,
                        FragmentState {
                            relays: f.relays,
                            using: 0,
                            next: f.offset,
                            last_heard: Instant::now(),
                        },
                    );
                    let _ = self.stream(id);
                }
            }
        }
        before != self.fragments()
    }

    fn relay(&mut self, endpoint: &str) -> Result<&zmq::Socket, zmq::Error> {
        if !self.relays.contains_key(endpoint) {
            let s = self.ctx.socket(zmq::DEALER)?;
            s.set_linger(0)?;
            if let Some(curve) = &self.opts.curve {
                curve.set_on(&s)?;
            }
            s.connect(endpoint)?;
            self.relays.insert(endpoint.to_owned(), s);
        }
        self.relays.get(endpoint).ok_or(zmq::Error::EINVAL)
    }

    fn stream(&mut self, fragment: u32) -> Result<(), zmq::Error> {
        let Some(st) = self.fragments.get_mut(&fragment) else {
            return Ok(());
        };
        st.last_heard = Instant::now();
        let Some(endpoint) = st.relays.get(st.using).cloned() else {
            return Ok(()); // no relay known yet; the next keepalive may name one
        };
        let request = RelayRequest::Stream(StreamRequest {
            topic: self.opts.topic.clone(),
            group: self.opts.group.clone(),
            subscriber: self.opts.id.clone(),
            fragment,
            offset: st.next,
            max_batch: self.opts.max_batch,
            flush_ms: self.opts.flush_ms,
            window: self.opts.window,
            revision: self.revision,
        });
        self.relay(&endpoint)?
            .send_multipart(request.encode(), zmq::DONTWAIT)
    }

    /// Acknowledges `fragment` up to `offset` (the `end` of a processed batch). The answer comes
    /// as [`Event::Acked`] (or [`Event::Revoked`] when the fragment moved meanwhile).
    pub fn ack(&mut self, fragment: u32, offset: u64) -> Result<(), zmq::Error> {
        let Some(endpoint) = self
            .fragments
            .get(&fragment)
            .and_then(|st| st.relays.get(st.using).cloned())
        else {
            return Ok(()); // no longer ours: the new owner gets it again
        };
        let request = RelayRequest::Ack(AckRequest {
            topic: self.opts.topic.clone(),
            group: self.opts.group.clone(),
            subscriber: self.opts.id.clone(),
            fragment,
            offset,
        });
        self.relay(&endpoint)?
            .send_multipart(request.encode(), zmq::DONTWAIT)?;
        let highest = self.unconfirmed.entry(fragment).or_insert(offset);
        *highest = (*highest).max(offset);
        Ok(())
    }

    /// Sends a result for the message at `offset` of `fragment` whose id (first frame) is
    /// `id` back to its producer (Pirius' retrievable pattern, `pirius.md` §13).
    pub fn send_result(
        &mut self,
        fragment: u32,
        offset: u64,
        id: &[u8],
        payload: &[u8],
    ) -> Result<(), zmq::Error> {
        let Some(endpoint) = self
            .fragments
            .get(&fragment)
            .and_then(|st| st.relays.get(st.using).cloned())
            .or_else(|| self.relays.keys().next().cloned())
        else {
            return Ok(());
        };
        let request = RelayRequest::Result(ResultMessage {
            topic: self.opts.topic.clone(),
            fragment,
            offset,
            id: id.to_vec(),
            payload: payload.to_vec(),
        });
        self.relay(&endpoint)?
            .send_multipart(request.encode(), zmq::DONTWAIT)
    }

    /// Waits up to `timeout` for something to happen; keeps the session alive and the streams
    /// running meanwhile. Returns what happened (possibly nothing).
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<Event>, SubscriberError> {
        let mut events = Vec::new();
        self.housekeeping()?;
        let endpoints: Vec<String> = self.relays.keys().cloned().collect();
        let ready = {
            let mut items = vec![self.controller.as_poll_item(zmq::POLLIN)];
            for e in &endpoints {
                if let Some(s) = self.relays.get(e) {
                    items.push(s.as_poll_item(zmq::POLLIN));
                }
            }
            let wait = timeout.min(self.lease / 6).as_millis() as i64;
            match zmq::poll(&mut items, wait) {
                // A signal (the caller's Ctrl-C): nothing happened; the caller decides.
                Err(zmq::Error::EINTR) => return Ok(events),
                other => other?,
            };
            items.iter().map(|i| i.is_readable()).collect::<Vec<_>>()
        };
        if ready.first() == Some(&true) {
            while let Ok(frames) = self.controller.recv_multipart(zmq::DONTWAIT) {
                let request = ControllerRequest::KeepAlive(self.member());
                match ControllerReply::decode(&request, &frames) {
                    Some(ControllerReply::Subscription(info)) => {
                        if self.apply(info) {
                            events.push(Event::Assigned(self.fragments()));
                        }
                    }
                    // A refused keepalive (topic deleted, no quorum): retry soon.
                    _ => {
                        self.keepalive_sent = None;
                        self.next_keepalive = Instant::now() + Duration::from_millis(200);
                    }
                }
            }
        }
        for (i, e) in endpoints.iter().enumerate() {
            if ready.get(i + 1) != Some(&true) {
                continue;
            }
            while let Some(frames) = self
                .relays
                .get(e)
                .and_then(|s| s.recv_multipart(zmq::DONTWAIT).ok())
            {
                if let Some(ev) = self.relay_message(&frames) {
                    events.push(ev);
                }
            }
        }
        Ok(events)
    }

    fn relay_message(&mut self, frames: &[Vec<u8>]) -> Option<Event> {
        match RelayReply::decode(frames)? {
            RelayReply::Records {
                topic,
                fragment,
                offset,
                end,
                records,
            } if topic == self.opts.topic => {
                let st = self.fragments.get_mut(&fragment)?;
                st.last_heard = Instant::now();
                if self.opts.raw {
                    // Only the batch that continues where this subscriber is (a restarted
                    // stream may repeat a batch; batches start at message boundaries).
                    if offset != st.next {
                        return None;
                    }
                    st.next = end;
                    return Some(Event::RawBatch {
                        fragment,
                        offset,
                        end,
                        records,
                    });
                }
                // Drop what was seen already (a restarted stream overlaps).
                let messages: Vec<PushedMessage> = split_messages(offset, &records)?
                    .into_iter()
                    .filter(|m| m.offset >= st.next)
                    .collect();
                if messages.first().map(|m| m.offset) != Some(st.next) {
                    return None;
                }
                st.next = end;
                Some(Event::Batch {
                    fragment,
                    messages,
                    end,
                })
            }
            RelayReply::Acked {
                fragment, offset, ..
            } => {
                if self
                    .unconfirmed
                    .get(&fragment)
                    .is_some_and(|&o| offset >= o)
                {
                    self.unconfirmed.remove(&fragment);
                }
                Some(Event::Acked { fragment, offset })
            }
            RelayReply::Revoked {
                fragment, reason, ..
            } => {
                self.unconfirmed.remove(&fragment); // no longer ours to commit
                let st = self.fragments.get_mut(&fragment)?;
                if reason.contains("holds no copy") && st.using + 1 < st.relays.len() {
                    st.using += 1; // try the next replica
                    let _ = self.stream(fragment);
                    return None;
                }
                self.fragments.remove(&fragment);
                // Ask for the current assignment now.
                self.next_keepalive = Instant::now();
                self.keepalive_sent = None;
                Some(Event::Revoked { fragment, reason })
            }
            RelayReply::Result(r) => Some(Event::Result(r)),
            RelayReply::Heartbeat { fragment, .. } => {
                if let Some(st) = self.fragments.get_mut(&fragment) {
                    st.last_heard = Instant::now();
                }
                None
            }
            RelayReply::Error(reason) => Some(Event::Error(reason)),
            _ => None,
        }
    }

    fn housekeeping(&mut self) -> Result<(), SubscriberError> {
        let now = Instant::now();
        let overdue = self
            .keepalive_sent
            .is_some_and(|t| now.duration_since(t) > self.lease / 3);
        if (self.keepalive_sent.is_none() && now >= self.next_keepalive) || overdue {
            let request = ControllerRequest::KeepAlive(self.member());
            let _ = self
                .controller
                .send_multipart(request.encode(), zmq::DONTWAIT);
            self.keepalive_sent = Some(now);
        }
        let stale: Vec<u32> = self
            .fragments
            .iter()
            .filter(|(_, st)| st.last_heard.elapsed() > REFRESH)
            .map(|(id, _)| *id)
            .collect();
        for f in stale {
            self.stream(f)?;
        }
        Ok(())
    }

    /// Registers for results of this subscriber's topic whose message id starts with
    /// `prefix`, on the relay at `relay` (results then come as [`Event::Result`]). For
    /// producers, see [`ResultsListener`].
    pub fn register_results(&mut self, relay: &str, prefix: &[u8]) -> Result<(), zmq::Error> {
        let request = RelayRequest::Results {
            topic: self.opts.topic.clone(),
            prefix: prefix.to_vec(),
        };
        self.relay(relay)?.send_multipart(request.encode(), 0)
    }

    /// Leaves the group (its fragments go to the other members at once) once every ack sent
    /// is confirmed (for at most 5 s), so the next member is not handed those records again.
    ///
    /// Errors: `Timeout`; `Refused(101)` when it was not a member any more.
    pub fn unsubscribe(mut self) -> Result<(), SubscriberError> {
        let drain_until = Instant::now() + self.opts.timeout.min(Duration::from_secs(5));
        while !self.unconfirmed.is_empty() && Instant::now() < drain_until {
            self.poll(Duration::from_millis(50))?; // records pushed meanwhile go unacked
        }
        let request = ControllerRequest::Unsubscribe(self.member());
        let deadline = Instant::now() + self.opts.timeout;
        let mut sent = 0u32;
        let mut resend = Instant::now();
        loop {
            // Sent again every second: the socket takes turns over the controllers it is
            // connected to, and one may have just died with the request queued to it.
            if Instant::now() >= resend {
                match self
                    .controller
                    .send_multipart(request.encode(), zmq::DONTWAIT)
                {
                    Ok(()) => sent += 1,
                    Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
                resend = Instant::now() + Duration::from_secs(1);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SubscriberError::Timeout(self.opts.timeout));
            }
            let wait = left.min(Duration::from_millis(200)).as_millis() as i64;
            match self.controller.poll(zmq::POLLIN, wait) {
                Ok(0) | Err(zmq::Error::EINTR) => continue,
                Ok(_) => {}
                Err(e) => return Err(e.into()),
            }
            let Ok(frames) = self.controller.recv_multipart(zmq::DONTWAIT) else {
                continue;
            };
            match frames.as_slice() {
                [s] if s.as_slice() == [Status::Ok.byte()] => return Ok(()),
                // A repeated request found it gone: an earlier one took it out.
                [s] if s.as_slice() == [Status::InvalidOffset.byte()] && sent > 1 => return Ok(()),
                [s] if s.len() == 1 => return Err(SubscriberError::Refused { status: s[0] }),
                _ => continue, // a keepalive answer still in flight
            }
        }
    }
}
