//! The reader endpoint on zper's own ZMTP engine (issue #17; `reader.engine = zmtp`): the front
//! thread owns a TCP listener instead of a libzmq ROUTER, runs each client's handshake (ZMTP/2.0
//! for JeroMQ 0.3, ZMTP/3.x with NULL for libzmq 4; DEALER, REQ and ROUTER clients, spec
//! `zper.md` §2, §5) and hands whole requests to `reader.workers` worker threads. A FETCH
//! range of the open segment of at least [`MIN_FILE`](super::worker::MIN_FILE) bytes comes back as a file range and
//! goes from the page cache to the socket with `sendfile`, as the original ZPER's reader sends
//! its segment files (§5.3); other replies come back as frames, built as on the libzmq reader
//! ([`super::handle`]).
//!
//! Same replies as the libzmq reader, each on the connection that asked (a REQ envelope
//! echoed, §5.5). What differs: a client with [`PER_CONNECTION`] requests in progress, or
//! [`OUTPUT_PAUSE`] reply bytes it has not taken, is not read until replies go out (TCP holds
//! it back) instead of being answered `[0xFF]`; the node takes at most [`IN_PROGRESS`]
//! requests in all the same way. A malformed stream closes that connection only and is
//! counted (`zmtp_protocol_errors`); a request over [`MAX_REQUEST`] bytes is answered `[102]`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};
use tracing::{debug, error};
use zper_wire::zmtp::{Command, Event, Limits, SocketType};
use zper_wire::{ReaderReply, Records, Status};

use super::worker::{Answer, Worker};
use super::{reply_bound, Remote, IN_PROGRESS, PER_CONNECTION};
use crate::context::NodeContext;
use crate::endpoint::POLL_MS;
use crate::error::NodeError;
use crate::metrics::Counters;
use crate::produce::engine::{
    DRAIN_TIMEOUT, HANDSHAKE_TIMEOUT, IDLE_EVICTION, MAX_CONNECTIONS, OUTPUT_PAUSE,
};
use crate::zmtp::connection::{Connection, READ_CHUNK};
use crate::zmtp::peers;

/// Peers the reader accepts (those libzmq's ROUTER accepts: DEALER, REQ and ROUTER).
pub(crate) const READER_PEERS: [SocketType; 3] =
    [SocketType::Dealer, SocketType::Req, SocketType::Router];
/// Largest request frame, bytes (a FETCH is 21 bytes of frames; PRODUCED names a message id of
/// at most 255 bytes).
pub(crate) const MAX_REQUEST: u64 = 64 * 1024;
/// Reply bytes a connection's requests in progress may add up to (each request counted at
/// the most its reply can hold: max_bytes for a FETCH): past this, its next request waits for
/// a reply, so a client that never reads holds a few replies' memory, not 16 of
/// `max_message` each. One request is always taken, whatever its size.
pub(crate) const MAX_IN_FLIGHT: u64 = 2 << 20;
/// Index into [`crate::metrics::ENDPOINTS`] of the reader's open connections.
const ENDPOINT: usize = 1;
/// Bytes read from one connection per wake before the others get their turn.
const READ_BUDGET: usize = 4 * READ_CHUNK;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);

/// One request for a worker: `frames` after the identity (and the REQ envelope, `envelope`).
struct Job {
    token: Token,
    /// The most bytes its reply can hold ([`reply_bound`]).
    bound: u64,
    routing_id: Vec<u8>,
    envelope: bool,
    frames: Vec<Vec<u8>>,
}

/// A worker's reply to `token`'s request.
struct Done {
    token: Token,
    bound: u64,
    envelope: bool,
    answer: Answer,
}

/// Binds `listener`'s poll, starts `reader.workers` workers and the engine thread.
///
/// Errors: the poll or its waker could not be made, or a thread could not be started.
pub(crate) fn spawn(listener: TcpListener, nc: &NodeContext) -> Result<JoinHandle<()>, NodeError> {
    let io = |source| NodeError::Listen {
        endpoint: nc.config.reader_bind.clone(),
        source,
    };
    let poll = Poll::new().map_err(io)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(io)?);
    // Never full: the engine admits at most IN_PROGRESS requests before their replies are
    // back, and each job gives one reply.
    let (jobs, job_rx) = crossbeam_channel::bounded::<Job>(IN_PROGRESS);
    let (done_tx, done) = crossbeam_channel::bounded::<Done>(IN_PROGRESS);
    let cap = nc.config.max_message as u64 + 9;
    let mut workers = Vec::with_capacity(nc.config.reader_workers);
    for i in 0..nc.config.reader_workers {
        let (rx, tx, waker) = (job_rx.clone(), done_tx.clone(), waker.clone());
        let (store, counters, budget) = (nc.store.clone(), nc.counters.clone(), nc.memory.clone());
        let remote = Some(Remote::new(
            nc.zmq.clone(),
            nc.view.clone(),
            nc.curve.reader(),
        ));
        workers.push(crate::context::spawn(
            &format!("zper-reader-{i}"),
            move || {
                let mut w = Worker {
                    store,
                    cap,
                    counters,
                    remote,
                    budget,
                };
                for job in rx {
                    let answer = w.answer(&job.routing_id, &job.frames);
                    let d = Done {
                        token: job.token,
                        bound: job.bound,
                        envelope: job.envelope,
                        answer,
                    };
                    if tx.send(d).is_err() {
                        return;
                    }
                    let _ = waker.wake();
                }
            },
        )?);
    }
    let engine = ReaderEngine {
        listener,
        cap,
        limits: Limits {
            max_message: MAX_REQUEST,
            max_buffered: 2 * MAX_REQUEST,
            allow_empty_message: true,
        },
        counters: nc.counters.clone(),
        stop: nc.stop(),
        max_connections: MAX_CONNECTIONS,
        idle_eviction: IDLE_EVICTION,
        curve: nc.curve.reader(),
    };
    crate::context::spawn("zper-reader", move || engine.run(poll, jobs, done, workers))
}

/// An open connection.
struct Client {
    conn: Connection,
    /// Its identity (or one made up for an empty identity, as libzmq's ROUTER does, §2).
    routing_id: Vec<u8>,
    /// Requests handed to the workers and not answered yet.
    in_progress: usize,
    /// The most bytes their replies can hold, in all ([`MAX_IN_FLIGHT`]).
    in_flight: u64,
    /// When bytes last came in or replies went out.
    active: Instant,
}

/// The engine loop's connections.
#[derive(Default)]
struct Clients {
    by_token: HashMap<Token, Client>,
    next: usize,
    anonymous: u32,
    /// Requests in progress in all.
    total: usize,
    /// Connections not read for now (see [`Clients::held`]).
    paused: HashSet<Token>,
    /// Connections whose peer ended its side, open until their replies are out.
    draining: HashMap<Token, Instant>,
}

impl Clients {
    /// Whether `token`'s connection must not be read for now: it has [`PER_CONNECTION`]
    /// requests in progress or [`MAX_IN_FLIGHT`] reply bytes on their way, the node
    /// [`IN_PROGRESS`] requests, or it holds [`OUTPUT_PAUSE`] reply bytes its peer has not
    /// taken.
    fn held(&self, token: Token) -> bool {
        self.total >= IN_PROGRESS
            || self.by_token.get(&token).is_some_and(|c| {
                c.in_progress >= PER_CONNECTION
                    || (c.in_progress > 0 && c.in_flight >= MAX_IN_FLIGHT)
                    || c.conn.unsent() >= OUTPUT_PAUSE
            })
    }

    /// Whether `token`'s connection owes its peer nothing more.
    fn settled(&self, token: Token) -> bool {
        self.by_token
            .get(&token)
            .is_none_or(|c| c.in_progress == 0 && c.conn.unsent() == 0)
    }

    /// The paused connections that may be read again (taken out of the paused set).
    fn resumable(&mut self) -> Vec<Token> {
        let ready: Vec<Token> = self
            .paused
            .iter()
            .filter(|t| !self.held(**t))
            .copied()
            .collect();
        for t in &ready {
            self.paused.remove(t);
        }
        ready
            .into_iter()
            .filter(|t| self.by_token.contains_key(t))
            .collect()
    }
}

struct ReaderEngine {
    listener: TcpListener,
    /// The most bytes one reply holds (`max_message` + 9).
    cap: u64,
    limits: Limits,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    /// Most connections held at once ([`MAX_CONNECTIONS`]).
    max_connections: usize,
    /// How long a connection must have been idle to be closed for a new one
    /// ([`IDLE_EVICTION`]).
    idle_eviction: Duration,
    /// CURVE, when the reader requires it (issue #19).
    curve: Option<crate::zmtp::security::CurveEndpoint>,
}

impl ReaderEngine {
    fn run(
        mut self,
        mut poll: Poll,
        jobs: Sender<Job>,
        done: Receiver<Done>,
        workers: Vec<JoinHandle<()>>,
    ) {
        if let Err(e) = self.serve(&mut poll, &jobs, &done) {
            error!(error = %e, "reader engine failed");
        }
        drop(jobs);
        drop(done); // a worker blocked on a full reply channel gives up
        for w in workers {
            let _ = w.join();
        }
        debug!("reader stopped");
    }

    fn serve(
        &mut self,
        poll: &mut Poll,
        jobs: &Sender<Job>,
        done: &Receiver<Done>,
    ) -> std::io::Result<()> {
        poll.registry()
            .register(&mut self.listener, LISTENER, Interest::READABLE)?;
        let mut clients = Clients {
            next: 2,
            ..Clients::default()
        };
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
                    LISTENER => self.accept(poll, &mut clients),
                    WAKER => {}
                    token => {
                        if (event.is_error() || event.is_write_closed()) && clients.held(token) {
                            // Not read while held, so the loss of its peer would go unseen.
                            self.close(poll, &mut clients, token);
                            continue;
                        }
                        if event.is_writable() {
                            self.flush(poll, &mut clients, token);
                        }
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            ready.push(token);
                        }
                    }
                }
            }
            self.answers(poll, &mut clients, done);
            ready.sort_unstable();
            ready.dedup();
            for token in ready {
                if self.read(poll, &mut clients, token, jobs) {
                    again.push(token);
                }
            }
            // Held connections whose replies went out: their requests may already wait in the
            // socket, which an edge-triggered poll will not announce again.
            again.extend(clients.resumable());
            if swept.elapsed() >= Duration::from_secs(1) {
                swept = Instant::now();
                self.sweep(poll, &mut clients);
            }
        }
        Ok(())
    }

    /// Closes connections whose handshake is late, whose CURVE key was revoked, and draining
    /// ones past [`DRAIN_TIMEOUT`].
    fn sweep(&mut self, poll: &Poll, clients: &mut Clients) {
        let conns = || clients.by_token.iter().map(|(t, c)| (t, &c.conn));
        let late = peers::late_handshakes(conns(), HANDSHAKE_TIMEOUT);
        let revoked = peers::revoked(conns(), self.curve.as_ref(), &self.counters.curve_refused);
        for token in late {
            self.protocol_error(poll, clients, token, "handshake timed out");
        }
        let stale = clients
            .draining
            .iter()
            .filter(|(_, t)| t.elapsed() >= DRAIN_TIMEOUT);
        let stale: Vec<Token> = stale.map(|(t, _)| *t).collect();
        for token in revoked.into_iter().chain(stale) {
            self.close(poll, clients, token);
        }
    }

    fn accept(&mut self, poll: &Poll, clients: &mut Clients) {
        while let Some(stream) = peers::next_stream(&self.listener, "reader") {
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
                &READER_PEERS,
                self.limits,
                "reader",
                self.curve.as_ref(),
            ) else {
                continue;
            };
            let client = Client {
                conn,
                routing_id: Vec::new(),
                in_progress: 0,
                in_flight: 0,
                active: Instant::now(),
            };
            clients.by_token.insert(token, client);
            self.counters.connections[ENDPOINT].fetch_add(1, Ordering::Relaxed);
            self.flush(poll, clients, token);
        }
    }

    /// Closes the connection idle the longest, if it has been idle for `idle_eviction` at
    /// least and has nothing in progress; true if one was closed.
    fn evict_idle(&mut self, poll: &Poll, clients: &mut Clients) -> bool {
        let idle = clients
            .by_token
            .iter()
            .filter(|(_, c)| c.in_progress == 0)
            .map(|(t, c)| (*t, c.active));
        let Some(token) = peers::idle_longest(idle, self.idle_eviction) else {
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
        jobs: &Sender<Job>,
    ) -> bool {
        if clients.held(token) {
            clients.paused.insert(token);
            return false;
        }
        let Some(client) = clients.by_token.get_mut(&token) else {
            return false;
        };
        let Ok(fill) = client.conn.fill(READ_BUDGET) else {
            self.close(poll, clients, token);
            return false;
        };
        if fill.bytes > 0 {
            client.active = Instant::now();
        }
        if client.conn.in_handshake() {
            match client.conn.handshake() {
                Ok(Some(peer)) => {
                    client.routing_id = peers::routing_id(&peer.identity, &mut clients.anonymous);
                    client.conn.peer = Some(peer);
                }
                Ok(None) => {}
                Err(e) => {
                    self.flush(poll, clients, token);
                    self.protocol_error(poll, clients, token, &e.to_string());
                    return false;
                }
            }
        }
        let held = match self.requests(clients, token, jobs) {
            Ok(held) => held,
            Err(e) => {
                self.flush(poll, clients, token);
                self.protocol_error(poll, clients, token, &e);
                return false;
            }
        };
        self.flush(poll, clients, token);
        if held {
            // Unread requests stay in the buffer (and the socket) until replies go out; an end
            // of stream behind them is seen then.
            clients.paused.insert(token);
            return false;
        }
        if fill.eof {
            // Replies still due go out before the connection closes.
            if clients.settled(token) {
                self.close(poll, clients, token);
            } else {
                clients.draining.entry(token).or_insert_with(Instant::now);
            }
            return false;
        }
        fill.more
    }

    /// Hands every whole request of `token`'s unread bytes to the workers; true when it
    /// stopped early because the connection (or the node) has too many in progress.
    ///
    /// Errors: a protocol error (the connection is to be closed).
    fn requests(
        &mut self,
        clients: &mut Clients,
        token: Token,
        jobs: &Sender<Job>,
    ) -> Result<bool, String> {
        let mut scratch = Vec::new();
        loop {
            if clients.held(token) {
                return Ok(true);
            }
            let Some(client) = clients.by_token.get_mut(&token) else {
                return Ok(false);
            };
            scratch.clear();
            let event = client
                .conn
                .next_event(&mut scratch)
                .map_err(|e| e.to_string())?;
            let mut pong = None;
            match event {
                None => return Ok(false),
                Some(Event::Message {
                    stored, envelope, ..
                }) => {
                    let frames: Vec<Vec<u8>> = scratch
                        .get(stored)
                        .map(|s| Records::new(s).map(|r| r.payload.to_vec()).collect())
                        .unwrap_or_default();
                    let bound = reply_bound(&frames, self.cap);
                    let job = Job {
                        token,
                        bound,
                        routing_id: client.routing_id.clone(),
                        envelope,
                        frames,
                    };
                    match jobs.try_send(job) {
                        Ok(()) => {
                            client.in_progress += 1;
                            client.in_flight = client.in_flight.saturating_add(bound);
                            clients.total += 1;
                        }
                        Err(_) => {
                            // Not reached while IN_PROGRESS bounds what is queued; at shutdown
                            // the workers are gone.
                            Counters::add(&self.counters.overloaded, 1);
                            let status = ReaderReply::Status(Status::InternalError);
                            client
                                .conn
                                .queue(&with_envelope(envelope, status.into_frames()));
                        }
                    }
                }
                Some(Event::Dropped(_)) => {
                    // A request frame over MAX_REQUEST bytes: no reader request is that long.
                    Counters::add(&self.counters.bad_requests, 1);
                    let status = ReaderReply::Status(Status::InvalidCommand).into_frames();
                    let envelope = client.conn.dropped_envelope();
                    client.conn.queue(&with_envelope(envelope, status));
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

    /// Queues the workers' replies on the connections that asked, each connection written
    /// once after the queue is drained.
    fn answers(&mut self, poll: &Poll, clients: &mut Clients, done: &Receiver<Done>) {
        let now = Instant::now();
        let mut touched = HashSet::new();
        while let Ok(d) = done.try_recv() {
            clients.total = clients.total.saturating_sub(1);
            let Some(client) = clients.by_token.get_mut(&d.token) else {
                // Its connection closed while the request was in progress.
                Counters::add(&self.counters.replies_dropped, 1);
                continue;
            };
            client.in_progress = client.in_progress.saturating_sub(1);
            client.in_flight = client.in_flight.saturating_sub(d.bound);
            client.active = now;
            match d.answer {
                Answer::Frames(frames) => client.conn.queue(&with_envelope(d.envelope, frames)),
                Answer::File { file, at, len } => {
                    let head = with_envelope(d.envelope, vec![vec![Status::Ok.byte()]]);
                    client.conn.queue_file(&head, file, at, len);
                }
            }
            touched.insert(d.token);
        }
        for token in touched {
            self.flush(poll, clients, token);
        }
    }

    fn protocol_error(&mut self, poll: &Poll, clients: &mut Clients, token: Token, why: &str) {
        peers::count_protocol_error(&self.counters.zmtp_protocol_errors, "reader", why);
        self.close(poll, clients, token);
    }

    fn close(&mut self, poll: &Poll, clients: &mut Clients, token: Token) {
        let Some(mut client) = clients.by_token.remove(&token) else {
            return;
        };
        let _ = poll.registry().deregister(&mut client.conn.stream);
        peers::count_unfinished_curve(&self.counters, &client.conn);
        clients.paused.remove(&token);
        clients.draining.remove(&token);
        self.counters.connections[ENDPOINT].fetch_sub(1, Ordering::Relaxed);
    }

    /// Writes what `token`'s connection has queued; closes it when that fails, or when it is
    /// draining and owes nothing more.
    fn flush(&mut self, poll: &Poll, clients: &mut Clients, token: Token) {
        let failed = match clients.by_token.get_mut(&token) {
            Some(client) => client.conn.flush().is_err(),
            None => false,
        };
        if failed || (clients.draining.contains_key(&token) && clients.settled(token)) {
            self.close(poll, clients, token);
        }
    }
}

/// `frames` after an empty envelope frame when the request came in one (§5.5).
fn with_envelope(envelope: bool, mut frames: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    if envelope {
        frames.insert(0, Vec::new());
    }
    frames
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
