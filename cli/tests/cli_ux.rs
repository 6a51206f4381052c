//! The CLI as Kafka, NATS and Redpanda users expect it (issue #15 "CLI"), through the real
//! binary: positions (`--from -N`, times, offset errors with the valid range), JSON output,
//! completions, `config show`, topics alter and message counts, plurals, pipes. The perf tools
//! are in `cli_perf.rs`.

mod common;

use std::process::Command;
use std::time::{Duration, SystemTime};

use common::run::*;
use common::*;

#[test]
fn from_takes_last_n_and_times_and_a_bad_offset_names_the_range_and_nearest_boundaries() {
    // 20-byte segments: messages `[i][mi]` are 7 bytes, so a segment holds three.
    let n = TestNode::start_with(|c| c.store.segment_size = 20);
    let msgs: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    let mut args = vec!["produce", "-t", "pos", "-w", &n.writer, "-m", "2"];
    args.extend(msgs.iter().map(String::as_str));
    let o = zper(&args);
    assert!(o.status.success(), "{o:?}");
    assert!(
        stderr(&o).contains("10 messages durable to topic pos"),
        "{}",
        stderr(&o)
    );
    let consume = |from: &str| {
        zper(&[
            "consume",
            "-t",
            "pos",
            "-r",
            &n.reader,
            "--fragment",
            "0",
            "--from",
            from,
        ])
    };
    let o = consume("-3");
    assert!(o.status.success(), "{o:?}");
    assert_eq!(texts(&stdout(&o)), ["m7", "m8", "m9"]);
    assert_eq!(texts(&stdout(&consume("-100"))), msgs);
    assert_eq!(texts(&stdout(&consume("earliest"))), msgs);
    assert_eq!(stdout(&consume("latest")), "");
    // A time before every segment: everything; an hour from now: nothing was written since.
    assert_eq!(texts(&stdout(&consume("2020-01-01T00:00:00Z"))), msgs);
    let later = humantime::format_rfc3339_seconds(SystemTime::now() + Duration::from_secs(3600));
    let o = consume(&later.to_string());
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), "");
    // Not a boundary: the range and the boundaries around it.
    let o = consume("5");
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("offset 5 is not the start of a message"),
        "{err}"
    );
    assert!(err.contains("valid offsets are 0 to 70"), "{err}");
    assert!(
        err.contains("nearest message boundaries are 0 or 7"),
        "{err}"
    );
    let o = consume("23");
    assert!(
        stderr(&o).contains("nearest message boundaries are 21 or 28"),
        "{}",
        stderr(&o)
    );
    let o = consume("1000");
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("outside the fragment: valid offsets are 0 to 70"),
        "{}",
        stderr(&o)
    );
    let o = consume("yesterday");
    assert!(!o.status.success());
    assert!(stderr(&o).contains("RFC 3339"), "{}", stderr(&o));
}

#[test]
fn json_output_for_produce_consume_dolly_and_perf_and_plurals_are_right() {
    let n = TestNode::start();
    let o = zper(&[
        "produce", "-t", "js", "-w", &n.writer, "-m", "2", "--json", "hello",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("produce JSON");
    assert_eq!(v["messages"], 1);
    assert_eq!(v["result"], "durable");
    let o = zper(&["produce", "-t", "js", "-w", &n.writer, "-m", "2", "world"]);
    assert!(
        stderr(&o).contains("1 message durable to topic js"),
        "{}",
        stderr(&o)
    );
    let o = zper(&[
        "consume",
        "-t",
        "js",
        "-r",
        &n.reader,
        "--fragment",
        "0",
        "--json",
    ]);
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("consume JSON line"))
        .collect();
    assert_eq!(lines.len(), 2, "{}", stdout(&o));
    assert_eq!(lines[0]["frames"], serde_json::json!(["0", "hello"]));
    assert_eq!(lines[1]["offset"], 10);
    assert_eq!(lines[1]["fragment"], 0);
    let dolly = &n.node().endpoints().dolly_requests;
    let o = zper(&["dolly", "-e", dolly, "--json", "put", "color", "blue"]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("dolly JSON");
    assert_eq!(v["key"], "color");
    assert!(v["sequence"].as_u64().is_some(), "{v}");
    let o = zper(&["dolly", "-e", dolly, "--json", "get", "color", "nokey"]);
    let replies: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("dolly JSON line"))
        .collect();
    assert_eq!(replies[0]["value"], "blue");
    assert!(replies[1]["error"].is_string(), "{replies:?}");
    assert!(
        stderr(&o).contains("1 of 2 keys not read"),
        "{}",
        stderr(&o)
    );
    let o = zper(&[
        "perf", "consume", "-t", "js", "-r", &n.reader, "-n", "1", "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("perf JSON");
    assert_eq!(v["tool"], "consume");
    assert_eq!(v["messages"], 1);
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "_zper()"),
        ("zsh", "#compdef zper"),
        ("fish", "complete -c zper"),
    ] {
        let o = zper(&["completions", shell]);
        assert!(o.status.success(), "{shell}: {o:?}");
        let script = stdout(&o);
        assert!(script.contains(marker), "{shell}");
        assert!(
            script.contains("consume") && script.contains("from"),
            "{shell}"
        );
    }
    let o = zper(&["completions", "tcsh"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("bash"), "{}", stderr(&o));
}

#[test]
fn config_show_prints_each_effective_value_with_its_source() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("server.properties");
    std::fs::write(
        &path,
        "segment_size = 536870912        # segment file size 512M\nbase_dir = \"/data/zper\"\n\
         flush_interval = 2s\n",
    )
    .expect("write");
    let file = path.to_str().expect("utf-8 path");
    let o = zper(&[
        "--config",
        file,
        "config",
        "show",
        "--set",
        "writer.bind=tcp://*:6555",
    ]);
    assert!(o.status.success(), "{o:?}");
    let out = stdout(&o);
    let row = |key: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no {key} row in\n{out}"))
            .to_owned()
    };
    assert!(row("segment_size").contains("536870912") && row("segment_size").contains(file));
    assert!(row("base_dir").contains("/data/zper"));
    assert!(row("flush_interval").contains("2s"));
    assert!(
        row("writer.bind").contains("tcp://*:6555") && row("writer.bind").contains("command line")
    );
    assert!(row("reader.bind").contains("default"));
    assert!(row("raft.dir").contains("/data/zper/.raft") && row("raft.dir").contains("computed"));
    let o = zper(&["--config", file, "config", "show", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let seg = v
        .as_array()
        .expect("array")
        .iter()
        .find(|e| e["key"] == "segment_size")
        .expect("segment_size");
    assert_eq!(seg["source"]["kind"], "file");
    // A bad value is refused naming the key, as `zper run` would.
    let o = zper(&["config", "show", "--set", "segment_size=big"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("segment_size"), "{}", stderr(&o));
}

#[test]
fn topics_alter_changes_retention_through_raft_and_retention_uses_it() {
    let n = TestNode::start_with(|c| {
        c.store.segment_size = 20;
        c.retention_check = Duration::from_millis(100);
    });
    let admin = n.node().endpoints().http.clone();
    let ready = || http("GET", &admin, "/v1/status/ready", None).is_some_and(|(s, _)| s == 200);
    assert!(eventually(ready), "node ready");
    let o = zper(&["topics", "create", "old", "--admin", &admin]);
    assert!(o.status.success(), "{o:?}");
    let o = zper(&[
        "produce", "-t", "old", "-w", &n.writer, "-m", "2", "a", "b", "c", "d", "e",
    ]);
    assert!(o.status.success(), "{o:?}");
    // Closed segments three hours old: kept under the default 168 h.
    let dir = n.dir.path().join("old");
    let segments = || -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(&dir)
            .expect("topic dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "dat"))
            .collect();
        v.sort();
        v
    };
    let before = segments();
    assert!(before.len() >= 2, "{before:?}");
    let old =
        filetime::FileTime::from_system_time(SystemTime::now() - Duration::from_secs(3 * 3600));
    for seg in &before[..before.len() - 1] {
        filetime::set_file_mtime(seg, old).expect("mtime");
    }
    std::thread::sleep(Duration::from_millis(500)); // several retention checks
    assert_eq!(segments(), before, "168 h keeps three-hour-old segments");
    let o = zper(&[
        "topics",
        "alter",
        "old",
        "--retain-hours",
        "2",
        "--admin",
        &admin,
    ]);
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).contains("retain_hours = 2"), "{}", stdout(&o));
    let o = zper(&["topics", "describe", "old", "--admin", &admin, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["retain_hours"], 2);
    assert!(
        eventually(|| segments().len() == 1),
        "closed segments older than 2 h deleted"
    );
    // Bad changes are refused and change nothing.
    let o = zper(&[
        "topics",
        "alter",
        "old",
        "--retain-hours",
        "0",
        "--admin",
        &admin,
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("retain-hours"), "{}", stderr(&o));
    let (status, body) = http(
        "PATCH",
        &admin,
        "/v1/topics/old",
        Some(r#"{"retain_hours":0}"#),
    )
    .expect("answer");
    assert_eq!(status, 400, "the API refuses 0 hours too: {body}");
    // Units, as the config key takes them.
    let o = zper(&[
        "topics",
        "alter",
        "old",
        "--retain-hours",
        "7days",
        "--admin",
        &admin,
    ]);
    assert!(stdout(&o).contains("retain_hours = 168"), "{o:?}");
    let o = zper(&[
        "topics",
        "alter",
        "old",
        "--retain-hours",
        "2",
        "--admin",
        &admin,
    ]);
    assert!(o.status.success(), "{o:?}");
    let o = zper(&[
        "topics",
        "alter",
        "nope",
        "--retain-hours",
        "5",
        "--admin",
        &admin,
    ]);
    assert!(!o.status.success());
    let (status, body) =
        http("PATCH", &admin, "/v1/topics/old", Some(r#"{"retain":1}"#)).expect("answer");
    assert_eq!(status, 400, "{body}");
}

#[test]
fn topics_list_and_describe_show_message_counts_next_to_human_sizes() {
    let n = TestNode::start();
    let admin = n.node().endpoints().http.clone();
    let ready = || http("GET", &admin, "/v1/status/ready", None).is_some_and(|(s, _)| s == 200);
    assert!(eventually(ready), "node ready");
    let o = zper(&[
        "produce", "-t", "counted", "-w", &n.writer, "-m", "2", "a", "b", "c", "d", "e",
    ]);
    assert!(o.status.success(), "{o:?}");
    // The column under `header` in the row that starts with `first`.
    let cell = |out: &str, first: &str, header: &str| -> String {
        let mut lines = out.lines();
        let head: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
        let col = head.iter().position(|h| *h == header).expect(header);
        let row = lines
            .find(|l| l.split_whitespace().next() == Some(first))
            .unwrap_or_else(|| panic!("no {first} row in\n{out}"));
        // Sizes are two words ("50 B"): join a size's unit to its number first.
        let words: Vec<String> = row
            .split_whitespace()
            .fold(Vec::<String>::new(), |mut acc, w| {
                if ["B", "KiB", "MiB", "GiB", "TiB", "PiB"].contains(&w) {
                    if let Some(last) = acc.last_mut() {
                        last.push(' ');
                        last.push_str(w);
                        return acc;
                    }
                }
                acc.push(w.to_owned());
                acc
            });
        words[col].clone()
    };
    let o = zper(&["topics", "describe", "counted", "--admin", &admin]);
    assert!(o.status.success(), "{o:?}");
    let out = stdout(&o);
    assert_eq!(cell(&out, "0", "MESSAGES"), "5", "{out}");
    assert_eq!(cell(&out, "0", "SIZE"), "30 B", "{out}"); // `[i][x]`: 6 bytes each
    let o = zper(&["topics", "list", "--admin", &admin]);
    let out = stdout(&o);
    assert_eq!(cell(&out, "counted", "MESSAGES"), "5", "{out}");
    let o = zper(&["topics", "describe", "counted", "--admin", &admin, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["fragments"][0]["messages"], 5);
    assert_eq!(v["fragments"][0]["end_offset"], 30);
}

#[test]
fn a_subscriber_that_leaves_has_its_acknowledgements_committed_first() {
    let n = TestNode::start();
    let msgs: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    let mut args = vec!["produce", "-t", "leave", "-w", &n.writer, "-m", "2"];
    args.extend(msgs.iter().map(String::as_str));
    assert!(zper(&args).status.success());
    let controller = n.node().endpoints().controller.clone();
    let run = || {
        let o = zper_bounded(
            &[
                "subscribe",
                "-t",
                "leave",
                "-g",
                "g",
                "--id",
                "one",
                "-C",
                &controller,
                "-n",
                "3",
                "--batch",
                "1",
                "--window",
                "1",
            ],
            Duration::from_secs(60),
        );
        assert!(o.status.success(), "{o:?}");
        texts(&stdout(&o))
    };
    assert_eq!(run(), ["m0", "m1", "m2"]);
    // The same member again resumes after what it acknowledged: nothing is handed out twice.
    assert_eq!(run(), ["m3", "m4", "m5"]);
    assert_eq!(run(), ["m6", "m7", "m8"]);
}

#[test]
fn consume_into_a_pipe_that_closes_early_exits_quietly() {
    let n = TestNode::start();
    let o = zper(&[
        "perf", "produce", "-t", "piped", "-w", &n.writer, "-n", "5000", "-s", "60", "-m", "1",
    ]);
    assert!(o.status.success(), "{o:?}");
    // ~300 KB of output into `head -1`: zper's writes fail with EPIPE once head is gone.
    let script = format!(
        "set -o pipefail; {} consume -t piped -r {} --fragment 0 | head -1 > /dev/null",
        env!("CARGO_BIN_EXE_zper"),
        n.reader
    );
    let o = Command::new("bash")
        .args(["-c", &script])
        .output()
        .expect("bash");
    assert!(o.status.success(), "{o:?}");
    assert!(!stderr(&o).contains("Broken pipe"), "{}", stderr(&o));
}

#[test]
fn from_a_time_starts_at_the_first_segment_written_since() {
    // 20-byte segments: `[i][mi]` messages are 7 bytes, three to a segment.
    let n = TestNode::start_with(|c| c.store.segment_size = 20);
    let produce = |msgs: &[&str]| {
        let mut args = vec!["produce", "-t", "timed", "-w", &n.writer, "-m", "2"];
        args.extend(msgs);
        assert!(zper(&args).status.success());
    };
    produce(&["m0", "m1", "m2", "m3", "m4"]); // segments [m0 m1 m2] [m3 m4 ...
    std::thread::sleep(Duration::from_millis(50));
    let t = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    std::thread::sleep(Duration::from_millis(50));
    produce(&["m5", "m6", "m7", "m8", "m9"]); // ... m5] [m6 m7 m8] [m9]
    let o = zper(&[
        "consume",
        "-t",
        "timed",
        "-r",
        &n.reader,
        "--fragment",
        "0",
        "--from",
        &t,
    ]);
    assert!(o.status.success(), "{o:?}");
    // The segment holding m3 m4 was written again after the time: it is where reading starts.
    assert_eq!(
        texts(&stdout(&o)),
        ["m3", "m4", "m5", "m6", "m7", "m8", "m9"]
    );
}
