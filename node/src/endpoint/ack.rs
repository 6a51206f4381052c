//! Ack PUB endpoint (`ack.bind`, default 5557; README's ZPAck, spec `zper.md` §9): after every
//! flush of a topic, one 3-frame message `[topic][message id][end offset:8 BE]`, where the message
//! id is the first frame of the last message flushed and the end offset is the topic's flushed
//! offset after the flush (the position a consumer resumes from). Subscribers filter by topic
//! prefix.

use std::sync::Arc;

use crossbeam_channel::Receiver;
use tracing::warn;

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

/// Publishes notices until every sender is dropped.
pub(crate) fn run(publisher: zmq::Socket, notices: Receiver<FlushNotice>, counters: Arc<Counters>) {
    for notice in notices {
        // PUB never blocks: a slow subscriber loses notices at its HWM, as ZeroMQ PUB does.
        match publisher.send_multipart(notice.frames(), zmq::DONTWAIT) {
            Ok(()) => Counters::add(&counters.flush_notices, 1),
            Err(e) => warn!(error = %e, "ack publish failed"),
        }
    }
}
