//! Dolly's requests endpoint (issue #5) spoken with raw DEALER frames as an unchanged Dolly
//! client does (`dolly.md` §4, §8, §10).

mod common;

use common::*;

fn dealer(n: &TestNode) -> zmq::Socket {
    let endpoint = n.node().endpoints().dolly_requests.clone();
    client(&n.ctx, zmq::DEALER, &[], &endpoint)
}

fn call(s: &zmq::Socket, frames: &[&[u8]]) -> Vec<Vec<u8>> {
    s.send_multipart(frames, 0).expect("send");
    s.recv_multipart(0).expect("a reply within 5 s")
}

fn seq(frame: &[u8]) -> u64 {
    u64::from_le_bytes(frame.try_into().expect("8-byte sequence"))
}

#[test]
fn put_get_and_miss_answer_as_dolly_clients_expect() {
    let n = TestNode::start();
    let s = dealer(&n);
    // Put color=blue: the request echoed with the assigned sequence (§8).
    let put =
        |k: &[u8], v: &[u8]| eventually_reply(&s, &[b"Put", &0u64.to_le_bytes(), k, v], b"Put");
    let first = put(b"color", b"blue");
    assert_eq!(first[0], b"Put");
    assert_eq!(
        (first[2].as_slice(), first[3].as_slice()),
        (&b"color"[..], &b"blue"[..])
    );
    let s1 = seq(&first[1]);
    assert!(s1 >= 1);
    // An empty value is accepted; the sequence grows.
    let second = put(b"empty", b"");
    assert!(seq(&second[1]) > s1);
    assert_eq!(second[3], b"");
    // Get: the stored record, with the key's own sequence (§5.3).
    let got = call(&s, &[b"Get", &0u64.to_le_bytes(), b"color", b""]);
    assert_eq!(
        got,
        vec![
            b"Put".to_vec(),
            s1.to_le_bytes().to_vec(),
            b"color".to_vec(),
            b"blue".to_vec()
        ]
    );
    // Miss: Error with the node's sequence and "key not found".
    let miss = call(&s, &[b"Get", &0u64.to_le_bytes(), b"nokey", b""]);
    assert_eq!(miss[0], b"Error");
    assert_eq!(seq(&miss[1]), seq(&second[1]));
    assert_eq!(
        (miss[2].as_slice(), miss[3].as_slice()),
        (&b"nokey"[..], &b"key not found"[..])
    );
}

/// Sends a Put until it commits (the node registers itself just after it starts).
fn eventually_reply(s: &zmq::Socket, frames: &[&[u8]], method: &[u8]) -> Vec<Vec<u8>> {
    let mut last = Vec::new();
    for _ in 0..50 {
        last = call(s, frames);
        if last[0] == method {
            return last;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    last
}

#[test]
fn malformed_requests_get_an_error_and_the_endpoint_keeps_serving() {
    let n = TestNode::start();
    let s = dealer(&n);
    for (frames, why) in [
        (vec![&b"Get"[..], &[0u8; 8][..], b"k"], "three frames"),
        (
            vec![&b"Get"[..], &[1u8, 2, 3][..], b"k", b""],
            "short sequence",
        ),
        (
            vec![&b"Delete"[..], &[0u8; 8][..], b"k", b""],
            "unknown method",
        ),
        (
            vec![&b""[..], b"Get", &[0u8; 8][..], b"k", b""],
            "REQ envelope",
        ),
        (
            vec![&b"Snapshot"[..], &[0u8; 8][..], b"", b""],
            "snapshot on the requests port",
        ),
    ] {
        let reply = call(&s, &frames);
        assert_eq!(reply.len(), 4, "{why}: {reply:?}");
        assert_eq!(reply[0], b"Error", "{why}");
        assert_eq!(reply[1].len(), 8, "{why}");
        assert!(!reply[3].is_empty(), "{why}: a reason");
    }
    // Still serving.
    let ok = eventually_reply(&s, &[b"Put", &0u64.to_le_bytes(), b"after", b"bad"], b"Put");
    assert_eq!(ok[0], b"Put");
}
