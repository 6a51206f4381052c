//! Data safety at the edges (issue #13) on one in-process node: a topic's own retention, a
//! data directory used by one node at a time, zero-filled tails, bounded reader memory and a
//! full disk. The replicated cases are in `replication.rs`.

mod common;

use std::time::{Duration, SystemTime};

use common::*;

/// Issue #13, defect 7: a topic's `retain_hours` was ignored (the node's value won).
#[test]
fn a_topics_own_retain_hours_wins_over_the_nodes() {
    let n = TestNode::start_with(|c| {
        c.store.segment_size = 1024;
        c.store.retain = Duration::from_secs(168 * 3600);
        c.retention_check = Duration::from_millis(100);
    });
    let admin = n.node().endpoints().http.clone();
    for (topic, hours) in [("short", 1), ("long", 500)] {
        // The node registers itself just after it starts: retry until it is live.
        assert!(
            eventually(|| {
                http(
                    "POST",
                    &admin,
                    &format!("/v1/topics/{topic}"),
                    Some(&format!(r#"{{"retain_hours": {hours}}}"#)),
                )
                .is_some_and(|(status, _)| status == 201)
            }),
            "{topic} created"
        );
    }
    for topic in ["short", "long"] {
        let w = n.writer_client(zmq::DEALER, topic, 2);
        for i in 0u32..20 {
            let reply = request(&w, &[b"", &i.to_be_bytes(), &[b'x'; 200]]);
            assert_eq!(reply.len(), 2, "acknowledged: {reply:?}");
        }
    }
    // Both topics' closed segments were last written two hours ago.
    let two_hours_ago = SystemTime::now() - Duration::from_secs(2 * 3600);
    let closed = |topic: &str| -> Vec<std::path::PathBuf> {
        let mut files: Vec<_> = std::fs::read_dir(n.dir.path().join(topic))
            .expect("topic dir")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "dat"))
            .collect();
        files.sort();
        files.pop(); // the active segment
        files
    };
    for topic in ["short", "long"] {
        let files = closed(topic);
        assert!(files.len() >= 2, "{topic} has closed segments: {files:?}");
        for f in files {
            std::fs::File::options()
                .write(true)
                .open(&f)
                .and_then(|file| file.set_modified(two_hours_ago))
                .expect("set mtime");
        }
    }
    assert!(
        eventually(|| closed("short").is_empty()),
        "the 1-hour topic dropped its old segments: {:?}",
        closed("short")
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(closed("long").len() >= 2, "the 500-hour topic kept them");
}

/// Issue #13, defect 7: two nodes could be started on one `base_dir`, both appending to the
/// same segment files.
#[test]
fn a_second_node_on_the_same_data_directory_is_refused_naming_the_holder() {
    let n = TestNode::start();
    let mut c = test_config(n.dir.path());
    c.cluster.raft_dir = Some(n.dir.path().join("other-raft"));
    match zper_node::Node::start(&c) {
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains("in use"), "{text}");
            assert!(
                text.contains(&format!("pid {}", std::process::id())),
                "{text}"
            );
        }
        Ok(_) => panic!("a second node started on the same base_dir"),
    }
    // The first one still serves.
    let w = n.writer_client(zmq::DEALER, "still", 2);
    assert_eq!(request(&w, &[b"", b"1", b"ok"]).len(), 2);
}

/// A small tmpfs the test mounts (root only), unmounted on drop: a disk that fills up.
struct SmallDisk {
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    /// `None` where mounting is not allowed (not root): the caller skips, except under CI.
    fn mount(mib: u32) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("disk");
        std::fs::create_dir_all(&path).expect("mkdir");
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&path)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var("CI").is_err(),
                "CI runs as root and must be able to mount a tmpfs"
            );
            eprintln!("note: cannot mount a tmpfs here (not root): disk-full test skipped");
            return None;
        }
        Some(SmallDisk { path, _dir: dir })
    }

    /// Fills all but about `leave` bytes with a filler file.
    fn fill(&self, leave: u64) -> std::path::PathBuf {
        let filler = self.path.join("filler");
        let free = fs2_free(&self.path);
        let f = std::fs::File::create(&filler).expect("filler");
        let mut left = free.saturating_sub(leave);
        let block = vec![0xAAu8; 64 * 1024];
        use std::io::Write;
        let mut w = std::io::BufWriter::new(f);
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            if w.write_all(&block[..n]).is_err() {
                break;
            }
            left -= n as u64;
        }
        let _ = w.flush();
        filler
    }
}

/// Free bytes of the filesystem holding `path` (from `df`, to stay in safe Rust).
fn fs2_free(path: &std::path::Path) -> u64 {
    let out = std::process::Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(path)
        .output()
        .expect("df");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .expect("df output")
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

/// Issue #13, defect 6: with the segment store full a mode-2 producer got no reply at all.
/// Every message now gets an answer (an ack, or 0xFF: not stored), nothing refused is stored,
/// nothing acknowledged is lost, and writes work again once space returns.
#[test]
fn a_full_disk_refuses_writes_with_a_status_and_recovers_when_space_returns() {
    let Some(disk) = SmallDisk::mount(8) else {
        return;
    };
    let raft = tempfile::tempdir().expect("raft dir");
    let base = disk.path.clone();
    let n = TestNode::start_with(|c| {
        c.store.base_dir = base;
        c.cluster.raft_dir = Some(raft.path().to_owned());
    });
    let filler = disk.fill(1 << 20);
    let w = n.writer_client(zmq::DEALER, "full", 2);
    w.set_rcvtimeo(10_000).expect("rcvtimeo");
    let body = vec![b'z'; 16 * 1024];
    let (mut acked, mut refused) = (Vec::new(), Vec::new());
    for id in 0u32..200 {
        w.send_multipart([&b""[..], &id.to_be_bytes()[..], &body[..]], 0)
            .expect("send");
    }
    for _ in 0u32..200 {
        let reply = w.recv_multipart(0).expect("every message is answered");
        let id = u32::from_be_bytes(reply[1][..4].try_into().expect("id"));
        match reply.len() {
            2 => acked.push(id),
            3 => {
                assert_eq!(reply[2], [zper_wire::WRITER_STORE_FAILED], "{reply:?}");
                refused.push(id);
            }
            _ => panic!("unexpected {reply:?}"),
        }
    }
    assert!(
        !refused.is_empty(),
        "the disk filled up: acked {}",
        acked.len()
    );
    assert!(!acked.is_empty(), "some fitted");
    let metrics = http("GET", &n.node().endpoints().http, "/metrics", None)
        .expect("metrics")
        .1;
    assert!(metrics.lines().any(|l| l
        .starts_with(r#"zper_integrity_events_total{event="disk_refused"}"#)
        && !l.ends_with(" 0")));
    // Space returns: writes work again.
    std::fs::remove_file(filler).expect("free space");
    let reply = request(&w, &[b"", &1000u32.to_be_bytes(), b"after"]);
    assert_eq!(reply.len(), 2, "acknowledged again: {reply:?}");
    acked.push(1000);
    let stored = ids(&n.read_all("full"));
    for id in &acked {
        assert!(stored.contains(id), "acknowledged {id} is stored");
    }
    for id in &refused {
        assert!(!stored.contains(id), "refused {id} was stored");
    }
}

/// The message ids (first frames, 4 bytes) of stored records.
fn ids(log: &[u8]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut first = true;
    for rec in zper_wire::Records::new(log) {
        if first && rec.payload.len() == 4 {
            out.push(u32::from_be_bytes(rec.payload.try_into().expect("4")));
        }
        first = !rec.more;
    }
    out
}

/// Issue #13, defect 6: when RocksDB hit ENOSPC the Raft core quit but the process stayed up
/// and its liveness probe still answered 200. Now the node exits non-zero (75) so its
/// supervisor restarts it, and it comes back with everything it had acknowledged.
#[test]
fn a_full_raft_disk_stops_the_node_with_a_status_and_it_recovers_after_restart() {
    let Some(disk) = SmallDisk::mount(16) else {
        return;
    };
    let data = tempfile::tempdir().expect("data");
    let mut node = ChildNode::start(
        &data.path().join("n1"),
        &format!("raft.dir = {}\n", disk.path.join("raft").display()),
    );
    let w = client(
        &zmq::Context::new(),
        zmq::DEALER,
        &identity("kept", 2),
        &node.writer,
    );
    assert_eq!(request(&w, &[b"", &1u32.to_be_bytes(), b"before"]).len(), 2);
    let filler = disk.fill(0);
    // Every new topic is a Raft write: one of them hits the full disk.
    let ctx = zmq::Context::new();
    let started = std::time::Instant::now();
    let status = loop {
        if let Ok(Some(status)) = node.child.try_wait() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the node kept running without its Raft core"
        );
        let topic = format!("t{}", started.elapsed().as_millis());
        let s = client(&ctx, zmq::DEALER, &identity(&topic, 0), &node.writer);
        let _ = s.send_multipart([&b"x"[..], &[b'y'; 1000][..]], zmq::DONTWAIT);
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        status.code(),
        Some(75),
        "exits with the Raft-stopped status"
    );
    std::fs::remove_file(filler).expect("free space");
    node.restart();
    let r = client(&ctx, zmq::DEALER, &identity("kept", 0), &node.reader);
    assert!(
        eventually(|| ids(&read_all(&r)).contains(&1)),
        "acknowledged data kept"
    );
    let w = client(&ctx, zmq::DEALER, &identity("kept", 2), &node.writer);
    assert!(eventually(|| {
        w.send_multipart([&b""[..], &2u32.to_be_bytes()[..], b"after"], 0)
            .is_ok()
            && w.recv_multipart(0).is_ok_and(|r| r.len() == 2)
    }));
}
