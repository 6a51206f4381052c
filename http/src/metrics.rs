//! `GET /metrics`: Prometheus text exposition (the `prometheus` crate), `zper_` prefix, base
//! units, `_total` counters. The node registers its own collectors (data path counters) in the
//! registry it hands to [`crate::router_with_metrics`]; this module adds the Raft gauges, read
//! from openraft's metrics at scrape time.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Encoder, IntGauge, Opts, Registry, TextEncoder};
use zper_raft::ClusterNode;

/// Raft gauges of one node: term, leader id, last log index, applied index, voters.
pub struct RaftCollector {
    node: ClusterNode,
    term: IntGauge,
    leader: IntGauge,
    last_log: IntGauge,
    applied: IntGauge,
    voters: IntGauge,
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
            applied: gauge(
                "zper_raft_applied_index",
                "Index of the last applied Raft entry.",
            )?,
            voters: gauge("zper_raft_voters", "Voters in the Raft membership.")?,
        })
    }

    fn all(&self) -> [&IntGauge; 5] {
        [
            &self.term,
            &self.leader,
            &self.last_log,
            &self.applied,
            &self.voters,
        ]
    }
}

impl Collector for RaftCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.all().into_iter().flat_map(|g| g.desc()).collect()
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
        self.all().into_iter().flat_map(|g| g.collect()).collect()
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
