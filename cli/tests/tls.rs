//! Issue #19: a node whose admin port speaks TLS (`http.tls_cert`, `http.tls_key`,
//! `http.tls_ca`) with its admin token read from a file (`http.admin_token_file`), driven by
//! the CLI with `--tls-ca` or the node's own `--config`; plain HTTP, an untrusted client and
//! a missing token are refused with a clear message, and a half-set TLS config stops the node
//! at start naming the keys.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::run::{stdout, zper};
use common::*;

/// Writes a CA and a certificate for 127.0.0.1 signed by it into `dir`: `ca.pem`,
/// `node.pem`, `node.key`.
fn certificates(dir: &Path) -> PathBuf {
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).expect("ca cert");
    let key = rcgen::KeyPair::generate().expect("node key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .expect("params")
        .signed_by(&key, &ca_cert, &ca_key)
        .expect("node cert");
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).expect("write");
    std::fs::write(dir.join("node.pem"), cert.pem()).expect("write");
    std::fs::write(dir.join("node.key"), key.serialize_pem()).expect("write");
    dir.join("ca.pem")
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn the_cli_speaks_to_a_node_whose_admin_port_is_tls_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = certificates(dir.path());
    std::fs::write(dir.path().join("token"), "s3cret\n").expect("write");
    let h = free_port();
    let node = ChildNode::start_on(
        &dir.path().join("n"),
        h,
        &format!(
            "http.tls_cert = {d}/node.pem\nhttp.tls_key = {d}/node.key\nhttp.tls_ca = {d}/ca.pem\n\
             http.admin_token_file = {d}/token\n",
            d = dir.path().display()
        ),
    );
    let admin = format!("127.0.0.1:{h}");
    let ca_arg = ca.to_str().expect("utf-8 path");
    // The node is up once the CLI can read its cluster status over TLS.
    assert!(
        eventually_within(std::time::Duration::from_secs(30), || {
            let o = zper(&[
                "cluster", "status", "--admin", &admin, "--tls-ca", ca_arg, "--json",
            ]);
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
            v["brokers"].as_array().is_some_and(|b| b.len() == 1)
        }),
        "no cluster status over TLS"
    );
    // A mutating command needs the token from the file...
    let o = zper(&[
        "topics", "create", "orders", "--admin", &admin, "--tls-ca", ca_arg,
    ]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).contains("unauthorized"), "{o:?}");
    let o = zper(&[
        "topics", "create", "orders", "--admin", &admin, "--tls-ca", ca_arg, "--token", "s3cret",
    ]);
    assert!(o.status.success(), "{o:?}");
    // ...and the node's own config gives the CLI the address, the CA and the token.
    let config = node.config.to_str().expect("utf-8 path");
    let o = zper(&["--config", config, "topics", "create", "payments"]);
    assert!(o.status.success(), "{o:?}");
    let o = zper(&["--config", config, "topics", "list", "--json"]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let names: Vec<&str> = v
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["orders", "payments"], "{v}");

    // Without the CA the CLI speaks plain HTTP, which the node does not answer: a clear error.
    let o = zper(&["topics", "list", "--admin", &admin]);
    assert_ne!(o.status.code(), Some(0), "{o:?}");
    assert!(stderr(&o).contains("not reachable"), "{o:?}");
    // A CA that did not sign the node's certificate: refused, also clearly.
    let other = tempfile::tempdir().expect("tempdir");
    let other_ca = certificates(other.path());
    let o = zper(&[
        "topics",
        "list",
        "--admin",
        &admin,
        "--tls-ca",
        other_ca.to_str().expect("utf-8"),
    ]);
    assert_ne!(o.status.code(), Some(0), "{o:?}");
    assert!(stderr(&o).contains("not reachable"), "{o:?}");
    // A CA file that is not one.
    let o = zper(&["topics", "list", "--admin", &admin, "--tls-ca", config]);
    assert_ne!(o.status.code(), Some(0), "{o:?}");
    assert!(stderr(&o).contains("CA certificates"), "{o:?}");
    // The node served all along.
    let o = zper(&["--config", config, "topics", "describe", "orders"]);
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).starts_with("FRAGMENT"), "{o:?}");
}

#[test]
fn a_node_with_half_a_tls_config_or_a_bad_key_file_stops_at_start_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    certificates(dir.path());
    let d = dir.path().display();
    for (extra, says) in [
        (
            format!("http.tls_cert = {d}/node.pem\nhttp.tls_ca = {d}/ca.pem\n"),
            "http.tls_key",
        ),
        (
            // The CA's certificate with the node's key: they do not fit (both files named).
            format!(
                "http.tls_cert = {d}/ca.pem\nhttp.tls_key = {d}/node.key\nhttp.tls_ca = {d}/ca.pem\n"
            ),
            "node.key",
        ),
        (
            format!(
                "http.tls_cert = {d}/node.pem\nhttp.tls_key = {d}/missing.key\nhttp.tls_ca = {d}/ca.pem\n"
            ),
            "missing.key",
        ),
    ] {
        let config = dir.path().join("n.properties");
        let mut text = format!("base_dir = {d}/data\nhttp.bind = 127.0.0.1:{}\n", free_port());
        for key in [
            "writer", "reader", "ack", "controller", "replica", "relay",
            "dolly.requests", "dolly.updates", "dolly.snapshots",
        ] {
            text.push_str(&format!("{key}.bind = tcp://127.0.0.1:{}\n", free_port()));
        }
        std::fs::write(&config, text + &extra).expect("write");
        let mut child = Command::new(env!("CARGO_BIN_EXE_zper"))
            .arg("--config")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run zper");
        // Bounded: a node that started anyway is killed and the test fails.
        let exited = eventually_within(std::time::Duration::from_secs(30), || {
            child.try_wait().ok().flatten().is_some()
        });
        if !exited {
            let _ = child.kill();
        }
        let o = child.wait_with_output().expect("wait");
        assert!(exited, "{extra}: the node started");
        assert!(!o.status.success(), "{extra}: {o:?}");
        assert!(stderr(&o).contains(says), "{extra}: {}", stderr(&o));
    }
}
