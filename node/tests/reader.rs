//! Reader endpoint as a client sees it: exact reply frames (spec `zper.md` §5, §11.3), and one test
//! per request that silently disabled or crashed the original (§5.5), each proving both halves:
//! the bad request gets a status frame, and the next valid request on any connection is served.

mod common;

use common::*;
use zper_node::config::ReaderEngine;
use zper_node::metrics::Counters;
use zper_wire::encode_record;

const READER_ENGINE: ReaderEngine = ReaderEngine::Libzmq;

include!("reader/cases.rs");

#[test]
fn replies_a_client_never_reads_are_bounded_and_counted() {
    // A client pipelining FETCHes without reading replies: after the per-connection queue
    // (READER_REPLY_HWM replies) and the TCP buffers fill, replies are dropped, not buffered.
    let n = TestNode::start_with(|c| {
        c.max_message = 1 << 20;
        c.reader_engine = ReaderEngine::Libzmq;
    });
    let s = n.writer_client(zmq::DEALER, "big", 1);
    s.send_multipart([&b"id"[..], &vec![7u8; 1 << 20][..]], 0)
        .expect("send");
    assert_eq!(s.recv_bytes(0).expect("ack"), b"id");
    let greedy = n.reader_dealer("big");
    greedy.set_rcvhwm(1).expect("hwm");
    greedy.set_rcvbuf(4096).expect("rcvbuf");
    for _ in 0..300 {
        let f = fetch_frames(0, 1 << 30);
        greedy.send_multipart(&f, 0).expect("send");
    }
    assert!(eventually(|| Counters::get(
        &n.node().counters().replies_dropped
    ) >= 100));
    still_serves_topic(&n, "big");
}

fn still_serves_topic(n: &TestNode, topic: &str) {
    let s = n.reader_dealer(topic);
    let reply = ask(&s, &offset_frames(-2));
    assert_eq!(reply, vec![vec![0x64], vec![0u8; 8]]);
}
