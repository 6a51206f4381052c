//! The perf tools as users expect them (issue #15 "CLI"), through the real binary: exactly `-n`
//! messages, a progress bar on a terminal, a partial report on Ctrl-C, an unreachable node
//! named within the timeout.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::run::*;
use common::*;

#[test]
fn perf_tools_honour_n_exactly() {
    let n = TestNode::start();
    // 1001 over 2 threads: not a multiple, still exactly 1001.
    let o = zper(&[
        "perf", "produce", "-t", "exact", "-w", &n.writer, "-n", "1001", "-m", "1", "-c", "2",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(field(&stdout(&o), "messages"), "1001", "{}", stdout(&o));
    // Fewer than one FETCH (and one pushed batch) holds.
    let o = zper(&[
        "perf", "consume", "-t", "exact", "-r", &n.reader, "-n", "777",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(field(&stdout(&o), "messages"), "777", "{}", stdout(&o));
    let controller = &n.node().endpoints().controller;
    let o = zper_bounded(
        &[
            "perf",
            "subscribe",
            "-t",
            "exact",
            "-C",
            controller,
            "-n",
            "333",
        ],
        Duration::from_secs(120),
    );
    assert!(o.status.success(), "{o:?}");
    assert_eq!(field(&stdout(&o), "messages"), "333", "{}", stdout(&o));
    let o = zper(&[
        "perf",
        "subscribe",
        "-t",
        "exact",
        "--fetch",
        "-r",
        &n.reader,
        "-n",
        "444",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(field(&stdout(&o), "messages"), "444", "{}", stdout(&o));
}

#[test]
fn an_unreachable_node_fails_within_the_timeout_naming_the_endpoint() {
    let port = free_port();
    let ep = format!("tcp://127.0.0.1:{port}");
    let limit = Duration::from_secs(60);
    for args in [
        vec![
            "perf",
            "produce",
            "-t",
            "x",
            "-w",
            &ep,
            "-n",
            "10",
            "--timeout",
            "1s",
        ],
        vec![
            "perf",
            "produce",
            "-t",
            "x",
            "-w",
            &ep,
            "-n",
            "10",
            "-m",
            "2",
            "--timeout",
            "1s",
        ],
        vec![
            "perf",
            "consume",
            "-t",
            "x",
            "-r",
            &ep,
            "-n",
            "10",
            "--timeout",
            "1s",
        ],
        vec![
            "consume",
            "-t",
            "x",
            "-r",
            &ep,
            "--fragment",
            "0",
            "--timeout",
            "1s",
        ],
        vec![
            "produce",
            "-t",
            "x",
            "-w",
            &ep,
            "-m",
            "2",
            "--timeout",
            "1s",
            "hi",
        ],
        vec!["dolly", "-e", &ep, "--timeout", "1s", "get", "k"],
        vec![
            "perf",
            "subscribe",
            "-t",
            "x",
            "-C",
            &ep,
            "-n",
            "10",
            "--timeout",
            "1s",
        ],
        vec!["subscribe", "-t", "x", "-C", &ep, "--timeout", "1s"],
    ] {
        let o = zper_bounded(&args, limit);
        assert!(!o.status.success(), "{args:?}: {o:?}");
        let err = stderr(&o);
        assert!(
            err.contains(&format!("127.0.0.1:{port}")),
            "{args:?}: {err}"
        );
        assert!(
            !err.contains("Resource temporarily unavailable"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn ctrl_c_prints_a_partial_perf_report_and_exits_130() {
    let n = TestNode::start();
    let mut child = Command::new(env!("CARGO_BIN_EXE_zper"))
        .args([
            "perf",
            "produce",
            "-t",
            "intr",
            "-w",
            &n.writer,
            "-n",
            "100000000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn perf");
    assert!(
        eventually(
            || std::fs::read_dir(n.dir.path().join("intr")).is_ok_and(|d| d.count() > 0)
                && n.read_all("intr").len() > 10_000
        ),
        "perf produce wrote nothing"
    );
    let pid = child.id().to_string();
    let kill = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("perf produce did not stop after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("read");
    assert_eq!(status.code(), Some(130), "{out}");
    assert_eq!(field(&out, "interrupted"), "true", "{out}");
    let sent: u64 = field(&out, "messages").parse().expect("messages=");
    assert!(sent > 0 && sent < 100_000_000, "{out}");
}

#[test]
fn perf_shows_progress_on_a_terminal_and_none_in_a_pipe() {
    let n = TestNode::start();
    let bin = env!("CARGO_BIN_EXE_zper");
    let cmd = format!("{bin} perf produce -t bar -w {} -n 300000", n.writer);
    // `script` gives the command a pseudo-terminal, as a user's shell would.
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .expect("script (util-linux)");
    assert!(o.status.success(), "{o:?}");
    let tty = String::from_utf8_lossy(&o.stdout);
    assert!(
        tty.contains("/300000"),
        "a progress bar `pos/len` on the terminal: {tty:?}"
    );
    let o = zper(&[
        "perf", "produce", "-t", "bar", "-w", &n.writer, "-n", "1000",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        !stderr(&o).contains("/1000"),
        "no bar in a pipe: {}",
        stderr(&o)
    );
}

#[test]
fn ctrl_c_during_perf_consume_prints_a_partial_report() {
    let n = TestNode::start();
    let o = zper(&[
        "perf", "produce", "-t", "slow", "-w", &n.writer, "-n", "200000", "-m", "1",
    ]);
    assert!(o.status.success(), "{o:?}");
    // One message per FETCH: 200000 round trips, far longer than the half second before Ctrl-C.
    let mut child = Command::new(env!("CARGO_BIN_EXE_zper"))
        .args([
            "--json",
            "perf",
            "consume",
            "-t",
            "slow",
            "-r",
            &n.reader,
            "-n",
            "100000000",
        ])
        .args(["-s", "120"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn perf consume");
    std::thread::sleep(Duration::from_millis(500));
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill")
        .success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "perf consume did not stop after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().expect("output");
    assert_eq!(o.status.code(), Some(130), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("a JSON report");
    assert_eq!(v["interrupted"], true, "{v}");
    let read = v["messages"].as_u64().expect("messages");
    assert!(read > 0 && read < 200_000, "{v}");
}
