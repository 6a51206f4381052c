//! Reader commands and replies (spec `zper.md` §5).
//!
//! A request is `[command][arg]...` after the optional REQ envelope, which the endpoint strips and
//! echoes. Replies start with a one-byte status frame (§5.2): `[100][...]` OK, `[101]`
//! INVALID_OFFSET, `[102]` INVALID_COMMAND. zper answers every malformed request with `[102]` where
//! the original went silent or crashed (§5.5).

use thiserror::Error;

/// Command word of a FETCH request.
pub const FETCH: &[u8] = b"FETCH";
/// Command word of an OFFSET request.
pub const OFFSET: &[u8] = b"OFFSET";
/// Command word of a PRODUCED request (zper's, issue #18): what became of an idempotent
/// producer's message.
pub const PRODUCED: &[u8] = b"PRODUCED";
/// Bytes of an idempotent message id: `[producer id:16][sequence:8]` (issue #18).
pub const IDEMPOTENT_ID_LEN: usize = 24;

pub use crate::status::Status;

/// Timestamp argument of OFFSET (§5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timestamp {
    /// -1: `[start of newest segment][flushed end]`.
    Latest,
    /// -2: `[start of oldest segment]`.
    Earliest,
    /// Milliseconds since the Unix epoch (any other value).
    At(i64),
}

impl Timestamp {
    /// From the signed wire value.
    pub fn from_i64(v: i64) -> Self {
        match v {
            -1 => Timestamp::Latest,
            -2 => Timestamp::Earliest,
            t => Timestamp::At(t),
        }
    }

    /// To the signed wire value.
    pub fn to_i64(self) -> i64 {
        match self {
            Timestamp::Latest => -1,
            Timestamp::Earliest => -2,
            Timestamp::At(t) => t,
        }
    }
}

/// Why a reader request is malformed; every case is answered with [`Status::InvalidCommand`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    /// No frames at all after the envelope.
    #[error("empty request")]
    Empty,
    /// A command word other than FETCH or OFFSET.
    #[error("unknown command {0:?}")]
    UnknownCommand(String),
    /// Wrong number of argument frames (FETCH: 2, OFFSET: 1 or 2).
    #[error("{command} takes {expected} argument(s), got {got}")]
    ArgumentCount {
        /// The command word.
        command: &'static str,
        /// What the command takes.
        expected: &'static str,
        /// How many arrived.
        got: usize,
    },
    /// An argument frame shorter than its integer.
    #[error("argument {name} is {len} bytes, needs {need}")]
    ShortArgument {
        /// Argument name.
        name: &'static str,
        /// Frame length in bytes.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// A PRODUCED message id that is not `[producer id:16][sequence:8]`.
    #[error(
        "message id is {0} bytes, an idempotent message id is 24 (producer id:16, sequence:8)"
    )]
    MessageIdLength(usize),
    /// A 24-byte message id that is not an idempotent producer's (its producer id lacks the
    /// fixed bits, or its sequence is 2^64-1; `crate::idempotent`).
    #[error(
        "not an idempotent producer's message id (see docs/protocol.md, Idempotent producers)"
    )]
    NotAProducerId,
    /// max_bytes below -1 (-1 selects stream fetch).
    #[error("max_bytes {0} is negative")]
    NegativeMaxBytes(i64),
}

/// A decoded reader request (§5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReaderRequest {
    /// FETCH offset max_bytes (max_bytes >= 0): one raw byte range of one segment (§5.3).
    Fetch {
        /// Absolute byte offset.
        offset: i64,
        /// Most bytes wanted.
        max_bytes: i64,
    },
    /// FETCH offset -1, the README's stream fetch (§9): whole messages from `offset` as one
    /// reply `[100][payload]...[next offset:8]`, one frame per stored record, then the offset
    /// after the last one (docs/protocol.md; last, so a README client reading the frames after
    /// the status as stored frames meets the stored frames first, issue #17).
    Stream {
        /// Absolute byte offset.
        offset: i64,
    },
    /// OFFSET timestamp [max_entries] (§5.4). `max_entries <= 0` or absent means unlimited.
    Offset {
        /// Which offsets.
        timestamp: Timestamp,
        /// Most segment starts returned for a time lookup.
        max_entries: Option<i32>,
    },
    /// PRODUCED message_id:24 (zper's, issue #18): whether an idempotent producer's message
    /// is in the fragment a writer with this reader identity's UUID writes to. Asked of the
    /// fragment's leader: `[100][start:8][end:8]` stored and durable, `[101]` not stored,
    /// `[105]` stored but not durable yet (ask again), `[104]` this node does not lead the
    /// fragment, `[106]` too old to tell.
    Produced {
        /// `[producer id:16][sequence:8]`, as the message's first frame.
        message_id: [u8; IDEMPOTENT_ID_LEN],
    },
}

fn read_i64(name: &'static str, frame: &[u8]) -> Result<i64, RequestError> {
    match frame.get(..8) {
        Some(b) => {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            Ok(i64::from_be_bytes(a))
        }
        None => Err(RequestError::ShortArgument {
            name,
            len: frame.len(),
            need: 8,
        }),
    }
}

fn read_i32(name: &'static str, frame: &[u8]) -> Result<i32, RequestError> {
    match frame.get(..4) {
        Some(b) => {
            let mut a = [0u8; 4];
            a.copy_from_slice(b);
            Ok(i32::from_be_bytes(a))
        }
        None => Err(RequestError::ShortArgument {
            name,
            len: frame.len(),
            need: 4,
        }),
    }
}

impl ReaderRequest {
    /// Decodes `[command][args]...` (envelope already stripped). Only the first 8 (or 4) bytes of
    /// an argument are read, as the original does (§5.1). A 4- to 7-byte OFFSET timestamp is read
    /// as a sign-extended 4-byte int, so the shipped ConsumerPerformance works (§10.3).
    pub fn decode<F: AsRef<[u8]>>(frames: &[F]) -> Result<Self, RequestError> {
        let (command, args) = frames.split_first().ok_or(RequestError::Empty)?;
        match command.as_ref() {
            FETCH => {
                if args.len() != 2 {
                    return Err(RequestError::ArgumentCount {
                        command: "FETCH",
                        expected: "2",
                        got: args.len(),
                    });
                }
                let offset = read_i64("offset", args[0].as_ref())?;
                let max_bytes = read_i64("max_bytes", args[1].as_ref())?;
                match max_bytes {
                    -1 => Ok(ReaderRequest::Stream { offset }),
                    m if m < 0 => Err(RequestError::NegativeMaxBytes(m)),
                    m => Ok(ReaderRequest::Fetch {
                        offset,
                        max_bytes: m,
                    }),
                }
            }
            OFFSET => {
                if args.is_empty() || args.len() > 2 {
                    return Err(RequestError::ArgumentCount {
                        command: "OFFSET",
                        expected: "1 or 2",
                        got: args.len(),
                    });
                }
                let ts = args[0].as_ref();
                let t = if ts.len() >= 8 {
                    read_i64("timestamp", ts)?
                } else {
                    i64::from(read_i32("timestamp", ts)?)
                };
                let max_entries = match args.get(1) {
                    Some(f) => Some(read_i32("max_entries", f.as_ref())?),
                    None => None,
                };
                Ok(ReaderRequest::Offset {
                    timestamp: Timestamp::from_i64(t),
                    max_entries,
                })
            }
            PRODUCED => {
                if args.len() != 1 {
                    return Err(RequestError::ArgumentCount {
                        command: "PRODUCED",
                        expected: "1",
                        got: args.len(),
                    });
                }
                let id = args[0].as_ref();
                let message_id: [u8; IDEMPOTENT_ID_LEN] = id
                    .try_into()
                    .map_err(|_| RequestError::MessageIdLength(id.len()))?;
                if crate::idempotent::parse_message_id(&message_id).is_none() {
                    return Err(RequestError::NotAProducerId);
                }
                Ok(ReaderRequest::Produced { message_id })
            }
            other => Err(RequestError::UnknownCommand(
                String::from_utf8_lossy(other).into_owned(),
            )),
        }
    }

    /// Encodes the request frames a client sends (8-byte arguments, 4-byte max_entries).
    pub fn encode(&self) -> Vec<Vec<u8>> {
        match *self {
            ReaderRequest::Fetch { offset, max_bytes } => vec![
                FETCH.to_vec(),
                offset.to_be_bytes().to_vec(),
                max_bytes.to_be_bytes().to_vec(),
            ],
            ReaderRequest::Stream { offset } => vec![
                FETCH.to_vec(),
                offset.to_be_bytes().to_vec(),
                (-1i64).to_be_bytes().to_vec(),
            ],
            ReaderRequest::Offset {
                timestamp,
                max_entries,
            } => {
                let mut f = vec![OFFSET.to_vec(), timestamp.to_i64().to_be_bytes().to_vec()];
                if let Some(e) = max_entries {
                    f.push(e.to_be_bytes().to_vec());
                }
                f
            }
            ReaderRequest::Produced { message_id } => {
                vec![PRODUCED.to_vec(), message_id.to_vec()]
            }
        }
    }
}

/// A reader reply (§5.2), as frames after the envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReaderReply {
    /// A single status frame (101, 102 or 0xFF).
    Status(Status),
    /// `[100][offset:8]...` for OFFSET.
    Offsets(Vec<u64>),
    /// `[100][data]` for FETCH: raw segment bytes.
    Data(Vec<u8>),
    /// `[100][payload]...[next offset:8]` for stream fetch.
    Stream {
        /// Offset just after the last record sent.
        next_offset: u64,
        /// One payload per stored record.
        payloads: Vec<Vec<u8>>,
    },
}

impl ReaderReply {
    /// Encodes the frames of the reply (moves data; no copy of FETCH bytes).
    pub fn into_frames(self) -> Vec<Vec<u8>> {
        let ok = vec![Status::Ok.byte()];
        match self {
            ReaderReply::Status(s) => vec![vec![s.byte()]],
            ReaderReply::Offsets(offs) => std::iter::once(ok)
                .chain(offs.iter().map(|o| o.to_be_bytes().to_vec()))
                .collect(),
            ReaderReply::Data(d) => vec![ok, d],
            ReaderReply::Stream {
                next_offset,
                payloads,
            } => std::iter::once(ok)
                .chain(payloads)
                .chain(std::iter::once(next_offset.to_be_bytes().to_vec()))
                .collect(),
        }
    }

    /// Decodes a reply to `request` (client side). `None` when the frames are not a valid reply.
    pub fn decode<F: AsRef<[u8]>>(request: &ReaderRequest, frames: &[F]) -> Option<Self> {
        let (status, rest) = frames.split_first()?;
        let status = Status::from_frame(status.as_ref())?;
        if status != Status::Ok {
            return rest.is_empty().then_some(ReaderReply::Status(status));
        }
        let be = |f: &[u8]| -> Option<u64> { Some(u64::from_be_bytes(f.try_into().ok()?)) };
        match request {
            ReaderRequest::Fetch { .. } => match rest {
                [d] => Some(ReaderReply::Data(d.as_ref().to_vec())),
                _ => None,
            },
            ReaderRequest::Stream { .. } => {
                let (next, payloads) = rest.split_last()?;
                Some(ReaderReply::Stream {
                    next_offset: be(next.as_ref())?,
                    payloads: payloads.iter().map(|p| p.as_ref().to_vec()).collect(),
                })
            }
            ReaderRequest::Offset { .. } | ReaderRequest::Produced { .. } => rest
                .iter()
                .map(|f| be(f.as_ref()))
                .collect::<Option<Vec<_>>>()
                .map(ReaderReply::Offsets),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn produced_takes_one_24_byte_message_id_and_answers_two_offsets() {
        let id = crate::idempotent::message_id(&crate::idempotent::producer_id([7; 16]), 7);
        let req = ReaderRequest::Produced { message_id: id };
        assert_eq!(ReaderRequest::decode(&req.encode()), Ok(req));
        assert_eq!(
            ReaderRequest::decode(&[PRODUCED, &id[..23]]),
            Err(RequestError::MessageIdLength(23))
        );
        assert_eq!(
            ReaderRequest::decode(&[PRODUCED, &[7u8; IDEMPOTENT_ID_LEN]]),
            Err(RequestError::NotAProducerId),
            "a plain producer's 24-byte id"
        );
        assert!(matches!(
            ReaderRequest::decode(&[PRODUCED]),
            Err(RequestError::ArgumentCount { .. })
        ));
        let frames = ReaderReply::Offsets(vec![10, 34]).into_frames();
        assert_eq!(
            ReaderReply::decode(&req, &frames),
            Some(ReaderReply::Offsets(vec![10, 34]))
        );
        assert_eq!(
            ReaderReply::decode(&req, &[vec![106]]),
            Some(ReaderReply::Status(Status::OutOfSequence))
        );
    }

    #[test]
    fn status_replies_decode_through_the_one_status_table_spec_5_2() {
        let fetch = ReaderRequest::Fetch {
            offset: 0,
            max_bytes: 10,
        };
        for s in crate::status::ALL {
            let decoded = ReaderReply::decode(&fetch, &[vec![s.byte()]]);
            if s == Status::Ok {
                assert_eq!(decoded, None, "100 needs its data frame");
            } else {
                assert_eq!(decoded, Some(ReaderReply::Status(s)), "{s:?}");
            }
        }
        assert_eq!(ReaderReply::decode(&fetch, &[vec![7]]), None);
        assert_eq!(ReaderReply::decode(&fetch, &[vec![101], vec![0]]), None);
    }

    #[test]
    fn fetch_request_bytes_spec_11_3() {
        let frames = ReaderRequest::Fetch {
            offset: 0,
            max_bytes: 300,
        }
        .encode();
        assert_eq!(frames[0], b"FETCH");
        assert_eq!(frames[1], [0u8; 8]);
        assert_eq!(frames[2], [0, 0, 0, 0, 0, 0, 0x01, 0x2c]);
    }

    #[test]
    fn replies_spec_11_3() {
        assert_eq!(
            ReaderReply::Offsets(vec![0]).into_frames(),
            vec![vec![0x64], vec![0u8; 8]]
        );
        assert_eq!(
            ReaderReply::Offsets(vec![0, 65_400_000]).into_frames(),
            vec![
                vec![0x64],
                vec![0u8; 8],
                vec![0, 0, 0, 0, 0x03, 0xe5, 0xec, 0xc0]
            ]
        );
        assert_eq!(
            ReaderReply::Status(Status::InvalidOffset).into_frames(),
            vec![vec![0x65]]
        );
        assert_eq!(
            ReaderReply::Status(Status::InvalidCommand).into_frames(),
            vec![vec![0x66]]
        );
        assert_eq!(
            ReaderReply::Data(vec![]).into_frames(),
            vec![vec![0x64], vec![]]
        );
    }

    #[test]
    fn malformed_requests_are_errors_spec_5_5() {
        let short: Vec<&[u8]> = vec![b"FETCH", &[0u8; 8], &[0u8; 3]];
        assert!(matches!(
            ReaderRequest::decode(&short),
            Err(RequestError::ShortArgument { need: 8, .. })
        ));
        let none: Vec<&[u8]> = vec![b"OFFSET"];
        assert!(matches!(
            ReaderRequest::decode(&none),
            Err(RequestError::ArgumentCount { got: 0, .. })
        ));
        let unknown: Vec<&[u8]> = vec![b"MASTER", &[0u8; 8]];
        assert_eq!(
            ReaderRequest::decode(&unknown),
            Err(RequestError::UnknownCommand("MASTER".into()))
        );
        let neg: Vec<Vec<u8>> = vec![
            b"FETCH".to_vec(),
            0i64.to_be_bytes().to_vec(),
            (-5i64).to_be_bytes().to_vec(),
        ];
        assert_eq!(
            ReaderRequest::decode(&neg),
            Err(RequestError::NegativeMaxBytes(-5))
        );
        let empty: Vec<&[u8]> = vec![];
        assert_eq!(ReaderRequest::decode(&empty), Err(RequestError::Empty));
    }

    #[test]
    fn four_byte_timestamp_is_sign_extended_spec_10_3() {
        let f: Vec<Vec<u8>> = vec![
            b"OFFSET".to_vec(),
            (-2i32).to_be_bytes().to_vec(),
            1i32.to_be_bytes().to_vec(),
        ];
        assert_eq!(
            ReaderRequest::decode(&f),
            Ok(ReaderRequest::Offset {
                timestamp: Timestamp::Earliest,
                max_entries: Some(1)
            })
        );
    }

    #[test]
    fn stream_fetch_is_minus_one_spec_9() {
        let f = ReaderRequest::Stream { offset: 7 }.encode();
        assert_eq!(
            ReaderRequest::decode(&f),
            Ok(ReaderRequest::Stream { offset: 7 })
        );
    }

    #[test]
    fn a_stream_reply_puts_the_stored_frames_first_and_the_next_offset_last() {
        let reply = ReaderReply::Stream {
            next_offset: 300,
            payloads: vec![b"a".to_vec(), b"bc".to_vec()],
        };
        let frames = reply.clone().into_frames();
        assert_eq!(
            frames,
            vec![
                vec![100],
                b"a".to_vec(),
                b"bc".to_vec(),
                300u64.to_be_bytes().to_vec()
            ]
        );
        let req = ReaderRequest::Stream { offset: 0 };
        assert_eq!(ReaderReply::decode(&req, &frames), Some(reply));
    }

    fn any_request() -> impl Strategy<Value = ReaderRequest> {
        prop_oneof![
            (any::<i64>(), 0i64..)
                .prop_map(|(offset, max_bytes)| ReaderRequest::Fetch { offset, max_bytes }),
            any::<i64>().prop_map(|offset| ReaderRequest::Stream { offset }),
            (any::<i64>(), proptest::option::of(any::<i32>())).prop_map(|(t, max_entries)| {
                ReaderRequest::Offset {
                    timestamp: Timestamp::from_i64(t),
                    max_entries,
                }
            }),
        ]
    }

    proptest! {
        #[test]
        fn request_round_trips(req in any_request()) {
            prop_assert_eq!(ReaderRequest::decode(&req.encode()), Ok(req));
        }

        #[test]
        fn decode_never_panics(frames in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..12), 0..5)) {
            let _ = ReaderRequest::decode(&frames);
            let req = ReaderRequest::Offset { timestamp: Timestamp::Latest, max_entries: None };
            let _ = ReaderReply::decode(&req, &frames);
            let _ = ReaderReply::decode(&ReaderRequest::Stream { offset: 0 }, &frames);
        }

        #[test]
        fn offsets_reply_round_trips(offs in proptest::collection::vec(any::<u64>(), 0..6)) {
            let req = ReaderRequest::Offset { timestamp: Timestamp::Latest, max_entries: None };
            let frames = ReaderReply::Offsets(offs.clone()).into_frames();
            prop_assert_eq!(ReaderReply::decode(&req, &frames), Some(ReaderReply::Offsets(offs)));
        }
    }
}
