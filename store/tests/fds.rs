//! Closed segments hold no file descriptor (a node with many segments must not run out).
//! Alone in its own test binary so no other test opens files meanwhile.

use std::time::Duration;

use zper_store::{FlushPolicy, Store, StoreConfig};
use zper_wire::encode_record;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[test]
fn only_active_segments_keep_a_file_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = StoreConfig {
        base_dir: dir.path().to_owned(),
        segment_size: 10,
        flush: FlushPolicy {
            flush_messages: 1,
            flush_interval: Duration::from_secs(1),
        },
        retain: Duration::from_secs(3600),
        allow_empty_message: true,
    };
    let mut msg = Vec::new();
    encode_record(&[1u8; 20], false, &mut msg);
    let before = open_fds();
    {
        let store = Store::open(config.clone()).expect("open");
        let t = store.topic_or_create("many").expect("topic");
        for _ in 0..300 {
            t.append(&msg).expect("append");
        }
        assert_eq!(t.segment_starts().expect("starts").len(), 301);
        assert!(
            open_fds() < before + 5,
            "{} fds for 301 segments",
            open_fds() - before
        );
        // Reads of closed segments still work.
        assert_eq!(t.fetch(22, 100, 100).expect("fetch").bytes, msg);
    }
    let store = Store::open(config).expect("reopen");
    assert!(
        open_fds() < before + 5,
        "reopen keeps closed segments closed"
    );
    assert_eq!(
        store
            .topic("many")
            .expect("t")
            .fetch(44, 22, 22)
            .expect("f")
            .bytes,
        msg
    );
}
