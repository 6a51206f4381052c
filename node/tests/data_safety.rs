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
        let (status, body) = http(
            "POST",
            &admin,
            &format!("/v1/topics/{topic}"),
            Some(&format!(r#"{{"retain_hours": {hours}}}"#)),
        )
        .expect("answer");
        assert_eq!(status, 201, "{body}");
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
    match zper::Node::start(&c) {
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
