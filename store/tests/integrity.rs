//! Checksums and recovery at the edges (issue #13): a flipped byte in durable bytes is damage,
//! never a torn tail and never served; a zero-filled tail is cut; ZPER's own data (no
//! sidecars) still opens.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;

use common::config;
use zper_store::{Store, StoreError};
use zper_wire::encode_record;

fn message(id: u32, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    encode_record(&id.to_be_bytes(), true, &mut m);
    encode_record(body, false, &mut m);
    m
}

fn flip(path: &std::path::Path, at: u64, mask: u8) {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).expect("read");
    b[0] ^= mask;
    f.write_all_at(&b, at).expect("write");
}

/// Issue #13, defect 3: a flipped flags byte in the middle of the active segment was taken for
/// a torn tail: recovery cut everything after it and the copy went on as if nothing happened
/// (as leader it then made healthy followers truncate). Now it is damage: the log is cut at
/// the damaged append and the copy is marked damaged, so it repairs from the others.
#[test]
fn a_flipped_byte_in_durable_bytes_is_damage_not_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tmp");
    let m = message(7, &[b'x'; 30]);
    let len = m.len() as u64;
    {
        let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
        let t = store.topic_or_create("t").expect("t");
        for _ in 0..20 {
            t.append(&m).expect("append");
            t.flush().expect("flush");
        }
        assert_eq!(t.damage().expect("damage"), None);
    }
    // The flags byte of message 10's second record.
    let seg = dir.path().join("t").join("00000000000000000000.dat");
    flip(&seg, 10 * len + 6, 0x04);
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    let damage = t.damage().expect("damage").expect("damaged");
    assert_eq!(damage.at, 10 * len, "cut at the damaged append");
    assert!(damage.cut);
    assert_eq!(t.written_end().expect("end"), 10 * len);
    assert_eq!(t.corruptions().expect("count"), 1);
    // What is left verifies; once repaired the copy takes appends again.
    t.repaired().expect("repair");
    assert_eq!(t.damage().expect("damage"), None);
    t.append(&m).expect("append");
    t.flush().expect("flush");
    drop(t);
    drop(store);
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert_eq!(t.damage().expect("damage"), None);
    assert_eq!(t.written_end().expect("end"), 11 * len);
}

/// Issue #13, defect 3: a flipped payload byte in a closed segment was served silently.
#[test]
fn a_flipped_byte_in_a_closed_segment_is_never_served_nor_replicated() {
    let dir = tempfile::tempdir().expect("tmp");
    let m = message(1, &[b'p'; 100]);
    let len = m.len() as u64;
    {
        let store = Store::open(config(dir.path(), 3 * len)).expect("open");
        let t = store.topic_or_create("t").expect("t");
        for _ in 0..12 {
            t.append(&m).expect("append");
        }
        t.flush().expect("flush");
        assert!(t.segment_starts().expect("starts").len() >= 3);
    }
    let first = dir.path().join("t").join("00000000000000000000.dat");
    flip(&first, len + 50, 0x01); // a payload byte of message 2
    let store = Store::open(config(dir.path(), 3 * len)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert!(matches!(
        t.fetch(0, 1 << 20, 1 << 20),
        Err(StoreError::Corrupt { start, .. }) if start <= len + 50
    ));
    assert!(matches!(
        t.raw_messages(len, 10, 1 << 20),
        Err(StoreError::Corrupt { .. })
    ));
    assert!(matches!(
        t.read_for_replica(0, 1 << 20),
        Err(StoreError::Corrupt { .. })
    ));
    let damage = t.damage().expect("damage").expect("noted");
    assert!(!damage.cut && damage.at <= len + 50, "{damage:?}");
    assert!(t.corruptions().expect("count") >= 3);
    // Intact segments are still served.
    let starts = t.segment_starts().expect("starts");
    let second = t.fetch(starts[1] as i64, 1 << 20, 1 << 20).expect("intact");
    assert!(!second.bytes.is_empty());
}

/// Issue #13, defect 7: a crash after the file was extended can leave zeros at the end of the
/// newest segment, which read back as thousands of empty messages (2048 from 4 KiB).
#[test]
fn a_zero_filled_tail_is_cut_at_recovery() {
    let dir = tempfile::tempdir().expect("tmp");
    let m = message(3, b"body");
    {
        let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
        let t = store.topic_or_create("t").expect("t");
        for _ in 0..5 {
            t.append(&m).expect("append");
        }
        t.flush().expect("flush");
    }
    let seg = dir.path().join("t").join("00000000000000000000.dat");
    let before = fs::metadata(&seg).expect("stat").len();
    let f = fs::OpenOptions::new()
        .append(true)
        .open(&seg)
        .expect("open");
    f.write_all_at(&[0u8; 4096], before).expect("zeros");
    drop(f);
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert_eq!(t.written_end().expect("end"), before, "the zeros are cut");
    assert_eq!(fs::metadata(&seg).expect("stat").len(), before);
    assert_eq!(t.damage().expect("damage"), None);
}

/// ZPER's own data directory (no sidecars) opens as before, and its newest segment gets a
/// sidecar covering what recovery kept; a trailing empty message there is kept (no checksum
/// says otherwise, and ZPER stored it).
#[test]
fn a_data_directory_without_sidecars_opens_as_zper_left_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let topic = dir.path().join("legacy");
    fs::create_dir_all(&topic).expect("mkdir");
    let mut bytes = Vec::new();
    for i in 0..4 {
        bytes.extend(message(i, b"zper"));
    }
    encode_record(b"", false, &mut bytes); // an empty message, as ZPER stores it
    fs::write(topic.join("00000000000000000000.dat"), &bytes).expect("write");
    let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
    let t = store.topic_or_create("legacy").expect("t");
    assert_eq!(t.written_end().expect("end"), bytes.len() as u64);
    assert_eq!(t.fetch(0, 1 << 20, 1 << 20).expect("fetch").bytes, bytes);
    assert!(topic.join("00000000000000000000.crc").exists());
    assert_eq!(t.damage().expect("damage"), None);
}
