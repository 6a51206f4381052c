//! The reader on zper's own ZMTP engine (issue #17, `reader.engine = zmtp`): every case of
//! `reader.rs` (included below) with the same replies as the libzmq ROUTER, then what the
//! engine adds: FETCH ranges of the open segment sent from the file byte for byte, clients
//! that pipeline past their share held back by TCP instead of answered `[0xFF]`, and hostile
//! byte streams that close their own connection only.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use zper_node::config::ReaderEngine;
use zper_node::metrics::Counters;
use zper_wire::encode_record;

const READER_ENGINE: ReaderEngine = ReaderEngine::Zmtp;

include!("reader/cases.rs");

/// `count` messages `[id:4][body:100]` (mode 1, acked after their flush) in `topic`.
fn produce(n: &TestNode, topic: &str, count: u32) -> Vec<u8> {
    let s = n.writer_client(zmq::DEALER, topic, 1);
    let mut stored = Vec::new();
    for i in 0..count {
        let body = [i as u8; 100];
        s.send_multipart([&i.to_be_bytes()[..], &body[..]], 0)
            .expect("send");
        encode_record(&i.to_be_bytes(), true, &mut stored);
        encode_record(&body, false, &mut stored);
    }
    assert_eq!(n.wait_readable(topic, stored.len()).len(), stored.len());
    stored
}

#[test]
fn fetches_of_the_open_segment_sent_from_the_file_are_the_stored_bytes() {
    let n = start_node();
    let stored = produce(&n, "big", 3000); // 336 KB: one open segment
    let s = n.reader_dealer("big");
    // From 0, from a record in the middle, capped by max_bytes, and to the flushed end: each
    // at least 64 KiB (sent with sendfile) and each exactly the stored range.
    let mid = (stored.len() / 3000 * 1000) as i64; // the 1000th message
    for (offset, max) in [
        (0i64, 1i64 << 20),
        (mid, 100_000),
        (mid, 1 << 20),
        (0, 65_536),
    ] {
        let reply = ask(&s, &fetch_frames(offset, max));
        let from = offset as usize;
        let to = (from + max as usize).min(stored.len());
        assert_eq!(reply.len(), 2, "FETCH {offset} {max}");
        assert_eq!(reply[0], [100]);
        assert!(
            reply[1] == stored[from..to],
            "FETCH {offset} {max}: bytes differ"
        );
    }
    // A REQ client gets its envelope back before the status and the file's bytes.
    let req = client(&n.ctx, zmq::REQ, &identity("big", 0), &n.reader);
    let reply = ask(&req, &fetch_frames(0, 1 << 20));
    assert_eq!(reply.len(), 2);
    assert!(reply[1] == stored, "REQ FETCH: bytes differ");
    // A raw ZMTP/2.0 client (JeroMQ 0.3) too.
    let mut z = Zmtp2::connect(&n.reader, Zmtp2::DEALER, &identity("big", 0));
    let f = fetch_frames(mid, 1 << 20);
    let refs: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
    z.send(&refs);
    let reply = z.recv();
    assert_eq!(reply[0], [100]);
    assert!(
        reply[1] == stored[mid as usize..],
        "ZMTP/2.0 FETCH: bytes differ"
    );
    // Bytes sent from the file are counted.
    let t = n.node().counters().topic("big");
    assert!(Counters::get(&t.bytes_fetched) >= 4 * stored.len() as u64);
}

#[test]
fn a_client_pipelining_past_its_share_is_held_back_not_refused() {
    // The libzmq reader answers [0xFF] past 16 requests in progress per connection; the
    // engine stops reading the connection until replies go out, so every request is served.
    let n = start_node();
    let stored = produce(&n, "piped", 1000);
    let s = n.reader_dealer("piped");
    let f = fetch_frames(0, 1 << 20);
    for _ in 0..200 {
        s.send_multipart(&f, 0).expect("send");
    }
    for i in 0..200 {
        let reply = s.recv_multipart(0).expect("a reply");
        assert_eq!(reply[0], [100], "reply {i}");
        assert!(reply[1] == stored, "reply {i}: bytes differ");
    }
    assert_eq!(Counters::get(&n.node().counters().overloaded), 0);
    assert_eq!(Counters::get(&n.node().counters().replies_dropped), 0);
}

#[test]
fn a_client_that_never_reads_holds_back_only_itself() {
    // 400 FETCHes of 1.1 MB each (440 MB) that the client never reads: TCP holds them back
    // in the socket (nothing is copied into the node's memory for a file range), others are
    // served meanwhile, and nothing is dropped.
    let n = TestNode::start_with(|c| {
        c.reader_engine = ReaderEngine::Zmtp;
        c.max_message = 2 << 20;
    });
    let w = n.writer_client(zmq::DEALER, "wide", 1);
    for i in 0..11u8 {
        w.send_multipart([&[i][..], &vec![i; 100_000][..]], 0)
            .expect("send");
    }
    // Each message: a 1-byte id (3 stored bytes), a 100,000-byte body (9 + 100,000).
    let total = 11 * (3 + 9 + 100_000);
    assert_eq!(n.wait_readable("wide", total).len(), total);
    let greedy = n.reader_dealer("wide");
    greedy.set_rcvbuf(4096).expect("rcvbuf");
    greedy.set_rcvhwm(1).expect("hwm");
    greedy.set_sndtimeo(2000).expect("timeout");
    let f = fetch_frames(0, 2 << 20);
    let mut sent = 0;
    for _ in 0..400 {
        if greedy.send_multipart(&f, 0).is_err() {
            break; // libzmq's own send queue is full: the node no longer reads this client
        }
        sent += 1;
    }
    assert!(sent >= 20, "{sent}");
    let other = n.reader_dealer("wide");
    for _ in 0..3 {
        let reply = ask(&other, &fetch_frames(0, 2 << 20));
        assert_eq!(reply[0], [100]);
        assert_eq!(reply[1].len(), total);
    }
    assert_eq!(Counters::get(&n.node().counters().replies_dropped), 0);
    assert_eq!(Counters::get(&n.node().counters().overloaded), 0);
}

#[test]
fn hostile_streams_close_their_own_connection_only() {
    let n = start_node();
    let stored = produce(&n, "safe", 10);
    let addr = n.reader.trim_start_matches("tcp://").to_owned();
    let errors = || Counters::get(&n.node().counters().zmtp_protocol_errors);
    let before = errors();
    // Not a ZMTP greeting at all.
    let mut junk = TcpStream::connect(&addr).expect("connect");
    junk.write_all(b"GET / HTTP/1.1\r\n\r\n").expect("write");
    // A ZMTP/2.0 client declaring a frame of 2^63 bytes after its identity.
    let mut huge = TcpStream::connect(&addr).expect("connect");
    let id = identity("safe", 0);
    let mut hello = vec![0xff, 0, 0, 0, 0, 0, 0, 0, id.len() as u8 + 1, 0x7f, 0x01, 5];
    hello.extend_from_slice(&[0, id.len() as u8]);
    hello.extend_from_slice(&id);
    hello.push(0x02);
    hello.extend_from_slice(&(1u64 << 63).to_be_bytes());
    huge.write_all(&hello).expect("write");
    for mut s in [junk, huge] {
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut buf = [0u8; 4096];
        // The node answers what it can (its greeting) and then closes the connection.
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => panic!("the node did not close a hostile connection: {e}"),
            }
        }
    }
    assert!(errors() >= before + 2);
    // A request frame larger than any reader request gets [102] and the connection goes on.
    let s = n.reader_dealer("safe");
    let big = vec![b"FETCH".to_vec(), vec![0u8; 100_000]];
    assert_eq!(ask(&s, &big), vec![vec![0x66]]);
    // A REQ client gets it too: the reply carries its envelope.
    let req = client(&n.ctx, zmq::REQ, &identity("safe", 0), &n.reader);
    assert_eq!(ask(&req, &big), vec![vec![0x66]]);
    let reply = ask(&s, &fetch_frames(0, 1 << 20));
    assert!(reply[1] == stored);
}
