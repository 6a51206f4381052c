//! The node in the Raft metadata group (issue #3): a single node forms a one-voter cluster with
//! no extra step; three `zper` processes form one cluster, survive SIGKILL of the leader, and a
//! restarted node catches up; a full stop and start keeps every committed command.

mod common;

use common::*;
use serde_json::{json, Value};

#[test]
fn a_single_node_is_a_ready_one_voter_cluster_and_registers_itself() {
    let n = TestNode::start();
    let http = n.node().endpoints().http.clone();
    assert!(eventually(
        || http_status(&http, "/v1/status/ready") == Some(200)
    ));
    let raft = get_json(&http, "/v1/raft");
    assert_eq!(raft["voters"], json!([1]));
    assert_eq!(raft["leader"], json!(1));
    assert!(eventually(|| get_json(&http, "/v1/brokers")[0]
        ["dolly_leader"]
        == json!(true)));
    let brokers = get_json(&http, "/v1/brokers");
    assert_eq!(brokers[0]["id"], json!(1));
    assert_eq!(brokers[0]["live"], json!(true));
    let writer = brokers[0]["endpoints"]["writer"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(writer, n.writer, "advertised writer endpoint");
}

fn http_status(addr: &str, path: &str) -> Option<u16> {
    http("GET", addr, path, None).map(|(s, _)| s)
}

fn topic_names(addr: &str) -> Vec<String> {
    match get_json(addr, "/v1/topics") {
        Value::Array(a) => a
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

#[test]
fn three_processes_elect_survive_sigkill_of_the_leader_and_catch_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let addr = |i: usize| format!("127.0.0.1:{}", ports[i]);
    let quorum: String = (0..3)
        .map(|i| format!("controller.quorum.{} = {}\n", i + 1, addr(i)))
        .collect();
    let mut nodes: Vec<ChildNode> = (0..3)
        .map(|i| {
            ChildNode::start_on(
                &dir.path().join(format!("n{}", i + 1)),
                ports[i],
                &format!("node.id = {}\n{quorum}node.lease_ms = 1500\n", i + 1),
            )
        })
        .collect();
    for i in 0..3 {
        assert!(
            eventually(|| http_status(&addr(i), "/v1/status/ready") == Some(200)),
            "node {} ready",
            i + 1
        );
    }
    // Every node registers itself and keeps its lease.
    let live = |i: usize| match get_json(&addr(i), "/v1/brokers") {
        Value::Array(b) => b.iter().filter(|n| n["live"] == json!(true)).count(),
        _ => 0,
    };
    assert!(eventually(|| live(0) == 3), "three live brokers");
    let leader = get_json(&addr(0), "/v1/raft")["leader"]
        .as_u64()
        .expect("leader") as usize;
    let follower = (1..=3).find(|n| *n != leader).expect("follower");
    // Topic create on a follower succeeds via forwarding.
    let (s, body) =
        http("POST", &addr(follower - 1), "/v1/topics/first", Some("{}")).expect("answer");
    assert_eq!(s, 201, "{body}");
    assert!(eventually(
        || (0..3).all(|i| topic_names(&addr(i)) == ["first"])
    ));

    // SIGKILL the leader: the others elect a new one and keep accepting metadata writes.
    nodes[leader - 1].kill9();
    assert!(eventually(|| {
        let l = get_json(&addr(follower - 1), "/v1/raft")["leader"].as_u64();
        l.is_some_and(|l| l as usize != leader)
    }));
    // The survivors renew their leases with the new leader (the killed one's lapses).
    assert!(eventually(|| live(follower - 1) == 2), "two live brokers");
    let (s, body) =
        http("POST", &addr(follower - 1), "/v1/topics/second", Some("{}")).expect("answer");
    assert_eq!(s, 201, "{body}");

    // The killed node restarts from its data dir and catches up.
    nodes[leader - 1].restart();
    assert!(eventually(
        || topic_names(&addr(leader - 1)) == ["first", "second"]
    ));

    // A full stop and start of all three keeps every committed command.
    for n in nodes.iter_mut() {
        assert!(n.terminate().success());
    }
    for n in nodes.iter_mut() {
        n.restart();
    }
    for i in 0..3 {
        assert!(
            eventually(|| topic_names(&addr(i)) == ["first", "second"]),
            "node {}",
            i + 1
        );
    }
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn metrics_export_data_path_counters_and_raft_gauges_in_prometheus_text() {
    let n = TestNode::start();
    let admin = n.node().endpoints().http.clone();
    let s = n.writer_client(zmq::DEALER, "metered", 1);
    s.send_multipart([&b"id"[..], b"body"], 0).expect("send");
    assert_eq!(s.recv_bytes(0).expect("ack"), b"id");
    let bad = client(&n.ctx, zmq::DEALER, &[0, 0, 0], &n.writer);
    bad.send("x", 0).expect("send");
    assert!(eventually(|| {
        let text = http("GET", &admin, "/metrics", None)
            .map(|(_, b)| b)
            .unwrap_or_default();
        metric(&text, r#"zper_rejected_total{reason="invalid_identity"}"#) == Some(1.0)
    }));
    let (status, text) = http("GET", &admin, "/metrics", None).expect("metrics");
    assert_eq!(status, 200);
    assert_eq!(metric(&text, "zper_messages_written_total"), Some(1.0));
    assert_eq!(metric(&text, "zper_bytes_written_total"), Some(10.0));
    assert_eq!(metric(&text, "zper_acks_sent_total"), Some(1.0));
    assert_eq!(metric(&text, "zper_raft_leader_id"), Some(1.0));
    assert_eq!(metric(&text, "zper_raft_voters"), Some(1.0));
    assert!(
        metric(&text, "zper_raft_term").is_some_and(|t| t >= 1.0),
        "{text}"
    );
}
