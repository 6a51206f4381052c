//! Counters of what the endpoints dropped or refused, so nothing is lost silently. Plain atomics;
//! the HTTP `/metrics` endpoint of a later issue exports them.

use std::sync::atomic::{AtomicU64, Ordering};

/// Event counters of one node (monotonic, since start).
#[derive(Debug, Default)]
pub struct Counters {
    /// Messages appended to the store.
    pub messages_stored: AtomicU64,
    /// Record bytes appended to the store.
    pub bytes_stored: AtomicU64,
    /// Writer messages dropped: the sender identity is not a valid topic identity (spec §3).
    pub invalid_identity: AtomicU64,
    /// Writer messages dropped: a frame larger than `max_message`.
    pub oversized_frames: AtomicU64,
    /// Writer messages dropped: an empty last frame while `allow_empty_message` is false.
    pub empty_messages: AtomicU64,
    /// Writer messages dropped: the store refused the append (I/O error).
    pub append_errors: AtomicU64,
    /// Acks that could not be delivered (peer gone or its queue full); never stops the writer.
    pub acks_dropped: AtomicU64,
    /// Acks sent.
    pub acks_sent: AtomicU64,
    /// Reader requests answered with 102 (malformed, unknown command, invalid identity).
    pub bad_requests: AtomicU64,
    /// Reader replies that could not be delivered.
    pub replies_dropped: AtomicU64,
    /// Flush notices published on the ack endpoint.
    pub flush_notices: AtomicU64,
}

impl Counters {
    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
