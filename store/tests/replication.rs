//! The store's replication primitives (issue #4): a replica that copies the leader chunk by
//! chunk ends byte-identical (same offsets, segment boundaries and bytes) whatever its own
//! segment_size; readers stop at the high-water mark; truncation cuts back to a message
//! boundary and survives a restart.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use common::config;
use proptest::prelude::*;
use zper_store::{Store, StoreError, TopicLog};
use zper_wire::{encode_record, Timestamp};

fn message(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut m = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        encode_record(f, i + 1 < frames.len(), &mut m);
    }
    m
}

/// Every segment file of a topic directory, by name (checksum sidecars are per copy: they
/// follow each copy's own appends).
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .expect("list")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".dat"))
        })
        .map(|e| {
            let e = e.expect("entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).expect("read"),
            )
        })
        .collect()
}

/// Copies `leader` into `replica` in chunks of at most `chunk` bytes, as replication does.
fn copy(leader: &TopicLog, replica: &TopicLog, chunk: u64) {
    loop {
        let from = replica.written_end().expect("end");
        if from == leader.written_end().expect("end") {
            break;
        }
        let c = leader.read_for_replica(from, chunk).expect("read");
        assert!(!c.bytes.is_empty() || c.rotate_after, "progress at {from}");
        replica
            .append_replica(c.offset, &c.bytes, c.rotate_after)
            .expect("append");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn a_replica_copy_is_byte_identical_whatever_its_segment_size(
        messages in proptest::collection::vec(
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..4),
            1..40,
        ),
        leader_segment in 64u64..1024,
        chunk in 1u64..2000,
    ) {
        let (a, b) = (tempfile::tempdir().expect("tmp"), tempfile::tempdir().expect("tmp"));
        let leader_store = Store::open(config(a.path(), leader_segment)).expect("open");
        // The replica's own segment_size is irrelevant: it rotates where the leader did.
        let replica_store = Store::open(config(b.path(), 1 << 30)).expect("open");
        let leader = leader_store.topic_or_create("t").expect("topic");
        let replica = replica_store.topic_or_create("t").expect("topic");
        for (i, m) in messages.iter().enumerate() {
            leader.append(&message(m)).expect("append");
            if i % 7 == 3 {
                copy(&leader, &replica, chunk);
            }
        }
        copy(&leader, &replica, chunk);
        replica.flush().expect("flush");
        prop_assert_eq!(files(&a.path().join("t")), files(&b.path().join("t")));
        prop_assert_eq!(
            leader.segment_starts().expect("starts"),
            replica.segment_starts().expect("starts")
        );
    }
}

#[test]
fn a_replica_append_must_continue_its_log() {
    let (a, b) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    let leader = Store::open(config(a.path(), 1 << 20)).expect("open");
    let replica = Store::open(config(b.path(), 1 << 20)).expect("open");
    let (l, r) = (
        leader.topic_or_create("t").expect("t"),
        replica.topic_or_create("t").expect("t"),
    );
    let m = message(&[b"id".to_vec(), b"body".to_vec()]);
    l.append(&m).expect("append");
    l.append(&m).expect("append");
    let second = l.read_for_replica(m.len() as u64, 1000).expect("read");
    let refused = r.append_replica(second.offset, &second.bytes, false);
    assert!(
        matches!(refused, Err(StoreError::OffsetMismatch { expected: 0, got, .. }) if got == m.len() as u64),
        "{refused:?}"
    );
    // Half a message is refused, and so is an offset inside a message.
    assert!(matches!(
        r.append_replica(0, &m[..5], false),
        Err(StoreError::MalformedAppend { .. })
    ));
    assert!(matches!(
        l.read_for_replica(3, 1000),
        Err(StoreError::InvalidOffset { .. })
    ));
    // Inside the second message's payload, where the bytes could parse as records: refused.
    let body = message(&[b"id".to_vec(), vec![0u8; 40]]);
    l.append(&body).expect("append");
    let inside = 2 * m.len() as u64 + 6;
    assert!(matches!(
        l.read_for_replica(inside, 1000),
        Err(StoreError::InvalidOffset { .. })
    ));
    assert_eq!(r.written_end().expect("end"), 0);
}

#[test]
fn readers_stop_at_the_high_water_mark() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
    let t = store.topic_or_create("t").expect("t");
    let m = message(&[b"id".to_vec(), b"body".to_vec()]);
    for _ in 0..3 {
        t.append(&m).expect("append");
    }
    t.flush().expect("flush");
    let len = m.len() as u64;
    t.set_high_water(Some(len)).expect("hw");
    assert_eq!(t.visible_end().expect("visible"), len);
    assert_eq!(t.fetch(0, 1 << 20, 1 << 20).expect("fetch").bytes, m);
    assert!(matches!(
        t.fetch(2 * len as i64, 100, 1 << 20),
        Err(StoreError::InvalidOffset { .. })
    ));
    assert_eq!(
        t.offsets(Timestamp::Latest, None).expect("latest"),
        vec![0, len]
    );
    // The leader still reads past it for its replicas.
    assert_eq!(
        t.read_for_replica(len, 1 << 20).expect("read").bytes.len() as u64,
        2 * len
    );
    t.set_high_water(None).expect("hw");
    assert_eq!(t.visible_end().expect("visible"), 3 * len);
}

/// Issue #13, defect 1: a restarted replicated log served its whole flushed tail (messages
/// never acknowledged, that replication then cut) until replication set a mark again.
#[test]
fn a_replicated_log_reopens_at_its_recorded_high_water_mark_not_its_flushed_end() {
    let dir = tempfile::tempdir().expect("tmp");
    let m = message(&[b"id".to_vec(), b"body".to_vec()]);
    let len = m.len() as u64;
    {
        let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
        let t = store.topic_or_create("t").expect("t");
        t.assign_epoch(1, 0).expect("epoch");
        for _ in 0..3 {
            t.append(&m).expect("append");
        }
        t.flush().expect("flush");
        t.set_high_water(Some(len)).expect("hw");
        // Two more, flushed here but never confirmed by the replicas (a crash follows).
        t.append(&m).expect("append");
        t.append(&m).expect("append");
        t.flush().expect("flush");
        assert_eq!(t.flushed_end().expect("flushed"), 5 * len);
    }
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert_eq!(t.flushed_end().expect("flushed"), 5 * len);
    assert_eq!(
        t.visible_end().expect("visible"),
        len,
        "only what was confirmed"
    );
    assert_eq!(t.fetch(0, 1 << 20, 1 << 20).expect("fetch").bytes, m);
    assert_eq!(
        t.offsets(Timestamp::Latest, None).expect("latest"),
        vec![0, len]
    );

    // A truncation below the record lowers it durably.
    t.set_high_water(Some(4 * len)).expect("hw");
    t.checkpoint_high_water().expect("checkpoint");
    t.truncate_to(2 * len).expect("truncate");
    t.append(&m).expect("append");
    t.flush().expect("flush");
    drop(t);
    drop(store);
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert_eq!(t.visible_end().expect("visible"), 2 * len);

    // A replicated log whose record is missing serves nothing until replication confirms.
    fs::remove_file(dir.path().join("t").join(zper_store::HIGH_WATER_FILE)).expect("rm");
    drop(t);
    drop(store);
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert_eq!(t.visible_end().expect("visible"), 0);

    // A log that was never replicated (ZPER's own data) still serves all it flushed.
    let lone = store.topic_or_create("lone").expect("lone");
    lone.append(&m).expect("append");
    lone.flush().expect("flush");
    drop(lone);
    drop(t);
    drop(store);
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let lone = store.topic_or_create("lone").expect("lone");
    assert_eq!(lone.visible_end().expect("visible"), len);
}

#[test]
fn truncation_cuts_back_to_a_message_boundary_across_segments_and_survives_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let m = message(&[b"id".to_vec(), vec![7u8; 40]]);
    let len = m.len() as u64;
    {
        let store = Store::open(config(dir.path(), 2 * len)).expect("open");
        let t = store.topic_or_create("t").expect("t");
        for _ in 0..7 {
            t.append(&m).expect("append");
        }
        t.flush().expect("flush");
        t.set_high_water(Some(7 * len)).expect("hw");
        let starts = t.segment_starts().expect("starts");
        assert!(starts.len() >= 3, "{starts:?}");
        // Inside a message: refused, nothing changes.
        assert!(matches!(
            t.truncate_to(len + 3),
            Err(StoreError::InvalidOffset { .. })
        ));
        assert_eq!(t.written_end().expect("end"), 7 * len);
        t.truncate_to(4 * len).expect("truncate");
        assert_eq!(t.written_end().expect("end"), 4 * len);
        assert_eq!(t.flushed_end().expect("flushed"), 4 * len);
        assert_eq!(t.high_water().expect("hw"), Some(4 * len));
        assert!(t
            .segment_starts()
            .expect("starts")
            .iter()
            .all(|s| *s <= 4 * len));
        // Appending goes on from the cut.
        t.append(&message(&[b"new".to_vec()])).expect("append");
        t.flush().expect("flush");
    }
    let store = Store::open(config(dir.path(), 2 * len)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    let new = message(&[b"new".to_vec()]);
    assert_eq!(t.written_end().expect("end"), 4 * len + new.len() as u64);
    // The mark recorded at the cut comes back with the log (issue #13): what was appended
    // after it is not visible until replication confirms it.
    assert_eq!(t.visible_end().expect("visible"), 4 * len);
    t.set_high_water(Some(4 * len + new.len() as u64))
        .expect("hw");
    let mut all = Vec::new();
    let mut off = 0i64;
    loop {
        let f = t.fetch(off, 1 << 20, 1 << 20).expect("fetch");
        if f.bytes.is_empty() {
            if f.segment_end > off as u64 {
                break;
            }
            if off as u64 >= t.written_end().expect("end") {
                break;
            }
        }
        off += f.bytes.len() as i64;
        all.extend(f.bytes);
        if off as u64 >= t.written_end().expect("end") {
            break;
        }
    }
    let mut expected = Vec::new();
    for _ in 0..4 {
        expected.extend_from_slice(&m);
    }
    expected.extend_from_slice(&new);
    assert_eq!(all, expected);
}

/// Issue #13 (attack on the restart epoch): a restarted leader recorded its new epoch at the
/// end of a recovered tail that was never made durable; a power loss kept the entry and lost
/// the tail. The next epoch was then recorded past the log end too (the history only grows),
/// and a replica holding the lost bytes was never told to cut them. Reopening drops entries
/// that start past the recovered end, so the next epoch starts where the log really ends.
#[test]
fn a_reopened_log_drops_epochs_recorded_past_its_end() {
    let dir = tempfile::tempdir().expect("tmp");
    let m = message(&[b"id".to_vec(), b"body".to_vec()]);
    let len = m.len() as u64;
    {
        let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
        let t = store.topic_or_create("t").expect("t");
        t.assign_epoch(1, 0).expect("epoch 1");
        for _ in 0..3 {
            t.append(&m).expect("append");
        }
        t.flush().expect("flush");
        t.assign_epoch(2, 3 * len).expect("epoch 2");
    }
    // The power loss: the last message never reached the disk, the history did.
    let seg = dir.path().join("t").join(format!("{:020}.dat", 0));
    let bytes = fs::read(&seg).expect("segment");
    fs::write(&seg, &bytes[..(2 * len) as usize]).expect("cut");
    let sums = dir.path().join("t").join(format!("{:020}.crc", 0));
    let raw = fs::read(&sums).expect("sidecar");
    let keep = raw[8..]
        .chunks_exact(16)
        .take_while(|e| u64::from_le_bytes(e[..8].try_into().expect("8")) <= 2 * len)
        .count();
    fs::write(&sums, &raw[..8 + keep * 16]).expect("cut sidecar");
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert_eq!(t.written_end().expect("end"), 2 * len);
    assert_eq!(t.epochs().expect("epochs"), vec![(1, 0)]);
    t.assign_epoch(3, t.written_end().expect("end"))
        .expect("epoch 3");
    assert_eq!(t.epochs().expect("epochs"), vec![(1, 0), (3, 2 * len)]);
    // A replica that holds the lost message in epoch 2 is told to cut back to 2 * len.
    assert_eq!(t.end_offset_for(Some(2)).expect("end"), 2 * len);
}

#[test]
fn the_epoch_history_answers_end_offsets_and_survives_truncation_and_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let m = message(&[b"id".to_vec(), b"body".to_vec()]);
    let len = m.len() as u64;
    {
        let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
        let t = store.topic_or_create("t").expect("t");
        assert_eq!(t.end_offset_for(None).expect("end"), 0);
        t.assign_epoch(0, 0).expect("epoch 0");
        t.append(&m).expect("append");
        t.append(&m).expect("append");
        t.assign_epoch(3, 2 * len).expect("epoch 3");
        t.assign_epoch(2, 2 * len).expect("older: ignored");
        t.append(&m).expect("append");
        assert_eq!(t.epochs().expect("epochs"), vec![(0, 0), (3, 2 * len)]);
        // Epoch 0 (and 1, 2, never seen here) ended where 3 began; 3 ends at the log end.
        assert_eq!(t.end_offset_for(Some(0)).expect("end"), 2 * len);
        assert_eq!(t.end_offset_for(Some(2)).expect("end"), 2 * len);
        assert_eq!(t.end_offset_for(Some(3)).expect("end"), 3 * len);
        assert_eq!(t.end_offset_for(None).expect("end"), 0);
        assert_eq!(t.last_epoch().expect("last"), Some(3));
    }
    {
        let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
        let t = store.topic_or_create("t").expect("t");
        assert_eq!(t.epochs().expect("epochs"), vec![(0, 0), (3, 2 * len)]);
        t.truncate_to(2 * len).expect("truncate");
        assert_eq!(
            t.epochs().expect("epochs"),
            vec![(0, 0)],
            "epoch 3 lost its data"
        );
    }
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert_eq!(t.epochs().expect("epochs"), vec![(0, 0)]);
    drop(t);
    drop(store);
    // A damaged history file is ignored, not fatal.
    fs::write(
        dir.path().join("t").join(zper_store::EPOCHS_FILE),
        "x y z\n",
    )
    .expect("write");
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert!(t.epochs().expect("epochs").is_empty());
}
