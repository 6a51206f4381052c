//! Counters of what the endpoints stored, sent, dropped or refused, so nothing is lost silently.
//! Plain atomics on the hot path; [`CountersCollector`] exports them on HTTP `/metrics` as
//! Prometheus counters (`zper_` prefix, `_total` suffix).

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

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, Opts};
use std::sync::Arc;

/// Exports [`Counters`] to Prometheus at scrape time.
pub struct CountersCollector {
    counters: Arc<Counters>,
    messages: IntCounter,
    bytes: IntCounter,
    acks_sent: IntCounter,
    acks_dropped: IntCounter,
    replies_dropped: IntCounter,
    flush_notices: IntCounter,
    rejected: IntCounterVec,
}

/// Moves a Prometheus counter up to `value` (counters only increase).
fn catch_up(c: &IntCounter, value: u64) {
    let now = c.get();
    if value > now {
        c.inc_by(value - now);
    }
}

impl CountersCollector {
    /// Collector over `counters`.
    ///
    /// Errors: only if a metric name were invalid (they are static).
    pub fn new(counters: Arc<Counters>) -> prometheus::Result<Self> {
        let c = |name: &str, help: &str| IntCounter::with_opts(Opts::new(name, help));
        Ok(CountersCollector {
            counters,
            messages: c(
                "zper_messages_written_total",
                "Messages appended to the store.",
            )?,
            bytes: c(
                "zper_bytes_written_total",
                "Record bytes appended to the store.",
            )?,
            acks_sent: c("zper_acks_sent_total", "Producer acks delivered.")?,
            acks_dropped: c(
                "zper_acks_dropped_total",
                "Producer acks that could not be delivered.",
            )?,
            replies_dropped: c(
                "zper_replies_dropped_total",
                "Reader or controller replies that could not be delivered.",
            )?,
            flush_notices: c(
                "zper_flush_notices_total",
                "Flush notices published on the ack endpoint.",
            )?,
            rejected: IntCounterVec::new(
                Opts::new(
                    "zper_rejected_total",
                    "Requests or messages refused, by reason.",
                ),
                &["reason"],
            )?,
        })
    }

    fn singles(&self) -> [&IntCounter; 6] {
        [
            &self.messages,
            &self.bytes,
            &self.acks_sent,
            &self.acks_dropped,
            &self.replies_dropped,
            &self.flush_notices,
        ]
    }
}

impl Collector for CountersCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut d: Vec<&Desc> = self.singles().into_iter().flat_map(|c| c.desc()).collect();
        d.extend(self.rejected.desc());
        d
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let k = &self.counters;
        catch_up(&self.messages, Counters::get(&k.messages_stored));
        catch_up(&self.bytes, Counters::get(&k.bytes_stored));
        catch_up(&self.acks_sent, Counters::get(&k.acks_sent));
        catch_up(&self.acks_dropped, Counters::get(&k.acks_dropped));
        catch_up(&self.replies_dropped, Counters::get(&k.replies_dropped));
        catch_up(&self.flush_notices, Counters::get(&k.flush_notices));
        for (reason, value) in [
            ("invalid_identity", &k.invalid_identity),
            ("oversized_frame", &k.oversized_frames),
            ("empty_message", &k.empty_messages),
            ("append_error", &k.append_errors),
            ("bad_request", &k.bad_requests),
        ] {
            catch_up(
                &self.rejected.with_label_values(&[reason]),
                Counters::get(value),
            );
        }
        let mut out: Vec<MetricFamily> = self
            .singles()
            .into_iter()
            .flat_map(|c| c.collect())
            .collect();
        out.extend(self.rejected.collect());
        out
    }
}
