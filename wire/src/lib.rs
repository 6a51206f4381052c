//! zper-wire: the byte formats ZPER speaks, as pure codecs.
//!
//! This crate owns the client identity (spec `zper.md` §3), the stored record format that is both
//! the segment file format and the ZMTP/2.0 frame layout (§6.2), and the reader's commands and
//! replies (§5), the replication frames between nodes (issue #4), Dolly's key/value messages (issue #5),
//! the controller's cluster-information and subscription frames (§9, issues #3, #7), and the relay's push-delivery frames (issue #7), and ZMTP itself: greetings, handshakes and frames
//! for zper's own engine (issue #17). It must never do I/O: no files, no sockets, no zmq, no clocks. Every decoder is
//! total: any byte string gives a value or a typed error, never a panic.

pub mod controller;
pub mod dolly;
pub mod endpoint;
pub mod idempotent;
pub mod identity;
pub mod reader;
pub mod record;
pub mod relay;
pub mod replication;
pub mod status;
pub mod zmtp;

pub use identity::{
    is_idempotent, topic_hash, AckMode, Identity, IdentityError, IDEMPOTENT_PER_FLUSH,
    IDEMPOTENT_PER_MESSAGE, MAX_TOPIC_LEN,
};

/// Status frame a cluster node appends to a writer reply instead of acknowledging (issue #4):
/// the topic's fragment has fewer in-sync replicas than `min_insync`, so the message was not
/// stored. Mode 1 gets `[message id][103]`, mode 2 `[empty][message id][103]`; a plain ack has
/// no status frame. (ZPER's reader statuses are 100-102; 103 continues the family.)
pub const WRITER_NOT_ENOUGH_REPLICAS: u8 = Status::NotEnoughReplicas as u8;

/// Status frame of a writer reply from a cluster node that does not lead the topic's
/// fragment (issue #4): the message was not stored; send it to the leader (controller
/// `TOPIC`, `/v1/topics/{name}`). Same frame layout as [`WRITER_NOT_ENOUGH_REPLICAS`].
pub const WRITER_NOT_LEADER: u8 = Status::NotLeader as u8;

/// Status frame of a writer reply when a new topic could not be created through the cluster
/// metadata (no quorum, no live node; issue #4): the message was not stored, retry later.
pub const WRITER_UNAVAILABLE: u8 = Status::Unavailable as u8;

/// Status frame of a writer reply when this node could not store the message (issue #13: the
/// disk is full or failing): nothing was stored or acknowledged; retry later or on another
/// node. Same frame layout as [`WRITER_NOT_ENOUGH_REPLICAS`]; the byte is the reader's
/// `INTERNAL_ERROR` (0xFF, "the store failed").
pub const WRITER_STORE_FAILED: u8 = Status::InternalError as u8;

/// Status frame of a writer reply to an idempotent producer whose message is not the next of
/// its sequence (issue #18): `[message id][106][next sequence:8]`; nothing was stored.
pub const WRITER_OUT_OF_SEQUENCE: u8 = Status::OutOfSequence as u8;
pub use identity::{topic_of, validate_topic};
pub use reader::{ReaderReply, ReaderRequest, RequestError, Timestamp};
pub use record::{
    encode_record, encoded_len, valid_bytes, whole_message_len, DecodeError, Record, Records,
    FLAG_LONG, FLAG_MORE,
};
pub use status::Status;
