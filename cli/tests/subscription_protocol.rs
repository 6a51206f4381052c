//! Subscriptions across three `zper` processes (issue #7), beyond the six scenarios of
//! `subscribe.rs`: the same assignment on every node from the controller's raw frames, the
//! retrievable back-channel (`pirius.md` §13), `zper subscribe`, and the relay's answers to
//! malformed and misdirected requests.

mod common;
mod subscription;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use subscription::*;
use zper_client::ResultsListener;

#[test]
fn the_same_joins_and_leaves_give_the_same_assignment_on_every_node() {
    let c = Cluster::start();
    c.create("determ", 8, "distribution");
    let ctx = zmq::Context::new();
    // Raw controller frames, each request through a different node.
    let ask = |node: usize, frames: &[&[u8]]| -> Vec<Vec<u8>> {
        let s = client(&ctx, zmq::DEALER, b"", &c.endpoint(node, "controller"));
        s.set_rcvtimeo(10_000).expect("timeout");
        s.send_multipart(frames, 0).expect("send");
        s.recv_multipart(0).expect("reply")
    };
    let mut joined = Vec::new();
    for (i, who) in ["m-a", "m-b", "m-c", "m-d"].iter().enumerate() {
        let reply = ask(i % 3 + 1, &[b"SUBSCRIBE", b"determ", b"g", who.as_bytes()]);
        assert_eq!(reply[0], [100], "{who} joined");
        joined.push(*who);
    }
    let reply = ask(2, &[b"UNSUBSCRIBE", b"determ", b"g", b"m-b"]);
    assert_eq!(reply, vec![vec![100u8]]);
    let reply = ask(3, &[b"UNSUBSCRIBE", b"determ", b"g", b"m-b"]);
    assert_eq!(reply, vec![vec![101u8]], "not a member any more");
    let reply = ask(1, &[b"KEEPALIVE", b"determ", b"g", b"m-c"]);
    assert_eq!(reply[0], [100]);
    // Every node, at the same applied index, has the same groups.
    let view = |n: usize| get_json(&c.http(n), "/v1/topics/determ/subscriptions");
    assert!(eventually(|| {
        let v: Vec<Value> = (1..=3).map(view).collect();
        v[0]["applied_index"] == v[1]["applied_index"]
            && v[1]["applied_index"] == v[2]["applied_index"]
    }));
    let v: Vec<Value> = (1..=3).map(view).collect();
    assert_eq!(v[0]["groups"], v[1]["groups"]);
    assert_eq!(v[1]["groups"], v[2]["groups"]);
    // And it is the policy's: 8 fragments over m-a, m-c, m-d, one owner each, 3/3/2.
    let assignment = v[0]["groups"]["g"]["assignment"]
        .as_object()
        .expect("assignment")
        .clone();
    assert_eq!(assignment.len(), 8);
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for owners in assignment.values() {
        let owners = owners.as_array().expect("owners");
        assert_eq!(owners.len(), 1);
        *per.entry(owners[0].as_str().expect("id").to_owned())
            .or_default() += 1;
    }
    assert_eq!(
        per.keys().cloned().collect::<Vec<_>>(),
        ["m-a", "m-c", "m-d"]
    );
    let mut shares: Vec<usize> = per.values().copied().collect();
    shares.sort();
    assert_eq!(shares, [2, 3, 3]);
    // Malformed: bad names, unknown topic.
    assert_eq!(ask(1, &[b"SUBSCRIBE", b"determ", b"g"]), vec![vec![102u8]]);
    assert_eq!(
        ask(1, &[b"SUBSCRIBE", b"determ", b"g", b"a b"]),
        vec![vec![102u8]]
    );
    assert_eq!(
        ask(1, &[b"SUBSCRIBE", b"nosuch", b"g", b"x"]),
        vec![vec![101u8]]
    );
    let _ = joined;
}

#[test]
fn a_subscribers_results_reach_the_producer_registered_on_another_node() {
    let c = Cluster::start();
    c.create("retrieve", 1, "distribution");
    // The producer listens on node 3's relay; the subscriber's stream may be on any node.
    let mut listener =
        ResultsListener::register(&c.endpoint(3, "relay"), "retrieve", b"p1-").expect("register");
    assert!(listener.wait_registered(Duration::from_secs(10)));
    let mut sub = TestSubscriber::start(&c, "retrieve", "s1", 1, 0, End::Leave, Some("_processed"));
    let p = Producer::new(&c, 1, "retrieve", 1);
    p.publish(&RECORDS1[..3], Duration::ZERO);
    let mut results = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while results.len() < 3 && Instant::now() < deadline {
        if let Some(r) = listener.next(Duration::from_millis(200)).expect("next") {
            results.push((
                String::from_utf8_lossy(&r.id).into_owned(),
                String::from_utf8_lossy(&r.payload).into_owned(),
            ));
        }
    }
    sub.stop();
    assert_eq!(
        results,
        vec![
            ("p1-0".to_owned(), "google_processed".to_owned()),
            ("p1-1".to_owned(), "paustq_processed".to_owned()),
            ("p1-2".to_owned(), "123456_processed".to_owned()),
        ]
    );
}

#[test]
fn zper_subscribe_prints_the_records_and_commits_the_group_offset() {
    let c = Cluster::start();
    c.create("clisub", 1, "default");
    let p = Producer::new(&c, 1, "clisub", 1);
    p.publish(&RECORDS1, Duration::ZERO);
    let controllers = c.controllers().join(",");
    let subscribe = |n: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_zper"))
            .args([
                "subscribe",
                "-t",
                "clisub",
                "-g",
                "cli",
                "--id",
                "one",
                "-C",
                &controllers,
                "-n",
                n,
            ])
            .output()
            .expect("run zper subscribe");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let out = subscribe("4");
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        lines,
        [
            "p1-0\tgoogle",
            "p1-1\tpaustq",
            "p1-2\t123456",
            "p1-3\tabcdef"
        ]
    );
    // The same member resumes after what it acknowledged.
    let out = subscribe("2");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "p1-4\tqwerty\np1-5\tasdfgh\n"
    );
    // A bad topic name is a clear error, before anything is sent (the controller would
    // answer 102).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_zper"))
        .args(["subscribe", "-t", "no-such", "-C", &c.controllers()[0]])
        .output()
        .expect("run zper subscribe");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ASCII letters or digits, e.g. nosuch"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_relay_answers_malformed_and_misdirected_requests_and_keeps_serving() {
    let c = Cluster::start();
    c.create("rawrelay", 2, "distribution");
    let ctx = zmq::Context::new();
    let relay = client(&ctx, zmq::DEALER, b"", &c.endpoint(1, "relay"));
    relay.set_rcvtimeo(10_000).expect("timeout");
    let ask = |frames: Vec<Vec<u8>>| -> Vec<Vec<u8>> {
        relay.send_multipart(frames, 0).expect("send");
        relay.recv_multipart(0).expect("reply")
    };
    let stream = |topic: &str, fragment: u32, window: u32| -> Vec<Vec<u8>> {
        vec![
            b"STREAM".to_vec(),
            topic.as_bytes().to_vec(),
            b"g".to_vec(),
            b"raw".to_vec(),
            fragment.to_be_bytes().to_vec(),
            0u64.to_be_bytes().to_vec(),
            1u32.to_be_bytes().to_vec(),
            0u32.to_be_bytes().to_vec(),
            window.to_be_bytes().to_vec(),
            0u64.to_be_bytes().to_vec(),
        ]
    };
    for bad in [
        vec![b"FETCH".to_vec()],
        vec![b"STREAM".to_vec(), b"rawrelay".to_vec()],
        stream("rawrelay", 0, 0),
        stream("raw-relay", 0, 10),
        vec![
            b"ACK".to_vec(),
            b"rawrelay".to_vec(),
            b"g".to_vec(),
            b"raw".to_vec(),
            vec![0],
            vec![1],
        ],
    ] {
        let reply = ask(bad.clone());
        assert_eq!(reply[0], b"ERROR", "{bad:?} -> {reply:?}");
        assert_eq!(reply.len(), 2);
    }
    // A fragment that does not exist, or a topic no one created: REVOKED with a reason.
    for (topic, fragment) in [("rawrelay", 7u32), ("nosuchtopic", 0)] {
        let reply = ask(stream(topic, fragment, 10));
        assert_eq!(reply[0], b"REVOKED", "{reply:?}");
        assert_eq!(reply[2], fragment.to_be_bytes());
    }
    // A stream for a member that is not in the group ends with REVOKED.
    let reply = ask(stream("rawrelay", 0, 10));
    assert_eq!(reply[0], b"REVOKED", "{reply:?}");
    // An ACK of nothing pushed on this connection is refused; no offset moves.
    let ack = |offset: u64| {
        vec![
            b"ACK".to_vec(),
            b"rawrelay".to_vec(),
            b"g".to_vec(),
            b"raw".to_vec(),
            1u32.to_be_bytes().to_vec(),
            offset.to_be_bytes().to_vec(),
        ]
    };
    assert_eq!(ask(ack(1000))[0], b"ERROR");
    let groups = get_json(&c.http(1), "/v1/topics/rawrelay/subscriptions");
    assert_eq!(groups["groups"], json!({}), "nothing committed: {groups}");
    // A member may acknowledge only message boundaries it was pushed: not inside a message,
    // not past what it got (either would make the group skip records or resume mid-message).
    let controller = client(&ctx, zmq::DEALER, b"", &c.endpoint(1, "controller"));
    controller.set_rcvtimeo(10_000).expect("timeout");
    let joined = request(&controller, &[b"SUBSCRIBE", b"rawrelay", b"g", b"raw"]);
    assert_eq!(joined[0], [100]);
    let revision = joined[2].clone();
    let relay1 = c.endpoint(
        get_json(&c.http(1), "/v1/topics/rawrelay")["fragments"][1]["leader"]
            .as_u64()
            .expect("leader") as usize,
        "relay",
    );
    let member = client(&ctx, zmq::DEALER, b"", &relay1);
    member.set_rcvtimeo(10_000).expect("timeout");
    let mut open = stream("rawrelay", 1, 10);
    open[9] = revision;
    member.send_multipart(open, 0).expect("stream");
    let p = Producer::on_fragment(&c, 2, "rawrelay", 8, 1, 2);
    p.publish(&RECORDS1[..1], Duration::ZERO);
    let batch = member.recv_multipart(0).expect("records");
    assert_eq!(batch[0], b"RECORDS", "{batch:?}");
    let end = u64::from_be_bytes(batch[4].as_slice().try_into().expect("end"));
    for bad in [3, end + 1, u64::MAX] {
        let mut a = ack(bad);
        a[4] = 1u32.to_be_bytes().to_vec();
        member.send_multipart(a, 0).expect("ack");
        let reply = member.recv_multipart(0).expect("reply");
        assert_eq!(reply[0], b"ERROR", "ACK {bad}: {reply:?}");
    }
    member.send_multipart(ack(end), 0).expect("ack");
    let reply = member.recv_multipart(0).expect("reply");
    assert_eq!(reply[0], b"ACKED", "{reply:?}");
    assert_eq!(reply[3], end.to_be_bytes());
    let reply = request(&controller, &[b"UNSUBSCRIBE", b"rawrelay", b"g", b"raw"]);
    assert_eq!(reply, vec![vec![100u8]]);
    // The node still serves a real subscriber.
    let mut sub = TestSubscriber::start(&c, "rawrelay", "real", 1, 0, End::Leave, None);
    // (Another group: it also gets the record the raw member acknowledged.)
    let p = Producer::on_fragment(&c, 2, "rawrelay", 9, 1, 2);
    p.publish(&RECORDS2[..2], Duration::ZERO);
    let all = wait_confirmed(&[&sub], 3);
    sub.stop();
    assert_exactly_once(&all, &["google", "zoogle", "zaustq"]);
}
