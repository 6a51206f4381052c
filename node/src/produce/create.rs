//! Topic creation on first write (issue #4: "the first write to a new topic creates it"),
//! without blocking the writer (issue #14).
//!
//! A worker that sees a topic its placement view does not know starts its creation
//! ([`CreateTopics::start`]: a Raft proposal on the node's runtime) and parks that topic's
//! writes in its [`ParkingLot`], in arrival order, while it goes on appending, flushing and
//! acknowledging every other topic. The outcome comes back as a [`Created`] through the
//! worker's mailbox: the parked writes are then appended as if they had just arrived, or
//! refused with status 105 (unavailable) if the topic could not be created.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::{Append, WriteBatch};
use crate::replication::PlacementView;

/// Longest a topic creation may take, from the proposal until this node applied it.
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes of records a worker keeps parked for topics being created; writes past it are
/// refused with 105 (issue #13: every queue has a bound).
pub const PARKED_BYTES: usize = 64 << 20;
/// Topics a worker may be creating at once; writes to further new topics are refused with 105.
pub const PARKED_TOPICS: usize = 1024;

/// The outcome of one creation, for the worker that started it.
#[derive(Debug)]
pub(crate) struct Created {
    /// The topic.
    pub(crate) topic: Arc<str>,
    /// `Ok` once the topic is in this node's placement view; otherwise why not (for the log).
    pub(crate) result: Result<(), String>,
}

/// Creates unknown topics for the writer workers.
pub(crate) trait CreateTopics: Send + Sync {
    /// True when this node's placement view already knows `topic`.
    fn known(&self, topic: &str) -> bool;
    /// Starts creating `topic` and returns at once; exactly one [`Created`] for it is sent to
    /// `done`, within about [`CREATE_TIMEOUT`].
    fn start(&self, topic: Arc<str>, done: Sender<Created>);
}

/// Creates a topic through Raft with the node's defaults and waits (asynchronously) until this
/// node has applied it, so the writer knows at once who leads it.
#[derive(Clone)]
pub struct TopicCreator {
    /// The Raft member.
    pub cluster: zper_raft::ClusterNode,
    /// The runtime the proposal runs on.
    pub runtime: tokio::runtime::Handle,
    /// The placement view to refresh.
    pub view: PlacementView,
    /// `retain_hours` of the topics it creates: this node's (`None`: the metadata default).
    pub retain_hours: Option<u32>,
    /// `auto_create_topics`: false refuses writes to topics not in the metadata.
    pub auto_create: bool,
}

impl CreateTopics for TopicCreator {
    fn known(&self, topic: &str) -> bool {
        self.view.knows(topic)
    }

    fn start(&self, topic: Arc<str>, done: Sender<Created>) {
        let this = self.clone();
        self.runtime.spawn(async move {
            let result = this.ensure(&topic).await;
            let _ = done.send(Created { topic, result });
        });
    }
}

impl TopicCreator {
    /// Ensures `topic` is in the metadata (creating it with the defaults if needed) and in
    /// this node's placement view.
    ///
    /// Errors: the creation did not commit (no quorum, no live node) or was not applied here
    /// within [`CREATE_TIMEOUT`]; a message for the log.
    async fn ensure(&self, topic: &str) -> Result<(), String> {
        // The view refreshes every few ms: look at the applied metadata itself first.
        self.view.refresh(&self.cluster);
        if self.view.fragment(topic).is_some() {
            return Ok(());
        }
        if !self.auto_create {
            return Err("the topic does not exist and auto_create_topics = false".into());
        }
        use zper_raft::metadata::MetadataError;
        let deadline = Instant::now() + CREATE_TIMEOUT;
        loop {
            let command = zper_raft::metadata::Command::CreateTopic {
                name: topic.to_owned(),
                fragments: None,
                replication_factor: None,
                retain_hours: self.retain_hours,
                policy: Default::default(),
                now_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let retry = match tokio::time::timeout(left, self.cluster.propose(command)).await {
                Ok(Ok(Ok(_))) | Ok(Ok(Err(MetadataError::TopicExists(_)))) => break,
                // No live node yet (this node registers just after it starts): wait a little.
                Ok(Ok(Err(e @ MetadataError::NotEnoughNodes { .. }))) => e.to_string(),
                Ok(Ok(Err(e))) => return Err(e.to_string()),
                Ok(Err(e)) => return Err(e.to_string()),
                Err(_) => return Err("creation did not commit in time".into()),
            };
            if Instant::now() >= deadline {
                return Err(retry);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        while Instant::now() < deadline {
            self.view.refresh(&self.cluster);
            if self.view.fragment(topic).is_some() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Err("created, but not applied here in time".into())
    }
}

/// Writes waiting for their topic to be created: per topic, in arrival order, at most
/// [`PARKED_BYTES`] of records and [`PARKED_TOPICS`] topics in all.
#[derive(Debug, Default)]
pub(crate) struct ParkingLot {
    topics: HashMap<Arc<str>, WriteBatch>,
    bytes: usize,
}

/// Why a write could not be parked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// [`PARKED_BYTES`] are parked already.
    Bytes,
    /// [`PARKED_TOPICS`] topics are being created already.
    Topics,
}

impl ParkingLot {
    /// True while `topic`'s creation is in progress (its writes must wait behind it).
    pub(crate) fn waiting(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
    }

    /// True when nothing waits.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }

    /// Parks one producer's run of records (`records` are exactly its bytes); the first write
    /// to a topic opens its place, and then the caller starts the creation (returns true).
    ///
    /// Errors: [`Full`], with the run handed back; nothing was parked and the writer refuses
    /// the run.
    pub(crate) fn park(&mut self, append: Append, records: &[u8]) -> Result<bool, (Append, Full)> {
        if self.bytes + records.len() > PARKED_BYTES {
            return Err((append, Full::Bytes));
        }
        let topic = append.producer.topic.clone();
        let opened = !self.topics.contains_key(&topic);
        if opened && self.topics.len() >= PARKED_TOPICS {
            return Err((append, Full::Topics));
        }
        let batch = self.topics.entry(topic).or_default();
        batch.bytes.extend_from_slice(records);
        self.bytes += records.len();
        batch.appends.push(Append {
            bytes_end: batch.bytes.len(),
            ..append
        });
        Ok(opened)
    }

    /// Everything parked for `topic`, in arrival order, as one batch (its creation ended).
    pub(crate) fn release(&mut self, topic: &str) -> Option<WriteBatch> {
        let batch = self.topics.remove(topic)?;
        self.bytes -= batch.bytes.len();
        Some(batch)
    }

    /// Everything parked, topic by topic (the worker is stopping).
    pub(crate) fn drain(&mut self) -> Vec<WriteBatch> {
        self.bytes = 0;
        self.topics.drain().map(|(_, b)| b).collect()
    }
}

/// Splits `batch` into what may be appended now and what must wait for a creation. `known`
/// tells whether a topic exists here; `start` is called once per topic whose first write
/// opened a place in `lot`; `refuse` gets every run that could not be parked.
pub(crate) fn park_unknown(
    batch: WriteBatch,
    lot: &mut ParkingLot,
    known: impl Fn(&str) -> bool,
    mut start: impl FnMut(&Arc<str>),
    mut refuse: impl FnMut(Append, Full),
) -> WriteBatch {
    let must_wait = |lot: &ParkingLot, topic: &str| lot.waiting(topic) || !known(topic);
    // The hot path: every topic known, nothing parked. A batch is mostly runs of one
    // producer, so each run's topic is looked up once.
    let mut previous: Option<&Arc<str>> = None;
    let any_waits = batch.appends.iter().any(|a| {
        let t = &a.producer.topic;
        if previous.is_some_and(|p| Arc::ptr_eq(p, t)) {
            return false;
        }
        previous = Some(t);
        must_wait(lot, t)
    });
    if !any_waits {
        return batch;
    }
    let mut now = WriteBatch::default();
    let mut start_at = 0;
    for a in batch.appends {
        let records = &batch.bytes[start_at..a.bytes_end];
        start_at = a.bytes_end;
        if !must_wait(lot, &a.producer.topic) {
            now.bytes.extend_from_slice(records);
            now.appends.push(Append {
                bytes_end: now.bytes.len(),
                ..a
            });
            continue;
        }
        let topic = a.producer.topic.clone();
        match lot.park(a, records) {
            Ok(true) => start(&topic),
            Ok(false) => {}
            Err((a, full)) => refuse(a, full),
        }
    }
    now
}

/// `batch` cut at run boundaries into batches of at most `max` bytes each (a single larger run
/// stays whole), in order: a released parking lot is appended as the front would have handed
/// it over, so one failed store write (a full disk) refuses one front-sized batch, not every
/// write that waited.
pub(crate) fn split(batch: WriteBatch, max: usize) -> Vec<WriteBatch> {
    let mut out = Vec::new();
    let mut current = WriteBatch::default();
    let mut start = 0;
    for a in batch.appends {
        let records = &batch.bytes[start..a.bytes_end];
        start = a.bytes_end;
        if !current.appends.is_empty() && current.bytes.len() + records.len() > max {
            out.push(std::mem::take(&mut current));
        }
        current.bytes.extend_from_slice(records);
        current.appends.push(Append {
            bytes_end: current.bytes.len(),
            ..a
        });
    }
    if !current.appends.is_empty() {
        out.push(current);
    }
    out
}

/// Whether a creation that failed lately should be retried yet (a dead quorum is not asked
/// again for every batch: writes in between are refused at once).
pub(crate) fn retry_due(failed_at: Option<&Instant>) -> bool {
    failed_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::produce::Producer;
    use zper_wire::AckMode;

    fn producer(topic: &str, id: u8) -> Arc<Producer> {
        Arc::new(Producer {
            routing_id: vec![id],
            topic: Arc::from(topic),
            mode: AckMode::PerMessage,
            idempotent: false,
            worker: 0,
        })
    }

    /// A batch of runs `(topic, producer id, records)`.
    fn batch(runs: &[(&str, u8, &[u8])]) -> WriteBatch {
        let mut b = WriteBatch::default();
        for (topic, id, records) in runs {
            b.bytes.extend_from_slice(records);
            b.appends.push(Append {
                producer: producer(topic, *id),
                bytes_end: b.bytes.len(),
                messages: 1,
                last_id: vec![*id],
            });
        }
        b
    }

    /// `(topic, records)` of each run of a batch, in order.
    fn runs(b: &WriteBatch) -> Vec<(String, Vec<u8>)> {
        let mut start = 0;
        b.appends
            .iter()
            .map(|a| {
                let r = (
                    a.producer.topic.to_string(),
                    b.bytes[start..a.bytes_end].to_vec(),
                );
                start = a.bytes_end;
                r
            })
            .collect()
    }

    #[test]
    fn known_topics_go_on_while_a_new_one_waits_in_order() {
        let mut lot = ParkingLot::default();
        let mut started = Vec::new();
        let known = |t: &str| t == "old";
        let b = batch(&[("old", 1, b"a"), ("new", 2, b"bb"), ("old", 1, b"c")]);
        let now = park_unknown(
            b,
            &mut lot,
            known,
            |t| started.push(t.to_string()),
            |_, _| panic!("room"),
        );
        assert_eq!(
            runs(&now),
            vec![("old".into(), b"a".to_vec()), ("old".into(), b"c".to_vec())]
        );
        assert_eq!(started, vec!["new".to_string()], "one creation per topic");
        // A later batch: the new topic's writes queue behind the first, no second creation.
        let b = batch(&[("new", 3, b"ddd"), ("old", 1, b"e")]);
        let now = park_unknown(
            b,
            &mut lot,
            known,
            |t| started.push(t.to_string()),
            |_, _| panic!("room"),
        );
        assert_eq!(runs(&now), vec![("old".into(), b"e".to_vec())]);
        assert_eq!(started.len(), 1);
        let parked = lot.release("new").expect("parked");
        assert_eq!(
            runs(&parked),
            vec![
                ("new".into(), b"bb".to_vec()),
                ("new".into(), b"ddd".to_vec())
            ]
        );
        assert!(lot.is_empty() && lot.bytes == 0);
    }

    #[test]
    fn a_topic_still_waiting_keeps_its_order_even_once_known() {
        // The view may learn the topic (another node created it) before this worker hears its
        // own creation's outcome: later writes must still queue behind the parked ones.
        let mut lot = ParkingLot::default();
        let b = batch(&[("t", 1, b"first")]);
        let _ = park_unknown(b, &mut lot, |_| false, |_| {}, |_, _| panic!("room"));
        let b = batch(&[("t", 1, b"second")]);
        let now = park_unknown(b, &mut lot, |_| true, |_| {}, |_, _| panic!("room"));
        assert!(now.appends.is_empty());
        let parked = lot.release("t").expect("parked");
        assert_eq!(parked.bytes, b"firstsecond".to_vec());
    }

    #[test]
    fn the_lot_is_bounded_in_bytes_and_topics() {
        let mut lot = ParkingLot::default();
        let big = vec![0u8; PARKED_BYTES];
        let b = batch(&[("t", 1, &big), ("t", 2, b"x")]);
        let mut refused = Vec::new();
        let _ = park_unknown(
            b,
            &mut lot,
            |_| false,
            |_| {},
            |a, full| refused.push((a.last_id, full)),
        );
        assert_eq!(refused, vec![(vec![2], Full::Bytes)]);
        assert_eq!(lot.release("t").map(|b| b.bytes.len()), Some(PARKED_BYTES));

        let mut lot = ParkingLot::default();
        for i in 0..PARKED_TOPICS {
            let topic = format!("t{i}");
            let run = batch(&[(&topic, 1, b"x")]).appends.remove(0);
            assert!(matches!(lot.park(run, b"x"), Ok(true)));
        }
        let extra = batch(&[("one-more", 1, b"x")]).appends.remove(0);
        assert!(matches!(lot.park(extra, b"x"), Err((_, Full::Topics))));
        let known = batch(&[("t0", 1, b"y")]).appends.remove(0);
        assert!(
            matches!(lot.park(known, b"y"), Ok(false)),
            "a waiting topic still queues"
        );
        assert_eq!(lot.drain().len(), PARKED_TOPICS);
        assert!(lot.is_empty());
    }

    #[test]
    fn a_released_lot_is_appended_in_front_sized_batches_in_order() {
        let b = batch(&[
            ("t", 1, b"aaaa"),
            ("t", 2, b"bb"),
            ("t", 1, b"cccccc"),
            ("t", 3, b"d"),
        ]);
        let parts = split(b, 6);
        let got: Vec<Vec<(String, Vec<u8>)>> = parts.iter().map(runs).collect();
        assert_eq!(
            got,
            vec![
                vec![("t".into(), b"aaaa".to_vec()), ("t".into(), b"bb".to_vec())],
                vec![("t".into(), b"cccccc".to_vec())],
                vec![("t".into(), b"d".to_vec())],
            ],
            "cut at run boundaries, a run larger than the limit whole"
        );
        assert!(split(WriteBatch::default(), 6).is_empty());
    }

    #[test]
    fn a_failed_creation_is_retried_after_a_second() {
        assert!(retry_due(None));
        assert!(!retry_due(Some(&Instant::now())));
        let long_ago = Instant::now().checked_sub(Duration::from_secs(2));
        assert!(long_ago.is_none_or(|t| retry_due(Some(&t))));
    }
}
