//! The Grafana dashboard and the metrics under it (issue #15 "Compose, images and Helm"): every
//! metric the dashboard queries is served by a node of a three-node cluster, the chart ships
//! the same dashboard, and the new gauges say what happens: replica lag, ISR size,
//! under-replicated fragments, subscription-group lag in messages and bytes.

mod common;

use common::run::subscribe_and_ack;
use std::path::Path;
use std::time::Duration;

use common::*;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The `zper_*` and `process_*` metric names the dashboard's queries use (histogram series
/// `_bucket` as their family name).
fn dashboard_metrics() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("deploy/grafana/zper-dashboard.json"))
        .expect("dashboard");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
    let mut names = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if (word.starts_with("zper_") || word.starts_with("process_"))
                    && !names.iter().any(|n| n == word)
                {
                    names.push(word.to_owned());
                }
            }
        }
    }
    names
}

/// Node `n`'s `/metrics` text.
fn metrics(c: &TestCluster, n: u64) -> String {
    http("GET", &c.http(n), "/metrics", None)
        .map(|(_, body)| body)
        .unwrap_or_default()
}

/// The value of the series `name{labels...}` whose label set contains every `want` pair.
fn value(text: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            let series = l.split_whitespace().next().unwrap_or("");
            (series == name || series.starts_with(&format!("{name}{{")))
                && want
                    .iter()
                    .all(|(k, v)| series.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
}

#[test]
fn every_dashboard_metric_is_served_and_the_new_gauges_tell_the_truth() {
    let shipped = std::fs::read(root().join("helm/zper/dashboards/zper-dashboard.json"))
        .expect("the chart ships the dashboard");
    let deployed =
        std::fs::read(root().join("deploy/grafana/zper-dashboard.json")).expect("deploy");
    assert_eq!(
        shipped, deployed,
        "helm/zper/dashboards and deploy/grafana hold the same dashboard"
    );

    let mut c = TestCluster::start();
    let leader = c.create("dash", 3);
    assert_eq!(c.produce_all(leader, "dash", 0..10).len(), 10);
    let brokers = get_json(&c.http(leader), "/v1/brokers");
    let controller = brokers
        .as_array()
        .expect("brokers")
        .iter()
        .find(|b| b["id"] == leader)
        .and_then(|b| b["endpoints"]["controller"].as_str())
        .expect("leader's controller")
        .to_owned();
    // A group that read and acknowledged 3 of the 10 messages.
    subscribe_and_ack(&controller, "dash", "board", 3);
    let labels = [("topic", "dash"), ("group", "board"), ("fragment", "0")];
    // Every message here is 17 bytes stored (`[id]["message <id>"]`, one-digit ids), so the lag
    // in messages is the lag in bytes / 17; the group committed at least its first ack.
    let lag = |t: &str| {
        let messages = value(t, "zper_group_lag_messages", &labels)?;
        let bytes = value(t, "zper_group_lag_bytes", &labels)?;
        Some((messages, bytes))
    };
    assert!(
        eventually(|| lag(&metrics(&c, leader))
            .is_some_and(|(m, b)| (7.0..10.0).contains(&m) && m * 17.0 == b)),
        "group lag in messages and bytes\n{}",
        metrics(&c, leader)
    );
    let text = metrics(&c, leader);
    let frag = [("topic", "dash"), ("fragment", "0")];
    assert_eq!(value(&text, "zper_fragment_isr_size", &frag), Some(3.0));
    assert_eq!(value(&text, "zper_fragment_replicas", &frag), Some(3.0));
    assert_eq!(
        value(&text, "zper_under_replicated_fragments", &[]),
        Some(0.0)
    );
    assert!(eventually(|| {
        let t = metrics(&c, leader);
        (1..=3u64).filter(|r| *r != leader).all(|r| {
            value(&t, "zper_replica_lag_bytes", &[("replica", &r.to_string())]) == Some(0.0)
        })
    }));
    assert!(
        value(
            &text,
            "zper_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ) == Some(1.0)
    );
    assert!(value(&text, "process_resident_memory_bytes", &[]).is_some_and(|v| v > 0.0));
    // Every metric the dashboard queries is there.
    let missing: Vec<String> = dashboard_metrics()
        .into_iter()
        .filter(|m| !text.lines().any(|l| l.starts_with(m.as_str())))
        .collect();
    assert!(missing.is_empty(), "not served: {missing:?}");
    // A follower stops: once it leaves the ISR the fragment is under-replicated.
    let follower = (1..=3u64).find(|n| *n != leader).expect("a follower");
    c.node(follower).kill9();
    assert!(
        eventually_within(Duration::from_secs(30), || {
            value(&metrics(&c, leader), "zper_under_replicated_fragments", &[]) == Some(1.0)
        }),
        "{}",
        metrics(&c, leader)
    );
    // The dead follower's lag grows with what is written after it died (it is computed at the
    // scrape, not kept from its last fetch).
    assert_eq!(c.produce_all(leader, "dash", 10..20).len(), 10);
    let dead = [("topic", "dash"), ("replica", &follower.to_string())];
    assert!(
        eventually(
            || value(&metrics(&c, leader), "zper_replica_lag_bytes", &dead)
                .is_some_and(|lag| lag >= 170.0)
        ),
        "{}",
        metrics(&c, leader)
    );
}
