//! Gauges of the cluster as this node sees it, computed at each `/metrics` scrape (issue #15,
//! for the Grafana dashboard in `deploy/grafana/`):
//!
//! - `zper_build_info{version}` = 1;
//! - for the fragments this node leads (so a sum over nodes is the cluster's): ISR size
//!   `zper_fragment_isr_size{topic,fragment}`, replicas `zper_fragment_replicas`, and the
//!   count of those with fewer in-sync replicas than replicas,
//!   `zper_under_replicated_fragments`;
//! - replica lag on the leader, `zper_replica_lag_bytes{topic,fragment,replica}`: its log end
//!   at scrape time minus what the replica last reported durable (from the replication
//!   endpoint's fetches), so a dead or paused replica shows a growing lag;
//! - subscription-group lag for led fragments, `zper_group_lag_bytes{topic,group,fragment}`
//!   (readable end minus the group's committed offset; the slowest member under the `default`
//!   policy) and `zper_group_lag_messages`, counted by reading at most [`LAG_SCAN_BYTES`] per
//!   fragment and extrapolated beyond that by the mean message size read.
//!
//! Process metrics (RSS, open fds, CPU seconds) come from prometheus' process collector.

use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGauge, IntGaugeVec, Opts};
use zper_raft::metadata::FragmentPolicy;
use zper_raft::{ClusterNode, NodeId};
use zper_store::Store;

use crate::metrics::Counters;

/// Most bytes read per (group, fragment) to count lag in messages at one scrape.
pub const LAG_SCAN_BYTES: u64 = 1 << 20;
/// Most bytes read for lag counting over one whole scrape; past it only byte lag is exported.
pub const SCRAPE_SCAN_BYTES: u64 = 16 << 20;

/// The collector: see the module docs.
pub struct ClusterCollector {
    me: NodeId,
    node: ClusterNode,
    store: Arc<Store>,
    counters: Arc<Counters>,
    build_info: IntGaugeVec,
    under_replicated: IntGauge,
    isr_size: IntGaugeVec,
    replicas: IntGaugeVec,
    replica_lag: IntGaugeVec,
    group_lag_bytes: IntGaugeVec,
    group_lag_messages: IntGaugeVec,
}

impl ClusterCollector {
    /// A collector for node `me`.
    ///
    /// Errors: only if a metric name were invalid (they are static).
    pub fn new(
        me: NodeId,
        node: ClusterNode,
        store: Arc<Store>,
        counters: Arc<Counters>,
    ) -> prometheus::Result<Self> {
        let vec = |name: &str, help: &str, labels: &[&str]| {
            IntGaugeVec::new(Opts::new(name, help), labels)
        };
        Ok(ClusterCollector {
            me,
            node,
            store,
            counters,
            build_info: vec(
                "zper_build_info",
                "Always 1; the version of the running binary as a label.",
                &["version"],
            )?,
            under_replicated: IntGauge::with_opts(Opts::new(
                "zper_under_replicated_fragments",
                "Fragments led by this node with fewer in-sync replicas than replicas.",
            ))?,
            isr_size: vec(
                "zper_fragment_isr_size",
                "In-sync replicas (leader included) of each fragment this node leads.",
                &["topic", "fragment"],
            )?,
            replicas: vec(
                "zper_fragment_replicas",
                "Replicas of each fragment this node leads.",
                &["topic", "fragment"],
            )?,
            replica_lag: vec(
                "zper_replica_lag_bytes",
                "Leader's log end minus the replica's last reported durable offset, bytes.",
                &["topic", "fragment", "replica"],
            )?,
            group_lag_bytes: vec(
                "zper_group_lag_bytes",
                "Readable end minus the group's committed offset, bytes (fragments led here).",
                &["topic", "group", "fragment"],
            )?,
            group_lag_messages: vec(
                "zper_group_lag_messages",
                "Messages between the group's committed offset and the readable end (counted up to 1 MiB, extrapolated beyond).",
                &["topic", "group", "fragment"],
            )?,
        })
    }

    fn gauges(&self) -> [&IntGaugeVec; 6] {
        [
            &self.build_info,
            &self.isr_size,
            &self.replicas,
            &self.replica_lag,
            &self.group_lag_bytes,
            &self.group_lag_messages,
        ]
    }

    /// Sets every gauge from the metadata, the store and the counters as they are now.
    fn update(&self) {
        for g in self.gauges() {
            g.reset();
        }
        self.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let led = self.node.state.with_metadata(|m| {
            let mut led = Vec::new();
            for (name, t) in &m.topics {
                for f in t.fragments.iter().filter(|f| f.leader == self.me) {
                    let groups: Vec<(String, u64)> = m
                        .subscriptions
                        .get(name)
                        .into_iter()
                        .flatten()
                        .map(|(group, g)| (group.clone(), slowest(g, t.policy, f.id)))
                        .collect();
                    let followers: Vec<NodeId> = f
                        .replicas
                        .iter()
                        .copied()
                        .filter(|r| *r != self.me)
                        .collect();
                    led.push((name.clone(), f.id, f.isr.len(), followers, groups));
                }
            }
            led
        });
        let led = led.unwrap_or_default();
        let mut under = 0;
        let mut budget = SCRAPE_SCAN_BYTES;
        let mut led_keys = std::collections::HashSet::new();
        for (topic, fragment, isr, followers, groups) in led {
            let replicas = followers.len() + 1;
            let labels = [topic.as_str(), &fragment.to_string()];
            self.isr_size.with_label_values(&labels).set(isr as i64);
            self.replicas
                .with_label_values(&labels)
                .set(replicas as i64);
            under += i64::from(isr < replicas);
            let key = zper_store::log_key(&topic, fragment);
            led_keys.insert(key.clone());
            let Some(log) = self.store.topic(&key) else {
                continue;
            };
            // Lag at scrape time: a replica that stopped fetching shows a growing lag.
            let written = log.written_end().unwrap_or(0);
            for r in followers {
                if let Some(durable) = self.counters.replica_lag.reported(&key, r) {
                    self.replica_lag
                        .with_label_values(&[topic.as_str(), &fragment.to_string(), &r.to_string()])
                        .set(written.saturating_sub(durable) as i64);
                }
            }
            let (Ok(end), Ok(starts)) = (log.visible_end(), log.segment_starts()) else {
                continue;
            };
            let start = starts.first().copied().unwrap_or(0);
            for (group, committed) in groups {
                let from = committed.clamp(start, end);
                let labels = [topic.as_str(), group.as_str(), &fragment.to_string()];
                self.group_lag_bytes
                    .with_label_values(&labels)
                    .set((end - from) as i64);
                if let Some(n) = lag_messages(&log, from, end, &mut budget) {
                    self.group_lag_messages
                        .with_label_values(&labels)
                        .set(n as i64);
                }
            }
        }
        self.under_replicated.set(under);
        self.counters
            .replica_lag
            .retain(|key| led_keys.contains(key));
    }
}

/// The committed offset of the group's slowest reader of `fragment` (0 when none).
fn slowest(
    g: &zper_raft::metadata::SubscriptionGroup,
    policy: FragmentPolicy,
    fragment: u32,
) -> u64 {
    match policy {
        FragmentPolicy::Distribution => g.offsets.get(&fragment).copied().unwrap_or(0),
        FragmentPolicy::Default => {
            let members: Vec<&String> = if g.members.is_empty() {
                g.member_offsets.keys().collect()
            } else {
                g.members.keys().collect()
            };
            members
                .into_iter()
                .map(|m| g.committed(policy, m, fragment))
                .min()
                .unwrap_or(0)
        }
    }
}

/// Messages in `[from, end)`: counted up to [`LAG_SCAN_BYTES`] (and the scrape's `budget`),
/// extrapolated by the mean message size read beyond that; `None` when nothing could be read.
fn lag_messages(log: &zper_store::TopicLog, from: u64, end: u64, budget: &mut u64) -> Option<u64> {
    if from >= end {
        return Some(0);
    }
    let limit = LAG_SCAN_BYTES.min(*budget);
    let (mut at, mut counted) = (from, 0u64);
    while at < end && at - from < limit {
        let (messages, next) = log.messages(at, usize::MAX, limit - (at - from)).ok()?;
        if messages.is_empty() || next <= at {
            break;
        }
        counted += messages.len() as u64;
        at = next;
    }
    let read = at - from;
    *budget = budget.saturating_sub(read);
    if at >= end {
        return Some(counted);
    }
    (read > 0 && counted > 0).then(|| counted + (end - at) * counted / read)
}

impl Collector for ClusterCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut d: Vec<&Desc> = self.gauges().iter().flat_map(|g| g.desc()).collect();
        d.extend(self.under_replicated.desc());
        d
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.update();
        let mut out: Vec<MetricFamily> = self.gauges().iter().flat_map(|g| g.collect()).collect();
        out.extend(self.under_replicated.collect());
        out
    }
}
