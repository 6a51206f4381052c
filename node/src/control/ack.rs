//! Ack PUB endpoint (`ack.bind`, default 5557; README's ZPAck, spec `zper.md` §9): after every
//! flush of a topic, one 3-frame message `[topic][message id][end offset:8 BE]`, where the message
//! id is the first frame of the last message flushed and the end offset is the topic's flushed
//! offset after the flush (the position a consumer resumes from). Subscribers filter by topic
//! prefix.

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Receiver;
use tracing::warn;

use crate::error::NodeError;
use crate::metrics::Counters;

/// One flush of a topic, as published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushNotice {
    /// Topic name.
    pub topic: Arc<str>,
    /// First frame of the last message flushed.
    pub message_id: Vec<u8>,
    /// Flushed offset after the flush (bytes).
    pub end_offset: u64,
}

impl FlushNotice {
    /// The three frames.
    pub fn frames(&self) -> Vec<Vec<u8>> {
        vec![
            self.topic.as_bytes().to_vec(),
            self.message_id.clone(),
            self.end_offset.to_be_bytes().to_vec(),
        ]
    }
}

/// Flush notices queued between the writer workers and the ack PUB thread, at most. Bounded
/// (issue #13): a notice that finds the queue full is dropped; the next one covers its range,
/// as a PUB subscriber past its HWM would see anyway.
pub const NOTICE_QUEUE: usize = 10_000;

/// Creates and binds the ack PUB (`ack.bind`).
///
/// Errors: [`NodeError::Bind`] (address in use, bad endpoint).
pub(crate) fn bind(
    zmq: &zmq::Context,
    config: &crate::config::NodeConfig,
    curve: &crate::context::CurveEndpoints,
) -> Result<zmq::Socket, NodeError> {
    crate::context::bind(zmq, zmq::PUB, &config.ack_bind, |a| {
        curve.serve(crate::config::CurveEndpointName::Ack, a)
    })
}

/// Starts the ack PUB thread and returns the sending end of its notice queue; the thread ends
/// once every sender (the writer workers) is gone.
///
/// Errors: the thread could not be started.
pub(crate) fn spawn(
    publisher: zmq::Socket,
    counters: Arc<Counters>,
) -> Result<(crossbeam_channel::Sender<FlushNotice>, JoinHandle<()>), NodeError> {
    let (tx, rx) = crossbeam_channel::bounded(NOTICE_QUEUE);
    let thread = crate::context::spawn("zper-ack", move || run(publisher, rx, counters))?;
    Ok((tx, thread))
}

/// Publishes notices until every sender is dropped.
fn run(publisher: zmq::Socket, notices: Receiver<FlushNotice>, counters: Arc<Counters>) {
    for notice in notices {
        // PUB never blocks: a slow subscriber loses notices at its HWM, as ZeroMQ PUB does.
        match publisher.send_multipart(notice.frames(), zmq::DONTWAIT) {
            Ok(()) => Counters::add(&counters.flush_notices, 1),
            Err(e) => warn!(error = %e, "ack publish failed"),
        }
    }
}

/// Message ids a flush notice may name (issue #13, defect 4): the end offset and id of the
/// newest message of each append, oldest first, until a notice has covered them. A notice
/// names the newest message that ends at or before the offset it announces, never one that
/// ends past it. Pure bookkeeping; bounded to [`NoticeIds::MAX_ENTRIES`] entries and
/// [`NoticeIds::MAX_BYTES`] bytes of ids (the oldest go first; a notice that then finds no
/// message at or below its offset is skipped, and the next one covers its range).
#[derive(Debug, Default)]
pub(crate) struct NoticeIds {
    /// `(end offset, message id)`, ascending by end offset.
    entries: std::collections::VecDeque<(u64, Vec<u8>)>,
    bytes: usize,
}

impl NoticeIds {
    /// Most appends remembered.
    pub(crate) const MAX_ENTRIES: usize = 4096;
    /// Most bytes of ids remembered.
    pub(crate) const MAX_BYTES: usize = 4 << 20;

    /// Notes that the message `id` ends at `end` (offsets only grow between truncations).
    pub(crate) fn appended(&mut self, end: u64, id: &[u8]) {
        if self.entries.back().is_some_and(|(e, _)| *e >= end) {
            return;
        }
        self.bytes += id.len();
        self.entries.push_back((end, id.to_vec()));
        while self.entries.len() > Self::MAX_ENTRIES || self.bytes > Self::MAX_BYTES {
            match self.entries.pop_front() {
                Some((_, old)) => self.bytes -= old.len(),
                None => break,
            }
        }
    }

    /// The notice for a mark at `visible`: the newest remembered message ending at or before
    /// it, as `(its end offset, its id)`, forgetting it and everything older; `None` when no
    /// remembered message ends at or before `visible`.
    pub(crate) fn covered(&mut self, visible: u64) -> Option<(u64, Vec<u8>)> {
        let mut last = None;
        while self.entries.front().is_some_and(|(e, _)| *e <= visible) {
            if let Some((end, id)) = self.entries.pop_front() {
                self.bytes -= id.len();
                last = Some((end, id));
            }
        }
        last
    }

    /// Forgets messages ending past `end` (the log was cut back there).
    pub(crate) fn truncated(&mut self, end: u64) {
        while self.entries.back().is_some_and(|(e, _)| *e > end) {
            if let Some((_, id)) = self.entries.pop_back() {
                self.bytes -= id.len();
            }
        }
    }

    /// Forgets everything (this node no longer leads the fragment).
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::NoticeIds;

    #[test]
    fn a_notice_names_the_newest_message_ending_at_or_before_its_offset() {
        let mut ids = NoticeIds::default();
        ids.appended(100, b"a");
        ids.appended(200, b"b");
        ids.appended(300, b"c");
        // The mark is inside c: c ends past it, so the notice names b at 200.
        assert_eq!(ids.covered(250), Some((200, b"b".to_vec())));
        assert_eq!(ids.covered(250), None, "nothing new");
        assert_eq!(ids.covered(300), Some((300, b"c".to_vec())));
    }

    #[test]
    fn a_truncation_forgets_the_messages_it_cut() {
        let mut ids = NoticeIds::default();
        ids.appended(100, b"a");
        ids.appended(200, b"gone");
        ids.truncated(150);
        ids.appended(180, b"new");
        assert_eq!(ids.covered(200), Some((180, b"new".to_vec())));
        ids.appended(300, b"x");
        ids.clear();
        assert_eq!(ids.covered(1_000), None);
    }

    #[test]
    fn memory_is_bounded_by_entries_and_bytes() {
        let mut ids = NoticeIds::default();
        for i in 1..=(NoticeIds::MAX_ENTRIES as u64 * 2) {
            ids.appended(i, b"id");
        }
        assert_eq!(ids.entries.len(), NoticeIds::MAX_ENTRIES);
        let big = vec![0u8; NoticeIds::MAX_BYTES / 2 + 1];
        ids.appended(u64::MAX - 1, &big);
        ids.appended(u64::MAX, &big);
        assert!(ids.bytes <= NoticeIds::MAX_BYTES);
        assert_eq!(ids.covered(u64::MAX).map(|(e, _)| e), Some(u64::MAX));
    }
}
