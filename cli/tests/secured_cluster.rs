//! Issue #19: a three-node cluster with CURVE on every ZMQ endpoint (one cluster key pair,
//! replication admitting only it) and an admin token on the HTTP port (Raft RPCs included).
//! Replication works through it (acks in mode 2 need the replicas, whose copies end equal);
//! a rogue process that knows every address but not the keys cannot fetch a replica, cannot
//! report a replica's progress, and cannot vote or append.

mod common;

use std::time::Duration;

use common::*;
use zper_wire::replication::FetchRequest;
use zper_wire::zmtp::curve::{encode_key, CurveKeyPair};

const TOKEN: &str = "cluster-s3cret";

/// A CURVE client socket of `kind` with `keys`, for a server whose public key is `server`.
fn curve_client(
    ctx: &zmq::Context,
    kind: zmq::SocketType,
    id: &[u8],
    server: &[u8; 32],
    keys: &CurveKeyPair,
    endpoint: &str,
) -> zmq::Socket {
    let s = ctx.socket(kind).expect("socket");
    if !id.is_empty() {
        s.set_identity(id).expect("identity");
    }
    s.set_linger(0).expect("linger");
    s.set_rcvtimeo(5000).expect("rcvtimeo");
    s.set_curve_serverkey(server).expect("server key");
    s.set_curve_publickey(&keys.public()).expect("public key");
    s.set_curve_secretkey(&keys.secret()).expect("secret key");
    s.connect(endpoint).expect("connect");
    s
}

/// An HTTP request with an optional bearer token: (status, body), or None.
fn http_with(
    method: &str,
    addr: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> Option<(u16, String)> {
    http_with_token(method, addr, path, token, Some(body))
}

/// `zper_rejected_total{reason="curve_refused"}` on the node at `addr`.
fn curve_refused(addr: &str) -> u64 {
    let Some((200, text)) = http_with("GET", addr, "/metrics", None, "") else {
        return 0;
    };
    text.lines()
        .find(|l| l.starts_with("zper_rejected_total{") && l.contains("curve_refused"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// The value of `key` in `node`'s config file.
fn config_value(node: &ChildNode, key: &str) -> String {
    std::fs::read_to_string(&node.config)
        .expect("config")
        .lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_else(|| panic!("{key} in {}", node.config.display()))
}

/// Sends a replica FETCH on `socket` and waits up to `wait` for any answer.
fn fetch_answered(socket: &zmq::Socket, request: &FetchRequest, wait: Duration) -> bool {
    if socket
        .send_multipart(request.to_frames(), zmq::DONTWAIT)
        .is_err()
    {
        return false;
    }
    socket
        .poll(zmq::POLLIN, wait.as_millis() as i64)
        .is_ok_and(|n| n > 0)
}

#[test]
fn a_secured_cluster_replicates_and_a_rogue_without_keys_cannot_fetch_report_or_vote() {
    let keys = tempfile::tempdir().expect("tempdir");
    let cluster = CurveKeyPair::generate();
    let app = CurveKeyPair::generate();
    let secret = keys.path().join("cluster.key_secret");
    std::fs::write(&secret, encode_key(&cluster.secret())).expect("write");
    std::fs::create_dir(keys.path().join("clients")).expect("dir");
    std::fs::write(
        keys.path().join("clients/app.key"),
        encode_key(&app.public()),
    )
    .expect("write");
    let c = TestCluster::start_with(&format!(
        "curve.secret_key_file = {}\ncurve.clients = {}/clients\nhttp.admin_token = {TOKEN}\n\
         min_insync = 2\n",
        secret.display(),
        keys.path().display()
    ));

    // Creating a topic needs the token.
    let (s, _) = http_with("POST", &c.http(1), "/v1/topics/orders", None, "{}").expect("answer");
    assert_eq!(s, 401);
    let (s, body) = http_with(
        "POST",
        &c.http(1),
        "/v1/topics/orders",
        Some(TOKEN),
        r#"{"replication_factor": 3}"#,
    )
    .expect("answer");
    assert!((200..300).contains(&s), "{s} {body}");
    let mut leader = 0;
    assert!(
        eventually(|| {
            leader = c.fragment(1, "orders")["leader"].as_u64().unwrap_or(0);
            leader != 0
                && (1..=3).all(|n| c.fragment(n, "orders")["leader"].as_u64() == Some(leader))
        }),
        "a leader known everywhere"
    );

    // The app's key produces in mode 2; acks need min_insync = 2 copies, so every ack proves
    // a replica fetched over CURVE.
    let writer = &c.nodes[leader as usize - 1].writer;
    let req = curve_client(
        &c.ctx,
        zmq::REQ,
        &identity("orders", 2),
        &cluster.public(),
        &app,
        writer,
    );
    for id in 0u32..20 {
        let body = format!("message {id}");
        req.send_multipart([&id.to_be_bytes()[..], body.as_bytes()], 0)
            .expect("send");
        let ack = req.recv_multipart(0).expect("ack in time");
        assert_eq!(ack, [id.to_be_bytes().to_vec()], "message {id}");
    }
    assert!(
        eventually(|| (1..=3).all(|n| ids_in(&concat(&c.segments(n, "orders"))).len() == 20)),
        "every copy holds the 20 messages"
    );
    let copy = concat(&c.segments(leader, "orders"));
    for n in 1..=3 {
        assert_eq!(concat(&c.segments(n, "orders")), copy, "node {n}'s copy");
    }

    // The rogue knows every address. It asks the leader for the replica of a follower, and
    // reports that follower far ahead.
    let follower = (1..=3).find(|n| *n != leader).expect("a follower");
    let replication = config_value(&c.nodes[leader as usize - 1], "replica.bind");
    let request = FetchRequest {
        topic: "orders".into(),
        fragment: 0,
        replica: follower,
        offset: 1 << 40,
        last_epoch: None,
        max_bytes: 1 << 20,
        last_epoch_start: None,
    };
    let from_start = FetchRequest {
        offset: 0,
        ..request.clone()
    };
    let before = curve_refused(&c.http(leader));
    // Without CURVE: libzmq ends the handshake; nothing is answered.
    let plain = client(&c.ctx, zmq::DEALER, b"", &replication);
    assert!(!fetch_answered(&plain, &from_start, Duration::from_secs(2)));
    assert!(!fetch_answered(
        &plain,
        &request,
        Duration::from_millis(500)
    ));
    // With CURVE and the right server key but another key pair: ZAP refuses it, counted.
    let stranger = curve_client(
        &c.ctx,
        zmq::DEALER,
        b"",
        &cluster.public(),
        &CurveKeyPair::generate(),
        &replication,
    );
    assert!(!fetch_answered(
        &stranger,
        &from_start,
        Duration::from_secs(2)
    ));
    // Nor does an authorised client's key open replication: only the cluster's does.
    let app_there = curve_client(
        &c.ctx,
        zmq::DEALER,
        b"",
        &cluster.public(),
        &app,
        &replication,
    );
    assert!(!fetch_answered(
        &app_there,
        &request,
        Duration::from_secs(2)
    ));
    assert!(
        eventually(|| curve_refused(&c.http(leader)) >= before + 2),
        "the leader counts both refused keys"
    );
    // The cluster's own key pair is answered: the refusals above are not a dead endpoint.
    let member = curve_client(
        &c.ctx,
        zmq::DEALER,
        b"",
        &cluster.public(),
        &cluster,
        &replication,
    );
    assert!(fetch_answered(
        &member,
        &from_start,
        Duration::from_secs(10)
    ));

    // The high-water mark is where the copies are, not where the rogue claimed.
    assert!(
        eventually(
            || c.fragment(leader, "orders")["high_water"].as_u64() == Some(copy.len() as u64)
        ),
        "{}",
        c.fragment(leader, "orders")
    );

    // Raft: a vote or append without the token is refused and the term does not move.
    let term = |n: u64| get_json(&c.http(n), "/v1/raft")["term"].as_u64();
    let terms: Vec<_> = (1..=3).map(term).collect();
    for path in ["/raft/vote", "/raft/append", "/raft/stream"] {
        for token in [None, Some("guess")] {
            let (s, _) = http_with("POST", &c.http(follower), path, token, "{}").expect("answer");
            assert_eq!(s, 401, "{path} with {token:?}");
        }
    }
    let vote = format!(
        r#"{{"vote":{{"leader_id":{{"term":{},"node_id":9}},"committed":false}},"last_log_id":null}}"#,
        terms[0].unwrap_or(1) + 100
    );
    let (s, _) = http_with("POST", &c.http(follower), "/raft/vote", None, &vote).expect("answer");
    assert_eq!(s, 401);
    assert_eq!(
        (1..=3).map(term).collect::<Vec<_>>(),
        terms,
        "terms unchanged"
    );

    // The cluster serves on: one more acknowledged message.
    req.send_multipart([&20u32.to_be_bytes()[..], b"message 20"], 0)
        .expect("send");
    assert_eq!(
        req.recv_multipart(0).expect("ack"),
        [20u32.to_be_bytes().to_vec()]
    );
}
