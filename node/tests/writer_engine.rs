//! The writer on zper's own ZMTP engine (issue #17), as producers see it: libzmq 4 PUSH
//! producers (refused by a libzmq ROUTER), ZMTP/3 DEALERs with acks, and hostile byte streams
//! that close their own connection only.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use zper_node::config::WriterEngine;
use zper_node::metrics::Counters;
use zper_wire::encode_record;

fn stored(messages: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        encode_record(m, false, &mut out);
    }
    out
}

/// A node whose writer runs zper's engine (`writer.engine = zmtp`).
fn engine_node() -> TestNode {
    TestNode::start_with(|c| c.writer_engine = WriterEngine::Zmtp)
}

fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_libzmq4_push_producer_is_stored_over_zmtp3() {
    let n = engine_node();
    let push = n.writer_client(zmq::PUSH, "pushed", 0);
    for m in [&b"one"[..], b"two", b"three"] {
        push.send(m, 0).expect("send");
    }
    let expected = stored(&[b"one", b"two", b"three"]);
    assert_eq!(n.wait_readable("pushed", expected.len()), expected);
}

#[test]
fn a_libzmq4_push_producer_is_refused_by_the_libzmq_router() {
    // What #17 fixes: libzmq's ROUTER refuses a PUSH peer in the ZMTP/3 handshake, so the
    // message never arrives. Kept to show the difference the engine makes.
    let n = TestNode::start_with(|c| c.writer_engine = WriterEngine::Libzmq);
    let push = n.writer_client(zmq::PUSH, "pushed", 0);
    push.send(&b"lost"[..], 0).expect("send");
    std::thread::sleep(Duration::from_millis(500));
    assert!(n.read_all("pushed").is_empty());
    // The libzmq engine still serves DEALERs.
    let dealer = n.writer_client(zmq::DEALER, "dealt", 0);
    dealer.send(&b"kept"[..], 0).expect("send");
    assert_eq!(n.wait_readable("dealt", 6), stored(&[b"kept"]));
}

#[test]
fn a_libzmq4_dealer_in_mode_1_gets_its_ack_on_the_same_connection_spec_4_5() {
    let n = engine_node();
    let dealer = n.writer_client(zmq::DEALER, "acked", 1);
    dealer.set_rcvtimeo(5000).expect("timeout");
    dealer.send(&b"m1"[..], 0).expect("send");
    let ack = dealer.recv_multipart(0).expect("ack");
    assert_eq!(ack, vec![b"m1".to_vec()]);
}

#[test]
fn a_req_producer_in_mode_2_gets_an_ack_per_message_spec_4_5() {
    let n = engine_node();
    let req = n.writer_client(zmq::REQ, "req", 2);
    req.set_rcvtimeo(5000).expect("timeout");
    for id in [&b"a"[..], b"b"] {
        req.send(id, 0).expect("send");
        let reply = req.recv_multipart(0).expect("ack");
        assert_eq!(reply.last().map(Vec::as_slice), Some(id));
    }
    // The REQ envelope is not stored (§4.2).
    assert_eq!(n.wait_readable("req", 6), stored(&[b"a", b"b"]));
}

#[test]
fn a_zmtp3_peer_presents_its_identity_in_ready_and_its_frames_are_stored() {
    // A ZMTP/3-only peer (zero padding in its signature, as RFC 23 allows): the node answers
    // version 3, NULL, READY; the identity comes in the peer's READY.
    let n = engine_node();
    let mut s = TcpStream::connect(n.writer.trim_start_matches("tcp://")).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut hello = vec![0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 1];
    hello.extend_from_slice(b"NULL\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
    hello.extend_from_slice(&[0u8; 32]);
    let id = identity("three", 1);
    let mut ready = vec![5];
    ready.extend_from_slice(b"READY");
    for (name, value) in [(&b"Socket-Type"[..], &b"DEALER"[..]), (b"Identity", &id)] {
        ready.push(name.len() as u8);
        ready.extend_from_slice(name);
        ready.extend_from_slice(&(value.len() as u32).to_be_bytes());
        ready.extend_from_slice(value);
    }
    hello.extend_from_slice(&[0x04, ready.len() as u8]);
    hello.extend_from_slice(&ready);
    hello.extend_from_slice(&[0x00, 0x02, b'm', b'3']);
    s.write_all(&hello).expect("handshake and one message");
    // The node's greeting: signature, version 3, minor 1, NULL, then its READY command.
    let mut greeting = [0u8; 64];
    s.read_exact(&mut greeting).expect("greeting");
    assert_eq!(greeting[10], 3);
    assert_eq!(&greeting[12..16], b"NULL");
    let mut header = [0u8; 2];
    s.read_exact(&mut header).expect("READY header");
    assert_eq!(header[0], 0x04, "a command frame");
    let mut body = vec![0u8; usize::from(header[1])];
    s.read_exact(&mut body).expect("READY body");
    assert!(body.starts_with(b"\x05READY"), "{body:?}");
    // Mode 1: the ack is the message id, as a ZMTP/3 data frame.
    let mut ack = [0u8; 4];
    s.read_exact(&mut ack).expect("ack");
    assert_eq!(ack, [0x00, 0x02, b'm', b'3']);
    assert_eq!(n.wait_readable("three", 4), stored(&[b"m3"]));
}

/// Opens a raw TCP connection to the writer, sends `bytes`, and waits (bounded) until the node
/// closes it; returns what the node sent.
fn hostile(endpoint: &str, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(endpoint.trim_start_matches("tcp://")).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let _ = s.write_all(bytes);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(k) => got.extend_from_slice(&buf[..k]),
            // A reset (the node closed with our bytes unread) is a close too.
            Err(e)
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return got
            }
            Err(_) => break,
        }
    }
    panic!("the node kept a hostile connection open; it sent {got:?}");
}

#[test]
fn hostile_streams_close_their_own_connection_and_are_counted() {
    let n = engine_node();
    let mut good = Zmtp2::connect(&n.writer, Zmtp2::DEALER, &identity("good", 0));
    good.send(&[b"before"]);
    let signature = [0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f];
    let v2 = |socket_type: u8| {
        let mut g = signature.to_vec();
        g.extend_from_slice(&[0x01, socket_type, 0x00, 0x00]);
        g
    };
    let mut long_frame = v2(5);
    long_frame.push(0x06); // ZMTP/2.0: the COMMAND bit is reserved
    long_frame.extend_from_slice(&(1u64 << 63).to_be_bytes());
    let mut v3_curve = signature.to_vec();
    v3_curve.extend_from_slice(&[3, 1]);
    v3_curve.extend_from_slice(b"CURVE\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
    v3_curve.extend_from_slice(&[0u8; 32]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("ZMTP/1.0", vec![0x01, 0x00]),
        ("garbage", b"GET / HTTP/1.1\r\n\r\n".to_vec()),
        ("a PUB socket", v2(1)),
        ("a reserved flag and a 2^63 length", long_frame),
        ("an unsupported mechanism", v3_curve),
    ];
    for (what, bytes) in &cases {
        let got = hostile(&n.writer, bytes);
        assert!(
            got.is_empty() || got.starts_with(&signature),
            "{what}: the node sent {got:?}"
        );
    }
    let counters = n.node().counters();
    eventually("protocol errors counted", || {
        Counters::get(&counters.zmtp_protocol_errors) >= cases.len() as u64
    });
    // The well-behaved producer was served throughout.
    good.send(&[b"after"]);
    let expected = stored(&[b"before", b"after"]);
    assert_eq!(n.wait_readable("good", expected.len()), expected);
}

#[test]
fn an_oversized_frame_drops_its_message_and_the_connection_goes_on_spec_4_1() {
    let n = TestNode::start_with(|c| {
        c.writer_engine = WriterEngine::Zmtp;
        c.max_message = 1000;
    });
    let mut s = Zmtp2::connect(&n.writer, Zmtp2::DEALER, &identity("big", 0));
    s.send(&[&[1u8; 5000][..]]);
    s.send(&[b"small"]);
    assert_eq!(n.wait_readable("big", 7), stored(&[b"small"]));
    assert_eq!(Counters::get(&n.node().counters().oversized_frames), 1);
}

#[test]
fn a_connection_that_never_finishes_its_handshake_is_closed() {
    let n = engine_node();
    let mut s = TcpStream::connect(n.writer.trim_start_matches("tcp://")).expect("connect");
    s.write_all(&[0xff, 0, 0]).expect("partial greeting");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut got = Vec::new();
    let started = Instant::now();
    // The node sends its signature, then closes once the handshake timeout passes.
    let closed = match s.read_to_end(&mut got) {
        Ok(_) => true,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    };
    assert!(closed, "still open after {:?}", started.elapsed());
    assert_eq!(got.len(), 10, "{got:?}");
}

#[test]
fn a_pipelining_mode_2_producer_that_takes_no_acks_is_held_back_and_loses_none() {
    // Helper-15's attack: one producer pipelines tiny mode-2 messages and does not read its
    // acks. The node must hold it back (stop reading its connection: TCP backpressure) rather
    // than queue acks without bound or drop them; once it reads, every ack arrives, in order.
    let n = engine_node();
    let counters = n.node().counters();
    let mut p = Zmtp2::connect(&n.writer, Zmtp2::DEALER, &identity("flood", 2));
    p.stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut out = p.stream.try_clone().expect("clone");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let (stop2, sent2) = (stop.clone(), sent.clone());
    // Sends in chunks of 10,000 until told to stop (at most 8 M messages).
    let sender = std::thread::spawn(move || {
        let mut next = 0u32;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) && next < 8_000_000 {
            let mut chunk = Vec::with_capacity(60_000);
            for id in next..next + 10_000 {
                chunk.extend_from_slice(&[0x00, 4]);
                chunk.extend_from_slice(&id.to_be_bytes());
            }
            if out.write_all(&chunk).is_err() {
                break;
            }
            next += 10_000;
            sent2.store(next, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    while Counters::get(&counters.writer_held) == 0 {
        assert!(
            Instant::now() < deadline,
            "never held back; {} acks dropped so far",
            Counters::get(&counters.acks_dropped)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(Counters::get(&counters.acks_dropped), 0);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    // Now read: every message gets its ack, `[empty][id]`, in order.
    let mut acked = 0u32;
    loop {
        if sender.is_finished() && acked == sent.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let reply = p.recv();
        assert_eq!(reply, vec![Vec::new(), acked.to_be_bytes().to_vec()]);
        acked += 1;
    }
    sender.join().expect("sender");
    assert!(acked >= 10_000);
    assert_eq!(Counters::get(&counters.acks_dropped), 0);
    eventually("no connection held", || {
        Counters::get(&counters.writer_held) == 0
    });
}

#[test]
fn a_producer_that_half_closes_after_its_last_message_still_gets_every_ack() {
    // Helper-16: a producer that shuts its sending side down after its last message lost the
    // acks still due (the engine closed at end of stream) although its messages were stored.
    let n = engine_node();
    // Mode 2: one ack per message, in order, then the node closes.
    let mut p = Zmtp2::connect(&n.writer, Zmtp2::DEALER, &identity("halfclose", 2));
    let mut all = Vec::new();
    for id in 0..2000u32 {
        all.extend_from_slice(&[0x00, 4]);
        all.extend_from_slice(&id.to_be_bytes());
    }
    p.stream.write_all(&all).expect("messages");
    p.stream
        .shutdown(std::net::Shutdown::Write)
        .expect("half-close");
    for id in 0..2000u32 {
        assert_eq!(
            p.recv(),
            vec![Vec::new(), id.to_be_bytes().to_vec()],
            "ack {id}"
        );
    }
    let mut rest = Vec::new();
    p.stream.read_to_end(&mut rest).expect("closed by the node");
    assert!(rest.is_empty(), "{rest:?}");
    // Mode 1: the last ack names the last message. 3000 two-frame messages (~630 KB) fill
    // more than one batch, so the newest id is taken over from batch to batch; a wrong one
    // would leave the connection owing an ack until DRAIN_TIMEOUT (30 s), past this read's
    // 20 s timeout.
    let mut p = Zmtp2::connect(&n.writer, Zmtp2::DEALER, &identity("halfclose1", 1));
    p.stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let body = [b'x'; 200];
    for id in 0..3000u32 {
        p.send(&[&id.to_be_bytes(), &body]);
    }
    p.stream
        .shutdown(std::net::Shutdown::Write)
        .expect("half-close");
    let mut last = Vec::new();
    let mut rest = Vec::new();
    p.stream.read_to_end(&mut rest).expect("closed by the node");
    let mut at = 0;
    while at < rest.len() {
        let len = usize::from(rest[at + 1]);
        last = rest[at + 2..at + 2 + len].to_vec();
        at += 2 + len;
    }
    assert_eq!(last, 2999u32.to_be_bytes());
}
