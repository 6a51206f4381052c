//! Dolly on one node (issue #5) spoken with raw DEALER, SUB and REQ frames as unchanged Dolly
//! clients and replicas do (`dolly.md` §4, §5, §8, §10), plus the HTTP `/v1/kv` view and the
//! `zper dolly` CLI over the same state.

mod common;

use common::*;

use std::process::Command;

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

fn frames(method: &[u8], seq: u64, key: &[u8], body: &[u8]) -> Vec<Vec<u8>> {
    vec![
        method.to_vec(),
        seq.to_le_bytes().to_vec(),
        key.to_vec(),
        body.to_vec(),
    ]
}

/// A SUB on the leader's updates endpoint that has seen a publication (the subscription is
/// live: ZeroMQ subscriptions start asynchronously), with everything so far drained.
fn live_subscriber(n: &TestNode, s: &zmq::Socket) -> zmq::Socket {
    let sub = client(&n.ctx, zmq::SUB, &[], &n.node().endpoints().dolly_updates);
    sub.set_subscribe(b"").expect("subscribe");
    sub.set_rcvtimeo(200).expect("rcvtimeo");
    let live = (0..100).any(|i| {
        let key = format!("warmup{i}");
        eventually_reply(s, &[b"Put", &[0; 8], key.as_bytes(), b"w"], b"Put");
        sub.recv_multipart(0).is_ok()
    });
    assert!(live, "the updates PUB publishes");
    while sub.recv_multipart(0).is_ok() {}
    sub.set_rcvtimeo(5000).expect("rcvtimeo");
    sub
}

/// Every worked example of `dolly.md` §8 against a running node, byte for byte. The sequence
/// values differ from the original's (they are Raft indexes, §10), so each is taken from the
/// Put reply and every other frame is compared exactly.
#[test]
fn spec_8_worked_examples_byte_for_byte() {
    let n = TestNode::start();
    let s = dealer(&n);
    let sub = live_subscriber(&n, &s);
    let warm: Vec<Vec<u8>> = {
        let snap = dealer_at(&n, &n.node().endpoints().dolly_snapshots);
        snapshot(&snap)
            .0
            .into_iter()
            .map(|r| r[2].clone())
            .collect()
    };

    // Put color=blue: raw request bytes as §8 shows them.
    let request = [
        vec![0x50, 0x75, 0x74],
        vec![0; 8],
        vec![0x63, 0x6f, 0x6c, 0x6f, 0x72],
        vec![0x62, 0x6c, 0x75, 0x65],
    ];
    let reply = call(&s, &request.iter().map(Vec::as_slice).collect::<Vec<_>>());
    let s1 = seq(&reply[1]);
    assert_eq!(reply, frames(b"Put", s1, b"color", b"blue"));
    // The publication is identical to the reply.
    assert_eq!(sub.recv_multipart(0).expect("publication"), reply);

    // Request sequence 99 and an empty value: ignored, next state, empty body frame.
    let empty = call(&s, &[b"Put", &99u64.to_le_bytes(), b"empty", b""]);
    let s2 = seq(&empty[1]);
    assert!(s2 > s1);
    assert_eq!(empty, frames(b"Put", s2, b"empty", b""));
    assert_eq!(sub.recv_multipart(0).expect("publication"), empty);

    // Get color after two writes: the key's own sequence, not the node's.
    let got = call(&s, &[b"Get", &[0; 8], b"color", b""]);
    assert_eq!(got, frames(b"Put", s1, b"color", b"blue"));

    // Missing key: Error, the node's current sequence, "key not found".
    let miss = call(&s, &[b"Get", &[0; 8], b"nokey", b""]);
    assert_eq!(miss, frames(b"Error", s2, b"nokey", b"key not found"));

    // Put x=1 "to a replica": here every node takes Puts (§10 allows forwarding); the one
    // leader-less answer this node could give is covered by the cluster test.

    // Snapshot exchange: every key in key order with its own sequence, then Terminate with
    // the newest sequence.
    let snap = dealer_at(&n, &n.node().endpoints().dolly_snapshots);
    let (records, terminate) = snapshot(&snap);
    assert_eq!(terminate, frames(b"Terminate", s2, b"", b""));
    let keys: Vec<&[u8]> = records.iter().map(|r| r[2].as_slice()).collect();
    let mut expected: Vec<&[u8]> = warm.iter().map(Vec::as_slice).collect();
    expected.extend([&b"color"[..], b"empty"]);
    expected.sort();
    assert_eq!(keys, expected);
    let color = records.iter().find(|r| r[2] == b"color").expect("color");
    assert_eq!(*color, frames(b"Put", s1, b"color", b"blue"));
    let e = records.iter().find(|r| r[2] == b"empty").expect("empty");
    assert_eq!(*e, frames(b"Put", s2, b"empty", b""));
}

fn dealer_at(n: &TestNode, endpoint: &str) -> zmq::Socket {
    client(&n.ctx, zmq::DEALER, &[], endpoint)
}

/// `[Snapshot, 0, "", ""]`, then the records up to Terminate.
fn snapshot(s: &zmq::Socket) -> (Vec<Vec<Vec<u8>>>, Vec<Vec<u8>>) {
    s.send_multipart(frames(b"Snapshot", 0, b"", b""), 0)
        .expect("send");
    let mut records = Vec::new();
    loop {
        let m = s.recv_multipart(0).expect("snapshot message within 5 s");
        if m[0] == b"Terminate" {
            return (records, m);
        }
        assert_eq!(m[0], b"Put", "{m:?}");
        records.push(m);
    }
}

#[test]
fn malformed_requests_get_an_error_and_the_endpoints_keep_serving() {
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
            vec![&b"Snapshot"[..], &[0u8; 8][..], b"", b""],
            "snapshot on the requests port",
        ),
        (vec![&b"Put"[..]], "one frame"),
    ] {
        let reply = call(&s, &frames);
        assert_eq!(reply.len(), 4, "{why}: {reply:?}");
        assert_eq!(reply[0], b"Error", "{why}");
        assert_eq!(reply[1].len(), 8, "{why}");
        assert!(!reply[3].is_empty(), "{why}: a reason");
    }
    // A REQ client (which the original panicked on) gets its Error through the envelope.
    let req = client(
        &n.ctx,
        zmq::REQ,
        &[],
        &n.node().endpoints().dolly_requests.clone(),
    );
    let reply = call(&req, &[b"Get", &[0; 8], b"k", b""]);
    assert_eq!(reply[0], b"Error");
    assert!(String::from_utf8_lossy(&reply[3]).contains("DEALER"));
    // Still serving.
    let ok = eventually_reply(&s, &[b"Put", &0u64.to_le_bytes(), b"after", b"bad"], b"Put");
    assert_eq!(ok[0], b"Put");

    // The snapshots port: a wrong method or shape is answered Error (the original leader
    // exited, §5.4 step 7), then a real snapshot is still served.
    let snap = dealer_at(&n, &n.node().endpoints().dolly_snapshots);
    assert!(eventually(|| {
        snap.send_multipart(frames(b"Get", 0, b"k", b""), 0).is_ok()
            && snap
                .recv_multipart(0)
                .is_ok_and(|r| r[0] == b"Error" && r[3].ends_with(b"is not a snapshot request"))
    }));
    let bad = call(&snap, &[b"Snapshot", &[0; 8], b""]);
    assert_eq!(bad[0], b"Error");
    let (records, end) = snapshot(&snap);
    assert!(records.iter().any(|r| r[2] == b"after" && r[3] == b"bad"));
    assert_eq!(end[0], b"Terminate");
}

#[test]
fn http_kv_reads_and_writes_the_same_map() {
    let n = TestNode::start();
    let s = dealer(&n);
    let http_addr = n.node().endpoints().http.clone();
    // Written over Dolly, read over HTTP (a binary value comes as hex).
    let put = eventually_reply(&s, &[b"Put", &[0; 8], b"bin", &[0xff, 0x00, 0x41]], b"Put");
    let v = get_json(&http_addr, "/v1/kv/bin");
    assert_eq!(v["sequence"], seq(&put[1]));
    assert_eq!(v["value_hex"], "ff0041");
    assert!(v.get("value").is_none());
    // Written over HTTP, read over Dolly.
    let (status, body) =
        http("PUT", &http_addr, "/v1/kv/color%20x", Some("blue sky")).expect("answer");
    assert_eq!(status, 200, "{body}");
    let written: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(written["key"], "color x");
    let sequence = written["sequence"].as_u64().expect("sequence");
    assert!(sequence > seq(&put[1]));
    assert_eq!(
        call(&s, &[b"Get", &[0; 8], b"color x", b""]),
        frames(b"Put", sequence, b"color x", b"blue sky")
    );
    let v = get_json(&http_addr, "/v1/kv/color%20x?consistent=true");
    assert_eq!(v["value"], "blue sky");
    assert_eq!(v["sequence"], sequence);
    // A miss is a JSON 404.
    let (status, body) = http("GET", &http_addr, "/v1/kv/nokey", None).expect("answer");
    assert_eq!(status, 404);
    let e: serde_json::Value = serde_json::from_str(&body).expect("json error");
    assert_eq!(e["code"], "key_not_found");
}

#[test]
fn http_kv_lists_keys_by_prefix_in_pages() {
    let n = TestNode::start();
    let http_addr = n.node().endpoints().http.clone();
    for key in ["app:a", "app:b", "app:c", "apq", "other", "app:d"] {
        let (status, body) =
            http("PUT", &http_addr, &format!("/v1/kv/{key}"), Some(key)).expect("answer");
        assert_eq!(status, 200, "{body}");
    }
    let keys = |v: &serde_json::Value| -> Vec<String> {
        v["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| e["key"].as_str().expect("key").to_owned())
            .collect()
    };
    let all = get_json(&http_addr, "/v1/kv");
    assert_eq!(
        keys(&all),
        ["app:a", "app:b", "app:c", "app:d", "apq", "other"]
    );
    assert_eq!(all["more"], false);
    assert_eq!(all["entries"][0]["value"], "app:a");
    // A prefix, in pages of two: `after` is the last key of the page before.
    let page = get_json(&http_addr, "/v1/kv?prefix=app:&limit=2");
    assert_eq!(keys(&page), ["app:a", "app:b"]);
    assert_eq!(page["more"], true);
    let page = get_json(
        &http_addr,
        "/v1/kv?prefix=app:&limit=2&after=app:b&keys_only=true",
    );
    assert_eq!(keys(&page), ["app:c", "app:d"]);
    assert_eq!(page["more"], false);
    assert!(page["entries"][0].get("value").is_none());
    assert!(page["sequence"].as_u64().expect("sequence") > 0);
    let none = get_json(&http_addr, "/v1/kv?prefix=zzz");
    assert_eq!(keys(&none), Vec::<String>::new());
    // Pages are bounded in bytes too (4 MiB): five values of ~1 MB take two pages.
    let big = "v".repeat(1_000_000);
    for i in 0..5 {
        let (status, body) =
            http("PUT", &http_addr, &format!("/v1/kv/big{i}"), Some(&big)).expect("answer");
        assert_eq!(status, 200, "{body}");
    }
    let first = get_json(&http_addr, "/v1/kv?prefix=big");
    assert_eq!(keys(&first), ["big0", "big1", "big2", "big3"]);
    assert_eq!(first["more"], true);
    let rest = get_json(&http_addr, "/v1/kv?prefix=big&after=big3");
    assert_eq!(keys(&rest), ["big4"]);
    assert_eq!(rest["more"], false);
    for bad in ["/v1/kv?limit=0", "/v1/kv?limit=10001", "/v1/kv?limit=x"] {
        let (status, body) = http("GET", &http_addr, bad, None).expect("answer");
        assert_eq!(status, 400, "{bad}: {body}");
    }
}

fn zper(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_zper"))
        .args(args)
        .output()
        .expect("run zper")
}

#[test]
fn the_cli_puts_and_gets_by_endpoint_or_by_peers_json() {
    let n = TestNode::start();
    let s = dealer(&n);
    eventually_reply(&s, &[b"Put", &[0; 8], b"ready", b"1"], b"Put");
    let at = n.node().endpoints().dolly_requests.clone();
    let o = zper(&["dolly", "--endpoint", &at, "put", "color", "blue"]);
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let state: u64 = out
        .trim()
        .strip_prefix("color set in state ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("Dolly's put line: {out:?}"));
    // Dolly's peers.json picks the node by name.
    let dir = tempfile::tempdir().expect("tempdir");
    let peers = dir.path().join("peers.json");
    let port = at.rsplit(':').next().expect("port");
    std::fs::write(
        &peers,
        format!(
            r#"[{{"pid": 1, "name": "alpha", "address": "127.0.0.1", "requests": {port},
                 "updates": 1, "snapshots": 2}}]"#
        ),
    )
    .expect("write");
    let p = peers.to_str().expect("utf8");
    let o = zper(&["dolly", "-p", p, "--name", "alpha", "get", "color", "nokey"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("color = blue (state {state})\n")
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("could not get nokey: key not found"));
    assert!(!o.status.success(), "a miss fails the command");
    // Bad targets and a node that does not answer fail with a message, within the timeout.
    let o = zper(&["dolly", "-p", p, "--name", "zulu", "get", "k"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("could not find replica named zulu"));
    let o = zper(&["dolly", "--timeout", "xyz", "get", "k"]);
    assert!(!o.status.success());
    let silent = format!("tcp://127.0.0.1:{}", free_port());
    let o = zper(&[
        "dolly",
        "-e",
        &silent,
        "--timeout",
        "300ms",
        "put",
        "k",
        "v",
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no reply"),
        "{o:?}"
    );
}

/// One connection's requests are answered and applied in the order it sent them, as by the
/// original's single loop: 100 pipelined Puts of one key end with the last value, and a Get
/// pipelined behind them sees it.
#[test]
fn pipelined_requests_on_one_connection_apply_and_answer_in_order() {
    let n = TestNode::start();
    let s = dealer(&n);
    eventually_reply(&s, &[b"Put", &[0; 8], b"ready", b"1"], b"Put");
    for i in 0..100u32 {
        s.send_multipart(frames(b"Put", 0, b"same", i.to_string().as_bytes()), 0)
            .expect("send");
    }
    s.send_multipart(frames(b"Get", 0, b"same", b""), 0)
        .expect("send");
    let mut last = 0;
    for i in 0..100u32 {
        let r = s.recv_multipart(0).expect("a Put reply");
        assert_eq!(r[0], b"Put");
        assert_eq!(r[3], i.to_string().as_bytes(), "replies in request order");
        assert!(seq(&r[1]) > last, "sequences grow in request order");
        last = seq(&r[1]);
    }
    let got = s.recv_multipart(0).expect("the Get reply");
    assert_eq!(got, frames(b"Put", last, b"same", b"99"));
}

#[test]
fn oversized_keys_and_values_are_refused_and_nothing_is_stored() {
    let n = TestNode::start();
    let s = dealer(&n);
    eventually_reply(&s, &[b"Put", &[0; 8], b"ready", b"1"], b"Put");
    let big = vec![b'v'; (1 << 20) + 1];
    let r = call(&s, &[b"Put", &[0; 8], b"big", &big]);
    assert_eq!(r[0], b"Error");
    assert!(String::from_utf8_lossy(&r[3]).contains("value of 1048577 bytes is over the limit"));
    let long_key = vec![b'k'; 4097];
    let r = call(&s, &[b"Put", &[0; 8], &long_key, b"v"]);
    assert_eq!(r[0], b"Error");
    assert_eq!(
        call(&s, &[b"Get", &[0; 8], b"big", b""])[3],
        b"key not found"
    );
    // At the limit it is stored.
    let max = vec![b'v'; 1 << 20];
    assert_eq!(call(&s, &[b"Put", &[0; 8], b"max", &max])[0], b"Put");
}

#[test]
fn four_frames_with_an_empty_method_get_a_four_frame_error() {
    let n = TestNode::start();
    let s = dealer(&n);
    let r = call(&s, &[b"", &[0; 8], b"color", b""]);
    assert_eq!(r.len(), 4, "{r:?}");
    assert_eq!((&r[0][..], &r[2][..]), (&b"Error"[..], &b"color"[..]));
}
