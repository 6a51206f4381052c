//! The `zper` binary as a process: restart after SIGKILL (spec `zper.md` §6.4), clean shutdown on
//! SIGTERM, and config errors that name the key.

mod common;

use std::process::Command;

use common::*;
use zper_wire::encode_record;

#[test]
fn sigkill_then_restart_keeps_every_acknowledged_message_and_cuts_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut node = ChildNode::start(&data, "flush_interval = 100000\nflush_messages = 1000000");
    let ctx = zmq::Context::new();
    let s = client(&ctx, zmq::DEALER, &identity("killed", 1), &node.writer);
    for i in 0..500u32 {
        s.send_multipart([&i.to_be_bytes()[..], b"payload"], 0)
            .expect("send");
    }
    // Mode 1: the ack of message 499 means all 500 are durable.
    loop {
        let ack = s.recv_bytes(0).expect("ack within 5 s");
        if ack == 499u32.to_be_bytes() {
            break;
        }
    }
    let acked_len = 500 * (6 + 9);
    node.kill9();

    // A torn tail as a crash mid-write leaves it: a complete MORE frame and half a frame.
    let seg = data.join("killed").join("00000000000000000000.dat");
    let mut bytes = std::fs::read(&seg).expect("segment");
    assert_eq!(bytes.len(), acked_len);
    encode_record(b"torn", true, &mut bytes);
    bytes.extend_from_slice(&[0x00, 0x09, b'x']);
    std::fs::write(&seg, &bytes).expect("write torn tail");

    node.restart();
    let r = client(&ctx, zmq::DEALER, &identity("killed", 0), &node.reader);
    let got = read_all(&r);
    assert_eq!(got.len(), acked_len);
    let ids: Vec<u32> = zper_wire::Records::new(&got)
        .filter(|r| r.more)
        .map(|r| u32::from_be_bytes(r.payload.try_into().expect("id")))
        .collect();
    assert_eq!(ids, (0..500).collect::<Vec<_>>());
    assert_eq!(
        std::fs::metadata(&seg).expect("seg").len() as usize,
        acked_len
    );
    // Appends continue on a message boundary.
    let s = client(&ctx, zmq::DEALER, &identity("killed", 1), &node.writer);
    s.send_multipart([&b"after"[..]], 0).expect("send");
    assert_eq!(s.recv_bytes(0).expect("ack"), b"after");
    assert_eq!(read_all(&r).len(), acked_len + 7);
}

#[test]
fn sigterm_flushes_everything_before_exit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut node = ChildNode::start(&data, "flush_interval = 100000\nflush_messages = 1000000");
    let ctx = zmq::Context::new();
    let s = client(&ctx, zmq::DEALER, &identity("term", 0), &node.writer);
    for i in 0..300u32 {
        s.send_multipart([&i.to_be_bytes()[..]], 0).expect("send");
    }
    // Mode 0 messages are appended but not flushed (1e5 ms interval): wait until written.
    let seg = data.join("term").join("00000000000000000000.dat");
    assert!(eventually(
        || std::fs::metadata(&seg).is_ok_and(|m| m.len() == 1800)
    ));
    let r = client(&ctx, zmq::DEALER, &identity("term", 0), &node.reader);
    assert!(read_all(&r).is_empty(), "not flushed yet");
    let status = node.terminate();
    assert!(status.success(), "{status:?}");
    node.restart();
    let r = client(&ctx, zmq::DEALER, &identity("term", 0), &node.reader);
    assert_eq!(read_all(&r).len(), 1800);
}

#[test]
fn bad_config_value_names_the_key_and_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("bad.properties");
    std::fs::write(&config, "segment_size = big\n").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_zper"))
        .arg("--config")
        .arg(&config)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`segment_size`"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let missing = Command::new(env!("CARGO_BIN_EXE_zper"))
        .arg("--config")
        .arg(dir.path().join("nope.properties"))
        .output()
        .expect("run");
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope.properties"));

    // base_dir that is a file: a clear error, not a panic.
    let file = dir.path().join("plainfile");
    std::fs::write(&file, "x").expect("write");
    std::fs::write(&config, format!("base_dir = {}\n", file.display())).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_zper"))
        .arg("--config")
        .arg(&config)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("base_dir"), "{err}");
}

#[test]
fn no_arguments_runs_the_embedded_default_under_data_on_default_ports() {
    for port in [5555u16, 5556, 5557, 5558, 5560, 3266, 9644] {
        assert!(
            std::net::TcpListener::bind(("0.0.0.0", port)).is_ok(),
            "port {port} is taken: this test runs `zper` on the default ports"
        );
    }
    let cwd = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_zper"))
        .current_dir(cwd.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn zper");
    let up = eventually(|| std::net::TcpStream::connect(("127.0.0.1", 5556)).is_ok());
    let ctx = zmq::Context::new();
    let s = client(
        &ctx,
        zmq::REQ,
        &identity("embedded", 2),
        "tcp://127.0.0.1:5555",
    );
    let reply = up.then(|| request(&s, &[b"id", b"x"]));
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let status = child.wait().expect("wait");
    assert!(up, "zper did not listen on 5556");
    assert_eq!(reply, Some(vec![b"id".to_vec()]));
    assert!(status.success());
    let seg = cwd.path().join("data/embedded/00000000000000000000.dat");
    assert_eq!(
        std::fs::read(seg).expect("segment under ./data"),
        [1, 2, b'i', b'd', 0, 1, b'x']
    );
}
