//! What every endpoint shares: the endpoints a node bound, the poll period, ROUTER request
//! envelopes and the worker reply sockets. The endpoints themselves are `produce`, `fetch`,
//! `relay`, `control`, `dolly` and `replication`.

/// The endpoints a node actually bound (ports resolved when the config asked for `*` or `0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// Writer ROUTER.
    pub writer: String,
    /// Reader ROUTER.
    pub reader: String,
    /// Ack PUB.
    pub ack: String,
    /// Controller ROUTER.
    pub controller: String,
    /// Replication ROUTER (issue #4).
    pub replica: String,
    /// Relay ROUTER: push delivery to subscribers (issue #7).
    pub relay: String,
    /// Dolly requests ROUTER (issue #5).
    pub dolly_requests: String,
    /// Dolly updates PUB, bound while this node leads (the port is resolved at start).
    pub dolly_updates: String,
    /// Dolly snapshots ROUTER, bound while this node leads.
    pub dolly_snapshots: String,
    /// HTTP admin (and Raft) address, `host:port`.
    pub http: String,
}

/// How often endpoint loops wake to check for shutdown, ms.
pub(crate) const POLL_MS: i64 = 100;

pub(crate) use crate::sockets::try_send;

/// A request as a ROUTER delivers it, split into the routing id, whether it came in a REQ
/// envelope (an empty first frame followed by the request), and the request frames.
pub(crate) struct Request {
    pub(crate) routing_id: Vec<u8>,
    pub(crate) envelope: bool,
    pub(crate) frames: Vec<Vec<u8>>,
}

impl Request {
    /// Splits `[routing id][empty]?[frames]...`; None for a message without a routing id.
    pub(crate) fn split(mut frames: Vec<Vec<u8>>) -> Option<Request> {
        if frames.is_empty() {
            return None;
        }
        let routing_id = frames.remove(0);
        let envelope = frames.len() > 1 && frames[0].is_empty();
        if envelope {
            frames.remove(0);
        }
        Some(Request {
            routing_id,
            envelope,
            frames,
        })
    }

    /// The reply message: routing id, the envelope if the request had one, then `reply`.
    pub(crate) fn reply(self, reply: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(reply.len() + 2);
        out.push(self.routing_id);
        if self.envelope {
            out.push(Vec::new());
        }
        out.extend(reply);
        out
    }
}

/// Replies from worker threads to an endpoint's front thread: the front's PULL (bound to a fresh
/// inproc address) and `workers` PUSH sockets connected to it, one per worker. Unlimited HWM, so
/// a worker never blocks on a reply.
pub(crate) fn worker_replies(
    ctx: &zmq::Context,
    name: &str,
    workers: usize,
) -> Result<(zmq::Socket, Vec<zmq::Socket>), zmq::Error> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let inproc = format!("inproc://zper-{name}-{n}");
    let pull = ctx.socket(zmq::PULL)?;
    pull.set_rcvhwm(0)?;
    pull.bind(&inproc)?;
    let mut pushes = Vec::with_capacity(workers);
    for _ in 0..workers {
        let push = ctx.socket(zmq::PUSH)?;
        push.set_sndhwm(0)?;
        push.set_linger(1000)?;
        push.connect(&inproc)?;
        pushes.push(push);
    }
    Ok((pull, pushes))
}
