//! Counters of what the endpoints stored, sent, dropped or refused, so nothing is lost silently.
//! Plain atomics on the hot path; [`CountersCollector`] exports them on HTTP `/metrics` as
//! Prometheus counters (`zper_` prefix, `_total` suffix).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::RwLock;

/// Per-topic data-path counters (monotonic, since start).
#[derive(Debug, Default)]
pub struct TopicCounters {
    /// Messages appended.
    pub messages_written: AtomicU64,
    /// Record bytes appended.
    pub bytes_written: AtomicU64,
    /// Whole messages served by FETCH and stream replies.
    pub messages_fetched: AtomicU64,
    /// Record (FETCH) or payload (stream) bytes served.
    pub bytes_fetched: AtomicU64,
}

/// The zmq endpoints whose open connections are counted, in [`Counters::connections`] order.
pub const ENDPOINTS: [&str; 4] = [
    zper_wire::endpoint::WRITER.name,
    zper_wire::endpoint::READER.name,
    zper_wire::endpoint::ACK.name,
    zper_wire::endpoint::CONTROLLER.name,
];

/// Upper bounds of the flush latency buckets, seconds (50 µs to ~1.6 s, doubling).
pub const FLUSH_BUCKETS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_2, 0.000_4, 0.000_8, 0.001_6, 0.003_2, 0.006_4, 0.012_8, 0.025_6,
    0.051_2, 0.102_4, 0.204_8, 0.409_6, 0.819_2, 1.638_4,
];

/// Event counters of one node (monotonic, since start).
#[derive(Debug)]
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
    /// Writer messages dropped: another node leads the topic's replicated fragment.
    pub not_leader: AtomicU64,
    /// Writer messages refused with status 103: fewer in-sync replicas than `min_insync`.
    pub not_enough_replicas: AtomicU64,
    /// Writer messages forwarded to the topic's leader on another node.
    pub forwarded: AtomicU64,
    /// Idempotent producers' messages stored before and answered without storing (issue #18).
    pub idempotent_duplicates: AtomicU64,
    /// Idempotent producers' messages refused with 106: not the next of their sequence.
    pub out_of_sequence: AtomicU64,
    /// Writer connections closed for a protocol error (a malformed handshake or frame, a
    /// refused socket type or mechanism, a handshake past its timeout; issue #17).
    pub zmtp_protocol_errors: AtomicU64,
    /// Connections to a writer or reader that requires CURVE closed before their handshake
    /// completed (issue #19): no CURVE, another server key, a client key not admitted, a box
    /// that does not open, or a client that gave up on the way.
    pub curve_refused: AtomicU64,
    /// Writer connections closed at once because the writer held its most connections.
    pub zmtp_refused_connections: AtomicU64,
    /// Idle writer connections closed to make room for a new one at the connection limit.
    pub zmtp_idle_closed: AtomicU64,
    /// Writer connections not read for now (backpressure): their producer has too many
    /// mode-2 messages unanswered or does not take its acks (a gauge).
    pub writer_held: AtomicU64,
    /// Acks that could not be delivered (peer gone or its queue full); never stops the writer.
    pub acks_dropped: AtomicU64,
    /// Acks sent.
    pub acks_sent: AtomicU64,
    /// Reader requests answered with 102 (malformed, unknown command, invalid identity).
    pub bad_requests: AtomicU64,
    /// Reader replies that could not be delivered.
    pub replies_dropped: AtomicU64,
    /// Requests refused because a bounded queue or the node's memory budget was full (issue
    /// #13): answered with a status, or dropped when even that cannot be delivered.
    pub overloaded: AtomicU64,
    /// Flush notices published on the ack endpoint.
    pub flush_notices: AtomicU64,
    /// fdatasync calls that made appended bytes durable.
    pub flushes: AtomicU64,
    /// Their durations, seconds (`zper_flush_duration_seconds`).
    pub flush_seconds: prometheus::Histogram,
    /// Open connections per endpoint, in [`ENDPOINTS`] order (accepted minus disconnected).
    pub connections: [AtomicI64; 4],
    /// Dolly endpoint events (`zper_dolly_events_total{event}`).
    pub dolly: DollyCounters,
    /// Relay (push delivery) events (`zper_relay_events_total{event}`).
    pub relay: RelayCounters,
    /// Data integrity events (`zper_integrity_events_total{event}`, issue #13).
    pub integrity: IntegrityCounters,
    /// Each replica's lag behind this leader (`zper_replica_lag_bytes`, issue #15).
    pub replica_lag: ReplicaLag,
    topics: RwLock<BTreeMap<String, std::sync::Arc<TopicCounters>>>,
}

/// What each replica last reported durable to this node as leader: (fragment log key,
/// replica) -> offset, bytes. The lag (`zper_replica_lag_bytes`) is the log's end at scrape
/// time minus this, so a replica that stopped fetching shows a growing lag, not its last one.
#[derive(Debug, Default)]
pub struct ReplicaLag(RwLock<BTreeMap<(String, u64), u64>>);

impl ReplicaLag {
    /// Records the durable offset `replica` reported for fragment log `key` in a fetch.
    pub fn record(&self, key: &str, replica: u64, durable: u64) {
        if let Ok(mut m) = self.0.write() {
            match m.get_mut(&(key.to_owned(), replica)) {
                Some(entry) => *entry = durable,
                None => {
                    m.insert((key.to_owned(), replica), durable);
                }
            }
        }
    }

    /// `replica`'s last reported durable offset on `key`, if it fetched since this node led it.
    pub fn reported(&self, key: &str, replica: u64) -> Option<u64> {
        self.0.read().ok()?.get(&(key.to_owned(), replica)).copied()
    }

    /// Forgets every fragment log `keep` says no (ones this node no longer leads).
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        if let Ok(mut m) = self.0.write() {
            m.retain(|(key, _), _| keep(key));
        }
    }
}

/// Data integrity events (issue #13).
#[derive(Debug, Default)]
pub struct IntegrityCounters {
    /// Stored bytes that did not match their checksum (at recovery or on a read).
    pub corruption_detected: AtomicU64,
    /// A damaged copy proposed to leave the in-sync replicas.
    pub isr_left: AtomicU64,
    /// A damaged copy was cut back to fetch the rest again from the leader.
    pub copy_repaired: AtomicU64,
    /// Writes refused because the disk (or the Raft store) failed, e.g. full.
    pub disk_refused: AtomicU64,
    /// Segments found without their checksum sidecar when a log was opened.
    pub checksums_missing: AtomicU64,
}

impl IntegrityCounters {
    /// `(event label, counter)` pairs.
    pub fn events(&self) -> [(&'static str, &AtomicU64); 5] {
        [
            ("corruption_detected", &self.corruption_detected),
            ("isr_left", &self.isr_left),
            ("copy_repaired", &self.copy_repaired),
            ("disk_refused", &self.disk_refused),
            ("checksums_missing", &self.checksums_missing),
        ]
    }
}

impl Default for Counters {
    fn default() -> Self {
        #[allow(clippy::expect_used)] // static options: the buckets are sorted and the name valid
        let flush_seconds = prometheus::Histogram::with_opts(
            prometheus::HistogramOpts::new(
                "zper_flush_duration_seconds",
                "Time to make appended bytes durable (fdatasync), seconds.",
            )
            .buckets(FLUSH_BUCKETS.to_vec()),
        )
        .expect("valid histogram options");
        Counters {
            messages_stored: AtomicU64::new(0),
            bytes_stored: AtomicU64::new(0),
            invalid_identity: AtomicU64::new(0),
            oversized_frames: AtomicU64::new(0),
            empty_messages: AtomicU64::new(0),
            append_errors: AtomicU64::new(0),
            not_leader: AtomicU64::new(0),
            not_enough_replicas: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            idempotent_duplicates: AtomicU64::new(0),
            out_of_sequence: AtomicU64::new(0),
            zmtp_protocol_errors: AtomicU64::new(0),
            curve_refused: AtomicU64::new(0),
            zmtp_refused_connections: AtomicU64::new(0),
            zmtp_idle_closed: AtomicU64::new(0),
            writer_held: AtomicU64::new(0),
            acks_dropped: AtomicU64::new(0),
            acks_sent: AtomicU64::new(0),
            bad_requests: AtomicU64::new(0),
            replies_dropped: AtomicU64::new(0),
            overloaded: AtomicU64::new(0),
            flush_notices: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            flush_seconds,
            connections: Default::default(),
            dolly: DollyCounters::default(),
            relay: RelayCounters::default(),
            integrity: IntegrityCounters::default(),
            replica_lag: ReplicaLag::default(),
            topics: RwLock::new(BTreeMap::new()),
        }
    }
}

/// Dolly endpoint events (issue #5), exported as `zper_dolly_events_total{event}`.
#[derive(Debug, Default)]
pub struct DollyCounters {
    /// Puts answered with their sequence.
    pub put_ok: AtomicU64,
    /// Puts answered `Error`: cancelled before they committed (never applied).
    pub put_cancelled: AtomicU64,
    /// Puts left unanswered: neither they nor their cancel committed (no quorum).
    pub put_unsettled: AtomicU64,
    /// Gets that found the key.
    pub get_hit: AtomicU64,
    /// Gets answered "key not found".
    pub get_miss: AtomicU64,
    /// Malformed or misdirected requests answered `Error` (requests or snapshots port).
    pub bad_request: AtomicU64,
    /// Updates published on the leader's PUB.
    pub update_published: AtomicU64,
    /// Updates the publisher fell too far behind to publish (observers must re-snapshot).
    pub update_lagged: AtomicU64,
    /// Snapshots served on the leader's snapshots ROUTER.
    pub snapshot_served: AtomicU64,
}

impl DollyCounters {
    /// (event label, counter) pairs.
    pub fn events(&self) -> [(&'static str, &AtomicU64); 9] {
        [
            ("put_ok", &self.put_ok),
            ("put_cancelled", &self.put_cancelled),
            ("put_unsettled", &self.put_unsettled),
            ("get_hit", &self.get_hit),
            ("get_miss", &self.get_miss),
            ("bad_request", &self.bad_request),
            ("update_published", &self.update_published),
            ("update_lagged", &self.update_lagged),
            ("snapshot_served", &self.snapshot_served),
        ]
    }
}

/// Relay endpoint events (issue #7), exported as `zper_relay_events_total{event}`.
#[derive(Debug, Default)]
pub struct RelayCounters {
    /// Streams started (STREAM requests accepted).
    pub stream_started: AtomicU64,
    /// Messages pushed to subscribers.
    pub message_pushed: AtomicU64,
    /// Batches pushed.
    pub batch_pushed: AtomicU64,
    /// Pushes deferred because the subscriber's connection was full (read again from disk).
    pub push_deferred: AtomicU64,
    /// Pushes that paused on a full credit window (the subscriber has not acknowledged).
    pub window_full: AtomicU64,
    /// Offsets committed through Raft from acknowledgements.
    pub commit_ok: AtomicU64,
    /// Streams ended because the fragment is not (or no longer) the subscriber's.
    pub revoked: AtomicU64,
    /// Malformed requests answered ERROR.
    pub bad_request: AtomicU64,
    /// Results received from subscribers (or forwarded by other nodes).
    pub result_received: AtomicU64,
    /// Results delivered to registered producers on this node.
    pub result_delivered: AtomicU64,
    /// Results that could not be delivered or forwarded (queue full, producer gone).
    pub result_dropped: AtomicU64,
}

impl RelayCounters {
    /// (event label, counter) pairs.
    pub fn events(&self) -> [(&'static str, &AtomicU64); 11] {
        [
            ("stream_started", &self.stream_started),
            ("message_pushed", &self.message_pushed),
            ("batch_pushed", &self.batch_pushed),
            ("push_deferred", &self.push_deferred),
            ("window_full", &self.window_full),
            ("commit_ok", &self.commit_ok),
            ("revoked", &self.revoked),
            ("bad_request", &self.bad_request),
            ("result_received", &self.result_received),
            ("result_delivered", &self.result_delivered),
            ("result_dropped", &self.result_dropped),
        ]
    }
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

    /// The counters of `topic`, created on first use (callers on the hot path keep the `Arc`).
    pub fn topic(&self, topic: &str) -> std::sync::Arc<TopicCounters> {
        if let Ok(map) = self.topics.read() {
            if let Some(t) = map.get(topic) {
                return t.clone();
            }
        }
        match self.topics.write() {
            Ok(mut map) => map.entry(topic.to_owned()).or_default().clone(),
            Err(_) => std::sync::Arc::default(),
        }
    }

    fn topic_snapshot(&self) -> Vec<(String, std::sync::Arc<TopicCounters>)> {
        self.topics
            .read()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }
}

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};
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
    flushes: IntCounter,
    forwarded: IntCounter,
    duplicates: IntCounter,
    rejected: IntCounterVec,
    topic_messages_written: IntCounterVec,
    topic_bytes_written: IntCounterVec,
    topic_messages_fetched: IntCounterVec,
    topic_bytes_fetched: IntCounterVec,
    connections: IntGaugeVec,
    writer_held: IntGauge,
    dolly: IntCounterVec,
    relay: IntCounterVec,
    integrity: IntCounterVec,
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
            flushes: c(
                "zper_flushes_total",
                "fdatasync calls that made appended bytes durable.",
            )?,
            forwarded: c(
                "zper_forwarded_total",
                "Writer messages forwarded to the topic's leader on another node.",
            )?,
            duplicates: c(
                "zper_idempotent_duplicates_total",
                "Idempotent producers' messages already stored, acknowledged without storing.",
            )?,
            rejected: IntCounterVec::new(
                Opts::new(
                    "zper_rejected_total",
                    "Requests or messages refused, by reason.",
                ),
                &["reason"],
            )?,
            topic_messages_written: per_topic(
                "zper_topic_messages_written_total",
                "Messages appended, by topic.",
            )?,
            topic_bytes_written: per_topic(
                "zper_topic_bytes_written_total",
                "Record bytes appended, by topic.",
            )?,
            topic_messages_fetched: per_topic(
                "zper_topic_messages_fetched_total",
                "Whole messages served to readers, by topic.",
            )?,
            topic_bytes_fetched: per_topic(
                "zper_topic_bytes_fetched_total",
                "Bytes served to readers, by topic.",
            )?,
            writer_held: IntGauge::new(
                "zper_writer_held_connections",
                "Writer connections not read for now: too many mode-2 messages unanswered, or acks not taken.",
            )?,
            connections: IntGaugeVec::new(
                Opts::new(
                    "zper_open_connections",
                    "Open zmq connections, by endpoint.",
                ),
                &["endpoint"],
            )?,
            dolly: IntCounterVec::new(
                Opts::new(
                    "zper_dolly_events_total",
                    "Dolly requests, updates and snapshots, by event.",
                ),
                &["event"],
            )?,
            relay: IntCounterVec::new(
                Opts::new(
                    "zper_relay_events_total",
                    "Relay push delivery, commits and results, by event.",
                ),
                &["event"],
            )?,
            integrity: IntCounterVec::new(
                Opts::new(
                    "zper_integrity_events_total",
                    "Damaged data found, damaged copies leaving the ISR and repaired, writes refused on disk failure, by event.",
                ),
                &["event"],
            )?,
        })
    }

    fn per_topic_vecs(&self) -> [&IntCounterVec; 4] {
        [
            &self.topic_messages_written,
            &self.topic_bytes_written,
            &self.topic_messages_fetched,
            &self.topic_bytes_fetched,
        ]
    }

    fn singles(&self) -> [&IntCounter; 9] {
        [
            &self.messages,
            &self.bytes,
            &self.acks_sent,
            &self.acks_dropped,
            &self.replies_dropped,
            &self.flush_notices,
            &self.flushes,
            &self.forwarded,
            &self.duplicates,
        ]
    }
}

fn per_topic(name: &str, help: &str) -> prometheus::Result<IntCounterVec> {
    IntCounterVec::new(Opts::new(name, help), &["topic"])
}

impl Collector for CountersCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut d: Vec<&Desc> = self.singles().into_iter().flat_map(|c| c.desc()).collect();
        d.extend(self.rejected.desc());
        d.extend(self.per_topic_vecs().into_iter().flat_map(|v| v.desc()));
        d.extend(self.connections.desc());
        d.extend(self.writer_held.desc());
        d.extend(self.dolly.desc());
        d.extend(self.relay.desc());
        d.extend(self.integrity.desc());
        d.extend(self.counters.flush_seconds.desc());
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
        catch_up(&self.flushes, Counters::get(&k.flushes));
        catch_up(&self.forwarded, Counters::get(&k.forwarded));
        catch_up(&self.duplicates, Counters::get(&k.idempotent_duplicates));
        for (topic, t) in k.topic_snapshot() {
            for (vec, value) in [
                (&self.topic_messages_written, &t.messages_written),
                (&self.topic_bytes_written, &t.bytes_written),
                (&self.topic_messages_fetched, &t.messages_fetched),
                (&self.topic_bytes_fetched, &t.bytes_fetched),
            ] {
                catch_up(&vec.with_label_values(&[&topic]), Counters::get(value));
            }
        }
        for (event, value) in k.dolly.events() {
            catch_up(
                &self.dolly.with_label_values(&[event]),
                Counters::get(value),
            );
        }
        for (event, value) in k.relay.events() {
            catch_up(
                &self.relay.with_label_values(&[event]),
                Counters::get(value),
            );
        }
        for (event, value) in k.integrity.events() {
            catch_up(
                &self.integrity.with_label_values(&[event]),
                Counters::get(value),
            );
        }
        for (endpoint, open) in ENDPOINTS.iter().zip(&k.connections) {
            self.connections
                .with_label_values(&[*endpoint])
                .set(open.load(Ordering::Relaxed).max(0));
        }
        self.writer_held
            .set(i64::try_from(Counters::get(&k.writer_held)).unwrap_or(i64::MAX));
        for (reason, value) in [
            ("invalid_identity", &k.invalid_identity),
            ("oversized_frame", &k.oversized_frames),
            ("empty_message", &k.empty_messages),
            ("append_error", &k.append_errors),
            ("not_leader", &k.not_leader),
            ("not_enough_replicas", &k.not_enough_replicas),
            ("bad_request", &k.bad_requests),
            ("overloaded", &k.overloaded),
            ("protocol_error", &k.zmtp_protocol_errors),
            ("curve_refused", &k.curve_refused),
            ("connection_refused", &k.zmtp_refused_connections),
            ("idle_closed", &k.zmtp_idle_closed),
            ("out_of_sequence", &k.out_of_sequence),
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
        out.extend(self.per_topic_vecs().into_iter().flat_map(|v| v.collect()));
        out.extend(self.connections.collect());
        out.extend(self.writer_held.collect());
        out.extend(self.dolly.collect());
        out.extend(self.relay.collect());
        out.extend(self.integrity.collect());
        out.extend(self.counters.flush_seconds.collect());
        out
    }
}
