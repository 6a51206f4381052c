//! Store behaviour against spec `zper.md` §4.3, §4.4, §5.3, §5.4, §6 (as fixed by issue #2).

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::config;
use zper_store::{Store, StoreError};
use zper_wire::{encode_record, Timestamp};

/// The perf producer's message (spec §11.2): 109 bytes.
fn perf_message() -> Vec<u8> {
    let mut m = Vec::new();
    encode_record(&[0x00, 0x5e, 0x0e, 0x5d, 0x8f], true, &mut m);
    encode_record(&[b'x'; 100], false, &mut m);
    m
}

fn message(id: &[u8], body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    encode_record(id, true, &mut m);
    encode_record(body, false, &mut m);
    m
}

fn is_invalid(r: Result<impl std::fmt::Debug, StoreError>) -> bool {
    matches!(r, Err(StoreError::InvalidOffset { .. }))
}

#[test]
fn unflushed_bytes_are_invisible_until_flush_spec_4_3() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
    let t = store.topic_or_create("test").expect("topic");
    t.append(&perf_message()).expect("append");
    assert_eq!(t.written_end().expect("end"), 109);
    assert_eq!(t.flushed_end().expect("flushed"), 0);
    assert!(t.fetch(0, 1000, 1 << 20).expect("fetch").bytes.is_empty());
    assert!(is_invalid(t.fetch(109, 1000, 1 << 20)));
    assert_eq!(t.pending().expect("pending").0, 1);
    let out = t.flush().expect("flush");
    assert_eq!((out.flushed_end, out.messages), (109, 1));
    assert_eq!(
        t.fetch(0, 1000, 1 << 20).expect("fetch").bytes,
        perf_message()
    );
    assert_eq!(t.pending().expect("pending"), (0, None));
}

#[test]
fn fetch_returns_raw_range_cut_at_max_bytes_spec_5_3() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
    let t = store.topic_or_create("test").expect("topic");
    for _ in 0..3 {
        t.append(&perf_message()).expect("append");
    }
    t.flush().expect("flush");
    let f = t.fetch(0, 300, 1 << 20).expect("fetch");
    assert_eq!(f.bytes.len(), 300);
    assert_eq!(zper_wire::valid_bytes(&f.bytes), 225);
    // Frame-granular next offset (225) and message-granular (218) are both record boundaries.
    assert_eq!(t.fetch(225, 1000, 1 << 20).expect("fetch").bytes.len(), 102);
    assert_eq!(t.fetch(218, 1000, 1 << 20).expect("fetch").bytes.len(), 109);
    // At the flushed end: OK and empty; max_bytes 0: empty.
    assert!(t.fetch(327, 10, 1 << 20).expect("fetch").bytes.is_empty());
    assert!(t.fetch(0, 0, 1 << 20).expect("fetch").bytes.is_empty());
    // The cap bounds the reply.
    assert_eq!(t.fetch(0, 1000, 50).expect("fetch").bytes.len(), 50);
}

#[test]
fn offsets_off_record_boundaries_or_out_of_range_are_invalid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
    let t = store.topic_or_create("test").expect("topic");
    for i in 0..100u32 {
        t.append(&message(
            &i.to_be_bytes(),
            &vec![b'y'; (i as usize * 13) % 600],
        ))
        .expect("append");
    }
    t.flush().expect("flush");
    let end = t.flushed_end().expect("end");
    assert!(is_invalid(t.fetch(-1, 10, 100)));
    assert!(is_invalid(t.fetch(end as i64 + 1, 10, 100)));
    assert!(is_invalid(t.fetch(3, 10, 100)));
    assert!(is_invalid(t.fetch(1, 10, 100)));
    // Every record start is accepted, every other offset is not.
    let all = t.fetch(0, end, end).expect("fetch all").bytes;
    let mut starts = std::collections::BTreeSet::new();
    let mut pos = 0;
    while pos < all.len() {
        starts.insert(pos);
        pos += zper_wire::Record::decode(&all[pos..]).expect("record").1;
    }
    for off in (0..all.len()).step_by(7) {
        assert_eq!(
            t.fetch(off as i64, 1, 10).is_ok(),
            starts.contains(&off),
            "offset {off}"
        );
    }
}

#[test]
fn rotation_creates_next_segment_at_once_spec_4_4() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(config(dir.path(), 100)).expect("open");
    let t = store.topic_or_create("test").expect("topic");
    let mut msg = Vec::new();
    encode_record(&[b'z'; 120], false, &mut msg); // 122 bytes, as in the spec's example
    t.append(&msg).expect("append");
    let tdir = dir.path().join("test");
    assert_eq!(
        fs::metadata(tdir.join("00000000000000000000.dat"))
            .expect("seg0")
            .len(),
        122
    );
    assert!(
        tdir.join("00000000000000000122.dat").exists(),
        "no rotation gap"
    );
    assert_eq!(t.segment_starts().expect("starts"), vec![0, 122]);
    // The closed segment is durable and readable; the new one is readable (empty) at its start.
    assert_eq!(t.flushed_end().expect("flushed"), 122);
    assert!(t.fetch(122, 100, 1000).expect("fetch").bytes.is_empty());
    assert_eq!(
        t.offsets(Timestamp::Latest, None).expect("latest"),
        vec![122, 122]
    );
    // A range never crosses into the next segment.
    t.append(&msg).expect("append");
    t.flush().expect("flush");
    assert_eq!(t.fetch(0, 10_000, 1 << 20).expect("fetch").bytes.len(), 122);
    assert_eq!(t.fetch(0, 10_000, 1 << 20).expect("fetch").segment_end, 122);
}

#[test]
fn earliest_and_latest_spec_5_4() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(config(dir.path(), 200)).expect("open");
    let t = store.topic_or_create("test").expect("topic");
    assert_eq!(t.offsets(Timestamp::Earliest, None).expect("e"), vec![0]);
    assert_eq!(t.offsets(Timestamp::Latest, None).expect("l"), vec![0, 0]);
    for _ in 0..4 {
        t.append(&perf_message()).expect("append");
    }
    // Segments 0, 218, 436; rotation made everything before 436 durable.
    assert_eq!(
        t.offsets(Timestamp::Latest, Some(1)).expect("l"),
        vec![436, 436]
    );
    // Latest's second value is the flushed end, not the written end (issue #2).
    t.append(&perf_message()).expect("append");
    assert_eq!(
        t.offsets(Timestamp::Latest, None).expect("l"),
        vec![436, 436]
    );
    t.flush().expect("flush");
    assert_eq!(
        t.offsets(Timestamp::Latest, None).expect("l"),
        vec![436, 545]
    );
    assert_eq!(t.offsets(Timestamp::Earliest, None).expect("e"), vec![0]);
}

fn set_mtime(path: &Path, ms: i64) {
    let t = filetime::FileTime::from_unix_time(ms / 1000, ((ms % 1000) * 1_000_000) as u32);
    filetime::set_file_mtime(path, t).expect("set mtime");
}

#[test]
fn offset_by_time_returns_all_starts_and_end_spec_5_4() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(config(dir.path(), 100)).expect("open");
    let t = store.topic_or_create("test").expect("topic");
    for _ in 0..4 {
        t.append(&perf_message()).expect("append");
    }
    t.flush().expect("flush");
    let starts = t.segment_starts().expect("starts");
    assert_eq!(starts, vec![0, 109, 218, 327, 436]);
    let base = 1_700_000_000_000i64;
    for (i, s) in starts.iter().enumerate() {
        set_mtime(
            &dir.path()
                .join("test")
                .join(zper_store::segment::file_name(*s)),
            base + i as i64 * 1000,
        );
    }
    // Older than every segment: 101.
    assert!(is_invalid(t.offsets(Timestamp::At(base), None)));
    // After segments 0..=2: their starts, no end (the newest does not qualify).
    assert_eq!(
        t.offsets(Timestamp::At(base + 2500), None).expect("t"),
        vec![0, 109, 218]
    );
    // max_entries keeps the newest ones (the original crashed a worker here).
    assert_eq!(
        t.offsets(Timestamp::At(base + 2500), Some(1)).expect("t"),
        vec![218]
    );
    assert_eq!(
        t.offsets(Timestamp::At(base + 2500), Some(2)).expect("t"),
        vec![109, 218]
    );
    // Everything qualifies: all starts plus the flushed end.
    assert_eq!(
        t.offsets(Timestamp::At(base + 10_000), None).expect("t"),
        vec![0, 109, 218, 327, 436, 436]
    );
    assert_eq!(
        t.offsets(Timestamp::At(base + 10_000), Some(2)).expect("t"),
        vec![327, 436, 436]
    );
}

#[test]
fn retention_deletes_old_closed_segments_only_spec_4_4() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(config(dir.path(), 100)).expect("open");
    let t = store.topic_or_create("test").expect("topic");
    for _ in 0..3 {
        t.append(&perf_message()).expect("append");
    }
    t.flush().expect("flush");
    assert_eq!(t.segment_starts().expect("s"), vec![0, 109, 218, 327]);
    let now = SystemTime::now();
    let old = now - Duration::from_secs(7200);
    let old_ms = old.duration_since(UNIX_EPOCH).expect("epoch").as_millis() as i64;
    let tdir = dir.path().join("test");
    // Segments 0 and 218 are old, 109 is new: retention stops at 109. The active one is old too.
    for s in [0u64, 218, 327] {
        set_mtime(&tdir.join(zper_store::segment::file_name(s)), old_ms);
    }
    assert_eq!(store.apply_retention(now).expect("retention"), 1);
    assert_eq!(t.segment_starts().expect("s"), vec![109, 218, 327]);
    assert!(!tdir.join(zper_store::segment::file_name(0)).exists());
    assert!(is_invalid(t.fetch(0, 10, 100)));
    assert_eq!(t.offsets(Timestamp::Earliest, None).expect("e"), vec![109]);
    set_mtime(&tdir.join(zper_store::segment::file_name(109)), old_ms);
    assert_eq!(
        t.apply_retention(Duration::from_secs(3600), now)
            .expect("r"),
        vec![109, 218]
    );
    // Never the active segment, however old.
    assert_eq!(t.segment_starts().expect("s"), vec![327]);
}

#[test]
fn stream_fetch_returns_whole_message_payloads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
    let t = store.topic_or_create("test").expect("topic");
    t.append(&message(b"id1", b"hello1")).expect("append");
    t.append(&message(b"id2", &[b'h'; 300])).expect("append");
    t.flush().expect("flush");
    let (payloads, next) = t.stream(0, 1 << 20).expect("stream");
    assert_eq!(payloads.len(), 4);
    assert_eq!(payloads[0], b"id1");
    assert_eq!(payloads[3].len(), 300);
    assert_eq!(next, t.flushed_end().expect("end"));
    // A cap smaller than the first message still returns that message.
    let (p, next1) = t.stream(0, 3).expect("stream");
    assert_eq!((p.len(), next1), (2, 13));
    // A cap that cuts the second message returns only the first.
    let (p, _) = t.stream(0, 20).expect("stream");
    assert_eq!(p.len(), 2);
    assert!(is_invalid(t.stream(4, 100)));
}

#[test]
fn appends_must_be_whole_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
    let t = store.topic_or_create("test").expect("topic");
    let mut dangling = Vec::new();
    encode_record(b"id", true, &mut dangling);
    assert!(matches!(
        t.append(&dangling),
        Err(StoreError::MalformedAppend { .. })
    ));
    assert_eq!(t.written_end().expect("end"), 0);
    assert!(store.topic_or_create("bad-name").is_err());
}

#[test]
fn restart_keeps_flushed_messages_and_cuts_torn_tail_spec_6_4() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
        let t = store.topic_or_create("test").expect("topic");
        t.append(&message(b"id1", b"hello1")).expect("append");
        t.append(&message(b"id2", b"hello2")).expect("append");
        t.flush().expect("flush");
    }
    let seg = dir.path().join("test").join("00000000000000000000.dat");
    let mut bytes = fs::read(&seg).expect("read");
    let good = bytes.clone();
    // A dangling MORE frame plus a torn frame: the message never completed.
    encode_record(b"id3", true, &mut bytes);
    bytes.extend_from_slice(&[0x01, 0x05, 0xab]);
    fs::write(&seg, &bytes).expect("write");
    let store = Store::open(config(dir.path(), 1 << 20)).expect("reopen");
    let t = store.topic("test").expect("topic exists");
    assert_eq!(fs::read(&seg).expect("read"), good);
    assert_eq!(t.flushed_end().expect("end"), good.len() as u64);
    assert_eq!(t.fetch(0, 1000, 1000).expect("fetch").bytes, good);
    // New appends continue on a message boundary.
    t.append(&message(b"id4", b"x")).expect("append");
    t.flush().expect("flush");
    let all = t.fetch(0, 1000, 1000).expect("fetch").bytes;
    assert_eq!(zper_wire::whole_message_len(&all), all.len());
}

#[test]
fn invalid_flags_tail_is_cut_spec_6_4() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tdir = dir.path().join("probe");
    fs::create_dir_all(&tdir).expect("mkdir");
    let mut bytes = message(b"a", b"b");
    let good = bytes.len() as u64;
    bytes.extend_from_slice(&[0x05, 0x01, 0x7a]);
    fs::write(tdir.join("00000000000000000000.dat"), &bytes).expect("write");
    let store = Store::open(config(dir.path(), 1 << 20)).expect("open");
    assert_eq!(
        store.topic("probe").expect("t").flushed_end().expect("e"),
        good
    );
}

/// A data directory as the original ZPER leaves it (spec §6): several topics, several segments
/// each, records in decoder mode (a REQ delimiter stored, 255-byte frames short), a torn tail in
/// one newest segment, an unrelated file. zper opens it unchanged and serves every byte.
#[test]
fn opens_original_zper_data_directory_spec_6() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut expected = Vec::new();
    for (topic, count) in [("topic1", 7usize), ("probe", 3), ("test", 12)] {
        let tdir = dir.path().join(topic);
        fs::create_dir_all(&tdir).expect("mkdir");
        let mut log = Vec::new();
        let mut start = 0usize;
        let mut seg = Vec::new();
        for i in 0..count {
            let mut m = Vec::new();
            if i % 3 == 0 {
                encode_record(b"", true, &mut m); // REQ delimiter, stored in decoder mode
            }
            encode_record(format!("id{i}").as_bytes(), true, &mut m);
            encode_record(&vec![b'a' + (i % 26) as u8; 200 + i * 11], false, &mut m);
            seg.extend_from_slice(&m);
            log.extend_from_slice(&m);
            if seg.len() > 500 {
                fs::write(tdir.join(format!("{start:020}.dat")), &seg).expect("write");
                start += seg.len();
                seg.clear();
            }
        }
        let mut tail = seg.clone();
        if topic == "test" {
            tail.extend_from_slice(&[0x01, 0x05, 0xab]);
        }
        fs::write(tdir.join(format!("{start:020}.dat")), &tail).expect("write");
        fs::write(tdir.join("notes.txt"), b"ignored").expect("write");
        expected.push((topic, log));
    }
    let store = Store::open(config(dir.path(), 500)).expect("open");
    for (topic, log) in expected {
        let t = store.topic(topic).expect("topic");
        assert_eq!(t.flushed_end().expect("end"), log.len() as u64, "{topic}");
        let mut got = Vec::new();
        let mut off = 0u64;
        loop {
            let f = t.fetch(off as i64, 1 << 20, 1 << 20).expect("fetch");
            if f.bytes.is_empty() {
                if off == f.segment_end && off < log.len() as u64 {
                    unreachable!("empty fetch inside the log at {off}");
                }
                break;
            }
            off += f.bytes.len() as u64;
            got.extend_from_slice(&f.bytes);
        }
        assert_eq!(got, log, "{topic}");
    }
}

#[test]
fn boundary_checks_in_segments_found_on_disk_spec_5_3() {
    // An older segment written by the original (never appended by zper): its record index is
    // built on first use, so offsets inside it are checked like those of a live segment.
    let dir = tempfile::tempdir().expect("tempdir");
    let tdir = dir.path().join("old");
    fs::create_dir_all(&tdir).expect("mkdir");
    let mut seg0 = Vec::new();
    let mut starts = Vec::new();
    for i in 0..3000u32 {
        starts.push(seg0.len() as u64);
        seg0.extend_from_slice(&message(
            &i.to_be_bytes(),
            &vec![b'q'; (i as usize * 31) % 700],
        ));
    }
    fs::write(tdir.join("00000000000000000000.dat"), &seg0).expect("write");
    let next = seg0.len() as u64;
    fs::write(tdir.join(format!("{next:020}.dat")), message(b"n", b"m")).expect("write");
    let store = Store::open(config(dir.path(), 1 << 30)).expect("open");
    let t = store.topic("old").expect("topic");
    for &s in starts.iter().step_by(97) {
        let f = t
            .fetch(s as i64, 64, 1 << 20)
            .expect("message start is a boundary");
        assert_eq!(
            f.bytes[..],
            seg0[s as usize..(s as usize + 64).min(seg0.len())]
        );
        assert!(
            is_invalid(t.fetch(s as i64 + 1, 64, 1 << 20)),
            "inside a header"
        );
        // Inside the first record of the message, one byte past its header.
        assert!(is_invalid(t.fetch(s as i64 + 3, 64, 1 << 20)));
    }
    // The end of the older segment is the start of the next one.
    assert_eq!(
        t.fetch(next as i64, 100, 100).expect("next").bytes,
        message(b"n", b"m")
    );
}

#[test]
fn messages_come_whole_with_their_offsets_across_segments_issue_7() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 250-byte segments: a rotation after every second 109-byte message.
    let store = Store::open(config(dir.path(), 250)).expect("open");
    let t = store.topic_or_create("push").expect("topic");
    for i in 0..5u8 {
        t.append(&message(&[i], &[b'x'; 100])).expect("append");
        t.flush().expect("flush");
    }
    let mut at = 0;
    let mut seen = Vec::new();
    while at < t.visible_end().expect("end") {
        let (msgs, next) = t.messages(at, 10, 1 << 20).expect("messages");
        assert!(!msgs.is_empty(), "progress at {at}");
        assert_eq!(msgs[0].0, at, "first message starts at the asked offset");
        for (off, frames) in msgs {
            assert_eq!(frames.len(), 2, "id and body");
            assert_eq!(frames[1], vec![b'x'; 100]);
            seen.push((off, frames[0][0]));
        }
        at = next;
    }
    assert_eq!(
        seen.iter().map(|s| s.1).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
    // Offsets are where each message starts (ZPER offsets: bytes).
    let starts: Vec<u64> = seen.iter().map(|s| s.0).collect();
    assert_eq!(starts, [0, 105, 210, 315, 420]);
    // At most max_messages; an offset inside a record is invalid; past the end: nothing yet.
    let (two, next) = t.messages(0, 1, 1 << 20).expect("one");
    assert_eq!((two.len(), next), (1, 105));
    assert!(is_invalid(t.messages(4, 10, 1 << 20)));
    let end = t.visible_end().expect("end");
    assert_eq!(
        t.messages(end + 50, 10, 1 << 20).expect("ahead"),
        (vec![], end + 50)
    );
    // A cap smaller than one message still returns that message.
    let (one, _) = t.messages(0, 10, 5).expect("small cap");
    assert_eq!(one.len(), 1);
}

/// Issue #17: a FETCH range of the open segment is handed out as a file range (sent by
/// `sendfile`) holding exactly the bytes `fetch` reads; short ranges and closed segments (whose
/// bytes are checked against their checksums) are read into memory.
#[test]
fn fetch_range_names_the_same_bytes_as_fetch_and_reads_closed_segments() {
    use std::os::unix::fs::FileExt;
    use zper_store::FetchedRange;
    let dir = tempfile::tempdir().expect("tempdir");
    // 50 messages of 109 bytes per 5,450-byte segment: the first segment closes.
    let store = Store::open(config(dir.path(), 5_000)).expect("open");
    let t = store.topic_or_create("test").expect("topic");
    for _ in 0..80 {
        t.append(&perf_message()).expect("append");
        t.flush().expect("flush");
    }
    let second = t.offsets(Timestamp::Latest, None).expect("offsets");
    let open_start = *second.first().expect("segments");
    assert!(open_start > 0, "{second:?}");
    let bytes_of = |r: FetchedRange| match r {
        FetchedRange::Bytes(b) => (false, b),
        FetchedRange::File { file, at, len } => {
            let mut b = vec![0; len as usize];
            file.read_exact_at(&mut b, at).expect("read the range");
            (true, b)
        }
    };
    // The open segment, at and above min_file: a file range of the same bytes.
    let want = t
        .fetch(open_start as i64, 1000, 1 << 20)
        .expect("fetch")
        .bytes;
    assert_eq!(want.len(), 1000);
    let got = t.fetch_range(open_start as i64, 1000, 1 << 20, 1000);
    assert_eq!(bytes_of(got.expect("range")), (true, want.clone()));
    // Below min_file: in memory.
    let got = t.fetch_range(open_start as i64, 1000, 1 << 20, 1001);
    assert_eq!(bytes_of(got.expect("range")), (false, want));
    // A closed segment: in memory, checked.
    let want = t.fetch(109, 2000, 1 << 20).expect("fetch").bytes;
    let got = t.fetch_range(109, 2000, 1 << 20, 1);
    assert_eq!(bytes_of(got.expect("range")), (false, want));
    // The cap and the flushed end bound a file range as they bound fetch.
    let end = t.flushed_end().expect("end");
    let got = t
        .fetch_range(open_start as i64, 1 << 20, 300, 1)
        .expect("range");
    assert_eq!(bytes_of(got).1.len(), 300);
    let got = t
        .fetch_range(open_start as i64, 1 << 20, 1 << 20, 1)
        .expect("range");
    assert_eq!(bytes_of(got).1.len() as u64, end - open_start);
    // At the flushed end: empty; past it, or off a record boundary: 101 as fetch.
    let got = t.fetch_range(end as i64, 1000, 1 << 20, 1).expect("range");
    assert_eq!(bytes_of(got), (false, Vec::new()));
    assert!(is_invalid(t.fetch_range(
        end as i64 + 109,
        1000,
        1 << 20,
        1
    )));
    assert!(is_invalid(t.fetch_range(
        open_start as i64 + 1,
        1000,
        1 << 20,
        1
    )));
}
