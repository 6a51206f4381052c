// The reader's cases, run against both engines: included by `reader.rs` (libzmq ROUTER) and
// `reader_engine.rs` (zper's own engine), each defining `READER_ENGINE`.

/// A node whose reader runs `READER_ENGINE`.
fn start_node() -> TestNode {
    TestNode::start_with(|c| c.reader_engine = READER_ENGINE)
}

fn perf_message() -> Vec<u8> {
    let mut m = Vec::new();
    encode_record(&[0x00, 0x5e, 0x0e, 0x5d, 0x8f], true, &mut m);
    encode_record(&[b'x'; 100], false, &mut m);
    m
}

/// A node with `count` perf messages (109 bytes each, §11.2) in topic `test`, all flushed.
fn node_with_perf_messages(count: usize) -> TestNode {
    let n = start_node();
    let s = n.writer_client(zmq::DEALER, "test", 1);
    for i in 0..count {
        s.send_multipart([&[0x00, 0x5e, 0x0e, 0x5d, 0x8f][..], &[b'x'; 100][..]], 0)
            .expect("send");
        let _ = i;
    }
    assert_eq!(n.wait_readable("test", 109 * count).len(), 109 * count);
    n
}

fn offset_frames(ts: i64) -> Vec<Vec<u8>> {
    vec![b"OFFSET".to_vec(), ts.to_be_bytes().to_vec()]
}

fn ask(s: &zmq::Socket, frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    request(s, &refs)
}

/// The "second half" of every bad-input test: a valid FETCH on a fresh connection is served.
fn still_serves(n: &TestNode) {
    let s = n.reader_dealer("test");
    let reply = ask(&s, &fetch_frames(0, 109));
    assert_eq!(reply, vec![vec![100], perf_message()]);
}

#[test]
fn fetch_300_bytes_spec_11_3() {
    let n = node_with_perf_messages(3);
    let s = n.reader_dealer("test");
    let reply = ask(&s, &fetch_frames(0, 300));
    assert_eq!(reply.len(), 2);
    assert_eq!(reply[0], [0x64]);
    assert_eq!(reply[1].len(), 300);
    let mut log = Vec::new();
    for _ in 0..3 {
        log.extend_from_slice(&perf_message());
    }
    assert_eq!(reply[1], log[..300]);
    assert_eq!(zper_wire::valid_bytes(&reply[1]), 225);
}

#[test]
fn offset_earliest_latest_and_statuses_spec_11_3() {
    let n = node_with_perf_messages(2);
    let s = n.reader_dealer("test");
    assert_eq!(ask(&s, &offset_frames(-2)), vec![vec![0x64], vec![0u8; 8]]);
    assert_eq!(
        ask(&s, &offset_frames(-1)),
        vec![vec![0x64], vec![0u8; 8], 218u64.to_be_bytes().to_vec()]
    );
    assert_eq!(ask(&s, &fetch_frames(219, 10)), vec![vec![0x65]]);
    assert_eq!(ask(&s, &fetch_frames(218, 10)), vec![vec![0x64], vec![]]);
    assert_eq!(ask(&s, &fetch_frames(0, 0)), vec![vec![0x64], vec![]]);
    assert_eq!(
        ask(&s, &[b"BOGUS".to_vec(), vec![0u8; 8]]),
        vec![vec![0x66]]
    );
}

#[test]
fn never_written_topic_reads_as_one_empty_segment_spec_5_4() {
    let n = start_node();
    let s = n.reader_dealer("fresh");
    assert_eq!(ask(&s, &offset_frames(-2)), vec![vec![0x64], vec![0u8; 8]]);
    assert_eq!(
        ask(&s, &offset_frames(-1)),
        vec![vec![0x64], vec![0u8; 8], vec![0u8; 8]]
    );
    assert_eq!(ask(&s, &fetch_frames(0, 100)), vec![vec![0x64], vec![]]);
    assert_eq!(ask(&s, &fetch_frames(5, 100)), vec![vec![0x65]]);
    assert!(!n.dir.path().join("fresh").exists(), "reads create nothing");
}

#[test]
fn fetch_off_a_record_boundary_is_invalid_offset_spec_5_3() {
    let n = node_with_perf_messages(2);
    let s = n.reader_dealer("test");
    assert_eq!(ask(&s, &fetch_frames(3, 20)), vec![vec![0x65]]);
    assert_eq!(ask(&s, &fetch_frames(-7, 20)), vec![vec![0x65]]);
    // Frame-granular (7) and message-granular (109) continuations are both boundaries.
    assert_eq!(ask(&s, &fetch_frames(7, 102))[1].len(), 102);
    assert_eq!(ask(&s, &fetch_frames(109, 109))[1], perf_message());
}

#[test]
fn offset_by_time_returns_intended_list_spec_5_4() {
    let n = node_with_perf_messages(2);
    let s = n.reader_dealer("test");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("epoch")
        .as_millis() as i64;
    // Every segment was modified before now + 1 min: all starts (one) plus the flushed end.
    assert_eq!(
        ask(&s, &offset_frames(now_ms + 60_000)),
        vec![vec![0x64], vec![0u8; 8], 218u64.to_be_bytes().to_vec()]
    );
    // max_entries 1 with a time lookup (crashed a worker in the original).
    let mut f = offset_frames(now_ms + 60_000);
    f.push(1i32.to_be_bytes().to_vec());
    assert_eq!(ask(&s, &f).len(), 3);
    // Older than every segment: 101.
    assert_eq!(ask(&s, &offset_frames(1000)), vec![vec![0x65]]);
    still_serves(&n);
}

#[test]
fn stream_fetch_is_answered_not_a_crash_spec_5_5() {
    let n = node_with_perf_messages(3);
    let s = n.reader_dealer("test");
    let reply = ask(&s, &fetch_frames(0, -1));
    // [100][payload per stored frame][next offset] for the whole messages from the offset:
    // the README's layout first (issue #17), the next offset last.
    assert_eq!(reply[0], [0x64]);
    assert_eq!(reply.len(), 1 + 6 + 1);
    assert_eq!(reply[1], [0x00, 0x5e, 0x0e, 0x5d, 0x8f]);
    assert_eq!(reply[2], [b'x'; 100]);
    assert_eq!(reply[7], 327u64.to_be_bytes());
    // Other negative max_bytes: 102.
    assert_eq!(ask(&s, &fetch_frames(0, -5)), vec![vec![0x66]]);
    still_serves(&n);
}

#[test]
fn req_envelope_is_echoed_spec_5_5() {
    let n = node_with_perf_messages(1);
    let s = n.client(zmq::REQ, "test", 0, &n.reader.clone());
    // REQ adds and strips the envelope: the reply arrives as [status][data].
    let reply = ask(&s, &fetch_frames(0, 109));
    assert_eq!(reply, vec![vec![100], perf_message()]);
    // A DEALER imitating REQ sees the envelope echoed.
    let d = n.reader_dealer("test");
    let mut f = vec![vec![]];
    f.extend(offset_frames(-2));
    assert_eq!(ask(&d, &f), vec![vec![], vec![0x64], vec![0u8; 8]]);
    still_serves(&n);
}

#[test]
fn short_and_missing_arguments_get_102_spec_5_5() {
    let n = node_with_perf_messages(1);
    let s = n.reader_dealer("test");
    for bad in [
        vec![b"FETCH".to_vec()],
        vec![b"OFFSET".to_vec()],
        vec![b"FETCH".to_vec(), vec![0u8; 8]],
        vec![b"FETCH".to_vec(), vec![0u8; 3], vec![0u8; 8]],
        vec![b"FETCH".to_vec(), vec![0u8; 8], vec![0u8; 7]],
        vec![b"OFFSET".to_vec(), vec![0u8; 2]],
        vec![b"OFFSET".to_vec(), vec![0xff; 8], vec![0u8; 3]],
        vec![
            b"OFFSET".to_vec(),
            vec![0xff; 8],
            vec![0u8; 4],
            vec![0u8; 4],
        ],
    ] {
        assert_eq!(ask(&s, &bad), vec![vec![0x66]], "{bad:?}");
    }
    assert!(Counters::get(&n.node().counters().bad_requests) >= 8);
    // Same connection, then another one.
    assert_eq!(
        ask(&s, &fetch_frames(0, 109)),
        vec![vec![100], perf_message()]
    );
    still_serves(&n);
}

#[test]
fn four_byte_timestamp_of_shipped_consumer_performance_spec_10_3() {
    let n = node_with_perf_messages(1);
    let s = n.reader_dealer("test");
    let req = vec![
        b"OFFSET".to_vec(),
        (-2i32).to_be_bytes().to_vec(),
        1i32.to_be_bytes().to_vec(),
    ];
    assert_eq!(ask(&s, &req), vec![vec![0x64], vec![0u8; 8]]);
    still_serves(&n);
}

#[test]
fn unknown_command_gets_102_spec_5_5() {
    let n = node_with_perf_messages(1);
    let s = n.reader_dealer("test");
    assert_eq!(ask(&s, &[b"MASTER".to_vec(), vec![1]]), vec![vec![0x66]]);
    assert_eq!(
        ask(&s, &[b"fetch".to_vec(), vec![0; 8], vec![0; 8]]),
        vec![vec![0x66]]
    );
    still_serves(&n);
}

#[test]
fn invalid_identity_gets_102_spec_5_5() {
    let n = node_with_perf_messages(1);
    for bad in [
        vec![1u8, 2],
        vec![0, 0, 0],
        vec![0, 0, 0x90, b'a'],
        vec![0, 0, 2, b'a', b'.'],
    ] {
        let s = client(&n.ctx, zmq::DEALER, &bad, &n.reader);
        assert_eq!(ask(&s, &fetch_frames(0, 10)), vec![vec![0x66]], "{bad:?}");
    }
    still_serves(&n);
}

#[test]
fn client_gone_before_its_reply_does_not_stop_the_reader_spec_5_5() {
    let n = node_with_perf_messages(1);
    for _ in 0..20 {
        let s = n.reader_dealer("test");
        s.set_linger(0).expect("linger");
        let f = fetch_frames(0, 1 << 20);
        s.send_multipart(&f, 0).expect("send");
        drop(s);
    }
    still_serves(&n);
}

#[test]
fn more_bad_requests_than_workers_do_not_silence_the_reader_spec_5_5() {
    // The original lost one worker per unanswered request; 5 of them silenced it.
    let n = node_with_perf_messages(1);
    let s = n.reader_dealer("test");
    for _ in 0..20 {
        assert_eq!(ask(&s, &[b"OFFSET".to_vec(), vec![1]]), vec![vec![0x66]]);
    }
    still_serves(&n);
}

#[test]
fn zmtp2_dealer_reads_back_spec_2() {
    let n = node_with_perf_messages(1);
    let mut c = Zmtp2::connect(&n.reader, Zmtp2::DEALER, &identity("test", 0));
    let f = fetch_frames(0, 109);
    let refs: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
    c.send(&refs);
    assert_eq!(c.recv(), vec![vec![100], perf_message()]);
}

#[test]
fn reconnecting_consumer_takes_its_identity_over() {
    let n = node_with_perf_messages(1);
    let id = identity("test", 0);
    let first = client(&n.ctx, zmq::DEALER, &id, &n.reader);
    assert_eq!(ask(&first, &offset_frames(-2))[0], [0x64]);
    // Same identity on a new connection while the old one is still open (a half-open drop).
    let second = client(&n.ctx, zmq::DEALER, &id, &n.reader);
    assert_eq!(
        ask(&second, &fetch_frames(0, 109)),
        vec![vec![100], perf_message()]
    );
    drop(first);
}

#[test]
fn offset_by_future_time_on_never_written_topic_matches_an_empty_one_spec_5_4() {
    let n = start_node();
    let s = n.reader_dealer("nothing");
    let future = i64::MAX / 2;
    assert_eq!(
        ask(&s, &offset_frames(future)),
        vec![vec![0x64], vec![0u8; 8], vec![0u8; 8]]
    );
    assert_eq!(ask(&s, &offset_frames(1000)), vec![vec![0x65]]);
}
