//! How a producer connects: [`ProducerOptions`], for [`crate::Producer`] and
//! [`crate::PlainProducer`].

use std::time::Duration;

use zper_wire::AckMode;

/// How a [`crate::Producer`] (or [`crate::PlainProducer`]) connects.
#[derive(Debug, Clone)]
pub struct ProducerOptions {
    /// Topic (1-64 ASCII letters or digits).
    pub topic: String,
    /// Ack mode.
    pub mode: AckMode,
    /// Send, receive and linger timeout; a writer that is not reachable fails a send after it.
    /// An idempotent [`crate::Producer`] waits at most this long (and at most 2 s) for one
    /// attempt's ack before it sends again.
    pub timeout: Duration,
    /// Idempotent (issue #18; default in modes 1 and 2): every message is stored once however
    /// often it is sent again, and [`crate::Producer`] sends it again after a timeout, a
    /// refusal or a broken connection until `retry_for` passed. Mode 0 cannot be (nothing is
    /// acknowledged).
    pub idempotent: bool,
    /// How long an idempotent [`crate::Producer`] retries one message (or a flush) before it
    /// fails with the last error.
    pub retry_for: Duration,
    /// Queue without a high-water mark (throughput tools): sends never block on a slow writer.
    pub unbounded: bool,
    /// The identity to present instead of a fresh one (`topic` and `mode` are then ignored for
    /// it): tests and tools that need a known UUID.
    pub identity: Option<Vec<u8>>,
    /// CURVE keys, for a writer that requires CURVE (issue #19); `None`: plain ZMTP.
    pub curve: Option<crate::ClientCurve>,
}

impl ProducerOptions {
    /// Options for `topic` in `mode` with a 10 s timeout; idempotent with 60 s of retries
    /// in modes 1 and 2.
    pub fn new(topic: &str, mode: AckMode) -> Self {
        ProducerOptions {
            topic: topic.to_owned(),
            mode,
            timeout: Duration::from_secs(10),
            idempotent: mode != AckMode::None,
            retry_for: Duration::from_secs(60),
            unbounded: false,
            identity: None,
            curve: None,
        }
    }

    /// The same with CURVE keys (`None`: plain ZMTP).
    pub fn curve(mut self, curve: Option<crate::ClientCurve>) -> Self {
        self.curve = curve;
        self
    }

    /// The same with `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same, not idempotent: the original ZPER producer's behaviour (a retry may store
    /// a message twice; a mode-1 ack after a reconnect may seem to cover lost messages).
    pub fn plain(mut self) -> Self {
        self.idempotent = false;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producers_are_idempotent_by_default_when_they_get_acks() {
        assert!(ProducerOptions::new("t", AckMode::PerMessage).idempotent);
        assert!(ProducerOptions::new("t", AckMode::PerFlush).idempotent);
        assert!(!ProducerOptions::new("t", AckMode::None).idempotent);
        assert!(
            !ProducerOptions::new("t", AckMode::PerFlush)
                .plain()
                .idempotent
        );
    }
}
