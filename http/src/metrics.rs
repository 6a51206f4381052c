//! `GET /metrics`: Prometheus text exposition (the `prometheus` crate), `zper_` prefix, base
//! units, `_total` counters. The node registers its own collectors (data path counters) in the
//! registry it hands to [`crate::router_with_metrics`]; this module adds the Raft gauges, read
//! from openraft's metrics at scrape time.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Encoder, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};
use std::sync::atomic::Ordering::Relaxed;

use zper_raft::ClusterNode;

/// Raft metrics of one node: term, leader id, last log, commit and applied index, voters,
/// proposal counts and latency.
pub struct RaftCollector {
    node: ClusterNode,
    term: IntGauge,
    leader: IntGauge,
    last_log: IntGauge,
    commit: IntGauge,
    applied: IntGauge,
    voters: IntGauge,
    proposals: IntCounterVec,
    /// Outgoing Raft RPCs by event (`sent`, `failed`, `connected`, `timeout_append`, ...).
    rpcs: IntCounterVec,
    leader_changes: prometheus::IntCounter,
    /// Lease renewals by result (`renewed`, `lapsed`).
    lease_renewals: IntCounterVec,
    /// Smallest margin a lease renewal left, seconds.
    lease_margin: prometheus::Gauge,
}

/// Raises counter `c` to `value` (counters only go up; the source is a monotonic atomic).
fn raise(c: &prometheus::IntCounter, value: u64) {
    if value > c.get() {
        c.inc_by(value - c.get());
    }
}

/// The commit index as this node knows it: on the leader, the highest index stored on a
/// quorum of voters (from its replication progress); elsewhere the applied index, a lower
/// bound (openraft 0.9 does not report a follower's commit index).
pub fn commit_index(m: &openraft::RaftMetrics<zper_raft::NodeId, zper_raft::NodeEndpoints>) -> u64 {
    let applied = m.last_applied.map_or(0, |l| l.index);
    let Some(replication) = m.replication.as_ref() else {
        return applied;
    };
    let voters: Vec<zper_raft::NodeId> = m.membership_config.membership().voter_ids().collect();
    let mut matched: Vec<u64> = voters
        .iter()
        .map(|v| {
            if *v == m.id {
                m.last_log_index.unwrap_or(0)
            } else {
                replication
                    .get(v)
                    .and_then(|l| l.as_ref())
                    .map_or(0, |l| l.index)
            }
        })
        .collect();
    if matched.is_empty() {
        return applied;
    }
    matched.sort_unstable_by(|a, b| b.cmp(a));
    matched[voters.len() / 2].max(applied)
}

fn gauge(name: &str, help: &str) -> prometheus::Result<IntGauge> {
    IntGauge::with_opts(Opts::new(name, help))
}

impl RaftCollector {
    /// Collector over `node`'s Raft metrics.
    ///
    /// Errors: only if a metric name were invalid (they are static).
    pub fn new(node: ClusterNode) -> prometheus::Result<Self> {
        Ok(RaftCollector {
            node,
            term: gauge("zper_raft_term", "Current Raft term.")?,
            leader: gauge(
                "zper_raft_leader_id",
                "Raft leader id as this node knows it (0: none).",
            )?,
            last_log: gauge(
                "zper_raft_last_log_index",
                "Index of the last Raft log entry.",
            )?,
            commit: gauge(
                "zper_raft_commit_index",
                "Raft commit index (on followers: the applied index, a lower bound).",
            )?,
            applied: gauge(
                "zper_raft_applied_index",
                "Index of the last applied Raft entry.",
            )?,
            voters: gauge("zper_raft_voters", "Voters in the Raft membership.")?,
            proposals: IntCounterVec::new(
                Opts::new(
                    "zper_raft_proposals_total",
                    "Metadata commands proposed by this node as leader, by result.",
                ),
                &["result"],
            )?,
            rpcs: IntCounterVec::new(
                Opts::new(
                    "zper_raft_rpc_total",
                    "Raft RPCs this node sent, by event: sent, failed (connection refused, reset, \
                     undecodable), connected (connections opened), forwarded (proposals sent to the \
                     leader over the stream and answered), timeout_append / timeout_vote / \
                     timeout_snapshot (abandoned before the peer answered).",
                ),
                &["event"],
            )?,
            leader_changes: prometheus::IntCounter::new(
                "zper_raft_leader_changes_total",
                "Times the Raft leader this node knows changed (to another node or to none) \
                 since it started.",
            )?,
            lease_renewals: IntCounterVec::new(
                Opts::new(
                    "zper_node_lease_renewals_total",
                    "Renewals of this node's liveness lease that committed, by result: renewed \
                     (before the lease ended), lapsed (after: the node was fenced meanwhile).",
                ),
                &["result"],
            )?,
            lease_margin: prometheus::Gauge::new(
                "zper_node_lease_margin_min_seconds",
                "Smallest part of the lease that was left when a renewal committed, seconds \
                 (negative after a lapse; absent before the first renewal).",
            )?,
        })
    }

    fn all(&self) -> [&IntGauge; 6] {
        [
            &self.term,
            &self.leader,
            &self.last_log,
            &self.commit,
            &self.applied,
            &self.voters,
        ]
    }
}

impl Collector for RaftCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut d: Vec<&Desc> = self.all().into_iter().flat_map(|g| g.desc()).collect();
        d.extend(self.proposals.desc());
        d.extend(self.rpcs.desc());
        d.extend(self.leader_changes.desc());
        d.extend(self.lease_renewals.desc());
        d.extend(self.lease_margin.desc());
        d.extend(self.node.proposals.seconds.desc());
        d
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let m = self.node.raft.metrics().borrow().clone();
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.term.set(i(m.current_term));
        self.leader.set(i(m.current_leader.unwrap_or(0)));
        self.last_log.set(i(m.last_log_index.unwrap_or(0)));
        self.applied.set(i(m.last_applied.map_or(0, |l| l.index)));
        self.voters
            .set(m.membership_config.membership().voter_ids().count() as i64);
        self.commit.set(i(commit_index(&m)));
        let p = &self.node.proposals;
        for (result, counter) in [("committed", &p.committed), ("failed", &p.failed)] {
            raise(
                &self.proposals.with_label_values(&[result]),
                counter.load(Relaxed),
            );
        }
        let t = &self.node.transport;
        let mut events = vec![
            ("sent", t.sent.load(Relaxed)),
            ("failed", t.failures.load(Relaxed)),
            ("connected", t.connects.load(Relaxed)),
            ("forwarded", t.forwarded.load(Relaxed)),
        ];
        for (kind, n) in zper_raft::transport::RPC_KINDS.iter().zip(&t.timeouts) {
            events.push((kind, n.load(Relaxed)));
        }
        for (event, value) in events {
            let label = match event {
                "append" | "vote" | "snapshot" => format!("timeout_{event}"),
                other => other.to_owned(),
            };
            raise(&self.rpcs.with_label_values(&[label.as_str()]), value);
        }
        raise(&self.leader_changes, self.node.leader_changes.load(Relaxed));
        let lease = &self.node.lease;
        for (result, counter) in [("renewed", &lease.renewed), ("lapsed", &lease.lapsed)] {
            raise(
                &self.lease_renewals.with_label_values(&[result]),
                counter.load(Relaxed),
            );
        }
        let mut out: Vec<MetricFamily> = self.all().into_iter().flat_map(|g| g.collect()).collect();
        if let Some(margin) = lease.min_margin() {
            self.lease_margin.set(margin as f64 / 1000.0);
            out.extend(self.lease_margin.collect());
        }
        out.extend(self.lease_renewals.collect());
        out.extend(self.proposals.collect());
        out.extend(self.rpcs.collect());
        out.extend(self.leader_changes.collect());
        out.extend(p.seconds.collect());
        out
    }
}

/// Serves the registry in Prometheus text format.
pub(crate) async fn metrics(State(registry): State<Registry>) -> impl IntoResponse {
    let mut out = Vec::new();
    let encoder = TextEncoder::new();
    if let Err(e) = encoder.encode(&registry.gather(), &mut out) {
        tracing::error!(error = %e, "metrics encoding failed");
    }
    ([(CONTENT_TYPE, encoder.format_type().to_owned())], out)
}
