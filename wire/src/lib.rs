//! zper-wire: the byte formats ZPER speaks, as pure codecs.
//!
//! This crate owns the client identity (spec `zper.md` §3), the stored record format that is both
//! the segment file format and the ZMTP/2.0 frame layout (§6.2), and the reader's commands and
//! replies (§5), the replication frames between nodes (issue #4), and the controller's cluster-information frames (§9, issue #3). It must never do I/O: no files, no sockets, no zmq, no clocks. Every decoder is
//! total: any byte string gives a value or a typed error, never a panic.

pub mod controller;
pub mod identity;
pub mod reader;
pub mod record;
pub mod replication;

pub use identity::{topic_hash, AckMode, Identity, IdentityError, MAX_TOPIC_LEN};
pub use identity::{topic_of, validate_topic};
pub use reader::{ReaderReply, ReaderRequest, RequestError, Status, Timestamp};
pub use record::{
    encode_record, encoded_len, valid_bytes, whole_message_len, DecodeError, Record, Records,
    FLAG_LONG, FLAG_MORE,
};
