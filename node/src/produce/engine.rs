//! The writer endpoint on zper's own ZMTP engine (issue #17): the front thread owns a TCP
//! listener instead of a libzmq ROUTER, runs each producer's handshake (ZMTP/2.0 for JeroMQ 0.3
//! and libzmq 3.2 clients, ZMTP/3.x with NULL for libzmq 4, DEALER, REQ and PUSH peers alike,
//! spec `zper.md` §2, §4.1), and copies each whole message's frames into its worker's batch as
//! received: they already have the stored record layout (§6.2).
//!
//! Same routing, rules and acks as the libzmq front ([`super::front`]): one worker per topic,
//! REQ envelopes left out, frames over `max_message` and (optionally) empty messages dropped
//! and counted; acks from the workers go back on the producer's own connection. What is new:
//! a malformed stream closes that connection only and is counted (`zmtp_protocol_errors`);
//! TCP backpressure, not drops, holds back a producer while its worker is 16 batches behind,
//! while it has [`MAX_UNANSWERED`](super::credit::MAX_UNANSWERED) mode-2 messages unanswered
//! (see [`super::credit`]), or while its connection holds [`OUTPUT_PAUSE`] reply bytes it has
//! not taken. At [`MAX_CONNECTIONS`] the connection idle the longest (at least
//! [`IDLE_EVICTION`]) is closed to make room; if none is, the new one is refused.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use tracing::{debug, error, warn};
use zper_wire::zmtp::{Command, Dropped, Event, Limits, SocketType};

use super::credit::Credit;
use super::front::{dropped, invalid_identity};
use super::{copy_id, Producer, Producers, WriteBatch, BATCH_BYTES};
use crate::endpoint::POLL_MS;
use crate::metrics::Counters;
use crate::zmtp::connection::{Connection, READ_CHUNK};
use crate::zmtp::peers;
use zper_wire::AckMode;

/// Peers the writer accepts (spec §4.1: DEALER, REQ and PUSH).
pub(crate) const WRITER_PEERS: [SocketType; 3] =
    [SocketType::Dealer, SocketType::Req, SocketType::Push];
/// A connection must finish its handshake within this time, or it is closed (libzmq's
/// `ZMQ_HANDSHAKE_IVL` default is 30 s).
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections the writer holds at once; more are accepted and closed at once, counted.
pub(crate) const MAX_CONNECTIONS: usize = 4096;
/// A connection idle this long may be closed to make room for a new one at
/// [`MAX_CONNECTIONS`].
pub(crate) const IDLE_EVICTION: Duration = Duration::from_secs(10);
/// Reply bytes a connection may hold unsent before its input is no longer read: a producer
/// that does not take its acks is held back rather than have them dropped.
pub(crate) const OUTPUT_PAUSE: usize = 256 * 1024;
/// How long a connection whose peer ended its side (a half-close after its last message)
/// stays open for the replies still due to it.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes read from one connection per wake before the others get their turn.
const READ_BUDGET: usize = 16 * READ_CHUNK;

const LISTENER: Token = Token(0);
const ACKS: Token = Token(1);

/// An open connection and the producer its identity names (None: not a topic identity).
struct Client {
    conn: Connection,
    routing_id: Vec<u8>,
    producer: Option<Arc<Producer>>,
    /// When bytes last came in or replies went out.
    active: Instant,
    /// Mode 1: the id of the newest message handed to the workers, until an ack naming it
    /// comes back (then empty).
    unacked_id: Vec<u8>,
}

pub(crate) struct EngineFront {
    pub(crate) listener: TcpListener,
    pub(crate) acks: zmq::Socket,
    pub(crate) senders: Vec<Sender<WriteBatch>>,
    pub(crate) producers: Producers,
    pub(crate) limits: Limits,
    pub(crate) counters: Arc<Counters>,
    pub(crate) stop: Arc<AtomicBool>,
    /// Most connections held at once ([`MAX_CONNECTIONS`]).
    pub(crate) max_connections: usize,
    /// How long a connection must have been idle to be closed for a new one
    /// ([`IDLE_EVICTION`]).
    pub(crate) idle_eviction: Duration,
    /// CURVE, when the writer requires it (issue #19).
    pub(crate) curve: Option<crate::zmtp::security::CurveEndpoint>,
}

/// The engine loop's connections: by token, and by routing id for acks.
#[derive(Default)]
struct Clients {
    by_token: HashMap<Token, Client>,
    by_id: HashMap<Vec<u8>, Token>,
    next: usize,
    anonymous: u32,
    /// Unanswered mode-2 messages per producer.
    credit: Credit,
    /// Connections not read for now (see [`Clients::held`]); read again once they may.
    paused: HashSet<Token>,
    /// Connections whose peer ended its side, kept open (since then) until their replies
    /// are out ([`Clients::settled`]) or [`DRAIN_TIMEOUT`] passed.
    draining: HashMap<Token, Instant>,
}

impl Clients {
    /// Whether `token`'s connection must not be read for now: it holds [`OUTPUT_PAUSE`] reply
    /// bytes its peer has not taken, or its producer may not send another mode-2 message.
    fn held(&self, token: Token) -> bool {
        self.by_token.get(&token).is_some_and(|c| {
            c.conn.unsent() >= OUTPUT_PAUSE
                || c.producer.as_ref().is_some_and(|p| {
                    p.mode == AckMode::PerMessage && !self.credit.may_send(&c.routing_id)
                })
        })
    }

    /// Whether `token`'s connection owes its peer nothing more: no reply bytes unsent, no
    /// mode-2 message unanswered, no mode-1 message past the last ack.
    fn settled(&self, token: Token) -> bool {
        self.by_token.get(&token).is_none_or(|c| {
            c.conn.unsent() == 0
                && c.unacked_id.is_empty()
                && !c.producer.as_ref().is_some_and(|p| {
                    p.mode == AckMode::PerMessage && self.credit.owes(&c.routing_id)
                })
        })
    }

    /// The draining connections that may be closed now: settled, or draining for
    /// [`DRAIN_TIMEOUT`].
    fn drained(&mut self, now: Instant) -> Vec<Token> {
        if self.draining.is_empty() {
            return Vec::new();
        }
        let done: Vec<Token> = self
            .draining
            .iter()
            .filter(|(t, since)| {
                self.settled(**t) || now.saturating_duration_since(**since) >= DRAIN_TIMEOUT
            })
            .map(|(t, _)| *t)
            .collect();
        for t in &done {
            self.draining.remove(t);
        }
        done
    }

    /// The paused connections that may be read again (taken out of the paused set).
    fn resumable(&mut self) -> Vec<Token> {
        if self.paused.is_empty() {
            return Vec::new();
        }
        let mut ready: Vec<Token> = self
            .paused
            .iter()
            .filter(|t| !self.by_token.contains_key(t) || !self.held(**t))
            .copied()
            .collect();
        for t in &ready {
            self.paused.remove(t);
        }
        ready.retain(|t| self.by_token.contains_key(t));
        ready
    }
}

impl EngineFront {
    pub(crate) fn run(mut self, workers: Vec<JoinHandle<()>>) {
        let mut workers = Some(workers);
        if let Err(e) = self.serve(&mut workers) {
            error!(error = %e, "writer engine failed");
        }
        // Shutdown (or a failed poll): workers flush what they hold and exit once their
        // channel closes.
        self.senders.clear();
        for w in workers.into_iter().flatten() {
            let _ = w.join();
        }
        debug!("writer stopped");
    }

    fn serve(&mut self, workers: &mut Option<Vec<JoinHandle<()>>>) -> std::io::Result<()> {
        let mut poll = Poll::new()?;
        poll.registry()
            .register(&mut self.listener, LISTENER, Interest::READABLE)?;
        let acks_fd = self.acks.get_fd().map_err(std::io::Error::other)?;
        poll.registry()
            .register(&mut mio::unix::SourceFd(&acks_fd), ACKS, Interest::READABLE)?;
        let mut clients = Clients {
            next: 2,
            ..Clients::default()
        };
        let mut batches: Vec<WriteBatch> =
            self.senders.iter().map(|_| WriteBatch::default()).collect();
        let mut events = Events::with_capacity(1024);
        let mut again: Vec<Token> = Vec::new();
        let mut swept = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            let timeout = if again.is_empty() {
                Duration::from_millis(POLL_MS as u64)
            } else {
                Duration::ZERO
            };
            if let Err(e) = poll.poll(&mut events, Some(timeout)) {
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let mut ready: Vec<Token> = std::mem::take(&mut again);
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(&poll, &mut clients),
                    ACKS => {}
                    token => {
                        if (event.is_error() || event.is_write_closed()) && clients.held(token) {
                            // Not read while held, so the loss of its peer would go unseen.
                            self.close(&poll, &mut clients, token);
                            continue;
                        }
                        if event.is_writable() {
                            self.flush(&poll, &mut clients, token);
                        }
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            ready.push(token);
                        }
                    }
                }
            }
            ready.sort_unstable();
            ready.dedup();
            for token in ready {
                if self.read(&poll, &mut clients, token, &mut batches) {
                    again.push(token);
                }
            }
            self.forward_acks(&poll, &mut clients);
            for worker in 0..batches.len() {
                self.dispatch(worker, &mut batches);
            }
            // Held connections whose replies caught up: their bytes may already wait in the
            // socket, which an edge-triggered poll will not announce again.
            again.extend(clients.resumable());
            for token in clients.drained(Instant::now()) {
                self.close(&poll, &mut clients, token);
            }
            self.counters
                .writer_held
                .store(clients.paused.len() as u64, Ordering::Relaxed);
            if swept.elapsed() >= Duration::from_secs(1) {
                swept = Instant::now();
                let forgiven = clients.credit.forgive_stale(swept);
                if forgiven > 0 {
                    warn!(
                        messages = forgiven,
                        "writer stopped waiting for mode-2 replies that never came"
                    );
                }
                let conns = clients.by_token.iter().map(|(t, c)| (t, &c.conn));
                let late = peers::late_handshakes(conns, HANDSHAKE_TIMEOUT);
                for token in late {
                    self.protocol_error(&poll, &mut clients, token, "handshake timed out");
                }
                let conns = clients.by_token.iter().map(|(t, c)| (t, &c.conn));
                let refused = &self.counters.curve_refused;
                for token in peers::revoked(conns, self.curve.as_ref(), refused) {
                    self.close(&poll, &mut clients, token);
                }
            }
        }
        // Shutdown: the workers append and flush what they hold, then their last acks go out.
        self.senders.clear();
        for w in workers.take().into_iter().flatten() {
            let _ = w.join();
        }
        self.forward_acks(&poll, &mut clients);
        Ok(())
    }

    fn accept(&mut self, poll: &Poll, clients: &mut Clients) {
        while let Some(stream) = peers::next_stream(&self.listener, "writer") {
            let conns = clients.by_token.values().map(|c| &c.conn);
            if peers::too_many_handshakes(conns, &stream)
                || clients.by_token.len() >= self.max_connections && !self.evict_idle(poll, clients)
            {
                Counters::add(&self.counters.zmtp_refused_connections, 1);
                continue; // dropped: closed
            }
            let token = Token(clients.next);
            clients.next += 1;
            let Some(conn) = peers::open(
                poll,
                stream,
                token,
                &WRITER_PEERS,
                self.limits,
                "writer",
                self.curve.as_ref(),
            ) else {
                continue;
            };
            let client = Client {
                conn,
                routing_id: Vec::new(),
                producer: None,
                active: Instant::now(),
                unacked_id: Vec::new(),
            };
            clients.by_token.insert(token, client);
            self.counters.connections[0].fetch_add(1, Ordering::Relaxed);
            self.flush(poll, clients, token);
        }
    }

    /// Closes the connection idle the longest, if it has been idle for `idle_eviction` at
    /// least; true if one was closed.
    fn evict_idle(&mut self, poll: &Poll, clients: &mut Clients) -> bool {
        let idle = clients.by_token.iter().map(|(t, c)| (*t, c.active));
        let oldest = peers::idle_longest(idle, self.idle_eviction);
        let Some(token) = oldest else {
            return false;
        };
        Counters::add(&self.counters.zmtp_idle_closed, 1);
        self.close(poll, clients, token);
        true
    }

    /// Reads and handles what `token`'s connection has; true when it should be read again
    /// without waiting for the poll.
    fn read(
        &mut self,
        poll: &Poll,
        clients: &mut Clients,
        token: Token,
        batches: &mut [WriteBatch],
    ) -> bool {
        if clients.held(token) {
            clients.paused.insert(token);
            return false;
        }
        let Some(client) = clients.by_token.get_mut(&token) else {
            return false;
        };
        let fill = match client.conn.fill(READ_BUDGET) {
            Ok(fill) => fill,
            Err(_) => {
                self.close(poll, clients, token);
                return false;
            }
        };
        if client.conn.in_handshake() {
            match client.conn.handshake() {
                Ok(Some(peer)) => {
                    let id = peers::routing_id(&peer.identity, &mut clients.anonymous);
                    let producer = self.producers.get(&id, self.senders.len());
                    if let Some(client) = clients.by_token.get_mut(&token) {
                        client.conn.peer = Some(peer);
                        client.routing_id = id.clone();
                        client.producer = producer;
                    }
                    // Handover (§2): a new connection takes the identity over.
                    if let Some(old) = clients.by_id.insert(id, token) {
                        if old != token {
                            self.close(poll, clients, old);
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    self.flush(poll, clients, token);
                    self.protocol_error(poll, clients, token, &e.to_string());
                    return false;
                }
            }
        }
        if fill.bytes > 0 {
            if let Some(client) = clients.by_token.get_mut(&token) {
                client.active = Instant::now();
            }
        }
        let held = match self.messages(clients, token, batches) {
            Ok(held) => held,
            Err(e) => {
                self.flush(poll, clients, token);
                self.protocol_error(poll, clients, token, &e);
                return false;
            }
        };
        self.flush(poll, clients, token);
        if held {
            // Unread messages stay in the buffer (and the socket) until replies catch up;
            // an end of stream behind them is seen then.
            clients.paused.insert(token);
            return false;
        }
        if fill.eof {
            // The peer sent its last message: it may still wait for the replies due to it
            // (a producer that half-closes), so they go out before the connection closes.
            if clients.settled(token) {
                self.close(poll, clients, token);
            } else {
                clients.draining.entry(token).or_insert_with(Instant::now);
            }
            return false;
        }
        fill.more
    }

    /// Moves every whole message of `token`'s unread bytes into its worker's batch; true when
    /// it stopped early because the producer has too many mode-2 messages unanswered.
    fn messages(
        &mut self,
        clients: &mut Clients,
        token: Token,
        batches: &mut [WriteBatch],
    ) -> Result<bool, String> {
        let Some(client) = clients.by_token.get_mut(&token) else {
            return Ok(false);
        };
        let credit = &mut clients.credit;
        let per_message = client
            .producer
            .as_ref()
            .is_some_and(|p| p.mode == AckMode::PerMessage);
        let now = Instant::now();
        let mut scratch = Vec::new();
        // One clone per call, not per message: the batch's runs hold it.
        let producer = client.producer.clone();
        // Mode 1: the newest message's id in its batch, copied to `unacked_id` once per call.
        let mut newest: Option<std::ops::Range<usize>> = None;
        loop {
            if per_message && !credit.may_send(&client.routing_id) {
                return Ok(true);
            }
            let out = match &producer {
                Some(p) => &mut batches[p.worker].bytes,
                None => &mut scratch,
            };
            let mark = out.len();
            let event = client.conn.next_event(out).map_err(|e| e.to_string())?;
            let mut pong = None;
            match event {
                None => {
                    if let Some(p) = &producer {
                        copy_id(&batches[p.worker].bytes, newest, &mut client.unacked_id);
                    }
                    return Ok(false);
                }
                Some(Event::Message { first_frame, .. }) => match &producer {
                    Some(p) => {
                        if per_message {
                            credit.sent(&client.routing_id, now);
                        } else if p.mode == AckMode::PerFlush {
                            newest = Some(first_frame.clone());
                        }
                        let batch = &mut batches[p.worker];
                        batch.record_at(p, first_frame);
                        if batch.bytes.len() >= BATCH_BYTES {
                            copy_id(&batch.bytes, newest.take(), &mut client.unacked_id);
                            self.dispatch(p.worker, batches);
                        }
                    }
                    None => {
                        scratch.truncate(mark);
                        invalid_identity(&self.counters.invalid_identity, &client.routing_id);
                    }
                },
                Some(Event::Dropped(why)) => {
                    let (counter, text): (&AtomicU64, _) = match why {
                        Dropped::OversizedFrame | Dropped::OversizedMessage => {
                            (&self.counters.oversized_frames, "frame over max_message")
                        }
                        Dropped::EmptyMessage => (
                            &self.counters.empty_messages,
                            "empty message while allow_empty_message = false",
                        ),
                    };
                    dropped(counter, text, &client.routing_id);
                }
                Some(Event::Command(Command::Ping { context, .. })) => {
                    pong = Some(context.to_vec());
                }
                Some(Event::Command(Command::Error(reason))) => {
                    return Err(format!(
                        "the peer sent ERROR: {}",
                        String::from_utf8_lossy(reason)
                    ));
                }
                Some(Event::Command(_)) => {}
            }
            if let Some(context) = pong {
                client.conn.send_pong(&context);
            }
        }
    }

    fn protocol_error(&mut self, poll: &Poll, clients: &mut Clients, token: Token, why: &str) {
        peers::count_protocol_error(&self.counters.zmtp_protocol_errors, "writer", why);
        self.close(poll, clients, token);
    }

    fn close(&mut self, poll: &Poll, clients: &mut Clients, token: Token) {
        let Some(mut client) = clients.by_token.remove(&token) else {
            return;
        };
        let _ = poll.registry().deregister(&mut client.conn.stream);
        peers::count_unfinished_curve(&self.counters, &client.conn);
        if clients.by_id.get(&client.routing_id) == Some(&token) {
            clients.by_id.remove(&client.routing_id);
        }
        clients.paused.remove(&token);
        clients.draining.remove(&token);
        self.counters.connections[0].fetch_sub(1, Ordering::Relaxed);
    }

    fn flush(&mut self, poll: &Poll, clients: &mut Clients, token: Token) {
        let failed = match clients.by_token.get_mut(&token) {
            Some(client) => client.conn.flush().is_err(),
            None => false,
        };
        if failed {
            self.close(poll, clients, token);
        }
    }

    /// Sends the workers' acks (`[routing id][frames...]`) on their producers' connections,
    /// each connection written once after the queue is drained.
    fn forward_acks(&mut self, poll: &Poll, clients: &mut Clients) {
        let now = Instant::now();
        let mut touched = HashSet::new();
        while let Ok(frames) = self.acks.recv_multipart(zmq::DONTWAIT) {
            let Some(id) = frames.first() else {
                continue;
            };
            clients.credit.answered(id, now);
            let token = clients.by_id.get(id).copied();
            let sent = token
                .and_then(|t| clients.by_token.get_mut(&t))
                .is_some_and(|c| {
                    c.active = now;
                    if frames.get(1) == Some(&c.unacked_id) {
                        c.unacked_id.clear();
                    }
                    c.conn.send(&frames[1..])
                });
            if sent {
                Counters::add(&self.counters.acks_sent, 1);
                touched.extend(token);
            } else {
                Counters::add(&self.counters.acks_dropped, 1);
            }
        }
        for token in touched {
            self.flush(poll, clients, token);
        }
    }

    fn dispatch(&self, worker: usize, batches: &mut [WriteBatch]) {
        if batches[worker].appends.is_empty() {
            batches[worker].bytes.clear();
            return;
        }
        let batch = batches[worker].take();
        // Blocks when the worker is 16 batches behind: backpressure reaches the producers' TCP.
        if self.senders[worker].send(batch).is_err() {
            error!(worker, "writer worker is gone");
        }
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
