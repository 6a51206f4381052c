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

#[test]
fn ready_means_a_topic_can_be_created_at_once() {
    // The real binary, polled as a start-up script would: the first 200 from ready must mean
    // `topics create` works (before issue #15 it answered 409 not_enough_nodes: 0 live).
    let dir = tempfile::tempdir().expect("tempdir");
    let h = free_port();
    let _n = ChildNode::start_on(&dir.path().join("n"), h, "");
    let http_addr = format!("127.0.0.1:{h}");
    let mut first = None;
    assert!(eventually_every(
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(1),
        || {
            first = http("GET", &http_addr, "/v1/status/ready", None).filter(|(s, _)| *s == 200);
            first.is_some()
        }
    ));
    let (s, body) = http("POST", &http_addr, "/v1/topics/atonce", None).expect("answer");
    assert_eq!(s, 201, "created right after ready: {body}");
    let ready: Value = serde_json::from_str(&first.expect("ready").1).expect("json");
    assert_eq!(ready["registered"], json!(true), "{ready}");
}

#[test]
fn the_start_up_log_names_every_bound_endpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = ChildNode::start_on(&dir.path().join("n"), free_port(), "");
    let config = std::fs::read_to_string(&n.config).expect("config");
    let log = n.config.with_extension("log");
    let mut line = String::new();
    assert!(eventually(|| {
        line = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .find(|l| l.contains("zper node started"))
            .unwrap_or_default()
            .to_owned();
        !line.is_empty()
    }));
    for key in [
        "writer.bind",
        "reader.bind",
        "ack.bind",
        "controller.bind",
        "relay.bind",
        "replica.bind",
        "dolly.requests.bind",
        "dolly.updates.bind",
        "dolly.snapshots.bind",
        "http.bind",
    ] {
        let bound = config
            .lines()
            .find_map(|l| l.strip_prefix(key)?.trim().strip_prefix('='))
            .map(str::trim)
            .expect("in the config");
        assert!(line.contains(bound), "{key} = {bound} is logged: {line}");
    }
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
    let mut cluster = TestCluster::start();
    let ports = cluster.ports.clone();
    let addr = |i: usize| format!("127.0.0.1:{}", ports[i]);
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
    let (s, body) = http(
        "POST",
        &addr(follower - 1),
        "/v1/topics/first",
        Some(r#"{"fragments": 3}"#),
    )
    .expect("answer");
    assert_eq!(s, 201, "{body}");
    assert!(eventually(
        || (0..3).all(|i| topic_names(&addr(i)) == ["first"])
    ));

    // SIGKILL the leader: the others elect a new one and keep accepting metadata writes.
    cluster.node(leader as u64).kill9();
    assert!(eventually(|| {
        let l = get_json(&addr(follower - 1), "/v1/raft")["leader"].as_u64();
        l.is_some_and(|l| l as usize != leader)
    }));
    // The survivors renew their leases with the new leader (the killed one's lapses).
    assert!(eventually(|| live(follower - 1) == 2), "two live brokers");
    // Its lease ended: the fragment it led moves to an in-sync replica, with a new epoch.
    assert!(
        eventually(|| {
            let t = get_json(&addr(follower - 1), "/v1/topics/first");
            let fragments = t["fragments"].as_array().cloned().unwrap_or_default();
            fragments.len() == 3
                && fragments.iter().all(|f| f["leader"] != json!(leader))
                && fragments.iter().any(|f| {
                    f["leader_epoch"] == json!(1)
                        && f["last_change"]["kind"] == json!("leases_expired")
                        && !f["isr"]
                            .as_array()
                            .is_some_and(|isr| isr.contains(&json!(leader)))
                })
        }),
        "{}",
        get_json(&addr(follower - 1), "/v1/topics/first")
    );
    let (s, body) =
        http("POST", &addr(follower - 1), "/v1/topics/second", Some("{}")).expect("answer");
    assert_eq!(s, 201, "{body}");

    // The killed node restarts from its data dir and catches up.
    cluster.node(leader as u64).restart();
    assert!(eventually(
        || topic_names(&addr(leader - 1)) == ["first", "second"]
    ));

    // A full stop and start of all three keeps every committed command.
    for n in cluster.nodes.iter_mut() {
        assert!(n.terminate().success());
    }
    for n in cluster.nodes.iter_mut() {
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
    // Per topic, written and fetched.
    assert_eq!(
        metric(
            &text,
            r#"zper_topic_messages_written_total{topic="metered"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(&text, r#"zper_topic_bytes_written_total{topic="metered"}"#),
        Some(10.0)
    );
    assert_eq!(n.read_all("metered").len(), 10);
    let scrape = || {
        http("GET", &admin, "/metrics", None)
            .map(|(_, b)| b)
            .unwrap_or_default()
    };
    assert!(eventually(|| metric(
        &scrape(),
        r#"zper_topic_messages_fetched_total{topic="metered"}"#
    ) == Some(1.0)));
    let text = scrape();
    assert_eq!(
        metric(&text, r#"zper_topic_bytes_fetched_total{topic="metered"}"#),
        Some(10.0)
    );
    // Flushes and their latency histogram (mode 1 acked only after one).
    assert!(
        metric(&text, "zper_flushes_total").is_some_and(|f| f >= 1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, "zper_flush_duration_seconds_count"),
        metric(&text, "zper_flushes_total")
    );
    // Raft: commit index and proposal latency (the node registers itself through Raft).
    let committed = || {
        metric(
            &scrape(),
            r#"zper_raft_proposals_total{result="committed"}"#,
        )
    };
    assert!(eventually(|| committed().is_some_and(|c| c >= 1.0)));
    let text = scrape();
    assert!(metric(&text, "zper_raft_commit_index").is_some_and(|c| c >= 1.0));
    assert!(metric(&text, "zper_raft_proposal_duration_seconds_count").is_some_and(|c| c >= 1.0));
    // Open connections follow the clients: two writer clients, then one.
    let writer_conns = || metric(&scrape(), r#"zper_open_connections{endpoint="writer"}"#);
    assert!(
        eventually(|| writer_conns() == Some(2.0)),
        "{:?}",
        writer_conns()
    );
    drop(bad);
    assert!(
        eventually(|| writer_conns() == Some(1.0)),
        "{:?}",
        writer_conns()
    );
}

fn zper_cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_zper"))
        .args(args)
        .output()
        .expect("run zper")
}

/// (metadata applied index, state hash) of the node at `addr`.
fn state_hash(addr: &str) -> Option<(u64, String)> {
    let v = get_json(addr, "/v1/raft");
    Some((
        v["metadata_applied"].as_u64()?,
        v["state_hash"].as_str()?.to_owned(),
    ))
}

fn broker_ids(addr: &str) -> Vec<u64> {
    match get_json(addr, "/v1/brokers") {
        Value::Array(b) => b.iter().filter_map(|n| n["id"].as_u64()).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn a_fourth_process_started_by_flags_joins_by_cli_and_leaves_with_the_same_state_everywhere() {
    // Three voters from the test kit, then a fourth process of our own.
    let three = TestCluster::start_with("node.lease_ms = 3000\n");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut ports = three.ports.clone();
    ports.push(free_port());
    let addr = |i: usize| format!("127.0.0.1:{}", ports[i]);
    assert!(eventually(|| {
        (0..3).all(|i| http_status(&addr(i), "/v1/status/ready") == Some(200))
    }));
    // Node 4 gets its id and the voters from command-line flags only (its file has neither):
    // not an initial voter, it waits to be added.
    let voters = (0..3)
        .map(|i| format!("{}={}", i + 1, addr(i)))
        .collect::<Vec<_>>()
        .join(",");
    let _four = ChildNode::start_on_with_args(
        &dir.path().join("n4"),
        ports[3],
        "node.lease_ms = 3000\n",
        &["run", "--node-id", "4", "--voters", &voters],
    );
    assert!(eventually(
        || get_json(&addr(3), "/v1/raft")["id"] == json!(4)
    ));
    assert_eq!(http_status(&addr(3), "/v1/status/ready"), Some(503));
    let leader = get_json(&addr(0), "/v1/raft")["leader"]
        .as_u64()
        .expect("leader") as usize;
    let follower = (1..=3).find(|n| *n != leader).expect("follower");

    // Added through the CLI: learner, then voter; it registers and serves the metadata.
    let out = zper_cli(&[
        "cluster",
        "add-node",
        "--id",
        "4",
        "--http",
        &addr(3),
        "--admin",
        &addr(leader - 1),
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.trim(), "voters 1,2,3,4");
    assert!(eventually(
        || http_status(&addr(3), "/v1/status/ready") == Some(200)
    ));
    let live = |a: &str| match get_json(a, "/v1/brokers") {
        Value::Array(b) => b
            .iter()
            .filter(|n| n["live"] == json!(true))
            .filter_map(|n| n["id"].as_u64())
            .collect::<Vec<_>>(),
        _ => Vec::new(),
    };
    assert!(eventually(|| live(&addr(leader - 1)) == [1, 2, 3, 4]));
    let out = zper_cli(&[
        "topics",
        "create",
        "spread",
        "--fragments",
        "8",
        "--replication-factor",
        "2",
        "--admin",
        &addr(follower - 1),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The same commands give the same metadata on every node: equal state hashes at equal
    // applied indexes (heartbeats keep committing, so sample until all four line up).
    assert!(
        eventually(|| {
            let hashes: Vec<Option<(u64, String)>> = (0..4).map(|i| state_hash(&addr(i))).collect();
            hashes[0].is_some() && hashes.windows(2).all(|w| w[0] == w[1])
        }),
        "state hashes never lined up"
    );
    let spread = get_json(&addr(3), "/v1/topics/spread");
    let leaders: Vec<u64> = spread["fragments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["leader"].as_u64())
        .collect();
    for n in 1..=4 {
        assert_eq!(
            leaders.iter().filter(|l| **l == n).count(),
            2,
            "8 leaders over 4 nodes: {leaders:?}"
        );
    }

    // Removed through the CLI: it leaves the voters and the brokers, its replicas move, and
    // it does not register itself back.
    let out = zper_cli(&["cluster", "remove-node", "4", "--admin", &addr(leader - 1)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        get_json(&addr(leader - 1), "/v1/raft")["voters"],
        json!([1, 2, 3])
    );
    assert!(eventually(|| broker_ids(&addr(leader - 1)) == [1, 2, 3]));
    let spread = get_json(&addr(leader - 1), "/v1/topics/spread");
    for f in spread["fragments"].as_array().into_iter().flatten() {
        assert!(
            !f["replicas"]
                .as_array()
                .is_some_and(|r| r.contains(&json!(4))),
            "{f}"
        );
        assert_eq!(f["replicas"].as_array().map(Vec::len), Some(2), "{f}");
    }
    // Give node 4's registrar several heartbeat periods (500 ms each) to try to come back.
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(broker_ids(&addr(leader - 1)), [1, 2, 3]);
    }
}

#[test]
fn topic_views_show_this_nodes_start_and_end_offsets() {
    let n = TestNode::start();
    let http_addr = n.node().endpoints().http.clone();
    assert!(eventually(|| broker_ids(&http_addr) == [1]), "registered");
    let (s, body) = http("POST", &http_addr, "/v1/topics/offsets", None).expect("answer");
    assert_eq!(s, 201, "{body}");
    let v = get_json(&http_addr, "/v1/topics/offsets");
    assert_eq!(
        v["fragments"][0]["end_offset"],
        Value::Null,
        "nothing stored yet: {v}"
    );
    let w = n.writer_client(zmq::DEALER, "offsets", 1);
    for body in [&b"first"[..], b"second"] {
        w.send(body, 0).expect("send");
    }
    assert!(eventually(|| {
        n.node()
            .store()
            .topic("offsets")
            .and_then(|t| t.flushed_end().ok())
            .is_some_and(|e| e > 0)
    }));
    let end = n
        .node()
        .store()
        .topic("offsets")
        .and_then(|t| t.flushed_end().ok())
        .expect("flushed");
    assert!(eventually(|| {
        let v = get_json(&http_addr, "/v1/topics/offsets");
        v["fragments"][0]["end_offset"] == json!(end)
            && v["fragments"][0]["start_offset"] == json!(0)
    }));
    // The CLI shows them too.
    let out = zper_cli(&["topics", "describe", "offsets", "--admin", &http_addr]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success());
    assert!(
        text.lines().any(|l| {
            // FRAGMENT LEADER EPOCH REPLICAS ISR START END SIZE (two words) MESSAGES
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() == 10 && cols[5] == "0" && cols[6] == end.to_string()
        }),
        "{text}"
    );
}

/// Runs `zper --config <file> args...` and waits (at most 20 s) for it to exit; returns its
/// exit code and stderr. A node that keeps running fails the test.
fn run_expecting_exit(config: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    use std::io::Read;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_zper"))
        .arg("--config")
        .arg(config)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn zper");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("zper {args:?} kept running");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    (status.code(), err)
}

#[test]
fn misconfigured_node_ids_stop_the_node_with_a_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (w, r, a, c, h, other) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let config = dir.path().join("n.properties");
    std::fs::write(
        &config,
        format!(
            "base_dir = {}\nwriter.bind = tcp://127.0.0.1:{w}\nreader.bind = tcp://127.0.0.1:{r}\n\
             ack.bind = tcp://127.0.0.1:{a}\ncontroller.bind = tcp://127.0.0.1:{c}\n\
             http.bind = 127.0.0.1:{h}\nreplica.bind = tcp://127.0.0.1:{rp}\n\
             relay.bind = tcp://127.0.0.1:{rl}\n\
             dolly.requests.bind = tcp://127.0.0.1:{d}\n\
             dolly.updates.bind = tcp://127.0.0.1:{du}\ndolly.snapshots.bind = tcp://127.0.0.1:{ds}\n",
            dir.path().join("data").display(),
            rp = free_port(),
            rl = free_port(),
            d = free_port(),
            du = free_port(),
            ds = free_port()
        ),
    )
    .expect("write config");
    // The voters list this id at another address than the node advertises (a second process
    // with the same node.id, or a wrong http.advertise).
    let (code, err) = run_expecting_exit(
        &config,
        &[
            "run",
            "--node-id",
            "2",
            "--voters",
            &format!("2=127.0.0.1:{other}"),
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("controller.quorum.2"), "{err}");
    // The same id twice in --voters.
    let (code, err) =
        run_expecting_exit(&config, &["run", "--voters", "1=127.0.0.1:1,1=127.0.0.1:2"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("listed twice"), "{err}");
    // A data directory keeps its node id: start as node 1, then try node 5 on it.
    let mut node = ChildNode::spawn(&config, w, r, a);
    assert!(eventually(|| http_status(
        &format!("127.0.0.1:{h}"),
        "/v1/status/ready"
    ) == Some(200)));
    assert!(node.terminate().success());
    let (code, err) = run_expecting_exit(&config, &["run", "--node-id", "5"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("belongs to node 1"), "{err}");
}
