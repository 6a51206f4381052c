//! Issue #19: `zper keygen` and the CLI's CURVE flags against a child node whose writer and
//! reader require CURVE (`curve.secret_key_file`, `curve.clients`): produce and consume with
//! the keys work; without keys, with a key not admitted, or with only one of the two flags,
//! the CLI fails with a clear message and nothing is stored.

mod common;

use std::time::Duration;

use common::run::zper;
use common::*;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn keygen_keys_let_the_cli_produce_and_consume_on_a_curve_node_and_nothing_else_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display().to_string();
    std::fs::create_dir(dir.path().join("clients")).expect("clients dir");
    for name in [
        format!("{d}/node"),
        format!("{d}/clients/app"),
        format!("{d}/stranger"),
    ] {
        let o = zper(&["keygen", &name]);
        assert!(o.status.success(), "{o:?}");
        assert!(stdout(&o).contains("public key"), "{o:?}");
    }
    let o = zper(&["keygen", &format!("{d}/node")]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "an existing key is not replaced: {o:?}"
    );
    assert!(stderr(&o).contains("--force"), "{o:?}");

    let node = ChildNode::start(
        &dir.path().join("n"),
        &format!("curve.secret_key_file = {d}/node.key_secret\ncurve.clients = {d}/clients\n"),
    );
    let server = format!("{d}/node.key");
    let app = format!("{d}/clients/app.key_secret");
    let stranger = format!("{d}/stranger.key_secret");
    let keys = |secret: &str| {
        vec![
            "--curve-server-key".to_owned(),
            server.clone(),
            "--curve-secret-key-file".to_owned(),
            secret.to_owned(),
        ]
    };
    let run = |extra: &[String], args: &[&str]| {
        let mut all: Vec<&str> = extra.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        zper(&all)
    };
    // The node is up once an authorised producer gets its acks.
    let produce = |extra: &[String], what: &str| {
        run(
            extra,
            &[
                "produce",
                "-t",
                "sealed",
                "-w",
                &node.writer,
                "-m",
                "1",
                "--timeout",
                "3s",
                what,
            ],
        )
    };
    assert!(
        eventually_within(Duration::from_secs(30), || produce(&keys(&app), "one")
            .status
            .success()),
        "an authorised CLI producer never got its ack"
    );
    let o = produce(&keys(&app), "two");
    assert!(o.status.success(), "{o:?}");
    // Refused: a key the node does not admit, and no CURVE at all (no ack within the timeout).
    let o = produce(&keys(&stranger), "intruder");
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let o = produce(&[], "plain");
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    // Half the flags: a message that says what is missing.
    let o = run(
        &keys(&app)[..2],
        &["produce", "-t", "sealed", "-w", &node.writer, "x"],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).contains("--curve-secret-key-file"), "{o:?}");
    // The public key file where the secret one belongs.
    let o = run(
        &keys(&format!("{d}/clients/app.key")),
        &["produce", "-t", "sealed", "-w", &node.writer, "x"],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).contains("no secret key"), "{o:?}");
    // An authorised consumer reads exactly the two messages.
    let o = run(
        &keys(&app),
        &[
            "consume",
            "-t",
            "sealed",
            "-r",
            &node.reader,
            "--timeout",
            "5s",
        ],
    );
    assert!(o.status.success(), "{o:?}");
    let lines: Vec<String> = stdout(&o)
        .lines()
        .map(|l| l.rsplit('\t').next().unwrap_or("").to_owned())
        .collect();
    assert_eq!(lines, ["one", "two"], "{o:?}");
    // A consumer without keys gets no answer.
    let o = run(
        &[],
        &[
            "consume",
            "-t",
            "sealed",
            "-r",
            &node.reader,
            "--timeout",
            "2s",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
}
