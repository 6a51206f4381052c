//! Interop with a second, independent ZMTP/2.0 implementation: Debian's JeroMQ 0.3.6
//! (`libjeromq-java`). `tests/java/ZperClient.java` produces in ack modes 0, 1 and 2 and fetches
//! the topic back through the reader; this test compiles and runs it against an in-process node.
#![allow(missing_docs)]

mod common;
use common::*;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const JAR: &str = "/usr/share/java/jeromq.jar";

/// True when `javac` runs; otherwise the test is skipped (or fails under `CI`).
fn have_javac() -> bool {
    Command::new("javac")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Stored records of one two-frame message: `[01][len][id]` then `[00][len][body]`.
fn stored(id: &str, body: &str) -> Vec<u8> {
    let mut out = vec![0x01, id.len() as u8];
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(&[0x00, body.len() as u8]);
    out.extend_from_slice(body.as_bytes());
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn jeromq_0_3_6_client_produces_in_modes_0_1_2_and_fetches_back() {
    if !Path::new(JAR).exists() || !have_javac() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{JAR} or javac is missing; CI must install libjeromq-java and a JDK"
        );
        eprintln!("note: skipping JeroMQ interop test ({JAR} or javac not found)");
        return;
    }
    let classes = tempfile::tempdir().expect("tempdir");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java/ZperClient.java");
    let javac = Command::new("javac")
        .arg("-cp")
        .arg(JAR)
        .arg("-d")
        .arg(classes.path())
        .arg(&source)
        .output()
        .expect("run javac");
    assert!(
        javac.status.success(),
        "javac failed:\n{}",
        String::from_utf8_lossy(&javac.stderr)
    );

    let node = TestNode::start();
    let run = run_bounded(
        Command::new("java")
            .arg("-cp")
            .arg(format!("{}:{JAR}", classes.path().display()))
            .arg("ZperClient")
            .args([&node.writer, &node.reader, "interop"]),
        Duration::from_secs(60),
    );
    let (stdout, report) = (run.stdout.clone(), run.report());
    let status = run.status;
    let status = status.unwrap_or_else(|| panic!("ZperClient ran over 60 s; killed\n{report}"));
    assert!(
        status.success(),
        "ZperClient exited with {status}\n{report}"
    );

    let messages: Vec<(String, String)> = ["m0", "m1", "m2"]
        .iter()
        .flat_map(|m| (0..3).map(move |i| (format!("{m}-{i}"), format!("body-{m}-{i}"))))
        .collect();
    let mut expected: Vec<String> = messages
        .iter()
        .map(|(id, body)| format!("MSG {id}|{body}"))
        .collect();
    expected.push("DONE 9".into());
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines, expected, "ZperClient output\n{report}");

    // On disk: exactly the ZMTP frames the producers sent, as stored records, in order.
    let segment = std::fs::read(node.segment("interop", 0)).expect("read segment");
    let first = stored("m0-0", "body-m0-0");
    assert_eq!(
        first, b"\x01\x04m0-0\x00\x09body-m0-0",
        "record layout of m0-0"
    );
    assert!(
        segment.starts_with(&first),
        "segment begins {:02x?}",
        &segment[..segment.len().min(32)]
    );
    let all: Vec<u8> = messages
        .iter()
        .flat_map(|(id, body)| stored(id, body))
        .collect();
    assert_eq!(&segment[..segment.len().min(all.len())], &all[..]);
    assert!(
        segment[all.len()..].iter().all(|&b| b == 0),
        "{} unexpected bytes after the 9 messages",
        segment.len() - all.len()
    );
    // The REQ producer's empty delimiter was not stored ahead of its messages.
    let m2 = find(&segment, &stored("m2-0", "body-m2-0")).expect("m2-0 stored");
    assert!(m2 >= 2, "m2-0 stored at {m2}");
    assert_ne!(&segment[m2 - 2..m2], &[0x01, 0x00], "REQ delimiter stored");
    assert_eq!(find(&segment, &[0x01, 0x00, 0x01, 0x04]), None);
}
