//! Every status byte zper answers with, in one table: the reader's statuses of spec `zper.md`
//! §5.2 (100-102, 0xFF) and the writer refusals a cluster node adds (103-105, issue #4; 0xFF,
//! issue #13). A status is one frame of one byte.

/// A status byte on the wire, with its meaning ([`Status::text`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Status {
    /// 100: OK; offsets or data follow (reader, §5.2).
    Ok = 100,
    /// 101: the offset is not in the log, or the timestamp precedes every segment (reader).
    InvalidOffset = 101,
    /// 102: unknown command or malformed request (reader).
    InvalidCommand = 102,
    /// 103: the fragment has fewer in-sync replicas than `min_insync`; the message was not
    /// stored (writer, issue #4).
    NotEnoughReplicas = 103,
    /// 104: this node does not lead the topic's fragment; the message was not stored, send it
    /// to the leader (writer, issue #4).
    NotLeader = 104,
    /// 105: a new topic could not be created through the cluster metadata (no quorum, no live
    /// node); the message was not stored, retry later (writer, issue #4).
    Unavailable = 105,
    /// 106: an idempotent producer's message is not the next in its sequence (a gap: an
    /// earlier message was lost or refused, or it is older than the de-duplication window);
    /// nothing was stored. The writer's refusal carries the expected sequence as a third
    /// frame, `[id][106][next sequence:8]`; the reader's `PRODUCED` answers 106 alone when
    /// the message is outside the window (issue #18).
    OutOfSequence = 106,
    /// 0xFF (-1): the store failed (reader: a read failed and the connection stays usable;
    /// writer: the disk is full or failing and nothing was stored, issue #13).
    InternalError = 0xFF,
}

/// Every status, in byte order.
pub const ALL: [Status; 8] = [
    Status::Ok,
    Status::InvalidOffset,
    Status::InvalidCommand,
    Status::NotEnoughReplicas,
    Status::NotLeader,
    Status::Unavailable,
    Status::OutOfSequence,
    Status::InternalError,
];

impl Status {
    /// The byte on the wire.
    pub fn byte(self) -> u8 {
        self as u8
    }

    /// The status of `byte`, if it is one.
    pub fn from_byte(byte: u8) -> Option<Status> {
        ALL.into_iter().find(|s| s.byte() == byte)
    }

    /// Parses a status frame (exactly one byte).
    pub fn from_frame(frame: &[u8]) -> Option<Status> {
        match frame {
            [b] => Status::from_byte(*b),
            _ => None,
        }
    }

    /// What the status means, for a user (one sentence, no trailing period).
    pub fn text(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::InvalidOffset => "the offset is not in the log",
            Status::InvalidCommand => "unknown command or malformed request",
            Status::NotEnoughReplicas => {
                "fewer in-sync replicas than min_insync; the message was not stored"
            }
            Status::NotLeader => {
                "this node does not lead the topic's fragment; the message was not stored \
                 (write to the leader: zper topics describe)"
            }
            Status::Unavailable => {
                "the topic does not exist and could not be created (no metadata quorum, no \
                 live node, or auto_create_topics = false); the message was not stored, retry \
                 later"
            }
            Status::OutOfSequence => {
                "not the next message of this idempotent producer (an earlier one was lost or \
                 refused, or it is outside the de-duplication window); it was not stored, \
                 send from the expected sequence"
            }
            Status::InternalError => "the node's store failed; nothing was stored or served",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (status {})", self.text(), self.byte())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bytes_are_zpers_and_the_cluster_additions() {
        let bytes: Vec<u8> = ALL.iter().map(|s| s.byte()).collect();
        assert_eq!(bytes, [100, 101, 102, 103, 104, 105, 106, 0xFF]);
        assert_eq!(crate::WRITER_OUT_OF_SEQUENCE, 106);
        assert_eq!(crate::WRITER_NOT_ENOUGH_REPLICAS, 103);
        assert_eq!(crate::WRITER_NOT_LEADER, 104);
        assert_eq!(crate::WRITER_UNAVAILABLE, 105);
        assert_eq!(crate::WRITER_STORE_FAILED, 0xFF);
    }

    #[test]
    fn every_byte_round_trips_and_others_are_refused() {
        for b in 0..=255u8 {
            match Status::from_frame(&[b]) {
                Some(s) => assert_eq!(s.byte(), b),
                None => assert!(!ALL.iter().any(|s| s.byte() == b), "{b}"),
            }
        }
        assert_eq!(Status::from_frame(&[]), None);
        assert_eq!(Status::from_frame(&[100, 100]), None);
        assert!(Status::NotLeader.to_string().contains("status 104"));
    }
}
