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
/// (as leader it then made healthy followers truncate). Then (attack F2) it was cut at the
/// damaged append, which still erased the intact messages after it. Now the damaged append is
/// fenced: never served, the copy marked damaged (a replicated copy repairs from the others),
/// and every message after it kept and served.
#[test]
fn a_flipped_byte_in_durable_bytes_fences_its_append_and_keeps_the_rest() {
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
    assert_eq!(damage.at, 10 * len, "damaged from the damaged append");
    assert!(!damage.cut, "fenced, not cut");
    assert_eq!(t.written_end().expect("end"), 20 * len, "nothing cut");
    assert_eq!(t.corruptions().expect("count"), 1);
    assert_eq!(
        t.damaged_ranges().expect("ranges"),
        vec![(10 * len, 11 * len)]
    );
    // Reads stop before the damage, fail in it, and go on after it.
    assert_eq!(
        t.fetch(0, 1 << 20, 1 << 20).expect("head").bytes.len() as u64,
        10 * len
    );
    assert!(matches!(
        t.fetch((10 * len) as i64, 1 << 20, 1 << 20),
        Err(StoreError::Corrupt { start, end, .. }) if start == 10 * len && end == 11 * len
    ));
    assert_eq!(
        t.fetch((11 * len) as i64, 1 << 20, 1 << 20)
            .expect("tail")
            .bytes
            .len() as u64,
        9 * len
    );
    assert_eq!(
        t.raw_messages(0, 100, 1 << 20).expect("push").starts.len(),
        10
    );
    assert_eq!(
        t.raw_messages(11 * len, 100, 1 << 20)
            .expect("push")
            .starts
            .len(),
        9
    );
    assert!(matches!(
        t.read_for_replica(0, 1 << 20),
        Err(StoreError::Corrupt { .. })
    ));
    // The only copy goes on taking appends; the damage is found again after a restart.
    t.append(&m).expect("append");
    t.flush().expect("flush");
    assert_eq!(
        t.fetch((20 * len) as i64, 1 << 20, 1 << 20)
            .expect("new")
            .bytes,
        m
    );
    drop(t);
    drop(store);
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert_eq!(t.damage().expect("damage").map(|d| d.at), Some(10 * len));
    assert_eq!(t.written_end().expect("end"), 21 * len);
    // A replicated copy is cut back at the damage to fetch the rest again; what is left
    // verifies and takes appends.
    t.repaired().expect("repair");
    assert_eq!(t.damage().expect("damage"), None);
    assert_eq!(t.written_end().expect("end"), 10 * len);
    assert!(t.damaged_ranges().expect("ranges").is_empty());
    t.append(&m).expect("append");
    t.flush().expect("flush");
    drop(t);
    drop(store);
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert_eq!(t.damage().expect("damage"), None);
    assert_eq!(t.written_end().expect("end"), 11 * len);
}

/// Issue #13, attack F2: the only copy of a topic (one replica, or a single node) with one
/// flipped byte in its newest segment lost every acknowledged message after the byte at
/// recovery (700 of 800). A consumer that skips the fenced range now reads all 799 others.
#[test]
fn the_only_copy_keeps_every_intact_message_after_a_flipped_byte() {
    let dir = tempfile::tempdir().expect("tmp");
    let len = message(0, &[b'a'; 100]).len() as u64;
    {
        let store = Store::open(config(dir.path(), 1 << 30)).expect("open");
        let t = store.topic_or_create("t").expect("t");
        for id in 0..800 {
            t.append(&message(id, &[b'a'; 100])).expect("append");
            if id % 10 == 9 {
                t.flush().expect("flush"); // acknowledged in batches of 10
            }
        }
    }
    let seg = dir.path().join("t").join("00000000000000000000.dat");
    flip(&seg, 100 * len + 50, 0x20); // a payload byte of message 100
    let store = Store::open(config(dir.path(), 1 << 30)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    let mut ids = Vec::new();
    let mut offset = 0u64;
    let mut skipped = Vec::new();
    while offset < t.flushed_end().expect("end") {
        match t.fetch(offset as i64, 64 << 10, 1 << 20) {
            Ok(f) => {
                let mut it = zper_wire::Records::new(&f.bytes);
                let mut id = None;
                for rec in it.by_ref() {
                    if rec.more {
                        id = Some(u32::from_be_bytes(rec.payload.try_into().expect("id")));
                    } else {
                        ids.extend(id.take()); // a whole message
                    }
                }
                offset += it.message_bytes() as u64;
            }
            Err(StoreError::Corrupt { start, end, .. }) => {
                skipped.push((start, end));
                offset = end;
            }
            Err(e) => panic!("{e}"),
        }
    }
    // A checksum covers one append: here one message.
    assert_eq!(skipped, vec![(100 * len, 101 * len)]);
    assert_eq!(ids.len(), 799, "every intact message is kept");
    assert!(ids.iter().copied().eq((0..800).filter(|id| *id != 100)));
}

/// Issue #13, attack F3: deleting a segment's checksum sidecar turned its checks off
/// silently. A missing sidecar is now logged and reported, also when every sidecar is gone.
#[test]
fn a_missing_checksum_sidecar_is_reported_not_silently_unchecked() {
    let dir = tempfile::tempdir().expect("tmp");
    let m = message(1, &[b'p'; 100]);
    let len = m.len() as u64;
    let starts = {
        let store = Store::open(config(dir.path(), 3 * len)).expect("open");
        let t = store.topic_or_create("t").expect("t");
        for _ in 0..12 {
            t.append(&m).expect("append");
        }
        t.flush().expect("flush");
        t.segment_starts().expect("starts")
    };
    assert!(starts.len() >= 4);
    let topic = dir.path().join("t");
    let sidecar = |s: u64| topic.join(zper_store::checksum::file_name(s));
    fs::remove_file(sidecar(starts[1])).expect("rm");
    {
        let store = Store::open(config(dir.path(), 3 * len)).expect("reopen");
        let t = store.topic_or_create("t").expect("t");
        assert_eq!(t.unchecked_segments().expect("unchecked"), vec![starts[1]]);
    }
    for s in &starts {
        let _ = fs::remove_file(sidecar(*s));
    }
    let store = Store::open(config(dir.path(), 3 * len)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    let unchecked = t.unchecked_segments().expect("unchecked");
    assert!(
        unchecked.starts_with(&starts[..starts.len() - 1]),
        "every closed segment: {unchecked:?}"
    );
}

/// Twelve 2-frame messages in topic `t` under `dir`, three segments of `3 x len` or more
/// (closed but the last); returns the message and its stored length.
fn closed_segments(dir: &std::path::Path) -> (Vec<u8>, u64) {
    let m = message(1, &[b'p'; 100]);
    let len = m.len() as u64;
    let store = Store::open(config(dir, 3 * len)).expect("open");
    let t = store.topic_or_create("t").expect("t");
    for _ in 0..12 {
        t.append(&m).expect("append");
    }
    t.flush().expect("flush");
    assert!(t.segment_starts().expect("starts").len() >= 3);
    (m, len)
}

/// Issue #13, defect 3: a flipped payload byte in a closed segment was served silently.
#[test]
fn a_flipped_byte_in_a_closed_segment_is_never_served_nor_replicated() {
    let dir = tempfile::tempdir().expect("tmp");
    let (m, len) = closed_segments(dir.path());
    let first = dir.path().join("t").join("00000000000000000000.dat");
    flip(&first, len + 50, 0x01); // a payload byte of message 2
    let store = Store::open(config(dir.path(), 3 * len)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    // A read stops where the damage starts; one starting there fails.
    assert_eq!(t.fetch(0, 1 << 20, 1 << 20).expect("head").bytes, m);
    assert!(matches!(
        t.fetch(len as i64, 1 << 20, 1 << 20),
        Err(StoreError::Corrupt { start, .. }) if start == len
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
    assert!(!damage.cut && damage.at == len, "{damage:?}");
    assert!(t.corruptions().expect("count") >= 1);
    // The message after the damaged one, in the same segment, is served.
    assert_eq!(
        t.fetch((2 * len) as i64, 1 << 20, 1 << 20)
            .expect("after")
            .bytes,
        [m.clone(), m].concat()
    );
    // Intact segments are still served.
    let starts = t.segment_starts().expect("starts");
    let second = t.fetch(starts[1] as i64, 1 << 20, 1 << 20).expect("intact");
    assert!(!second.bytes.is_empty());
}

/// A closed segment's file cut short (a bad disk, a careless copy) was read as an I/O error:
/// every FETCH in the segment got `[0xFF]`, even before the cut, and nothing reported it. Now
/// the lost bytes are damage like a flipped byte: noted (health reports it, a replicated copy
/// repairs), never served, and the bytes before the cut are served.
#[test]
fn a_closed_segment_cut_short_is_damage_and_its_intact_bytes_are_served() {
    let dir = tempfile::tempdir().expect("tmp");
    let (m, len) = closed_segments(dir.path());
    let first = dir.path().join("t").join("00000000000000000000.dat");
    let f = fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .expect("open");
    f.set_len(2 * len + 10).expect("cut"); // inside message 3
    drop(f);
    // Read from the segment's start (no index built yet) ...
    let store = Store::open(config(dir.path(), 3 * len)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert_eq!(
        t.fetch(0, 1 << 20, 1 << 20).expect("before the cut").bytes,
        [m.clone(), m.clone()].concat()
    );
    assert!(matches!(
        t.fetch(2 * len as i64, 1 << 20, 1 << 20),
        Err(StoreError::Corrupt { start, .. }) if start == 2 * len
    ));
    let damage = t.damage().expect("damage").expect("noted");
    assert_eq!(damage.at, 2 * len, "{damage:?}");
    assert!(t.corruptions().expect("count") >= 1);
    let starts = t.segment_starts().expect("starts");
    assert!(!t
        .fetch(starts[1] as i64, 1 << 20, 1 << 20)
        .expect("the next segment")
        .bytes
        .is_empty());
    drop(t);
    drop(store);
    // ... and from inside it (the index is built first, as far as the file goes).
    let store = Store::open(config(dir.path(), 3 * len)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert_eq!(
        t.fetch(len as i64, 1 << 20, 1 << 20)
            .expect("message 2")
            .bytes,
        m
    );
    assert!(matches!(
        t.fetch(2 * len as i64, 1 << 20, 1 << 20),
        Err(StoreError::Corrupt { .. })
    ));
    assert_eq!(t.damaged_ranges().expect("ranges"), [(2 * len, 4 * len)]);
    assert_eq!(t.damage().expect("damage").map(|d| d.at), Some(2 * len));
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

/// Issue #13, attack F3 and F4: a damaged sidecar was rewritten from the data silently, and a
/// sidecar copied from another segment made recovery cut the only copy's intact messages (6
/// of 6). A damaged sidecar is now reported; a wrong one fences, it never cuts.
#[test]
fn a_damaged_or_foreign_sidecar_is_reported_and_cuts_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let m = message(5, &[b'q'; 60]);
    let len = m.len() as u64;
    {
        let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
        for (topic, n) in [("t", 20), ("u", 40)] {
            let t = store.topic_or_create(topic).expect("t");
            for _ in 0..n {
                t.append(&message(n, &[b'r'; 61])).expect("append");
                t.flush().expect("flush");
            }
        }
        let t = store.topic_or_create("t").expect("t");
        assert_eq!(t.written_end().expect("end"), 20 * (len + 1));
    }
    let sidecar = |topic: &str| {
        dir.path()
            .join(topic)
            .join(zper_store::checksum::file_name(0))
    };
    let mut bytes = fs::read(sidecar("t")).expect("read");
    bytes[8 + 16 * 5 + 2] ^= 0x40; // inside entry 6 of 20
    fs::write(sidecar("t"), &bytes).expect("write");
    {
        let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
        let t = store.topic_or_create("t").expect("t");
        assert_eq!(t.unchecked_segments().expect("unchecked"), vec![0]);
        assert_eq!(t.written_end().expect("end"), 20 * (len + 1), "nothing cut");
    }
    // Another topic's (longer, valid) sidecar over this one's.
    fs::copy(sidecar("u"), sidecar("t")).expect("copy");
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert_eq!(t.written_end().expect("end"), 20 * (len + 1), "nothing cut");
    let damage = t.damage().expect("damage").expect("reported as damage");
    assert!(!damage.cut);
}

/// Stop-41 attack: a closed segment whose sidecar was cut short (here to its 8-byte magic)
/// served the bytes no entry covers unchecked, and nothing reported it. Now the segment is
/// listed as unchecked, as a missing sidecar is above.
#[test]
fn a_sidecar_cut_short_is_reported_not_silently_unchecked() {
    damaged_sidecar_is_reported(
        |crc| {
            let f = fs::OpenOptions::new()
                .write(true)
                .open(crc)
                .expect("open sidecar");
            f.set_len(8).expect("cut the sidecar to its magic");
        },
        1,
    );
}

/// Stop-41 attack: the same with the sidecar's last entry damaged (its own check flipped).
#[test]
fn a_sidecar_with_a_damaged_last_entry_is_reported_not_silently_unchecked() {
    damaged_sidecar_is_reported(
        |crc| {
            let len = fs::metadata(crc).expect("stat").len();
            flip(crc, len - 3, 0x10);
        },
        3,
    ); // the segment's fourth and last message, the one the last entry covers
}

/// Damages the first (closed) segment's sidecar with `damage` and one payload byte of its
/// message `k` (from 0); that byte may be served only if the segment is reported as unchecked.
fn damaged_sidecar_is_reported(damage: impl Fn(&std::path::Path), k: u64) {
    let dir = tempfile::tempdir().expect("tmp");
    let (m, len) = closed_segments(dir.path());
    let topic = dir.path().join("t");
    damage(&topic.join(zper_store::checksum::file_name(0)));
    flip(&topic.join("00000000000000000000.dat"), k * len + 50, 0x01);
    let store = Store::open(config(dir.path(), 3 * len)).expect("reopen");
    let t = store.topic_or_create("t").expect("t");
    assert_eq!(
        t.segment_starts().expect("starts")[1],
        4 * len,
        "four messages"
    );
    let read = t.fetch(0, 1 << 20, 1 << 20);
    let served_damaged = read.as_ref().is_ok_and(|f| {
        let kth = ((k * len) as usize)..(((k + 1) * len) as usize);
        f.bytes.len() as u64 >= (k + 1) * len && f.bytes[kth] != m[..]
    });
    let reported = !t.unchecked_segments().expect("unchecked").is_empty()
        || t.corruptions().expect("count") > 0;
    assert!(
        !served_damaged || reported,
        "a damaged byte was served and nothing reports the segment as unchecked"
    );
}
