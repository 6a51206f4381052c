//! Writer endpoint as a client sees it: raw zmq DEALER/PUSH/REQ/SUB sockets against an in-process
//! node, exact frames (spec `zper.md` §4, §11) and exact bytes on disk (§6).

mod common;

use std::time::Duration;

use common::*;
use zper_node::metrics::Counters;
use zper_wire::encode_record;

fn stored(frames: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        encode_record(f, i + 1 < frames.len(), &mut out);
    }
    out
}

#[test]
fn zmtp_2_0_handshake_spec_11_1() {
    let n = TestNode::start();
    let id = [
        0x92, 0x00, 0x04, b't', b'e', b's', b't', 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
        0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
    ];
    let mut c = Zmtp2::connect(&n.writer, Zmtp2::DEALER, &id);
    // ff, 8-byte (identity length + 1 = 1), 7f, revision, ROUTER (6), then an empty identity
    // frame. libzmq announces revision 3 and then speaks ZMTP/2.0 to this peer; JeroMQ 0.3.x
    // clients accept any revision >= 1.
    let g = &c.server_greeting;
    assert_eq!(&g[..10], &[0xff, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x7f]);
    assert!(g[10] >= 0x01);
    assert_eq!(&g[11..], &[0x06, 0x00, 0x00]);
    c.send(&[b"id2", b"hello2"]);
    assert_eq!(n.wait_readable("test", 13).len(), 13);
}

#[test]
fn dealer_message_is_stored_as_zmtp_frames_spec_11_2() {
    let n = TestNode::start();
    let s = n.writer_client(zmq::DEALER, "test", 0);
    s.send_multipart([&b"id2"[..], b"hello2"], 0).expect("send");
    let data = n.wait_readable("test", 13);
    let expected = [
        0x01, 0x03, 0x69, 0x64, 0x32, 0x00, 0x06, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x32,
    ];
    assert_eq!(data, expected);
    assert_eq!(
        std::fs::read(n.segment("test", 0)).expect("segment"),
        expected
    );
}

#[test]
fn frame_lengths_use_short_form_up_to_255_spec_4_2() {
    let n = TestNode::start();
    // A PUSH producer speaking ZMTP/2.0 as JeroMQ 0.3.x does (libzmq 4 PUSH refuses a ROUTER).
    let mut s = Zmtp2::connect(&n.writer, Zmtp2::PUSH, &identity("test", 0));
    let crc = [0x00, 0x5e, 0x0e, 0x5d, 0x8f];
    s.send(&[&crc[..], &[b'x'; 100][..]]);
    s.send(&[&[7u8; 255][..]]);
    s.send(&[&[8u8; 300][..]]);
    let data = n.wait_readable("test", 109 + 257 + 309);
    assert_eq!(data.len(), 109 + 257 + 309);
    assert_eq!(
        &data[..9],
        &[0x01, 0x05, 0x00, 0x5e, 0x0e, 0x5d, 0x8f, 0x00, 0x64]
    );
    assert_eq!(&data[109..111], &[0x00, 0xff]);
    assert_eq!(&data[366..375], &[0x02, 0, 0, 0, 0, 0, 0, 0x01, 0x2c]);
}

#[test]
fn quiet_topic_tail_becomes_visible_by_timer_spec_4_3() {
    // flush_messages is far away; only the flush_interval timer can make the tail visible.
    let n = TestNode::start_with(|c| {
        c.store.flush.flush_messages = 1_000_000;
        c.store.flush.flush_interval = Duration::from_millis(100);
    });
    let s = n.writer_client(zmq::DEALER, "quiet", 0);
    for i in 0..5u8 {
        s.send_multipart([&[i][..], b"tail"], 0).expect("send");
    }
    let data = n.wait_readable("quiet", 5 * 9);
    assert_eq!(
        data.len(),
        5 * 9,
        "the tail must be flushed without new writes"
    );
}

#[test]
fn mode_1_dealer_gets_one_ack_per_flush_with_newest_message_id_spec_4_5() {
    let n = TestNode::start_with(|c| {
        c.store.flush.flush_interval = Duration::from_secs(3600);
        c.store.flush.flush_messages = 1_000_000;
    });
    let s = n.writer_client(zmq::DEALER, "acked", 1);
    for i in 0..50u32 {
        s.send_multipart([&i.to_be_bytes()[..], b"payload"], 0)
            .expect("send");
    }
    // Group commit: a waiting producer is flushed without waiting for flush_interval (1 h).
    let mut newest = None;
    while newest != Some(49u32) {
        let ack = s.recv_multipart(0).expect("ack within 5 s");
        assert_eq!(ack.len(), 1, "mode 1 ack is a single frame");
        let id = u32::from_be_bytes(ack[0].as_slice().try_into().expect("4-byte id"));
        assert!(newest.is_none_or(|n| id > n), "acks move forward");
        newest = Some(id);
    }
    // Everything acknowledged is durable: readable now, without waiting.
    assert_eq!(n.read_all("acked").len(), 50 * (6 + 9));
}

#[test]
fn mode_2_req_gets_one_reply_per_message_and_delimiter_is_not_stored_spec_4_5() {
    let n = TestNode::start_with(|c| {
        c.store.flush.flush_interval = Duration::from_secs(3600);
    });
    let s = n.writer_client(zmq::REQ, "reqs", 2);
    for i in 0..5u8 {
        let id = [b'm', i];
        let reply = request(&s, &[&id, b"body"]);
        // REQ strips the empty delimiter the server sends: [empty][message id].
        assert_eq!(reply, vec![id.to_vec()]);
        // Durable when acknowledged: readable at once.
        assert_eq!(n.read_all("reqs").len(), (i as usize + 1) * 10);
    }
    let data = std::fs::read(n.segment("reqs", 0)).expect("segment");
    assert_eq!(&data[..10], stored(&[b"m\x00", b"body"]).as_slice());
}

#[test]
fn mode_2_dealer_reply_carries_the_delimiter() {
    let n = TestNode::start();
    let s = n.writer_client(zmq::DEALER, "reqs", 2);
    let reply = request(&s, &[b"id-1", b"body"]);
    assert_eq!(reply, vec![Vec::new(), b"id-1".to_vec()]);
}

#[test]
fn ack_pub_publishes_topic_last_id_and_end_offset_after_flush_spec_9() {
    let n = TestNode::start();
    let sub = client(&n.ctx, zmq::SUB, &[], &n.ack);
    sub.set_subscribe(b"pubbed").expect("subscribe");
    let s = n.writer_client(zmq::DEALER, "pubbed", 1);
    // A subscription takes a moment to reach the PUB: write acknowledged warm-up messages until
    // one flush notice arrives (bounded), then check the notice of a known last message.
    let mut end = 0u64;
    let mut subscribed = false;
    for i in 0..50u8 {
        s.send_multipart([&b"warm"[..], &[i][..]], 0).expect("send");
        assert_eq!(s.recv_bytes(0).expect("ack"), b"warm");
        end += 6 + 3;
        if sub.poll(zmq::POLLIN, 100).expect("poll") > 0 {
            subscribed = true;
            break;
        }
    }
    assert!(subscribed, "no flush notice after 50 acknowledged messages");
    while sub.poll(zmq::POLLIN, 200).expect("poll") > 0 {
        let _ = sub.recv_multipart(0).expect("drain");
    }
    s.send_multipart([&b"first"[..], b"x"], 0).expect("send");
    s.send_multipart([&b"last"[..], b"y"], 0).expect("send");
    end += 10 + 9;
    let mut last = Vec::new();
    while last.get(2) != Some(&end.to_be_bytes().to_vec()) {
        last = sub.recv_multipart(0).expect("flush notice within 5 s");
        assert_eq!(last.len(), 3);
        assert_eq!(last[0], b"pubbed");
    }
    assert_eq!(last[1], b"last", "the id of the last message flushed");
}

#[test]
fn messages_of_one_producer_keep_their_order_across_topics() {
    let n = TestNode::start();
    let topics = ["a1", "b2", "c3", "d4"];
    let sockets: Vec<_> = topics
        .iter()
        .map(|t| n.writer_client(zmq::DEALER, t, 0))
        .collect();
    for i in 0..200u32 {
        for s in &sockets {
            s.send_multipart([&i.to_be_bytes()[..]], 0).expect("send");
        }
    }
    for t in topics {
        let data = n.wait_readable(t, 200 * 6);
        let ids: Vec<u32> = zper_wire::Records::new(&data)
            .map(|r| u32::from_be_bytes(r.payload.try_into().expect("4 bytes")))
            .collect();
        assert_eq!(ids, (0..200).collect::<Vec<_>>(), "topic {t}");
    }
}

#[test]
fn invalid_identity_is_dropped_and_counted_and_writer_keeps_serving_spec_3() {
    let n = TestNode::start();
    for bad in [
        vec![0x00, 0x00, 0x00], // empty topic (stored in base_dir by the original)
        vec![0x00, 0x00, 0x85, b'a', b'b'], // negative tlen (killed a worker)
        vec![0x00, 0x00, 0x03, b'a', b'-', b'c'], // not alphanumeric
        vec![0x00, 0x00, 0x09, b'a'], // truncated
    ] {
        let s = client(&n.ctx, zmq::DEALER, &bad, &n.writer);
        // The following frames parse as a valid identity: the original then wrote garbage.
        let follow = identity("victim", 0);
        s.send_multipart([&follow[..], b"x"], 0).expect("send");
    }
    let good = n.writer_client(zmq::DEALER, "good", 0);
    good.send_multipart([&b"ok"[..]], 0).expect("send");
    assert_eq!(n.wait_readable("good", 4), stored(&[b"ok"]));
    assert!(eventually(|| Counters::get(
        &n.node().counters().invalid_identity
    ) == 4));
    assert!(!n.dir.path().join("victim").exists());
    assert!(n
        .dir
        .path()
        .read_dir()
        .expect("dir")
        .map(|e| e.expect("entry"))
        .filter(|e| e.file_name() != zper_store::LOCK_FILE) // the data-directory lock
        .all(|e| e.path().is_dir()));
}

#[test]
fn frame_over_max_message_is_dropped_and_counted_spec_4_2() {
    let n = TestNode::start_with(|c| c.max_message = 1000);
    let s = n.writer_client(zmq::DEALER, "big", 0);
    s.send_multipart([&b"id"[..], &[1u8; 1001][..]], 0)
        .expect("send");
    s.send_multipart([&b"id2"[..], &[2u8; 1000][..]], 0)
        .expect("send");
    let data = n.wait_readable("big", 5 + 1009);
    let expected = stored(&[b"id2", &[2u8; 1000]]);
    assert_eq!(data.len(), expected.len());
    assert!(data == expected, "only the second message is stored");
    assert!(eventually(|| Counters::get(
        &n.node().counters().oversized_frames
    ) == 1));
}

#[test]
fn undeliverable_acks_are_dropped_and_writer_keeps_storing_spec_4_5() {
    let n = TestNode::start();
    // A client that disconnects before its ack, and a PUSH (which cannot read) in ack mode.
    {
        let gone = n.writer_client(zmq::DEALER, "acks", 1);
        gone.send_multipart([&b"gone"[..]], 0).expect("send");
    }
    let mut push = Zmtp2::connect(&n.writer, Zmtp2::PUSH, &identity("acks", 1));
    for i in 0..100u32 {
        push.send(&[&i.to_be_bytes()[..]]);
    }
    assert_eq!(n.wait_readable("acks", 6 + 100 * 6).len(), 6 + 100 * 6);
    drop(push);
    // The writer still stores and acks for everyone else.
    let s = n.writer_client(zmq::DEALER, "acks", 1);
    s.send_multipart([&b"after"[..]], 0).expect("send");
    assert_eq!(s.recv_multipart(0).expect("ack"), vec![b"after".to_vec()]);
    assert_eq!(n.read_all("acks").len(), 6 + 100 * 6 + 7);
    // Every ack was either delivered or dropped and counted (whether a given one is dropped
    // depends on when the peer's disconnect is seen; `endpoint::tests` pins the drop itself).
    let c = n.node().counters();
    assert!(Counters::get(&c.acks_sent) + Counters::get(&c.acks_dropped) >= 2);
}

#[test]
fn shutdown_flushes_everything() {
    let mut n = TestNode::start_with(|c| {
        c.store.flush.flush_interval = Duration::from_secs(3600);
        c.store.flush.flush_messages = 1_000_000;
    });
    let s = n.writer_client(zmq::DEALER, "last", 0);
    for i in 0..1000u32 {
        s.send_multipart([&i.to_be_bytes()[..]], 0).expect("send");
    }
    // Everything queued in the node is appended: wait until it is written (not yet flushed).
    let store = n.node().store().clone();
    assert!(eventually(|| store
        .topic("last")
        .is_some_and(|t| t.written_end().unwrap_or(0) == 6000)));
    assert_eq!(store.topic("last").expect("t").flushed_end().expect("f"), 0);
    n.node
        .take()
        .expect("node")
        .shutdown()
        .expect("clean shutdown");
    assert_eq!(
        store.topic("last").expect("t").flushed_end().expect("f"),
        6000
    );
}

#[test]
fn empty_messages_are_dropped_when_not_allowed_so_recovery_never_cuts_acked_data_spec_6_3() {
    let n = TestNode::start_with(|c| c.store.allow_empty_message = false);
    let s = n.writer_client(zmq::DEALER, "noempty", 1);
    s.send_multipart([&b"1"[..], b"before"], 0).expect("send");
    s.send_multipart([&b"2"[..], b""], 0).expect("send");
    s.send_multipart([&b"3"[..], b"after"], 0).expect("send");
    let mut last = Vec::new();
    while last != b"3" {
        last = s.recv_bytes(0).expect("ack");
        assert_ne!(last, b"2", "the dropped message is never acknowledged");
    }
    assert_eq!(
        n.read_all("noempty"),
        [stored(&[b"1", b"before"]), stored(&[b"3", b"after"])].concat()
    );
    assert_eq!(Counters::get(&n.node().counters().empty_messages), 1);
    // A restart (recovery with allow_empty_message = false) keeps both.
    let dir = n.dir.path().to_owned();
    let mut n = n;
    n.node
        .take()
        .expect("running")
        .shutdown()
        .expect("clean shutdown");
    let mut config = test_config(&dir);
    config.store.allow_empty_message = false;
    let store = zper_store::Store::open(config.store).expect("reopen");
    assert_eq!(
        store.topic("noempty").expect("t").flushed_end().expect("e"),
        21
    );
}

#[test]
fn retention_runs_on_a_timer_and_keeps_the_active_segment_spec_4_4() {
    let n = TestNode::start_with(|c| {
        c.store.segment_size = 100;
        c.store.retain = Duration::from_secs(3600);
        c.retention_check = Duration::from_millis(200);
    });
    let s = n.writer_client(zmq::DEALER, "old", 1);
    for i in 0..3u8 {
        s.send_multipart([&[i][..], &[b'z'; 100][..]], 0)
            .expect("send");
        assert_eq!(s.recv_bytes(0).expect("ack"), [i]);
    }
    let starts = n
        .node()
        .store()
        .topic("old")
        .expect("t")
        .segment_starts()
        .expect("s");
    assert_eq!(starts, vec![0, 105, 210, 315]);
    let two_hours_ago =
        filetime::FileTime::from_unix_time(filetime::FileTime::now().unix_seconds() - 7200, 0);
    for start in &starts {
        filetime::set_file_mtime(n.segment("old", *start), two_hours_ago).expect("mtime");
    }
    // No new writes: the retention timer alone deletes every closed segment.
    assert!(eventually(|| !n.segment("old", 210).exists()));
    assert!(!n.segment("old", 0).exists());
    assert!(
        n.segment("old", 315).exists(),
        "the active segment is never deleted"
    );
    let r = n.reader_dealer("old");
    assert_eq!(
        request(&r, &[b"FETCH", &0i64.to_be_bytes(), &10i64.to_be_bytes()]),
        vec![vec![0x65]]
    );
    assert_eq!(
        request(&r, &[b"OFFSET", &(-2i64).to_be_bytes()]),
        vec![vec![0x64], 315u64.to_be_bytes().to_vec()]
    );
}
