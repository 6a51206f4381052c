//! One walk over an append's records (issue #17): checks that they are whole messages and
//! finds, in the same pass, where the active segment must rotate, which record starts the
//! sparse index keeps ([`crate::index::STRIDE`] apart) and where checksum pieces end
//! ([`crate::checksum::PIECE`], at message ends). The append path used to walk the same bytes
//! three times for these (a profile of the 4-producer benchmark put the walks and the growth
//! of their message-end list at about 8% of the node's CPU).

use std::ops::Range;

use zper_wire::Records;

use crate::checksum::PIECE;
use crate::index::STRIDE;

/// The part of an append that goes into one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// Its bytes within the append.
    pub(crate) range: Range<usize>,
    /// Whole messages in it.
    pub(crate) messages: u64,
    /// Absolute offsets of the record starts the segment's index notes.
    pub(crate) index: Vec<u64>,
    /// Chunk-relative ends of the checksum pieces before the last (the last ends with the
    /// chunk).
    pub(crate) pieces: Vec<usize>,
    /// The segment is full after this chunk: rotate before the next.
    pub(crate) rotate_after: bool,
}

/// Where the active segment stands before an append.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Start {
    /// Absolute offset where the append's first byte goes (the written end).
    pub(crate) at: u64,
    /// Absolute start of the active segment.
    pub(crate) segment_start: u64,
    /// The active segment's last index entry (none: the first record start is noted).
    pub(crate) last_indexed: Option<u64>,
    /// Rotate after the message that takes the segment past this many bytes.
    pub(crate) segment_size: u64,
}

/// Plans the append of `records` (spec `zper.md` §6.2) from `start`: one [`Chunk`] per
/// segment it touches, in order (none for empty `records`).
///
/// Errors: the number of leading bytes that form whole messages, when that is not all of them.
pub(crate) fn plan(records: &[u8], start: Start) -> Result<Vec<Chunk>, usize> {
    let mut chunks = Vec::with_capacity(1);
    let mut segment_start = start.segment_start;
    let mut last = start.last_indexed;
    let mut chunk = empty(0);
    let mut piece_from = 0usize;
    let mut pos = 0usize;
    let mut it = Records::new(records);
    for rec in it.by_ref() {
        let abs = start.at + pos as u64;
        if last.is_none_or(|l| abs >= l.saturating_add(STRIDE)) {
            chunk.index.push(abs);
            last = Some(abs);
        }
        pos += rec.stored_len();
        if rec.more {
            continue;
        }
        chunk.messages += 1;
        let rel = pos - chunk.range.start;
        if rel - piece_from >= PIECE {
            chunk.pieces.push(rel);
            piece_from = rel;
        }
        if start.at + pos as u64 - segment_start > start.segment_size {
            chunk.rotate_after = true;
            chunks.push(finish(chunk, pos));
            segment_start = start.at + pos as u64;
            last = Some(segment_start); // a new segment's index starts with its start
            chunk = empty(pos);
            piece_from = 0;
        }
    }
    if it.message_bytes() != records.len() {
        return Err(it.message_bytes());
    }
    if chunk.range.start < records.len() {
        chunks.push(finish(chunk, records.len()));
    }
    Ok(chunks)
}

fn empty(at: usize) -> Chunk {
    Chunk {
        range: at..at,
        messages: 0,
        index: Vec::new(),
        pieces: Vec::new(),
        rotate_after: false,
    }
}

fn finish(mut chunk: Chunk, end: usize) -> Chunk {
    chunk.range.end = end;
    // The last piece ends with the chunk.
    if chunk.pieces.last() == Some(&chunk.range.len()) {
        chunk.pieces.pop();
    }
    chunk
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
