//! Store errors: what failed, on which subject.

use std::path::PathBuf;
use thiserror::Error;

/// Errors of the segment store.
#[derive(Debug, Error)]
pub enum StoreError {
    /// An I/O call failed on a file or directory.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (open, write, fdatasync, ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The offset is not in the log: before the oldest segment, past the flushed end, or not on a
    /// record boundary (reply 101, spec §5.3).
    #[error("offset {offset} is not a readable record boundary of topic {topic}")]
    InvalidOffset {
        /// Topic name.
        topic: String,
        /// The requested offset.
        offset: i64,
    },
    /// The topic name is not 1..=64 ASCII letters or digits (spec §3).
    #[error("invalid topic name {0:?}")]
    InvalidTopic(String),
    /// An append that is not a run of whole, valid messages.
    #[error("append to {topic} is not a run of whole messages: {reason}")]
    MalformedAppend {
        /// Topic name.
        topic: String,
        /// Why.
        reason: String,
    },
    /// A write failed and could not be rolled back; the topic refuses appends until restart
    /// (recovery then cuts the partial record).
    #[error("topic {topic} refuses appends: {reason}")]
    Broken {
        /// Topic name.
        topic: String,
        /// What happened.
        reason: String,
    },
    /// A replica append at another offset than this log's written end.
    #[error("replica append to {topic} at {got}, but the log ends at {expected}")]
    OffsetMismatch {
        /// Topic name.
        topic: String,
        /// This log's written end.
        expected: u64,
        /// The chunk's offset.
        got: u64,
    },
    /// Another process (or another store in this one) holds the data directory (issue #13:
    /// two nodes on one `base_dir` would append to the same segment files).
    #[error("data directory {dir} is in use by {holder}: stop that node, or give this one another base_dir")]
    Locked {
        /// The data directory.
        dir: PathBuf,
        /// What the lock file says of its holder (`pid <n>`), or `unknown`.
        holder: String,
    },
    /// Stored bytes do not match their checksum (issue #13): they are never served.
    #[error("corrupt data in topic {topic} at offsets {start}..{end} ({path}): checksum mismatch")]
    Corrupt {
        /// Topic (store key).
        topic: String,
        /// The segment file.
        path: PathBuf,
        /// First byte of the damaged range (absolute offset).
        start: u64,
        /// End of the damaged range (absolute offset).
        end: u64,
    },
    /// A lock was poisoned by a panic on another thread.
    #[error("store lock poisoned for {0}")]
    Poisoned(String),
}

impl StoreError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
