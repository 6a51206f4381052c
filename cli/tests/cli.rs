//! The CLI against a running node: produce, consume, perf (issue #2 "CLI").

mod common;

use std::process::{Command, Output};

use common::*;

fn zper(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zper"))
        .args(args)
        .output()
        .expect("run zper")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn field(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn produce_then_consume_round_trips_in_every_mode() {
    let n = TestNode::start();
    for mode in ["0", "1", "2"] {
        let o = zper(&[
            "produce", "-t", "cli", "-w", &n.writer, "-m", mode, "hello", "world",
        ]);
        assert!(o.status.success(), "{o:?}");
    }
    assert!(eventually(|| n.read_all("cli").len() == 3 * (3 + 7 + 3 + 7)));
    let o = zper(&["consume", "-t", "cli", "-r", &n.reader, "--offsets"]);
    assert!(o.status.success(), "{o:?}");
    let lines: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[0], "0\t0\thello");
    assert_eq!(lines[1], "10\t1\tworld");
    assert_eq!(lines[5], "50\t1\tworld");
    // From a byte offset, at most one message.
    let o = zper(&[
        "consume", "-t", "cli", "-r", &n.reader, "--from", "20", "-n", "1",
    ]);
    assert_eq!(stdout(&o), "0\thello\n");
    // From latest: nothing new.
    let o = zper(&["consume", "-t", "cli", "-r", &n.reader, "--from", "latest"]);
    assert_eq!(stdout(&o), "");
}

#[test]
fn cli_bad_input_gets_a_message_not_a_panic() {
    let n = TestNode::start();
    for args in [
        vec![
            "produce",
            "-t",
            "cli",
            "-w",
            n.writer.as_str(),
            "--payload",
            "hex",
            "abc",
        ],
        vec![
            "consume",
            "-t",
            "cli",
            "-r",
            n.reader.as_str(),
            "--from",
            "3",
        ],
        vec![
            "perf",
            "produce",
            "-t",
            "p",
            "-w",
            n.writer.as_str(),
            "-n",
            "1",
            "-c",
            "4",
        ],
    ] {
        let o = zper(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.starts_with("zper: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let o = zper(&["produce", "-t", "x", "-m", "7"]);
    assert_eq!(o.status.code(), Some(2), "clap rejects the mode");
    // A topic name outside §3's rule is refused before anything is sent, with a name that
    // would do (consume used to suggest `zper topics create bad-topic`).
    for (cmd, flag, endpoint) in [("produce", "-w", &n.writer), ("consume", "-r", &n.reader)] {
        let o = zper(&[cmd, "-t", "bad-topic", flag, endpoint]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {err}");
        assert!(err.contains("e.g. badtopic"), "{cmd}: {err}");
    }
    let o = zper(&[
        "consume",
        "-t",
        "cli",
        "-r",
        &n.reader,
        "--from",
        "yesterday",
    ]);
    assert_eq!(o.status.code(), Some(2), "clap rejects the position");
    assert!(String::from_utf8_lossy(&o.stderr).contains("RFC 3339"));
}

#[test]
fn perf_tools_count_what_they_claim() {
    let n = TestNode::start();
    let o = zper(&[
        "perf", "produce", "-t", "perf", "-w", &n.writer, "-n", "3000", "-m", "1", "-c", "2",
    ]);
    assert!(o.status.success(), "{o:?}");
    let line = stdout(&o);
    assert_eq!(field(&line, "messages"), "3000");
    assert_eq!(field(&line, "counted"), "acknowledged-durable");
    // Acknowledged as durable means readable now: 3000 messages of 5 + 100 bytes.
    assert_eq!(n.read_all("perf").len(), 3000 * 109);
    let o = zper(&[
        "perf", "produce", "-t", "perf", "-w", &n.writer, "-n", "200", "-m", "2", "-c", "4",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert!(!field(&stdout(&o), "p99_ms").is_empty());
    assert_eq!(n.read_all("perf").len(), 3200 * 109);
    let o = zper(&[
        "perf", "consume", "-t", "perf", "-r", &n.reader, "-n", "3200", "-s", "10000",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(field(&stdout(&o), "messages"), "3200");
    let o = zper(&["perf", "raw", "-n", "1000"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(field(&stdout(&o), "messages"), "1000");
    assert_eq!(field(&stdout(&o), "curve"), "false");
    // bench/curve.sh's reference: libzmq against itself with CURVE (issue #19).
    let o = zper(&["perf", "raw", "-n", "1000", "--curve"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(field(&stdout(&o), "messages"), "1000");
    assert_eq!(field(&stdout(&o), "curve"), "true");
}

#[test]
fn perf_metadata_counts_the_commits_it_claims() {
    let n = TestNode::start();
    let admin = n.node().endpoints().http.clone();
    let node = n.node().cluster();
    assert!(
        eventually(|| node.state.metadata().nodes.contains_key(&1)),
        "registered"
    );
    let before = node
        .proposals
        .committed
        .load(std::sync::atomic::Ordering::Relaxed);
    let o = zper(&[
        "perf", "metadata", "--admin", &admin, "-n", "20", "-c", "2", "--prefix", "pm",
    ]);
    assert!(o.status.success(), "{o:?}");
    let line = stdout(&o);
    assert_eq!(field(&line, "commits"), "20", "{line}");
    assert_eq!(field(&line, "errors"), "0", "{line}");
    assert!(!field(&line, "p99_ms").is_empty());
    let after = node
        .proposals
        .committed
        .load(std::sync::atomic::Ordering::Relaxed);
    // Concurrent proposals may share an entry (raft/src/batch.rs): with 2 writers, each
    // entry holds at most 2 of the 20 writes.
    assert!(
        after >= before + 10,
        "{before} -> {after}: the writes are Raft commits"
    );
    // Creates and deletes alternate, so nothing is left behind.
    assert!(node.state.metadata().topics.is_empty());
    // Nothing to write to: a clear error, not a hang.
    let o = zper(&[
        "perf",
        "metadata",
        "--admin",
        "127.0.0.1:1",
        "-n",
        "2",
        "--prefix",
        "pm",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no metadata write committed"));
}

#[test]
fn binary_payloads_round_trip_as_hex_and_base64() {
    let n = TestNode::start();
    for (encoding, payload) in [("hex", "00ff0a09"), ("base64", "gAE=")] {
        let o = zper(&[
            "produce",
            "-t",
            "bin",
            "-w",
            &n.writer,
            "-m",
            "2",
            "--payload",
            encoding,
            payload,
        ]);
        assert!(o.status.success(), "{o:?}");
    }
    // The stored frames are the bytes, not the text.
    assert!(eventually(
        || n.read_all("bin").len() == (2 + 1 + 2 + 4) + (2 + 1 + 2 + 2)
    ));
    let o = zper(&["consume", "-t", "bin", "-r", &n.reader, "--payload", "hex"]);
    assert_eq!(stdout(&o), "30\t00ff0a09\n30\t8001\n");
    let o = zper(&[
        "consume",
        "-t",
        "bin",
        "-r",
        &n.reader,
        "--payload",
        "base64",
    ]);
    assert_eq!(stdout(&o), "MA==\tAP8KCQ==\nMA==\tgAE=\n");
}

#[test]
fn consume_reads_a_message_larger_than_one_fetch() {
    let n = TestNode::start();
    let big = "y".repeat(5000);
    let o = zper(&[
        "produce", "-t", "large", "-w", &n.writer, "-m", "2", "a", &big, "c",
    ]);
    assert!(o.status.success(), "{o:?}");
    let o = zper(&[
        "consume",
        "-t",
        "large",
        "-r",
        &n.reader,
        "--fetch-size",
        "64",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), format!("0\ta\n1\t{big}\n2\tc\n"));
    let o = zper(&[
        "perf", "consume", "-t", "large", "-r", &n.reader, "-n", "3", "-s", "64",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(field(&stdout(&o), "messages"), "3");
}

#[test]
fn produce_to_a_node_that_is_down_fails_within_its_timeout() {
    let port = free_port();
    for mode in ["0", "1", "2"] {
        let o = zper(&[
            "produce",
            "-t",
            "down",
            "-w",
            &format!("tcp://127.0.0.1:{port}"),
            "-m",
            mode,
            "--timeout",
            "300",
            "x",
        ]);
        assert_eq!(o.status.code(), Some(1), "mode {mode}: {o:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("not reachable"),
            "{o:?}"
        );
    }
}

#[test]
fn cli_tools_connect_to_the_endpoints_of_config() {
    let n = TestNode::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("node.properties");
    let port = |e: &str| e.rsplit(':').next().expect("port").to_owned();
    std::fs::write(
        &config,
        format!(
            "writer.bind = tcp://*:{}\nreader.bind = tcp://0.0.0.0:{}\n",
            port(&n.writer),
            port(&n.reader)
        ),
    )
    .expect("write");
    let c = config.to_str().expect("utf8");
    let o = zper(&["--config", c, "produce", "-t", "viaconf", "-m", "2", "hi"]);
    assert!(o.status.success(), "{o:?}");
    let o = zper(&["consume", "--config", c, "-t", "viaconf"]);
    assert_eq!(stdout(&o), "0\thi\n");
}

#[test]
fn topics_and_cluster_commands_use_the_admin_api() {
    let n = TestNode::start();
    let admin = n.node().endpoints().http.clone();
    assert!(eventually(|| {
        let o = zper(&["cluster", "status", "--admin", &admin, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        v["brokers"].as_array().is_some_and(|b| b.len() == 1)
    }));
    let o = zper(&[
        "topics",
        "create",
        "orders",
        "--fragments",
        "2",
        "--admin",
        &admin,
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), "created orders\n");
    let o = zper(&["topics", "list", "--admin", &admin, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v[0]["name"], serde_json::json!("orders"));
    let o = zper(&["topics", "describe", "orders", "--admin", &admin]);
    let table = stdout(&o);
    assert!(table.starts_with("FRAGMENT"), "{table}");
    assert_eq!(table.lines().count(), 3, "{table}");
    let o = zper(&["cluster", "status", "--admin", &admin]);
    assert!(stdout(&o).contains("leader 1"), "{}", stdout(&o));
    // Errors print the API's code and exit 1.
    let o = zper(&["topics", "create", "orders", "--admin", &admin]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("topic_exists"),
        "{o:?}"
    );
    // A name outside the rule never reaches the API (which would answer invalid_name).
    let o = zper(&["topics", "create", "bad-name", "--admin", &admin]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("e.g. badname"),
        "{o:?}"
    );
    let o = zper(&["topics", "delete", "orders", "--admin", &admin]);
    assert!(o.status.success(), "{o:?}");
    let o = zper(&["topics", "list", "--admin", &admin, "--json"]);
    assert_eq!(stdout(&o).trim(), "[]");
    let o = zper(&[
        "topics",
        "list",
        "--admin",
        &format!("127.0.0.1:{}", free_port()),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not reachable"),
        "{o:?}"
    );
}

#[test]
fn consume_reads_every_fragment_and_refuses_a_topic_that_does_not_exist() {
    let n = TestNode::start();
    let admin = n.node().endpoints().http.clone();
    assert!(ready(&admin));
    let o = zper(&[
        "topics",
        "create",
        "multi",
        "--fragments",
        "3",
        "--admin",
        &admin,
    ]);
    assert!(o.status.success(), "{o:?}");
    // Each `zper produce` is a producer of its own (a fresh UUID), so the messages spread over
    // the fragments by the UUID's hash.
    let sent: Vec<String> = (0..12).map(|i| format!("m{i}")).collect();
    for body in &sent {
        let o = zper(&["produce", "-t", "multi", "-w", &n.writer, "-m", "2", body]);
        assert!(o.status.success(), "{o:?}");
    }
    let holding = || {
        get_json(&admin, "/v1/topics/multi")["fragments"]
            .as_array()
            .map_or(0, |f| {
                f.iter()
                    .filter(|f| f["end_offset"].as_u64().is_some_and(|e| e > 0))
                    .count()
            })
    };
    assert!(
        eventually(|| holding() >= 2),
        "several fragments hold messages"
    );
    let payloads = |o: &Output| {
        let mut p: Vec<String> = stdout(o)
            .lines()
            .filter_map(|l| l.rsplit('\t').next().map(str::to_owned))
            .collect();
        p.sort();
        p
    };
    let mut want = sent.clone();
    want.sort();
    let o = zper(&["consume", "-t", "multi", "-r", &n.reader, "--admin", &admin]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(payloads(&o), want, "every fragment is read");
    // --offsets names the fragment; --fragment reads one.
    let o = zper(&[
        "consume",
        "-t",
        "multi",
        "-r",
        &n.reader,
        "--admin",
        &admin,
        "--offsets",
    ]);
    let firsts: std::collections::BTreeSet<String> = stdout(&o)
        .lines()
        .filter_map(|l| {
            l.split('\t')
                .next()?
                .split_once(':')
                .map(|(f, _)| f.to_owned())
        })
        .collect();
    assert!(
        firsts.len() >= 2,
        "fragment:offset on every line: {}",
        stdout(&o)
    );
    let mut one = 0;
    for f in ["0", "1", "2"] {
        let o = zper(&["consume", "-t", "multi", "-r", &n.reader, "--fragment", f]);
        assert!(o.status.success(), "{o:?}");
        one += stdout(&o).lines().count();
    }
    assert_eq!(one, sent.len(), "the fragments split the messages");
    // A byte offset needs a fragment.
    let o = zper(&[
        "consume", "-t", "multi", "-r", &n.reader, "--admin", &admin, "--from", "0",
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--fragment"),
        "{o:?}"
    );
    // A topic that does not exist is an error, also with --follow (which used to wait forever).
    for follow in [false, true] {
        let mut args = vec!["consume", "-t", "nope", "-r", &n.reader, "--admin", &admin];
        if follow {
            args.push("-f");
        }
        let o = zper(&args);
        assert!(!o.status.success(), "{o:?}");
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            err.contains("does not exist") && err.contains("--wait"),
            "{err}"
        );
    }
    assert!(!n
        .node()
        .cluster()
        .state
        .cluster_metadata()
        .topics
        .contains_key("nope"));
}

#[test]
fn with_auto_create_off_a_write_to_a_new_topic_is_refused_until_it_is_created() {
    let n = TestNode::start_with(|c| c.auto_create_topics = false);
    let admin = n.node().endpoints().http.clone();
    assert!(ready(&admin));
    let o = zper(&["produce", "-t", "fresh", "-w", &n.writer, "-m", "2", "x"]);
    assert!(!o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.contains("auto_create_topics"),
        "the refusal says why: {err}"
    );
    let topics = || n.node().cluster().state.cluster_metadata().topics;
    assert!(!topics().contains_key("fresh"), "nothing was created");
    let o = zper(&["topics", "create", "fresh", "--admin", &admin]);
    assert!(o.status.success(), "{o:?}");
    // Refusals are remembered for a second, then the topic is looked up again.
    assert!(eventually_every(
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(200),
        || zper(&["produce", "-t", "fresh", "-w", &n.writer, "-m", "2", "y"])
            .status
            .success()
    ));
    let o = zper(&["consume", "-t", "fresh", "-r", &n.reader, "--admin", &admin]);
    assert_eq!(stdout(&o), "0\ty\n", "{o:?}");
}

/// Waits until the node at `admin` says ready (a member that can create topics).
fn ready(admin: &str) -> bool {
    eventually(|| http("GET", admin, "/v1/status/ready", None).is_some_and(|(s, _)| s == 200))
}
