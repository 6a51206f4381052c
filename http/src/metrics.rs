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
            let c = self.proposals.with_label_values(&[result]);
            let value = counter.load(std::sync::atomic::Ordering::Relaxed);
            if value > c.get() {
                c.inc_by(value - c.get());
            }
        }
        let mut out: Vec<MetricFamily> = self.all().into_iter().flat_map(|g| g.collect()).collect();
        out.extend(self.proposals.collect());
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
