//! A reader worker of zper's own engine ([`super::engine`], issue #17): answers a request as the
//! libzmq reader's workers do ([`super::handle`]), but gives a FETCH range of the open segment
//! as a file range for the engine to send with `sendfile`.

use std::fs::File;
use std::sync::Arc;

use zper_store::{FetchedRange, Store};
use zper_wire::{Identity, ReaderReply, ReaderRequest, Status};

use super::{count_fetched, fragment_key, handle, reply_bound, Remote};
use crate::memory::MemoryBudget;
use crate::metrics::Counters;
use crate::replication::PlacementView;

/// FETCH ranges of the open segment at least this long (bytes) are sent from the file with
/// `sendfile`; shorter ones are read into memory (a system call each way costs more than
/// copying them).
pub(crate) const MIN_FILE: u64 = 64 * 1024;

/// A reply as a worker built it.
pub(crate) enum Answer {
    /// The reply's frames.
    Frames(Vec<Vec<u8>>),
    /// `[100][len bytes of file at position at]` (a FETCH of the open segment).
    File {
        /// The segment file.
        file: Arc<File>,
        /// Position in the file, bytes.
        at: u64,
        /// Bytes.
        len: u64,
    },
}

/// What a reader worker holds.
pub(crate) struct Worker {
    pub(crate) store: Arc<Store>,
    pub(crate) cap: u64,
    pub(crate) counters: Arc<Counters>,
    pub(crate) remote: Option<Remote>,
    pub(crate) budget: Arc<MemoryBudget>,
}

impl Worker {
    /// The reply to one request: as the libzmq reader's workers answer it, but a FETCH of the
    /// open segment as a file range.
    pub(crate) fn answer(&mut self, routing_id: &[u8], frames: &[Vec<u8>]) -> Answer {
        if !self.budget.allows(reply_bound(frames, self.cap)) {
            Counters::add(&self.counters.overloaded, 1);
            return Answer::Frames(ReaderReply::Status(Status::InternalError).into_frames());
        }
        if let Some(reply) = self
            .remote
            .as_mut()
            .and_then(|r| r.answer(routing_id, frames))
        {
            return Answer::Frames(reply);
        }
        let view = self.remote.as_ref().map(|r| &r.view);
        if let Some(answer) = self.fetch(view, routing_id, frames) {
            return answer;
        }
        let reply = handle(&self.store, view, routing_id, frames, self.cap);
        if matches!(reply, ReaderReply::Status(Status::InvalidCommand)) {
            Counters::add(&self.counters.bad_requests, 1);
        }
        count_fetched(&self.counters, routing_id, &reply);
        Answer::Frames(reply.into_frames())
    }

    /// A FETCH of a topic held here of at least [`MIN_FILE`] bytes: a file range when it is of
    /// the open segment, else its bytes; `None` for anything else and for errors (then
    /// [`handle`] answers, with the status it maps the error to).
    fn fetch(
        &self,
        view: Option<&PlacementView>,
        routing_id: &[u8],
        frames: &[Vec<u8>],
    ) -> Option<Answer> {
        let Ok(ReaderRequest::Fetch { offset, max_bytes }) = ReaderRequest::decode(frames) else {
            return None;
        };
        let max_bytes = u64::try_from(max_bytes).ok().filter(|&m| m >= MIN_FILE)?;
        let identity = Identity::parse(routing_id).ok()?;
        let topic = self.store.topic(&fragment_key(view, &identity))?;
        match topic.fetch_range(offset, max_bytes, self.cap, MIN_FILE) {
            Ok(FetchedRange::File { file, at, len }) => {
                // The bytes never pass through here, so only they are counted: the messages
                // in them are not (docs/operations.md, Metrics).
                let t = self.counters.topic(&identity.topic);
                Counters::add(&t.bytes_fetched, len);
                Some(Answer::File { file, at, len })
            }
            Ok(FetchedRange::Bytes(bytes)) => {
                let reply = ReaderReply::Data(bytes);
                count_fetched(&self.counters, routing_id, &reply);
                Some(Answer::Frames(reply.into_frames()))
            }
            Err(_) => None,
        }
    }
}
