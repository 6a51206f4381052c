//! Idempotent producers (issue #18), as a client speaks them: mode byte 0x42 / 0x41, message
//! ids `[producer id:16][sequence:8]`. A retried message is stored once, with its first
//! outcome; a gap is refused with 106 and the expected sequence, so a mode-1 ack never covers
//! a message lost in flight; `PRODUCED` tells stored from not stored; across a leader kill and
//! a restart the same message retried 1000 times is stored once.

mod common;

use std::time::{Duration, Instant};

use common::*;
use zper_wire::Identity;

const PRODUCER: [u8; 16] = zper_wire::idempotent::producer_id([0xab; 16]);

fn id(seq: u64) -> Vec<u8> {
    let mut out = PRODUCER.to_vec();
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// An idempotent identity (mode byte `mode`) whose UUID is the producer id.
fn idempotent_identity(topic: &str, mode: u8) -> Vec<u8> {
    Identity::new(topic, mode, &PRODUCER)
        .expect("identity")
        .to_bytes()
}

/// Whole messages of a log whose first frame is `[PRODUCER][seq]`: their sequences in order.
fn sequences(log: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut first = true;
    for rec in zper_wire::Records::new(log) {
        if first && rec.payload.len() == 24 && rec.payload[..16] == PRODUCER {
            out.push(u64::from_be_bytes(
                rec.payload[16..].try_into().expect("test value"),
            ));
        }
        first = !rec.more;
    }
    out
}

fn produced(s: &zmq::Socket, seq: u64) -> Vec<Vec<u8>> {
    request(s, &[b"PRODUCED", &id(seq)])
}

#[test]
fn a_retried_message_is_stored_once_and_a_gap_is_refused_with_the_expected_sequence() {
    let n = TestNode::start();
    let ctx = zmq::Context::new();
    // Mode 2 over a DEALER (the REQ envelope written by hand), so it can send again at once.
    let w = client(
        &ctx,
        zmq::DEALER,
        &idempotent_identity("idem", 0x42),
        &n.writer,
    );
    for attempt in 0..1000 {
        let reply = request(&w, &[b"", &id(0), b"hello"]);
        assert_eq!(reply, [b"".to_vec(), id(0)], "attempt {attempt}: an ack");
    }
    assert_eq!(request(&w, &[b"", &id(1), b"world"]), [b"".to_vec(), id(1)]);
    // Sequence 3 without 2: refused, nothing stored, the next expected is 2.
    let reply = request(&w, &[b"", &id(3), b"late"]);
    assert_eq!(
        reply,
        [b"".to_vec(), id(3), vec![106], 2u64.to_be_bytes().to_vec()]
    );
    // An id that is not [producer:16][sequence:8]: 102.
    let reply = request(&w, &[b"", b"7", b"bad"]);
    assert_eq!(reply, [b"".to_vec(), b"7".to_vec(), vec![102]]);
    let log = n.wait_readable("idem", 1);
    assert_eq!(sequences(&log), [0, 1], "each once, the gap not stored");
    // PRODUCED, asked with the producer's identity (its UUID picks the fragment).
    let r = client(
        &ctx,
        zmq::DEALER,
        &idempotent_identity("idem", 0x42),
        &n.reader,
    );
    let first_len = (2 + 24 + 2 + 5) as u64;
    assert_eq!(
        produced(&r, 0),
        [
            vec![100],
            0u64.to_be_bytes().to_vec(),
            first_len.to_be_bytes().to_vec()
        ]
    );
    assert_eq!(produced(&r, 2), [vec![101]], "not stored");
    assert_eq!(request(&r, &[b"PRODUCED", b"short"]), [vec![102]]);
    let other = client(&ctx, zmq::DEALER, &identity("nothere", 0), &n.reader);
    assert_eq!(produced(&other, 0), [vec![101]], "a topic never written");
}

#[test]
fn a_mode_1_ack_never_covers_a_message_lost_in_flight() {
    let n = TestNode::start();
    let ctx = zmq::Context::new();
    let w = client(
        &ctx,
        zmq::DEALER,
        &idempotent_identity("lost", 0x41),
        &n.writer,
    );
    for seq in [0u64, 1] {
        w.send_multipart([&id(seq)[..], b"m"], 0).expect("send");
    }
    // Sequence 2 "dies in flight": 3 arrives next.
    w.send_multipart([&id(3)[..], b"m"], 0).expect("send");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut replies = Vec::new();
    while !replies.contains(&vec![id(3), vec![106], 2u64.to_be_bytes().to_vec()]) {
        assert!(Instant::now() < deadline, "{replies:?}");
        if let Ok(r) = w.recv_multipart(0) {
            replies.push(r);
        }
    }
    assert!(
        !replies.iter().any(|r| r == &vec![id(3)]),
        "no ack names 3: {replies:?}"
    );
    // Sent again from 2: both stored, in order, and the ack names 3.
    for seq in [2u64, 3] {
        w.send_multipart([&id(seq)[..], b"m"], 0).expect("send");
    }
    while !replies.iter().any(|r| r == &vec![id(3)]) {
        assert!(Instant::now() < deadline, "{replies:?}");
        if let Ok(r) = w.recv_multipart(0) {
            replies.push(r);
        }
    }
    assert_eq!(sequences(&n.wait_readable("lost", 1)), [0, 1, 2, 3]);
}

#[test]
fn the_same_message_retried_1000_times_across_a_leader_kill_and_a_restart_is_stored_once() {
    let mut c = TestCluster::start();
    let leader = c.create("retry", 3);
    let via = (1..=3).find(|n| *n != leader).expect("a follower");
    let ident = idempotent_identity("retry", 0x42);
    let writers: Vec<String> = c.nodes.iter().map(|n| n.writer.clone()).collect();
    let ctx = c.ctx.clone();
    // One message (sequence 0), sent 1000 times, each attempt to the next node in turn and
    // never waiting more than 300 ms for its reply; bounded in count and time.
    let retries = std::thread::spawn(move || {
        let mut acks = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        for attempt in 0..1000usize {
            if Instant::now() > deadline {
                break;
            }
            let s = ctx.socket(zmq::DEALER).expect("socket");
            s.set_identity(&ident).expect("identity");
            s.set_rcvtimeo(300).expect("timeout");
            s.set_sndtimeo(300).expect("timeout");
            s.set_linger(0).expect("linger");
            s.connect(&writers[attempt % 3]).expect("connect");
            if s.send_multipart([&b""[..], &id(0), b"once"], 0).is_ok()
                && s.recv_multipart(0)
                    .is_ok_and(|r| r == [b"".to_vec(), id(0)])
            {
                acks += 1;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        acks
    });
    assert!(
        eventually(|| sequences(&concat(&c.segments(leader, "retry"))) == [0]),
        "stored on the leader"
    );
    c.node(leader).kill9();
    let new = c.new_leader(via, "retry", leader);
    c.node(leader).restart();
    let acks = retries.join().expect("retries");
    assert!(acks > 100, "{acks} attempts acknowledged");
    assert!(
        eventually(|| (1..=3).all(|n| sequences(&concat(&c.segments(n, "retry"))) == [0])),
        "one copy on every node: {:?}",
        (1..=3)
            .map(|n| sequences(&concat(&c.segments(n, "retry"))))
            .collect::<Vec<_>>()
    );
    // The new leader answers PRODUCED for it.
    let r = client(
        &c.ctx,
        zmq::DEALER,
        &idempotent_identity("retry", 0x42),
        &c.nodes[new as usize - 1].reader,
    );
    assert_eq!(produced(&r, 0)[0], [100]);
    assert_eq!(produced(&r, 1), [vec![101]]);
}

#[test]
fn zper_produce_idempotent_stores_each_message_once_with_a_24_byte_id() {
    let n = TestNode::start();
    for (mode, words) in [("2", ["a", "b"]), ("1", ["c", "d"])] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_zper"))
            .args([
                "produce",
                "--idempotent",
                "-m",
                mode,
                "-t",
                "idemcli",
                "-w",
                &n.writer,
            ])
            .args(words)
            .output()
            .expect("run zper");
        assert!(o.status.success(), "{o:?}");
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_zper"))
        .args([
            "produce",
            "--idempotent",
            "-m",
            "0",
            "-t",
            "idemcli",
            "-w",
            &n.writer,
            "x",
        ])
        .output()
        .expect("run zper");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--mode 1 or --mode 2"));
    let log = n.wait_readable("idemcli", 4 * (26 + 3));
    let mut messages = Vec::new();
    let mut frames: Vec<Vec<u8>> = Vec::new();
    for rec in zper_wire::Records::new(&log) {
        frames.push(rec.payload.to_vec());
        if !rec.more {
            messages.push(std::mem::take(&mut frames));
        }
    }
    let bodies: Vec<&[u8]> = messages.iter().map(|m| m[1].as_slice()).collect();
    assert_eq!(bodies, [b"a", b"b", b"c", b"d"]);
    assert!(messages.iter().all(|m| m.len() == 2 && m[0].len() == 24));
    // Two runs, two producers, each from sequence 0.
    let seqs: Vec<u64> = messages
        .iter()
        .map(|m| u64::from_be_bytes(m[0][16..].try_into().expect("test value")))
        .collect();
    assert_eq!(seqs, [0, 1, 0, 1]);
}

#[test]
fn a_producer_the_leader_does_not_know_must_start_at_0() {
    // Its message 0 "died in flight" on a broken connection: message 1, arriving first,
    // must not be stored (a mode-1 ack for it would cover 0).
    let n = TestNode::start();
    let ctx = zmq::Context::new();
    let w = client(
        &ctx,
        zmq::DEALER,
        &idempotent_identity("fresh", 0x41),
        &n.writer,
    );
    w.send_multipart([&id(1)[..], b"m"], 0).expect("send");
    let reply = w.recv_multipart(0).expect("a refusal");
    assert_eq!(reply, [id(1), vec![106], 0u64.to_be_bytes().to_vec()]);
    for seq in [0u64, 1] {
        w.send_multipart([&id(seq)[..], b"m"], 0).expect("send");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "no ack for 1");
        if w.recv_multipart(0).is_ok_and(|r| r == [id(1)]) {
            break;
        }
    }
    assert_eq!(sequences(&n.wait_readable("fresh", 1)), [0, 1]);
}

/// The whole messages of a log, as frames.
fn messages(log: &[u8]) -> Vec<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut frames = Vec::new();
    for rec in zper_wire::Records::new(log) {
        frames.push(rec.payload.to_vec());
        if !rec.more {
            out.push(std::mem::take(&mut frames));
        }
    }
    out
}

#[test]
fn zper_clients_producer_is_idempotent_by_default_and_retries_on_the_next_writer() {
    use zper_client::{AckMode, Producer, ProducerOptions};
    let n = TestNode::start();
    let ctx = zmq::Context::new();
    // The first writer is down: the first attempt times out and the producer moves on.
    let dead = format!("tcp://127.0.0.1:{}", free_port());
    let writers = [dead, n.writer.clone()];
    for (topic, mode) in [("dflt2", AckMode::PerMessage), ("dflt1", AckMode::PerFlush)] {
        let opts = ProducerOptions::new(topic, mode).timeout(Duration::from_millis(300));
        let mut p = Producer::connect(&ctx, &writers, &opts).expect("producer");
        assert!(p.is_idempotent(), "{mode:?}");
        let ids: Vec<u64> = (0..5u8)
            .map(|i| p.send(&[&[i][..]]).expect("sent").sequence)
            .collect();
        assert_eq!(ids, [0, 1, 2, 3, 4]);
        p.flush().expect("every message acknowledged");
        let log = n.wait_readable(topic, 5 * (2 + 24 + 2 + 1));
        let stored = messages(&log);
        let bodies: Vec<Vec<u8>> = stored.iter().map(|m| m[1].clone()).collect();
        assert_eq!(bodies, (0..5u8).map(|i| vec![i]).collect::<Vec<_>>());
        assert!(stored.iter().all(|m| m.len() == 2 && m[0].len() == 24));
    }
    let plain = ProducerOptions::new("dflt0", AckMode::PerMessage).plain();
    let p = Producer::connect(&ctx, std::slice::from_ref(&n.writer), &plain).expect("producer");
    assert!(!p.is_idempotent());
}

#[test]
fn a_mode_1_producer_the_leader_forgot_goes_on_under_a_new_producer_id() {
    use zper_client::{AckMode, IdempotentOptions, IdempotentProducer};
    let n = TestNode::start();
    let ctx = zmq::Context::new();
    // A producer resuming at sequence 7 the node has no memory of (its earlier messages were
    // lost, or forgotten): 106 with expected 0, below anything it holds.
    let mut opts = IdempotentOptions::new("forgot", AckMode::PerFlush);
    opts.resume = Some(zper_client::MessageId {
        producer: zper_wire::idempotent::producer_id([0x5a; 16]),
        sequence: 7,
    });
    opts.timeout = Duration::from_millis(500);
    opts.deadline = Duration::from_secs(20);
    let mut p =
        IdempotentProducer::connect(&ctx, std::slice::from_ref(&n.writer), opts).expect("producer");
    for i in 0..3u8 {
        p.send(&[&[i][..]]).expect("queued");
    }
    p.flush().expect("acknowledged under a new producer id");
    assert_eq!(p.renumbered, 3);
    let next = p.next_id();
    assert_eq!(next.sequence, 3);
    let stored = messages(&n.wait_readable("forgot", 3 * (2 + 24 + 2 + 1)));
    let ids: Vec<Vec<u8>> = stored.iter().map(|m| m[0].clone()).collect();
    let expected: Vec<Vec<u8>> = (0..3u64)
        .map(|s| {
            zper_client::MessageId {
                producer: next.producer,
                sequence: s,
            }
            .to_bytes()
            .to_vec()
        })
        .collect();
    assert_eq!(ids, expected, "0, 1, 2 of the new producer id, each once");
}

#[test]
fn a_producer_resuming_where_a_renumbered_one_left_off_stores_every_message() {
    // The chaos suite's mode-2 producer reconnects every 20 messages with its identity and
    // where the last connection left off. When that one had gone on under a new producer id
    // (a gap it could not fill), resuming the identity's id at the new id's sequence sent
    // sequences the old id had used long ago: acknowledged as duplicates, never stored
    // (idempotent_lost 5 in restart_of_all_three_at_once).
    use zper_client::{AckMode, IdempotentOptions, IdempotentProducer, MessageId};
    let n = TestNode::start();
    let ctx = zmq::Context::new();
    let writers = std::slice::from_ref(&n.writer);
    let options = |resume: Option<MessageId>| {
        let mut o = IdempotentOptions::new("resume", AckMode::PerMessage);
        o.identity = Some(idempotent_identity("resume", 0x42));
        o.timeout = Duration::from_millis(500);
        o.deadline = Duration::from_secs(20);
        o.resume = resume;
        o
    };
    let mut p = IdempotentProducer::connect(&ctx, writers, options(None)).expect("producer");
    for i in 0..10u8 {
        p.send(&[&[b'a', i][..]]).expect("stored");
    }
    assert_eq!(p.next_id().producer, PRODUCER);
    // Sequence 20 leaves a gap after 9: 106, and it goes on as a new producer id from 0.
    let gap = MessageId {
        producer: PRODUCER,
        sequence: 20,
    };
    let mut p = IdempotentProducer::connect(&ctx, writers, options(Some(gap))).expect("producer");
    for i in 0..3u8 {
        p.send(&[&[b'b', i][..]]).expect("stored");
    }
    let left_off = p.next_id();
    assert_ne!(
        left_off.producer, PRODUCER,
        "went on under a new producer id"
    );
    assert_eq!(left_off.sequence, 3);
    let mut p =
        IdempotentProducer::connect(&ctx, writers, options(Some(left_off))).expect("producer");
    for i in 0..3u8 {
        p.send(&[&[b'c', i][..]]).expect("stored");
    }
    let stored = messages(&n.wait_readable("resume", 16 * (2 + 24 + 2 + 2)));
    let bodies: Vec<Vec<u8>> = stored.iter().map(|m| m[1].clone()).collect();
    let expected: Vec<Vec<u8>> = (0..10u8)
        .map(|i| vec![b'a', i])
        .chain((0..3u8).map(|i| vec![b'b', i]))
        .chain((0..3u8).map(|i| vec![b'c', i]))
        .collect();
    assert_eq!(bodies, expected, "every message stored once, in order");
}

/// After a restart the window is rebuilt from the log, where only message ids are stored. A
/// plain producer's 24-byte ids (zper-client's plain `Producer` makes `[UUID v4][counter]`)
/// must not count as idempotent producers there: before, 40 of them pushed a still-sending
/// idempotent producer out of a 16-producer window (forgotten in HashMap order, all found at
/// one instant), so its retry got 106 expected 0 and was stored again under a new producer
/// id; and a plain `[producer id][2^64-1]` made the rebuilt window's next sequence overflow.
#[test]
fn a_plain_producers_24_byte_ids_do_not_push_idempotent_producers_out_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut node = ChildNode::start(&dir.path().join("n"), "idempotence.max_producers = 16\n");
    let ctx = zmq::Context::new();
    let w = client(
        &ctx,
        zmq::DEALER,
        &idempotent_identity("mixed", 0x42),
        &node.writer,
    );
    for seq in 0..4 {
        assert_eq!(request(&w, &[b"", &id(seq), b"i"]), [b"".to_vec(), id(seq)]);
    }
    // A plain mode-2 producer on the same fragment (same UUID), its own 24-byte ids.
    let plain_identity = Identity::new("mixed", 2, &PRODUCER)
        .expect("identity")
        .to_bytes();
    let p = client(&ctx, zmq::DEALER, &plain_identity, &node.writer);
    let mut plain_ids: Vec<Vec<u8>> = (0..40u8)
        .map(|n| {
            let mut v4 = [n; 16];
            v4[6] = 0x40 | (n & 0x0f);
            v4[8] = 0x80;
            zper_wire::idempotent::message_id(&v4, 0).to_vec()
        })
        .collect();
    let other = zper_wire::idempotent::producer_id([0xcd; 16]);
    plain_ids.push(zper_wire::idempotent::message_id(&other, u64::MAX).to_vec());
    for pid in &plain_ids {
        assert_eq!(request(&p, &[b"", pid, b"p"]), [b"".to_vec(), pid.clone()]);
    }
    drop((w, p));
    node.kill9();
    node.restart();
    let w = client(
        &ctx,
        zmq::DEALER,
        &idempotent_identity("mixed", 0x42),
        &node.writer,
    );
    // The retry of 3 is known (a duplicate, acknowledged), 4 is the next.
    assert_eq!(request(&w, &[b"", &id(3), b"i"]), [b"".to_vec(), id(3)]);
    assert_eq!(request(&w, &[b"", &id(4), b"i"]), [b"".to_vec(), id(4)]);
    let log = concat(&segment_files(&dir.path().join("n").join("mixed")));
    assert_eq!(sequences(&log), [0, 1, 2, 3, 4], "each once");
    // PRODUCED knows a plain 24-byte id is not an idempotent producer's.
    let r = client(
        &ctx,
        zmq::DEALER,
        &idempotent_identity("mixed", 0x42),
        &node.reader,
    );
    assert_eq!(request(&r, &[b"PRODUCED", &plain_ids[0]]), [vec![102]]);
    assert_eq!(produced(&r, 4)[0], [100]);
}

/// Found by an attack on #18: with `idempotence.max_producers = 4`, producer A's 0 and 1 were
/// stored, five other producers pushed A out of the window, and A's retries of 0 and 1 were
/// stored a second time (with or without a restart): a producer the window did not know was
/// taken for a new one. A producer pushed out is now summed up (its next sequence and newest
/// end), so its retries are duplicates and it goes on at its next sequence.
#[test]
fn a_producer_pushed_out_of_the_window_by_others_is_not_stored_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut node = ChildNode::start(&dir.path().join("n"), "idempotence.max_producers = 4\n");
    let ctx = zmq::Context::new();
    let connect = |node: &ChildNode| {
        client(
            &ctx,
            zmq::DEALER,
            &idempotent_identity("evict", 0x42),
            &node.writer,
        )
    };
    let push_out = |node: &ChildNode, round: u8| {
        for n in 0..5u8 {
            let other = zper_wire::idempotent::producer_id([round * 16 + n + 1; 16]);
            let identity = Identity::new("evict", 0x42, &other)
                .expect("identity")
                .to_bytes();
            let s = client(&ctx, zmq::DEALER, &identity, &node.writer);
            let mid = zper_wire::idempotent::message_id(&other, 0).to_vec();
            assert_eq!(request(&s, &[b"", &mid, b"o"]), [b"".to_vec(), mid]);
        }
    };
    let w = connect(&node);
    for seq in 0..2 {
        assert_eq!(request(&w, &[b"", &id(seq), b"a"]), [b"".to_vec(), id(seq)]);
    }
    push_out(&node, 0);
    for seq in 0..2 {
        assert_eq!(
            request(&w, &[b"", &id(seq), b"a"]),
            [b"".to_vec(), id(seq)],
            "the retry of {seq} is acknowledged"
        );
    }
    let gap = request(&w, &[b"", &id(5), b"a"]);
    assert_eq!(
        gap,
        [b"".to_vec(), id(5), vec![106], 2u64.to_be_bytes().to_vec()]
    );
    assert_eq!(request(&w, &[b"", &id(2), b"a"]), [b"".to_vec(), id(2)]);
    drop(w);
    // After a restart the window is rebuilt from the log, and pushes A out again.
    push_out(&node, 1);
    node.kill9();
    node.restart();
    let w = connect(&node);
    for seq in 0..3 {
        assert_eq!(request(&w, &[b"", &id(seq), b"a"]), [b"".to_vec(), id(seq)]);
    }
    assert_eq!(request(&w, &[b"", &id(3), b"a"]), [b"".to_vec(), id(3)]);
    let log = concat(&segment_files(&dir.path().join("n").join("evict")));
    assert_eq!(sequences(&log), [0, 1, 2, 3], "each once");
}
