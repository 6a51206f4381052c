//! Reader endpoint (`reader.bind`, default 5556; spec `zper.md` §5, fixed as issue #2 asks).
//!
//! Requests `[routing id][REQ envelope?][command][args]...` are handed to `reader.workers` worker
//! threads; each reply goes back through an inproc socket to the front, which owns the ROUTER.
//! Every request gets exactly one reply: a REQ envelope is echoed (§5.5), malformed requests and
//! invalid identities get `[102]`, bad offsets `[101]`, store failures `[0xFF]`. FETCH with
//! max_bytes -1 is the README's stream fetch (§9): `[100][payload]...[next offset:8]`, the whole
//! messages from the offset within one segment (the next offset last since issue #17). A topic never written reads as one empty segment
//! at 0 (§5.4) without creating anything on disk.
//!
//! Memory is bounded (issue #13): a connection may have [`PER_CONNECTION`] requests in
//! progress and the node [`IN_PROGRESS`] in all; a FETCH or stream reply is only built when it
//! fits the node's memory budget ([`MemoryBudget`]), which counts replies still queued towards
//! clients that do not read them. A request past any of these gets `[0xFF]` at once (counted
//! as `zper_rejected_total{reason="overloaded"}`); ZPER has no "busy" status, and 0xFF is
//! what its clients already retry.
//!
//! With `reader.engine = zmtp` zper's own ZMTP engine ([`engine`]) replaces the ROUTER and
//! its front thread: same replies, FETCH ranges sent from the segment file, TCP backpressure
//! instead of `[0xFF]` past the in-progress bounds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use tracing::{debug, debug_span, error, warn};
use zper_store::{Store, StoreError};
use zper_wire::{Identity, ReaderReply, ReaderRequest, Status, Timestamp};

use crate::config::{NodeConfig, ReaderEngine};
use crate::context::NodeContext;
use crate::endpoint::{try_send, Request, POLL_MS};
use crate::error::NodeError;
use crate::memory::MemoryBudget;
use crate::metrics::Counters;
use crate::replication::PlacementView;
use crate::sockets::recv_parts;

pub(crate) mod engine;
mod worker;

/// Started reader endpoint threads.
pub(crate) struct Reader {
    pub(crate) front: JoinHandle<()>,
}

/// Requests one connection may have in progress (received, not yet answered); docs promise 16
/// unread replies per connection, and libzmq queues at most that many more
/// ([`READER_REPLY_HWM`]).
pub const PER_CONNECTION: usize = 16;
/// Requests the node has in progress across all connections.
pub const IN_PROGRESS: usize = 256;

/// Requests in progress, per connection and in all (the front's bookkeeping).
#[derive(Debug, Default)]
pub(crate) struct InProgress {
    by_peer: HashMap<Vec<u8>, usize>,
    total: usize,
}

impl InProgress {
    /// Takes a slot for `peer`; false when it has [`PER_CONNECTION`] already or the node
    /// [`IN_PROGRESS`].
    pub(crate) fn admit(&mut self, peer: &[u8]) -> bool {
        if self.total >= IN_PROGRESS {
            return false;
        }
        let n = self.by_peer.entry(peer.to_vec()).or_insert(0);
        if *n >= PER_CONNECTION {
            return false;
        }
        *n += 1;
        self.total += 1;
        true
    }

    /// Gives `peer`'s slot back (its reply left the worker).
    pub(crate) fn done(&mut self, peer: &[u8]) {
        if let Some(n) = self.by_peer.get_mut(peer) {
            *n -= 1;
            self.total = self.total.saturating_sub(1);
            if *n == 0 {
                self.by_peer.remove(peer);
            }
        }
    }

    /// Requests in progress in all.
    pub(crate) fn total(&self) -> usize {
        self.total
    }
}

/// Unread replies queued per reader connection before further replies to it are dropped.
pub const READER_REPLY_HWM: i32 = 16;

/// The bound reader endpoint: a libzmq ROUTER, or the listener of zper's own engine.
pub(crate) enum ReaderSocket {
    /// `reader.engine = libzmq`.
    Router(zmq::Socket),
    /// `reader.engine = zmtp`: the listener and the bound endpoint (port resolved).
    Engine(mio::net::TcpListener, String),
}

impl ReaderSocket {
    /// The bound endpoint (`*` and port 0 resolved).
    ///
    /// Errors: zmq cannot tell (the socket is closed).
    pub(crate) fn address(&self) -> Result<String, NodeError> {
        match self {
            ReaderSocket::Router(s) => crate::context::bound_address(s),
            ReaderSocket::Engine(_, bound) => Ok(bound.clone()),
        }
    }

    /// The ROUTER, for the connection monitor (zper's engine counts its connections itself).
    pub(crate) fn router(&self) -> Option<&zmq::Socket> {
        match self {
            ReaderSocket::Router(s) => Some(s),
            ReaderSocket::Engine(..) => None,
        }
    }
}

/// Binds the reader endpoint (`reader.bind`) with the engine `reader.engine` names.
///
/// Errors: [`NodeError::Bind`] / [`NodeError::Listen`] (address in use, bad endpoint), or a
/// zmq option refused.
pub(crate) fn bind(
    zmq: &zmq::Context,
    config: &NodeConfig,
    curve: &crate::context::CurveEndpoints,
) -> Result<ReaderSocket, NodeError> {
    match config.reader_engine {
        ReaderEngine::Zmtp => {
            let (listener, bound) = crate::zmtp::listener::bind(&config.reader_bind)?;
            Ok(ReaderSocket::Engine(listener, bound))
        }
        ReaderEngine::Libzmq => bind_router(zmq, config, curve).map(ReaderSocket::Router),
    }
}

/// Creates and binds the reader ROUTER (`reader.bind`).
///
/// Errors: [`NodeError::Bind`] (address in use, bad endpoint), or a zmq option refused.
fn bind_router(
    zmq: &zmq::Context,
    config: &NodeConfig,
    curve: &crate::context::CurveEndpoints,
) -> Result<zmq::Socket, NodeError> {
    crate::context::bind(zmq, zmq::ROUTER, &config.reader_bind, |r| {
        curve.serve(crate::config::CurveEndpointName::Reader, r)?;
        r.set_router_mandatory(true)?;
        // A reconnecting consumer takes its identity over instead of hanging behind a
        // half-open connection (the original reader had no handover, spec §2).
        r.set_router_handover(true)?;
        // Replies a client has not read yet, per connection: bounds memory at this many FETCH
        // replies of at most max_message + 9 bytes; further replies are dropped and counted.
        r.set_sndhwm(READER_REPLY_HWM)?;
        r.set_sndbuf(config.send_buffer)
    })
}

/// Starts the reader endpoint on its bound socket: zper's engine, or the front thread and
/// `reader.workers` worker threads over the ROUTER. One FETCH reply holds at most
/// `max_message + 9` bytes.
///
/// Errors: an inproc socket, the engine's poll or a thread could not be created.
pub(crate) fn spawn(socket: ReaderSocket, nc: &NodeContext) -> Result<Reader, NodeError> {
    let router = match socket {
        ReaderSocket::Router(router) => router,
        ReaderSocket::Engine(listener, _) => {
            return Ok(Reader {
                front: engine::spawn(listener, nc)?,
            })
        }
    };
    let workers = nc.config.reader_workers;
    let cap = nc.config.max_message as u64 + 9;
    let (replies, pushes) = crate::endpoint::worker_replies(&nc.zmq, "reader-replies", workers)?;
    // Never full: the front admits at most IN_PROGRESS requests before their replies are back.
    let (tx, rx) = crossbeam_channel::bounded::<Vec<Vec<u8>>>(IN_PROGRESS);
    let mut handles = Vec::with_capacity(workers);
    for (i, push) in pushes.into_iter().enumerate() {
        let (rx, store, counters) = (rx.clone(), nc.store.clone(), nc.counters.clone());
        let remote = Some(Remote::new(
            nc.zmq.clone(),
            nc.view.clone(),
            nc.curve.reader(),
        ));
        let budget = nc.memory.clone();
        handles.push(crate::context::spawn(
            &format!("zper-reader-{i}"),
            move || work(rx, push, store, cap, counters, remote, &budget),
        )?);
    }
    let (counters, stop) = (nc.counters.clone(), nc.stop());
    let front = crate::context::spawn("zper-reader", move || {
        front(router, replies, tx, handles, counters, stop)
    })?;
    Ok(Reader { front })
}

fn front(
    router: zmq::Socket,
    replies: zmq::Socket,
    tx: Sender<Vec<Vec<u8>>>,
    workers: Vec<JoinHandle<()>>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) {
    let mut in_progress = InProgress::default();
    let forward = |replies: &zmq::Socket, in_progress: &mut InProgress| {
        // Replies pass through as libzmq messages: a FETCH reply's bytes are not copied here.
        while let Ok(parts) = recv_parts(replies, zmq::DONTWAIT) {
            if let Some(peer) = parts.first() {
                in_progress.done(peer);
            }
            if !try_send(&router, parts) {
                Counters::add(&counters.replies_dropped, 1);
            }
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let mut items = [
            router.as_poll_item(zmq::POLLIN),
            replies.as_poll_item(zmq::POLLIN),
        ];
        if let Err(e) = zmq::poll(&mut items, POLL_MS) {
            error!(error = %e, "reader poll failed");
            break;
        }
        forward(&replies, &mut in_progress);
        for _ in 0..1024 {
            match router.recv_multipart(zmq::DONTWAIT) {
                Ok(frames) => {
                    let Some(peer) = frames.first().cloned() else {
                        continue;
                    };
                    if !in_progress.admit(&peer) {
                        refuse_overloaded(&router, frames, &counters);
                        continue;
                    }
                    match tx.try_send(frames) {
                        Ok(()) => {}
                        Err(crossbeam_channel::TrySendError::Full(frames)) => {
                            in_progress.done(&peer);
                            refuse_overloaded(&router, frames, &counters);
                        }
                        Err(crossbeam_channel::TrySendError::Disconnected(_)) => {
                            in_progress.done(&peer);
                            error!("reader workers are gone");
                        }
                    }
                }
                Err(zmq::Error::EAGAIN) => break,
                Err(e) => {
                    warn!(error = %e, "reader receive failed");
                    break;
                }
            }
        }
    }
    drop(tx);
    for w in workers {
        let _ = w.join();
    }
    forward(&replies, &mut in_progress);
    debug!(in_progress = in_progress.total(), "reader stopped");
}

/// Answers a request the node has no room for with `[0xFF]` (dropped if even that cannot be
/// delivered), and counts it.
fn refuse_overloaded(router: &zmq::Socket, frames: Vec<Vec<u8>>, counters: &Counters) {
    Counters::add(&counters.overloaded, 1);
    if let Some(req) = Request::split(frames) {
        let out = req.reply(ReaderReply::Status(Status::InternalError).into_frames());
        if !try_send(router, out) {
            Counters::add(&counters.replies_dropped, 1);
        }
    }
}

/// Forwards reader requests for topics this node holds no copy of to the fragment's leader
/// (issue #4), over one DEALER per (leader, topic) whose identity names the topic.
pub(crate) struct Remote {
    ctx: zmq::Context,
    view: PlacementView,
    /// CURVE keys for the leaders' readers when they require CURVE (issue #19).
    curve: Option<crate::zmtp::security::CurveEndpoint>,
    /// By (leader, fragment store key).
    links: HashMap<(u64, String), zmq::Socket>,
}

/// Longest wait for a forwarded reader request's answer, ms.
const REMOTE_TIMEOUT_MS: i64 = 2000;

impl Remote {
    fn new(
        ctx: zmq::Context,
        view: PlacementView,
        curve: Option<crate::zmtp::security::CurveEndpoint>,
    ) -> Self {
        Remote {
            ctx,
            view,
            curve,
            links: HashMap::new(),
        }
    }

    /// The leader's answer when `topic` is placed and this node holds no copy; `None` to
    /// answer locally. A leader that does not answer in time gives `[0xFF]`.
    fn answer(&mut self, routing_id: &[u8], frames: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
        let identity = Identity::parse(routing_id).ok()?;
        let topic = identity.topic.clone();
        let key = fragment_key(Some(&self.view), &identity);
        let frag = self.view.fragment(&key)?;
        if frag.replicas.contains(&self.view.me()) {
            return None;
        }
        let endpoint = self
            .view
            .endpoints(frag.leader)
            .map(|e| e.peer_reader().to_owned())?;
        let link = (frag.leader, key.clone());
        let result = (|| -> Result<Vec<Vec<u8>>, String> {
            if !self.links.contains_key(&link) {
                let mut uuid = [0u8; 16];
                uuid[..8].copy_from_slice(&self.view.me().to_be_bytes());
                // Unique per link in this process (several workers forward the same topic).
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
                let n = NEXT.fetch_add(1, Ordering::Relaxed);
                uuid[8..].copy_from_slice(&n.to_be_bytes());
                // The mode byte names the fragment to the leader's reader.
                let id = Identity::new(&topic, frag.id.min(255) as u8, &uuid)
                    .map_err(|e| e.to_string())?;
                let s = self.ctx.socket(zmq::DEALER).map_err(|e| e.to_string())?;
                if let Some(curve) = &self.curve {
                    curve
                        .apply_to_peer_link(&s)
                        .map_err(|e| format!("CURVE keys: {e}"))?;
                }
                s.set_identity(&id.to_bytes()).map_err(|e| e.to_string())?;
                s.set_linger(0).map_err(|e| e.to_string())?;
                s.connect(&endpoint).map_err(|e| e.to_string())?;
                self.links.insert(link.clone(), s);
            }
            let s = self.links.get(&link).ok_or("no link")?;
            s.send_multipart(frames, 0).map_err(|e| e.to_string())?;
            if s.poll(zmq::POLLIN, REMOTE_TIMEOUT_MS)
                .map_err(|e| e.to_string())?
                == 0
            {
                return Err("the leader did not answer".into());
            }
            s.recv_multipart(0).map_err(|e| e.to_string())
        })();
        match result {
            Ok(reply) => Some(reply),
            Err(e) => {
                debug!(topic = %topic, leader = frag.leader, error = %e, "reader forward failed");
                self.links.remove(&link);
                Some(ReaderReply::Status(Status::InternalError).into_frames())
            }
        }
    }
}

fn work(
    rx: Receiver<Vec<Vec<u8>>>,
    push: zmq::Socket,
    store: Arc<Store>,
    cap: u64,
    counters: Arc<Counters>,
    mut remote: Option<Remote>,
    budget: &MemoryBudget,
) {
    for frames in rx {
        let Some(req) = Request::split(frames) else {
            continue;
        };
        if !budget.allows(reply_bound(&req.frames, cap)) {
            // Built, this reply would take the node past its memory budget.
            Counters::add(&counters.overloaded, 1);
            let out = req.reply(ReaderReply::Status(Status::InternalError).into_frames());
            if push.send_multipart(out, 0).is_err() {
                Counters::add(&counters.replies_dropped, 1);
            }
            continue;
        }
        if let Some(reply) = remote
            .as_mut()
            .and_then(|r| r.answer(&req.routing_id, &req.frames))
        {
            let out = req.reply(reply);
            if push.send_multipart(out, 0).is_err() {
                Counters::add(&counters.replies_dropped, 1);
            }
            continue;
        }
        let view = remote.as_ref().map(|r| &r.view);
        let reply = handle(&store, view, &req.routing_id, &req.frames, cap);
        if matches!(reply, ReaderReply::Status(Status::InvalidCommand)) {
            Counters::add(&counters.bad_requests, 1);
        }
        count_fetched(&counters, &req.routing_id, &reply);
        let out = req.reply(reply.into_frames());
        if push.send_multipart(out, 0).is_err() {
            Counters::add(&counters.replies_dropped, 1);
        }
    }
}

/// The most bytes the reply to `frames` can hold: FETCH's max_bytes (at most `cap`), `cap`
/// for a stream fetch, a few bytes for anything else.
fn reply_bound(frames: &[Vec<u8>], cap: u64) -> u64 {
    match ReaderRequest::decode(frames) {
        Ok(ReaderRequest::Fetch { max_bytes, .. }) => {
            u64::try_from(max_bytes).unwrap_or(0).min(cap)
        }
        Ok(ReaderRequest::Stream { .. }) => cap,
        _ => 0,
    }
}

/// The store key a reader identity reads (issue #4): its topic's fragment named by the mode
/// byte (ignored by ZPER's reader, spec §5) when the topic has that many fragments, else
/// fragment 0 (so unchanged clients, whatever their mode byte, read fragment 0).
fn fragment_key(view: Option<&PlacementView>, identity: &Identity) -> String {
    let n = view.map_or(1, |v| v.fragment_count(&identity.topic));
    let k = u32::from(identity.mode);
    zper_store::log_key(&identity.topic, if k < n { k } else { 0 })
}

/// Adds a FETCH or stream reply's messages and bytes to its topic's counters.
fn count_fetched(counters: &Counters, routing_id: &[u8], reply: &ReaderReply) {
    let (messages, bytes) = match reply {
        ReaderReply::Data(b) if !b.is_empty() => (
            zper_wire::Records::new(b).filter(|r| !r.more).count() as u64,
            b.len() as u64,
        ),
        ReaderReply::Stream { payloads, .. } if !payloads.is_empty() => (
            payloads.len() as u64,
            payloads.iter().map(|p| p.len() as u64).sum(),
        ),
        _ => return,
    };
    let Ok(topic) = zper_wire::topic_of(routing_id) else {
        return;
    };
    let t = counters.topic(topic);
    Counters::add(&t.messages_fetched, messages);
    Counters::add(&t.bytes_fetched, bytes);
}

/// Answers one request (routing id = the client's ZPER identity, frames after the envelope).
pub(crate) fn handle(
    store: &Store,
    view: Option<&PlacementView>,
    routing_id: &[u8],
    frames: &[Vec<u8>],
    cap: u64,
) -> ReaderReply {
    let Ok(identity) = Identity::parse(routing_id) else {
        return ReaderReply::Status(Status::InvalidCommand);
    };
    let request = match ReaderRequest::decode(frames) {
        Ok(r) => r,
        Err(e) => {
            debug!(topic = %identity.topic, error = %e, "bad reader request");
            return ReaderReply::Status(Status::InvalidCommand);
        }
    };
    let span = debug_span!("reader", topic = %identity.topic, ?request);
    let _enter = span.enter();
    if let ReaderRequest::Produced { message_id } = request {
        return crate::produce::produced(store, view, &identity, &message_id);
    }
    let key = fragment_key(view, &identity);
    let Some(topic) = store.topic(&key) else {
        return empty_topic(request);
    };
    let result = match request {
        ReaderRequest::Fetch { offset, max_bytes } => topic
            .fetch(offset, max_bytes as u64, cap)
            .map(|f| ReaderReply::Data(f.bytes)),
        ReaderRequest::Stream { offset } => {
            topic
                .stream(offset, cap)
                .map(|(payloads, next_offset)| ReaderReply::Stream {
                    next_offset,
                    payloads,
                })
        }
        ReaderRequest::Offset {
            timestamp,
            max_entries,
        } => topic
            .offsets(timestamp, max_entries)
            .map(ReaderReply::Offsets),
        ReaderRequest::Produced { .. } => Ok(ReaderReply::Status(Status::InvalidCommand)),
    };
    result.unwrap_or_else(|e| match e {
        StoreError::InvalidOffset { .. } => ReaderReply::Status(Status::InvalidOffset),
        StoreError::Corrupt { start, end, .. } => {
            // Logged and counted when found; `/v1/cluster/health` names the range. Not logged
            // per request: a consumer retrying would flood the log (issue #13).
            debug!(start, end, "read of a damaged range refused");
            ReaderReply::Status(Status::InternalError)
        }
        e => {
            error!(error = %e, "reader store error");
            ReaderReply::Status(Status::InternalError)
        }
    })
}

/// Replies for a topic that was never written: one empty segment at 0 (§5.4).
fn empty_topic(request: ReaderRequest) -> ReaderReply {
    match request {
        ReaderRequest::Fetch { offset: 0, .. } => ReaderReply::Data(Vec::new()),
        ReaderRequest::Stream { offset: 0 } => ReaderReply::Stream {
            next_offset: 0,
            payloads: Vec::new(),
        },
        ReaderRequest::Offset {
            timestamp: Timestamp::Earliest,
            ..
        } => ReaderReply::Offsets(vec![0]),
        ReaderRequest::Offset {
            timestamp: Timestamp::Latest,
            ..
        } => ReaderReply::Offsets(vec![0, 0]),
        // The virtual empty segment counts as modified now: later timestamps find it.
        ReaderRequest::Offset {
            timestamp: Timestamp::At(t),
            ..
        } if t > now_ms() => ReaderReply::Offsets(vec![0, 0]),
        _ => ReaderReply::Status(Status::InvalidOffset),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_gets_at_most_its_share_of_requests_in_progress_and_the_node_a_total() {
        let mut p = InProgress::default();
        for _ in 0..PER_CONNECTION {
            assert!(p.admit(b"a"));
        }
        assert!(!p.admit(b"a"), "one connection past its share");
        p.done(b"a");
        assert!(p.admit(b"a"), "a slot given back can be taken again");
        let peers = (IN_PROGRESS - PER_CONNECTION).div_ceil(PER_CONNECTION);
        for n in 0..peers {
            for _ in 0..PER_CONNECTION {
                let _ = p.admit(format!("peer{n}").as_bytes());
            }
        }
        assert_eq!(p.total(), IN_PROGRESS);
        assert!(!p.admit(b"newcomer"), "the node's total is a bound too");
        p.done(b"nobody");
        assert_eq!(p.total(), IN_PROGRESS, "an unknown peer gives nothing back");
    }

    #[test]
    fn the_reply_bound_is_the_fetch_size_capped_or_the_cap_for_a_stream() {
        let fetch = |max: i64| {
            vec![
                b"FETCH".to_vec(),
                0i64.to_be_bytes().to_vec(),
                max.to_be_bytes().to_vec(),
            ]
        };
        assert_eq!(reply_bound(&fetch(100), 1000), 100);
        assert_eq!(reply_bound(&fetch(1 << 30), 1000), 1000);
        assert_eq!(reply_bound(&fetch(-1), 1000), 1000);
        assert_eq!(reply_bound(&[b"NONSENSE".to_vec()], 1000), 0);
    }
}
