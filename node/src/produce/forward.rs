//! Forwarding writes to the fragment leader (issue #4): an unchanged ZPER producer connected to
//! any node keeps working. A writer worker that does not lead a topic hands the messages here;
//! they go to the leader's writer endpoint over a DEALER per (leader, producer) whose identity
//! names the topic, in REQ style (`[empty][frames...]`) when the producer waits for
//! acks, so the leader answers each message with `[empty][message id]` (plus a status frame on
//! refusal). Answers come back in order and are relayed to the producers through the writer's
//! ack path: mode 2 `[empty][id(, status)]`, mode 1 `[id(, status)]`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use tracing::{debug, warn};
use zper_raft::NodeId;
use zper_wire::{AckMode, Identity};

use crate::metrics::Counters;
use crate::replication::PlacementView;

/// Messages of one producer for a topic another node leads.
#[derive(Debug)]
pub struct ForwardJob {
    /// Topic.
    pub topic: Arc<str>,
    /// The producer's routing id (its identity) on this node's writer.
    pub routing_id: Vec<u8>,
    /// Its ack mode.
    pub mode: AckMode,
    /// An idempotent producer (issue #18): forwarded as one, so the leader de-duplicates.
    pub idempotent: bool,
    /// Each message's frames (the first is its id).
    pub messages: Vec<Vec<Vec<u8>>>,
}

struct Waiting {
    routing_id: Vec<u8>,
    mode: AckMode,
    /// The message id the leader's answer must carry.
    id: Vec<u8>,
    since: Instant,
}

/// A forwarded message unanswered this long is given up: its producer gets 104 (the leader
/// may have died with it; the producer decides whether to send it again).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

struct Link {
    socket: zmq::Socket,
    waiting: VecDeque<Waiting>,
    last_used: Instant,
}

/// How long an idle link to a leader stays open.
const IDLE: Duration = Duration::from_secs(30);

pub(crate) struct Forwarder {
    pub(crate) ctx: zmq::Context,
    pub(crate) view: PlacementView,
    pub(crate) jobs: Receiver<ForwardJob>,
    /// Connected to the writer front's ack pull: relayed answers leave through the ROUTER.
    pub(crate) acks: zmq::Socket,
    pub(crate) counters: Arc<Counters>,
    pub(crate) stop: Arc<AtomicBool>,
    /// CURVE keys for the leaders' writers when they require CURVE (issue #19).
    pub(crate) curve: Option<crate::zmtp::security::CurveEndpoint>,
}

/// One link per (leader, producer): answers for one producer come back on its own link, in
/// its own order, so they can never be handed to another producer.
type Key = (NodeId, Vec<u8>);

impl Forwarder {
    pub(crate) fn run(self) {
        let mut links: HashMap<Key, Link> = HashMap::new();
        while !self.stop.load(Ordering::Relaxed) {
            // Jobs first (bounded per round), then answers.
            let mut got = false;
            for _ in 0..256 {
                match self.jobs.try_recv() {
                    Ok(job) => {
                        got = true;
                        self.forward(job, &mut links);
                    }
                    Err(_) => break,
                }
            }
            let keys: Vec<Key> = links.keys().cloned().collect();
            let mut items: Vec<zmq::PollItem> = keys
                .iter()
                .filter_map(|k| links.get(k).map(|l| l.socket.as_poll_item(zmq::POLLIN)))
                .collect();
            let timeout = if got { 0 } else { 5 };
            if items.is_empty() {
                if let Ok(job) = self.jobs.recv_timeout(Duration::from_millis(50)) {
                    self.forward(job, &mut links);
                }
                continue;
            }
            if zmq::poll(&mut items, timeout).is_err() {
                continue;
            }
            let ready: Vec<bool> = items.iter().map(|i| i.is_readable()).collect();
            drop(items);
            for (key, readable) in keys.iter().zip(ready) {
                if readable {
                    if let Some(link) = links.get_mut(key) {
                        self.relay(link);
                    }
                }
            }
            self.expire(&mut links);
            links.retain(|_, l| !l.waiting.is_empty() || l.last_used.elapsed() < IDLE);
        }
        debug!("write forwarder stopped");
    }

    fn forward(&self, job: ForwardJob, links: &mut HashMap<Key, Link>) {
        let n = job.messages.len() as u64;
        let Some(frag) = self.view.fragment(&job.topic) else {
            Counters::add(&self.counters.not_leader, n);
            self.give_up(job);
            return;
        };
        let Some(endpoint) = self
            .view
            .endpoints(frag.leader)
            .map(|e| e.peer_writer().to_owned())
            .filter(|w| !w.is_empty())
        else {
            Counters::add(&self.counters.not_leader, n);
            self.give_up(job);
            return;
        };
        let acked = job.mode != AckMode::None;
        let key: Key = (frag.leader, job.routing_id.clone());
        if !links.contains_key(&key) {
            let mode = match (job.idempotent, acked) {
                (true, _) => zper_wire::IDEMPOTENT_PER_MESSAGE,
                (false, true) => 2,
                (false, false) => 0,
            };
            match self.connect(&job.routing_id, mode, &endpoint) {
                Ok(socket) => {
                    links.insert(
                        key.clone(),
                        Link {
                            socket,
                            waiting: VecDeque::new(),
                            last_used: Instant::now(),
                        },
                    );
                }
                Err(e) => {
                    warn!(leader = frag.leader, error = %e, "cannot connect to the leader's writer");
                    Counters::add(&self.counters.not_leader, n);
                    self.give_up(job);
                    return;
                }
            }
        }
        let Some(link) = links.get_mut(&key) else {
            return;
        };
        link.last_used = Instant::now();
        for frames in job.messages {
            let mut out = Vec::with_capacity(frames.len() + 1);
            if acked {
                out.push(Vec::new());
            }
            let id = frames.first().cloned().unwrap_or_default();
            out.extend(frames);
            let waiting = acked.then(|| Waiting {
                routing_id: job.routing_id.clone(),
                mode: job.mode,
                id,
                since: Instant::now(),
            });
            if link.socket.send_multipart(out, zmq::DONTWAIT).is_err() {
                Counters::add(&self.counters.not_leader, 1);
                if let Some(w) = waiting {
                    self.answer(w, None);
                }
                continue;
            }
            Counters::add(&self.counters.forwarded, 1);
            link.waiting.extend(waiting);
        }
    }

    /// A DEALER to the leader's writer with an identity of its own (the producer may also be
    /// connected to the leader directly; two connections with one identity would take each
    /// other's place there) whose uuid maps to the same fragment as the producer's, with mode
    /// byte `mode`: 2 when acks are wanted (the leader then answers each message), 0x42 for
    /// an idempotent producer (answered per message, de-duplicated by its ids), else 0.
    fn connect(&self, routing_id: &[u8], mode: u8, endpoint: &str) -> Result<zmq::Socket, String> {
        let producer = Identity::parse(routing_id).map_err(|e| e.to_string())?;
        let fragments = self.view.fragment_count(&producer.topic);
        let wanted = crate::replication::fragment_for(&producer.uuid, fragments);
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let mut uuid = [0u8; 16];
        uuid[..8].copy_from_slice(&self.view.me().to_be_bytes());
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            uuid[8..].copy_from_slice(&n.to_be_bytes());
            if crate::replication::fragment_for(&uuid, fragments) == wanted {
                break;
            }
        }
        let identity = Identity::new(&producer.topic, mode, &uuid)
            .map_err(|e| e.to_string())?
            .to_bytes();
        let s = self.ctx.socket(zmq::DEALER).map_err(|e| e.to_string())?;
        if let Some(curve) = &self.curve {
            curve
                .apply_to_peer_link(&s)
                .map_err(|e| format!("CURVE keys: {e}"))?;
        }
        s.set_identity(&identity).map_err(|e| e.to_string())?;
        s.set_linger(0).map_err(|e| e.to_string())?;
        s.set_sndhwm(100_000).map_err(|e| e.to_string())?;
        s.connect(endpoint).map_err(|e| e.to_string())?;
        Ok(s)
    }

    /// Relays the leader's answers to the waiting producers. Answers come in order, but a
    /// leader that crashed may have lost some messages: an answer is matched by its message id
    /// to the oldest waiting message with that id, and the older waiting ones before it are
    /// answered 104 (never answered, never to be). A producer never gets another's ack.
    fn relay(&self, link: &mut Link) {
        while let Ok(mut frames) = link.socket.recv_multipart(zmq::DONTWAIT) {
            if frames.first().is_some_and(Vec::is_empty) {
                frames.remove(0);
            }
            let Some(id) = frames.first() else {
                continue;
            };
            let Some(at) = link.waiting.iter().position(|w| &w.id == id) else {
                continue; // an answer for a message given up already
            };
            for lost in link.waiting.drain(..at).collect::<Vec<_>>() {
                self.answer(lost, None);
            }
            if let Some(w) = link.waiting.pop_front() {
                self.answer(w, Some(frames));
            }
        }
    }

    /// Answers every message of `job` 104 (not the leader) when its producer waits for acks:
    /// each message that waits gets exactly one answer, which the writer's bound on unanswered
    /// messages counts on (`produce::credit`).
    fn give_up(&self, job: ForwardJob) {
        if job.mode == AckMode::None {
            return;
        }
        for frames in job.messages {
            let id = frames.into_iter().next().unwrap_or_default();
            self.answer(
                Waiting {
                    routing_id: job.routing_id.clone(),
                    mode: job.mode,
                    id,
                    since: Instant::now(),
                },
                None,
            );
        }
    }

    /// Sends `w`'s producer the leader's answer, or 104 (not the leader) when there is none.
    fn answer(&self, w: Waiting, frames: Option<Vec<Vec<u8>>>) {
        let mut out = vec![w.routing_id];
        if w.mode == AckMode::PerMessage {
            out.push(Vec::new());
        }
        match frames {
            Some(f) => out.extend(f),
            None => {
                out.push(w.id);
                out.push(vec![zper_wire::WRITER_NOT_LEADER]);
            }
        }
        let _ = self.acks.send_multipart(out, 0);
    }

    /// Gives up messages unanswered for [`ANSWER_TIMEOUT`]; their producers get 104. (A
    /// former leader forwards what it still gets to the new one and answers through the same
    /// link, so a leader change alone gives nothing up. A message given up may still have
    /// been stored: its outcome is unknown, as after any timeout.)
    fn expire(&self, links: &mut HashMap<Key, Link>) {
        for link in links.values_mut() {
            while link
                .waiting
                .front()
                .is_some_and(|w| w.since.elapsed() > ANSWER_TIMEOUT)
            {
                if let Some(w) = link.waiting.pop_front() {
                    self.answer(w, None);
                }
            }
        }
    }
}
