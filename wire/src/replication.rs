//! Frames of the replication endpoint (`replica.bind`, default 5560; issue #4). A replica pulls
//! from the fragment's leader, Kafka-style: each FETCH names the offset the replica has made
//! durable (so it doubles as the replica's progress report) and the newest leader epoch in its
//! epoch history; the leader answers with whole messages from one segment, its high-water mark,
//! the epoch-history entries the chunk crosses, and whether the leader rotated right after the
//! chunk, so the copy keeps the same offsets, segment boundaries and bytes. A replica whose log
//! went past what the leader's epoch history allows is told where to truncate (Kafka KIP-101 /
//! KIP-279 / KIP-320). The request also names where the replica's newest epoch starts: a
//! leader that never had that epoch tells the replica to cut back to it (issue #13).
//!
//! ```text
//! request  ["RFETCH"][topic][fragment:u32][replica:u64][offset:u64][last_epoch:u64][max_bytes:u32]
//!            [last_epoch_start:u64]
//!            (the numbers in one 40-byte big-endian frame; u64::MAX = none; a 32-byte frame
//!            without the last field is accepted, from a node not yet upgraded)
//! reply    [0 OK][leader_epoch:u64][high_water:u64][offset:u64][rotate_after:u8] + [epochs] + [bytes]
//!            epochs: n x (epoch:u64, start_offset:u64)
//!          [1 NOT_LEADER][leader_epoch:u64]     this node does not lead the fragment (now)
//!          [2 DIVERGING][truncate_to:u64]       cut the log to this offset, then fetch again
//!          [3 BAD_REQUEST]                      malformed or unknown fragment
//! ```

use thiserror::Error;

/// Command frame of a replica fetch.
pub const FETCH: &[u8] = b"RFETCH";

/// A replica's fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// Topic name.
    pub topic: String,
    /// Fragment id.
    pub fragment: u32,
    /// The fetching replica's node id.
    pub replica: u64,
    /// Where to read from: the replica's durable end (its progress).
    pub offset: u64,
    /// Newest epoch in the replica's epoch history, if any.
    pub last_epoch: Option<u64>,
    /// Most bytes wanted (at least one whole message is sent).
    pub max_bytes: u32,
    /// Offset where `last_epoch` starts in the replica's epoch history, if known.
    pub last_epoch_start: Option<u64>,
}

/// The leader's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchReply {
    /// Data (possibly none) from `offset`.
    Ok {
        /// The leader's epoch for the fragment.
        leader_epoch: u64,
        /// Offset every in-sync replica has made durable.
        high_water: u64,
        /// Offset of the first byte of `bytes`.
        offset: u64,
        /// The leader rotated right after these bytes.
        rotate_after: bool,
        /// Leader epoch-history entries `(epoch, start offset)` starting within the chunk.
        epochs: Vec<(u64, u64)>,
        /// Whole messages.
        bytes: Vec<u8>,
    },
    /// This node does not lead the fragment.
    NotLeader {
        /// Its view of the leader epoch.
        leader_epoch: u64,
    },
    /// The replica's log went past what the leader's history allows: truncate to this offset.
    Diverging {
        /// Offset to cut the replica's log back to.
        truncate_to: u64,
    },
    /// Malformed request or unknown fragment.
    BadRequest,
}

/// Why frames are not a valid fetch or reply.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReplicationError {
    /// Wrong number of frames or a frame of the wrong size.
    #[error("malformed replication frames: {0}")]
    Malformed(&'static str),
    /// Not a topic name (1-64 ASCII letters or digits).
    #[error("invalid topic in replication frames")]
    InvalidTopic,
    /// An unknown status byte.
    #[error("unknown replication status {0}")]
    UnknownStatus(u8),
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(a)
}

impl FetchRequest {
    /// The request's frames.
    pub fn to_frames(&self) -> Vec<Vec<u8>> {
        let mut n = Vec::with_capacity(32);
        n.extend_from_slice(&self.fragment.to_be_bytes());
        n.extend_from_slice(&self.replica.to_be_bytes());
        n.extend_from_slice(&self.offset.to_be_bytes());
        n.extend_from_slice(&self.last_epoch.unwrap_or(u64::MAX).to_be_bytes());
        n.extend_from_slice(&self.max_bytes.to_be_bytes());
        n.extend_from_slice(&self.last_epoch_start.unwrap_or(u64::MAX).to_be_bytes());
        vec![FETCH.to_vec(), self.topic.as_bytes().to_vec(), n]
    }

    /// Decodes the frames after the routing id.
    ///
    /// Errors: `Malformed`, `InvalidTopic`.
    pub fn decode(frames: &[Vec<u8>]) -> Result<Self, ReplicationError> {
        let [cmd, topic, n] = frames else {
            return Err(ReplicationError::Malformed("a fetch has 3 frames"));
        };
        if cmd.as_slice() != FETCH {
            return Err(ReplicationError::Malformed("unknown command"));
        }
        if n.len() != 32 && n.len() != 40 {
            return Err(ReplicationError::Malformed(
                "fetch numbers are 40 (or 32) bytes",
            ));
        }
        crate::validate_topic(topic).map_err(|_| ReplicationError::InvalidTopic)?;
        let topic = String::from_utf8(topic.clone()).map_err(|_| ReplicationError::InvalidTopic)?;
        let last = u64_at(n, 20);
        let last_start = if n.len() == 40 {
            u64_at(n, 32)
        } else {
            u64::MAX
        };
        Ok(FetchRequest {
            topic,
            fragment: u32_at(n, 0),
            replica: u64_at(n, 4),
            offset: u64_at(n, 12),
            last_epoch: (last != u64::MAX).then_some(last),
            max_bytes: u32_at(n, 28),
            last_epoch_start: (last_start != u64::MAX).then_some(last_start),
        })
    }
}

impl FetchReply {
    /// The reply's frames.
    pub fn to_frames(&self) -> Vec<Vec<u8>> {
        match self {
            FetchReply::Ok {
                leader_epoch,
                high_water,
                offset,
                rotate_after,
                epochs,
                bytes,
            } => {
                let mut h = Vec::with_capacity(25);
                h.extend_from_slice(&leader_epoch.to_be_bytes());
                h.extend_from_slice(&high_water.to_be_bytes());
                h.extend_from_slice(&offset.to_be_bytes());
                h.push(u8::from(*rotate_after));
                let mut e = Vec::with_capacity(epochs.len() * 16);
                for (epoch, start) in epochs {
                    e.extend_from_slice(&epoch.to_be_bytes());
                    e.extend_from_slice(&start.to_be_bytes());
                }
                vec![vec![0], h, e, bytes.clone()]
            }
            FetchReply::NotLeader { leader_epoch } => {
                vec![vec![1], leader_epoch.to_be_bytes().to_vec()]
            }
            FetchReply::Diverging { truncate_to } => {
                vec![vec![2], truncate_to.to_be_bytes().to_vec()]
            }
            FetchReply::BadRequest => vec![vec![3]],
        }
    }

    /// Decodes a reply's frames.
    ///
    /// Errors: `Malformed`, `UnknownStatus`.
    pub fn decode(frames: &[Vec<u8>]) -> Result<Self, ReplicationError> {
        let status = frames
            .first()
            .and_then(|f| (f.len() == 1).then(|| f[0]))
            .ok_or(ReplicationError::Malformed("a 1-byte status frame first"))?;
        match (status, &frames[1..]) {
            (0, [h, e, bytes]) => {
                if h.len() != 25 || e.len() % 16 != 0 {
                    return Err(ReplicationError::Malformed("OK header or epochs size"));
                }
                Ok(FetchReply::Ok {
                    leader_epoch: u64_at(h, 0),
                    high_water: u64_at(h, 8),
                    offset: u64_at(h, 16),
                    rotate_after: h[24] != 0,
                    epochs: e
                        .chunks_exact(16)
                        .map(|c| (u64_at(c, 0), u64_at(c, 8)))
                        .collect(),
                    bytes: bytes.clone(),
                })
            }
            (1, [n]) if n.len() == 8 => Ok(FetchReply::NotLeader {
                leader_epoch: u64_at(n, 0),
            }),
            (2, [n]) if n.len() == 8 => Ok(FetchReply::Diverging {
                truncate_to: u64_at(n, 0),
            }),
            (3, []) => Ok(FetchReply::BadRequest),
            (0..=3, _) => Err(ReplicationError::Malformed("frames for the status")),
            (s, _) => Err(ReplicationError::UnknownStatus(s)),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_fetch_has_the_documented_40_byte_numbers_frame() {
        let r = FetchRequest {
            topic: "t".into(),
            fragment: 1,
            replica: 2,
            offset: 3,
            last_epoch: Some(4),
            max_bytes: 5,
            last_epoch_start: None,
        };
        let mut n = Vec::new();
        n.extend_from_slice(&1u32.to_be_bytes());
        n.extend_from_slice(&2u64.to_be_bytes());
        n.extend_from_slice(&3u64.to_be_bytes());
        n.extend_from_slice(&4u64.to_be_bytes());
        n.extend_from_slice(&5u32.to_be_bytes());
        n.extend_from_slice(&u64::MAX.to_be_bytes());
        assert_eq!(
            r.to_frames(),
            vec![b"RFETCH".to_vec(), b"t".to_vec(), n.clone()]
        );
        // Neither 32 nor 40 bytes: refused, as any other length.
        n.push(0);
        assert!(FetchRequest::decode(&[b"RFETCH".to_vec(), b"t".to_vec(), n]).is_err());
    }

    proptest! {
        #[test]
        fn fetches_round_trip(topic in "[a-zA-Z0-9]{1,64}", fragment: u32, replica: u64,
                              offset: u64, last in proptest::option::of(0u64..u64::MAX), max_bytes: u32,
                              start in proptest::option::of(0u64..u64::MAX)) {
            let r = FetchRequest { topic, fragment, replica, offset, last_epoch: last, max_bytes,
                                   last_epoch_start: start };
            prop_assert_eq!(FetchRequest::decode(&r.to_frames()), Ok(r.clone()));
            // A node not yet upgraded sends the 32-byte form.
            let mut old = r.to_frames();
            old[2].truncate(32);
            prop_assert_eq!(FetchRequest::decode(&old), Ok(FetchRequest { last_epoch_start: None, ..r }));
        }

        #[test]
        fn replies_round_trip(leader_epoch: u64, high_water: u64, offset: u64, rotate_after: bool,
                              epochs in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..4),
                              bytes in proptest::collection::vec(any::<u8>(), 0..64), which in 0u8..4) {
            let r = match which {
                0 => FetchReply::Ok { leader_epoch, high_water, offset, rotate_after, epochs, bytes },
                1 => FetchReply::NotLeader { leader_epoch },
                2 => FetchReply::Diverging { truncate_to: offset },
                _ => FetchReply::BadRequest,
            };
            prop_assert_eq!(FetchReply::decode(&r.to_frames()), Ok(r));
        }

        #[test]
        fn decoders_never_panic(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..5)) {
            let _ = FetchRequest::decode(&frames);
            let _ = FetchReply::decode(&frames);
        }
    }

    #[test]
    fn bad_frames_are_typed_errors() {
        assert!(FetchRequest::decode(&[b"RFETCH".to_vec(), b"a-b".to_vec(), vec![0; 32]]).is_err());
        assert!(FetchRequest::decode(&[b"FETCH".to_vec(), b"ab".to_vec(), vec![0; 32]]).is_err());
        assert!(FetchRequest::decode(&[b"RFETCH".to_vec(), b"ab".to_vec(), vec![0; 31]]).is_err());
        assert_eq!(
            FetchReply::decode(&[vec![9]]),
            Err(ReplicationError::UnknownStatus(9))
        );
        assert!(FetchReply::decode(&[vec![0], vec![0; 25], vec![0; 15], vec![]]).is_err());
    }
}
