//! Running the `zper` binary from the CLI tests: output, a watchdog for runs that must end,
//! and reading what it printed.
#![allow(dead_code)]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn zper(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zper"))
        .args(args)
        .output()
        .expect("run zper")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs zper with a watchdog: a run that does not end within `limit` is killed and fails the
/// test (a hang is the bug these tests look for; the limit is far above the expected time).
pub fn zper_bounded(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_zper"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zper");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("zper {args:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// Joins `group` of `topic` through the controller endpoint `controller` with `zper subscribe`,
/// reads `n` messages in batches of one (acknowledging each) and leaves; panics on failure.
pub fn subscribe_and_ack(controller: &str, topic: &str, group: &str, n: u32) {
    let n = n.to_string();
    let o = zper(&[
        "subscribe",
        "-t",
        topic,
        "-g",
        group,
        "-C",
        controller,
        "-n",
        &n,
        "--batch",
        "1",
        "--window",
        "1",
    ]);
    assert!(o.status.success(), "{o:?}");
}

/// The second column of `offset<TAB>id<TAB>text` lines: the texts.
pub fn texts(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| l.rsplit('\t').next().unwrap_or("").to_owned())
        .collect()
}

/// The `key=value` field of a perf summary line.
pub fn field(out: &str, key: &str) -> String {
    out.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_default()
        .to_owned()
}
