//! Controller commands and replies (README's ZPController, spec `zper.md` §9; issue #3): cluster
//! information for clients on the controller ROUTER (`controller.bind`, default 5558), in the
//! reader's request style: `[command][arg]...` in, `[status:1][...]` out (statuses of §5.2).
//!
//! ```text
//! NODES          -> [100][count:4] then per node: [id:8][live:1][name][writer][reader][ack]
//!                   [controller][dolly requests][dolly updates][dolly snapshots][http]
//! TOPIC <name>   -> [100][count:4] then per fragment: [fragment:4][leader:8][leader epoch:8]
//!                   [replica count:4] then per replica (leader first): [id:8][writer][reader]
//!                   | [101] unknown topic
//! LEADER         -> [100] then one node as in NODES | [101] no leader known
//! SUBSCRIBE <topic> <group> <subscriber>      (issue #7; KEEPALIVE renews with the same frames)
//!                -> [100][lease ms:8][revision:8][count:4] then per assigned fragment:
//!                   [fragment:4][committed offset:8][relay count:4] then that many relay
//!                   endpoints (the fragment's leader first, then its other replicas)
//!                   | [101] unknown topic | [0xFF] the metadata could not be written (retry)
//! UNSUBSCRIBE <topic> <group> <subscriber>
//!                -> [100] | [101] not a member (or unknown topic) | [0xFF]
//! anything else  -> [102]
//! ```

use thiserror::Error;

use crate::reader::Status;

/// Command words.
pub const NODES: &[u8] = b"NODES";
/// Command words.
pub const TOPIC: &[u8] = b"TOPIC";
/// Command words.
pub const LEADER: &[u8] = b"LEADER";

/// Command words (issue #7, `pirius.md` §16.2 RegisterSubscriber / KeepAlive / Deregister).
pub const SUBSCRIBE: &[u8] = b"SUBSCRIBE";
/// Command words.
pub const KEEPALIVE: &[u8] = b"KEEPALIVE";
/// Command words.
pub const UNSUBSCRIBE: &[u8] = b"UNSUBSCRIBE";

/// Frames per node in a NODES or LEADER reply.
pub const NODE_FRAMES: usize = 11;

/// A node as the controller describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInfo {
    /// Node id.
    pub id: u64,
    /// Lease current.
    pub live: bool,
    /// Name.
    pub name: String,
    /// Writer, reader, ack, controller, Dolly requests/updates/snapshots endpoints and the HTTP
    /// address, in that order.
    pub endpoints: [String; 8],
}

/// A replica of a fragment: its node and that node's data endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaInfo {
    /// Node id.
    pub id: u64,
    /// Its writer endpoint.
    pub writer: String,
    /// Its reader endpoint.
    pub reader: String,
}

/// A fragment of a topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FragmentInfo {
    /// Fragment id.
    pub id: u32,
    /// Leader node id.
    pub leader: u64,
    /// Leader epoch.
    pub leader_epoch: u64,
    /// Replicas, leader first.
    pub replicas: Vec<ReplicaInfo>,
}

/// Who subscribes: topic, subscription group and the subscriber's id within it (group and id:
/// 1-64 printable ASCII characters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    /// Topic name (spec `zper.md` §3 rules).
    pub topic: String,
    /// Subscription group.
    pub group: String,
    /// Subscriber id within the group.
    pub subscriber: String,
}

/// One fragment assigned to a subscriber (issue #7).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssignedFragment {
    /// Fragment id.
    pub id: u32,
    /// The group's committed offset in it (bytes; where delivery resumes).
    pub offset: u64,
    /// Relay endpoints of the nodes holding a copy, the fragment's leader first.
    pub relays: Vec<String>,
}

/// The answer to SUBSCRIBE / KEEPALIVE: the subscriber's fragments now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriptionInfo {
    /// Session lease, ms: renew (KEEPALIVE) well within it or the subscriber leaves the group.
    pub lease_ms: u64,
    /// Raft index at which this assignment was applied (relays judge assignment only once
    /// they have applied at least this far).
    pub revision: u64,
    /// Assigned fragments, by id.
    pub fragments: Vec<AssignedFragment>,
}

/// A decoded controller request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControllerRequest {
    /// Every node.
    Nodes,
    /// One topic's fragments.
    Topic(String),
    /// The Raft leader.
    Leader,
    /// Join a subscription group (issue #7).
    Subscribe(Member),
    /// Renew a subscriber's session (same effect and reply as SUBSCRIBE).
    KeepAlive(Member),
    /// Leave a subscription group.
    Unsubscribe(Member),
}

/// Why a controller request is malformed (answered with 102).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ControllerError {
    /// No frames.
    #[error("empty request")]
    Empty,
    /// Unknown command word.
    #[error("unknown command {0:?}")]
    UnknownCommand(String),
    /// Wrong number of arguments.
    #[error("{command} takes {expected} argument(s), got {got}")]
    ArgumentCount {
        /// Command.
        command: &'static str,
        /// Expected count.
        expected: usize,
        /// Received count.
        got: usize,
    },
    /// A topic name that is not valid (spec §3).
    #[error("invalid topic name")]
    InvalidTopic,
    /// A group or subscriber id that is not 1-64 printable ASCII characters.
    #[error("invalid {0}: 1-64 printable ASCII characters")]
    InvalidName(&'static str),
}

fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.len() <= 64 && name.iter().all(|b| b.is_ascii_graphic())
}

fn member<F: AsRef<[u8]>>(args: &[F]) -> Result<Member, ControllerError> {
    let topic = args[0].as_ref();
    crate::identity::validate_topic(topic).map_err(|_| ControllerError::InvalidTopic)?;
    for (what, name) in [("group", &args[1]), ("subscriber", &args[2])] {
        if !valid_name(name.as_ref()) {
            return Err(ControllerError::InvalidName(what));
        }
    }
    let text = |f: &F| String::from_utf8_lossy(f.as_ref()).into_owned();
    Ok(Member {
        topic: text(&args[0]),
        group: text(&args[1]),
        subscriber: text(&args[2]),
    })
}

impl ControllerRequest {
    /// Decodes `[command][args]...` (envelope already stripped).
    pub fn decode<F: AsRef<[u8]>>(frames: &[F]) -> Result<Self, ControllerError> {
        let (command, args) = frames.split_first().ok_or(ControllerError::Empty)?;
        let count = |command: &'static str, expected: usize| {
            if args.len() == expected {
                Ok(())
            } else {
                Err(ControllerError::ArgumentCount {
                    command,
                    expected,
                    got: args.len(),
                })
            }
        };
        match command.as_ref() {
            NODES => count("NODES", 0).map(|_| ControllerRequest::Nodes),
            LEADER => count("LEADER", 0).map(|_| ControllerRequest::Leader),
            TOPIC => {
                count("TOPIC", 1)?;
                let name = args[0].as_ref();
                crate::identity::validate_topic(name).map_err(|_| ControllerError::InvalidTopic)?;
                Ok(ControllerRequest::Topic(
                    String::from_utf8_lossy(name).into_owned(),
                ))
            }
            SUBSCRIBE => {
                count("SUBSCRIBE", 3)?;
                member(args).map(ControllerRequest::Subscribe)
            }
            KEEPALIVE => {
                count("KEEPALIVE", 3)?;
                member(args).map(ControllerRequest::KeepAlive)
            }
            UNSUBSCRIBE => {
                count("UNSUBSCRIBE", 3)?;
                member(args).map(ControllerRequest::Unsubscribe)
            }
            other => Err(ControllerError::UnknownCommand(
                String::from_utf8_lossy(other).into_owned(),
            )),
        }
    }

    /// The request frames a client sends.
    pub fn encode(&self) -> Vec<Vec<u8>> {
        match self {
            ControllerRequest::Nodes => vec![NODES.to_vec()],
            ControllerRequest::Leader => vec![LEADER.to_vec()],
            ControllerRequest::Topic(t) => vec![TOPIC.to_vec(), t.as_bytes().to_vec()],
            ControllerRequest::Subscribe(m) => member_frames(SUBSCRIBE, m),
            ControllerRequest::KeepAlive(m) => member_frames(KEEPALIVE, m),
            ControllerRequest::Unsubscribe(m) => member_frames(UNSUBSCRIBE, m),
        }
    }
}

fn member_frames(word: &[u8], m: &Member) -> Vec<Vec<u8>> {
    vec![
        word.to_vec(),
        m.topic.as_bytes().to_vec(),
        m.group.as_bytes().to_vec(),
        m.subscriber.as_bytes().to_vec(),
    ]
}

/// A controller reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControllerReply {
    /// A single status frame (101, 102).
    Status(Status),
    /// NODES.
    Nodes(Vec<NodeInfo>),
    /// TOPIC.
    Topic(Vec<FragmentInfo>),
    /// LEADER.
    Leader(Box<NodeInfo>),
    /// SUBSCRIBE and KEEPALIVE.
    Subscription(SubscriptionInfo),
}

fn node_frames(n: &NodeInfo, out: &mut Vec<Vec<u8>>) {
    out.push(n.id.to_be_bytes().to_vec());
    out.push(vec![u8::from(n.live)]);
    out.push(n.name.as_bytes().to_vec());
    out.extend(n.endpoints.iter().map(|e| e.as_bytes().to_vec()));
}

/// Reads frames in order; `None` once they run out or are malformed.
struct Cursor<'a, F> {
    frames: &'a [F],
    at: usize,
}

impl<'a, F: AsRef<[u8]>> Cursor<'a, F> {
    fn next(&mut self) -> Option<&'a [u8]> {
        let f = self.frames.get(self.at)?;
        self.at += 1;
        Some(f.as_ref())
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.next()?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.next()?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.next()?.to_vec()).ok()
    }
    fn node(&mut self) -> Option<NodeInfo> {
        let id = self.u64()?;
        let live = match self.next()? {
            [0] => false,
            [1] => true,
            _ => return None,
        };
        let name = self.string()?;
        let mut endpoints: [String; 8] = Default::default();
        for e in endpoints.iter_mut() {
            *e = self.string()?;
        }
        Some(NodeInfo {
            id,
            live,
            name,
            endpoints,
        })
    }
    fn done(&self) -> bool {
        self.at == self.frames.len()
    }
}

impl ControllerReply {
    /// Encodes the reply frames.
    pub fn into_frames(self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        match self {
            ControllerReply::Status(s) => out.push(vec![s.byte()]),
            ControllerReply::Nodes(nodes) => {
                out.push(vec![Status::Ok.byte()]);
                out.push((nodes.len() as u32).to_be_bytes().to_vec());
                nodes.iter().for_each(|n| node_frames(n, &mut out));
            }
            ControllerReply::Leader(n) => {
                out.push(vec![Status::Ok.byte()]);
                node_frames(&n, &mut out);
            }
            ControllerReply::Subscription(s) => {
                out.push(vec![Status::Ok.byte()]);
                out.push(s.lease_ms.to_be_bytes().to_vec());
                out.push(s.revision.to_be_bytes().to_vec());
                out.push((s.fragments.len() as u32).to_be_bytes().to_vec());
                for f in s.fragments {
                    out.push(f.id.to_be_bytes().to_vec());
                    out.push(f.offset.to_be_bytes().to_vec());
                    out.push((f.relays.len() as u32).to_be_bytes().to_vec());
                    out.extend(f.relays.into_iter().map(String::into_bytes));
                }
            }
            ControllerReply::Topic(fragments) => {
                out.push(vec![Status::Ok.byte()]);
                out.push((fragments.len() as u32).to_be_bytes().to_vec());
                for f in fragments {
                    out.push(f.id.to_be_bytes().to_vec());
                    out.push(f.leader.to_be_bytes().to_vec());
                    out.push(f.leader_epoch.to_be_bytes().to_vec());
                    out.push((f.replicas.len() as u32).to_be_bytes().to_vec());
                    for r in f.replicas {
                        out.push(r.id.to_be_bytes().to_vec());
                        out.push(r.writer.into_bytes());
                        out.push(r.reader.into_bytes());
                    }
                }
            }
        }
        out
    }

    /// Decodes a reply to `request` (client side); `None` when malformed.
    pub fn decode<F: AsRef<[u8]>>(request: &ControllerRequest, frames: &[F]) -> Option<Self> {
        let (status, rest) = frames.split_first()?;
        let status = Status::from_frame(status.as_ref())?;
        if status != Status::Ok {
            return rest.is_empty().then_some(ControllerReply::Status(status));
        }
        let mut c = Cursor {
            frames: rest,
            at: 0,
        };
        let reply = match request {
            ControllerRequest::Unsubscribe(_) => ControllerReply::Status(Status::Ok),
            ControllerRequest::Subscribe(_) | ControllerRequest::KeepAlive(_) => {
                let (lease_ms, revision, n) = (c.u64()?, c.u64()?, c.u32()?);
                let mut fragments = Vec::new();
                for _ in 0..n {
                    let (id, offset, r) = (c.u32()?, c.u64()?, c.u32()?);
                    let mut relays = Vec::new();
                    for _ in 0..r {
                        relays.push(c.string()?);
                    }
                    fragments.push(AssignedFragment { id, offset, relays });
                }
                ControllerReply::Subscription(SubscriptionInfo {
                    lease_ms,
                    revision,
                    fragments,
                })
            }
            ControllerRequest::Leader => ControllerReply::Leader(Box::new(c.node()?)),
            ControllerRequest::Nodes => {
                let n = c.u32()?;
                let mut nodes = Vec::new();
                for _ in 0..n {
                    nodes.push(c.node()?);
                }
                ControllerReply::Nodes(nodes)
            }
            ControllerRequest::Topic(_) => {
                let n = c.u32()?;
                let mut fragments = Vec::new();
                for _ in 0..n {
                    let (id, leader, leader_epoch) = (c.u32()?, c.u64()?, c.u64()?);
                    let r = c.u32()?;
                    let mut replicas = Vec::new();
                    for _ in 0..r {
                        replicas.push(ReplicaInfo {
                            id: c.u64()?,
                            writer: c.string()?,
                            reader: c.string()?,
                        });
                    }
                    fragments.push(FragmentInfo {
                        id,
                        leader,
                        leader_epoch,
                        replicas,
                    });
                }
                ControllerReply::Topic(fragments)
            }
        };
        c.done().then_some(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(id: u64) -> NodeInfo {
        NodeInfo {
            id,
            live: id.is_multiple_of(2),
            name: format!("n{id}"),
            endpoints: std::array::from_fn(|i| format!("tcp://10.0.0.{id}:{}", 5555 + i)),
        }
    }

    #[test]
    fn requests_decode_and_malformed_ones_are_errors() {
        assert_eq!(
            ControllerRequest::decode(&[b"NODES".as_slice()]),
            Ok(ControllerRequest::Nodes)
        );
        assert_eq!(
            ControllerRequest::decode(&[b"TOPIC".as_slice(), b"orders"]),
            Ok(ControllerRequest::Topic("orders".into()))
        );
        assert!(ControllerRequest::decode(&[b"TOPIC".as_slice()]).is_err());
        assert!(ControllerRequest::decode(&[b"TOPIC".as_slice(), b"a-b"]).is_err());
        assert!(ControllerRequest::decode(&[b"LEADER".as_slice(), b"x"]).is_err());
        assert!(ControllerRequest::decode(&[b"MASTER".as_slice()]).is_err());
        assert_eq!(
            ControllerRequest::decode::<&[u8]>(&[]),
            Err(ControllerError::Empty)
        );
    }

    #[test]
    fn subscription_requests_and_replies() {
        let m = Member {
            topic: "orders".into(),
            group: "billing".into(),
            subscriber: "s-1".into(),
        };
        let frames = ControllerRequest::Subscribe(m.clone()).encode();
        assert_eq!(
            frames,
            vec![
                b"SUBSCRIBE".to_vec(),
                b"orders".to_vec(),
                b"billing".to_vec(),
                b"s-1".to_vec()
            ]
        );
        assert_eq!(
            ControllerRequest::decode(&frames),
            Ok(ControllerRequest::Subscribe(m.clone()))
        );
        assert_eq!(
            ControllerRequest::decode(&ControllerRequest::Unsubscribe(m.clone()).encode()),
            Ok(ControllerRequest::Unsubscribe(m.clone()))
        );
        for bad in [
            vec![b"SUBSCRIBE".to_vec(), b"orders".to_vec(), b"g".to_vec()],
            vec![
                b"KEEPALIVE".to_vec(),
                b"or-ders".to_vec(),
                b"g".to_vec(),
                b"s".to_vec(),
            ],
            vec![
                b"SUBSCRIBE".to_vec(),
                b"orders".to_vec(),
                b"".to_vec(),
                b"s".to_vec(),
            ],
            vec![
                b"UNSUBSCRIBE".to_vec(),
                b"orders".to_vec(),
                b"g".to_vec(),
                b"a b".to_vec(),
            ],
            vec![
                b"SUBSCRIBE".to_vec(),
                b"orders".to_vec(),
                vec![b'g'; 65],
                b"s".to_vec(),
            ],
        ] {
            assert!(ControllerRequest::decode(&bad).is_err(), "{bad:?}");
        }
        let info = SubscriptionInfo {
            lease_ms: 10_000,
            revision: 42,
            fragments: vec![AssignedFragment {
                id: 3,
                offset: 77,
                relays: vec!["tcp://a:5559".into(), "tcp://b:5559".into()],
            }],
        };
        let frames = ControllerReply::Subscription(info.clone()).into_frames();
        assert_eq!(frames[0], [100]);
        assert_eq!(frames[1], 10_000u64.to_be_bytes());
        assert_eq!(frames[2], 42u64.to_be_bytes());
        assert_eq!(frames[3], 1u32.to_be_bytes());
        assert_eq!(frames[4], 3u32.to_be_bytes());
        assert_eq!(frames[5], 77u64.to_be_bytes());
        assert_eq!(frames[6], 2u32.to_be_bytes());
        assert_eq!(frames[7], b"tcp://a:5559");
        assert_eq!(
            ControllerReply::decode(&ControllerRequest::KeepAlive(m.clone()), &frames),
            Some(ControllerReply::Subscription(info))
        );
        assert_eq!(
            ControllerReply::decode(&ControllerRequest::Unsubscribe(m), &[[100u8]]),
            Some(ControllerReply::Status(Status::Ok))
        );
    }

    #[test]
    fn nodes_reply_frames() {
        let frames = ControllerReply::Nodes(vec![node(1)]).into_frames();
        assert_eq!(frames[0], [100]);
        assert_eq!(frames[1], [0, 0, 0, 1]);
        assert_eq!(frames[2], 1u64.to_be_bytes());
        assert_eq!(frames[3], [0]);
        assert_eq!(frames[4], b"n1");
        assert_eq!(frames.len(), 2 + NODE_FRAMES);
    }

    proptest! {
        #[test]
        fn replies_round_trip(ids in proptest::collection::vec(any::<u64>(), 0..4),
                              epochs in proptest::collection::vec(any::<u64>(), 0..4)) {
            let nodes: Vec<NodeInfo> = ids.iter().map(|i| node(*i)).collect();
            let frames = ControllerReply::Nodes(nodes.clone()).into_frames();
            prop_assert_eq!(ControllerReply::decode(&ControllerRequest::Nodes, &frames),
                            Some(ControllerReply::Nodes(nodes)));
            let fragments: Vec<FragmentInfo> = epochs.iter().enumerate().map(|(i, e)| FragmentInfo {
                id: i as u32, leader: *e, leader_epoch: *e,
                replicas: vec![ReplicaInfo { id: *e, writer: "w".into(), reader: "r".into() }],
            }).collect();
            let req = ControllerRequest::Topic("t".into());
            let frames = ControllerReply::Topic(fragments.clone()).into_frames();
            prop_assert_eq!(ControllerReply::decode(&req, &frames), Some(ControllerReply::Topic(fragments)));
        }

        #[test]
        fn decoders_never_panic(frames in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..10), 0..14)) {
            let _ = ControllerRequest::decode(&frames);
            for req in [ControllerRequest::Nodes, ControllerRequest::Leader, ControllerRequest::Topic("t".into())] {
                let _ = ControllerReply::decode(&req, &frames);
            }
        }
    }
}
