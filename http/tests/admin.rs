//! The admin API over HTTP against a 3-member cluster: every route, including error bodies.

mod common;

use common::*;
use serde_json::{json, Value};
use zper_raft::metadata::{Command, MetadataError};

async fn call(method: reqwest::Method, url: &str, body: Option<&str>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut req = client.request(method, url);
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_owned());
    }
    let resp = req.send().await.expect("http");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_routes_answer_json_and_errors_have_code_and_message() {
    let c = Cluster::start(3).await;
    let (leader, follower) = (c.leader(), c.follower());
    for id in 1..=3u64 {
        let r = c
            .node(follower)
            .propose(Command::RegisterNode {
                id,
                endpoints: c.voters[&id].clone(),
                now_ms: u64::MAX / 4,
                lease_ms: 1,
                incarnation: 0,
            })
            .await
            .expect("forwarded");
        assert!(r.is_ok());
    }
    assert!(eventually(|| c.converged()).await);
    let f = c.http(follower);

    // Healthy: leader known, every lease current.
    let (s, v) = call(
        reqwest::Method::GET,
        &format!("{f}/v1/cluster/health"),
        None,
    )
    .await;
    assert_eq!((s, v["healthy"].clone()), (200, json!(true)), "{v}");
    // Ready and raft state.
    let (s, v) = call(reqwest::Method::GET, &format!("{f}/v1/status/ready"), None).await;
    assert_eq!((s, v["ready"].clone()), (200, json!(true)), "{v}");
    let (s, v) = call(reqwest::Method::GET, &format!("{f}/v1/raft"), None).await;
    assert_eq!(s, 200);
    assert_eq!(v["leader"], json!(leader));
    assert_eq!(v["voters"], json!([1, 2, 3]));

    // Create a topic on a follower (forwarded to the leader).
    let body = r#"{"fragments": 3, "replication_factor": 2}"#;
    let (s, v) = call(
        reqwest::Method::POST,
        &format!("{f}/v1/topics/orders"),
        Some(body),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["name"], json!("orders"));
    assert_eq!(v["fragments"].as_array().map(Vec::len), Some(3));
    assert!(eventually(|| c.converged()).await);
    for id in 1..=3u64 {
        let (s, v) = call(
            reqwest::Method::GET,
            &format!("{}/v1/topics/orders", c.http(id)),
            None,
        )
        .await;
        assert_eq!((s, v["replication_factor"].clone()), (200, json!(2)));
    }
    let (s, v) = call(reqwest::Method::GET, &format!("{f}/v1/topics"), None).await;
    assert_eq!((s, v.as_array().map(Vec::len)), (200, Some(1)));
    let (s, v) = call(reqwest::Method::GET, &format!("{f}/v1/brokers"), None).await;
    assert_eq!((s, v.as_array().map(Vec::len)), (200, Some(3)));

    // A page of another origin cannot change the cluster through a browser, token or not
    // (attack finding, issue #20); the console's own same-origin request can.
    let client = reqwest::Client::new();
    for (name, value) in [
        ("origin", "http://evil.example:43000"),
        ("origin", "null"),
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
    ] {
        let r = client
            .post(format!("{f}/v1/topics/csrf"))
            .header(name, value)
            .header("content-type", "text/plain")
            .send()
            .await
            .expect("http");
        assert_eq!(r.status().as_u16(), 403, "{name}: {value}");
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["code"], json!("cross_origin"), "{v}");
    }
    let (s, _) = call(reqwest::Method::GET, &format!("{f}/v1/topics/csrf"), None).await;
    assert_eq!(s, 404, "no topic was created");
    let r = client
        .delete(format!("{f}/v1/topics/nothere"))
        .header("origin", f.clone())
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .expect("http");
    assert_eq!(
        r.status().as_u16(),
        404,
        "the console's own request reaches the API"
    );
    // Errors: JSON {code, message} with a 4xx/5xx status.
    for (method, path, body, status, code) in [
        (
            reqwest::Method::POST,
            "/v1/topics/orders",
            None,
            409,
            "topic_exists",
        ),
        (
            reqwest::Method::POST,
            "/v1/topics/bad-name",
            None,
            400,
            "invalid_name",
        ),
        (
            reqwest::Method::POST,
            "/v1/topics/x",
            Some(r#"{"fragments": 0}"#),
            400,
            "invalid_argument",
        ),
        (
            reqwest::Method::POST,
            "/v1/topics/x",
            Some(r#"{"replication_factor": 9}"#),
            409,
            "not_enough_nodes",
        ),
        (
            reqwest::Method::POST,
            "/v1/topics/x",
            Some("{nope"),
            400,
            "invalid_body",
        ),
        (
            reqwest::Method::POST,
            "/v1/topics/x",
            Some(r#"{"colour": 1}"#),
            400,
            "invalid_body",
        ),
        (
            reqwest::Method::GET,
            "/v1/topics/missing",
            None,
            404,
            "unknown_topic",
        ),
        (
            reqwest::Method::DELETE,
            "/v1/topics/missing",
            None,
            404,
            "unknown_topic",
        ),
        (reqwest::Method::GET, "/v1/nothing", None, 404, "not_found"),
        (
            reqwest::Method::PUT,
            "/v1/topics",
            None,
            405,
            "method_not_allowed",
        ),
        (
            reqwest::Method::POST,
            "/v1/topics/x",
            Some(r#"{"replication_factor": 0}"#),
            400,
            "invalid_argument",
        ),
        (
            reqwest::Method::POST,
            "/v1/topics/x",
            Some(r#"{"retain_hours": 0}"#),
            400,
            "invalid_argument",
        ),
        (
            reqwest::Method::POST,
            "/v1/cluster/nodes",
            Some(r#"{"id": 5, "http": "http://evil.example/x?y="}"#),
            400,
            "invalid_argument",
        ),
    ] {
        let (s, v) = call(method.clone(), &format!("{f}{path}"), body).await;
        assert_eq!(s, status, "{method} {path}: {v}");
        assert_eq!(v["code"], json!(code), "{method} {path}: {v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
    // A consistent read on a follower is forwarded to the leader (issue #15)...
    let (s, v) = call(
        reqwest::Method::GET,
        &format!("{f}/v1/topics?consistent=true"),
        None,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v[0]["name"], "orders", "{v}");
    // ...once: a request a follower already forwarded is not forwarded again, and its 503
    // names the leader to ask.
    let resp = reqwest::Client::new()
        .get(format!("{f}/v1/topics?consistent=true"))
        .header(zper_http::forward::FORWARDED, "9")
        .send()
        .await
        .expect("http");
    assert_eq!(resp.status().as_u16(), 503);
    let v: Value = serde_json::from_str(&resp.text().await.expect("body")).expect("json");
    assert_eq!(v["code"], "not_leader", "{v}");
    let expected = format!("node {leader} at {}", c.voters[&leader].http);
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.ends_with(&expected)),
        "{v}"
    );
    // Consistent read on the leader.
    let (s, _) = call(
        reqwest::Method::GET,
        &format!("{}/v1/topics?consistent=true", c.http(leader)),
        None,
    )
    .await;
    assert_eq!(s, 200);
    // Registration is refused for ids outside the Raft membership, and for an id whose
    // membership entry has another address (two processes sharing one node.id).
    let refused = c
        .node(leader)
        .propose(Command::RegisterNode {
            id: 9,
            endpoints: c.voters[&1].clone(),
            now_ms: 0,
            lease_ms: 1,
            incarnation: 0,
        })
        .await
        .expect("answered");
    assert_eq!(refused, Err(MetadataError::NotMember(9)));
    let refused = c
        .node(follower)
        .propose(Command::RegisterNode {
            id: leader,
            endpoints: c.voters[&follower].clone(),
            now_ms: 0,
            lease_ms: 1,
            incarnation: 0,
        })
        .await
        .expect("answered");
    assert!(
        matches!(refused, Err(MetadataError::DuplicateNodeId { id, .. }) if id == leader),
        "{refused:?}"
    );
    // A node whose lease ended makes the cluster unhealthy, naming it.
    c.node(leader)
        .propose(Command::RegisterNode {
            id: follower,
            endpoints: c.voters[&follower].clone(),
            now_ms: 0,
            lease_ms: 1,
            incarnation: 0,
        })
        .await
        .expect("commits")
        .expect("registers");
    assert!(eventually(|| c.converged()).await);
    let (s, v) = call(
        reqwest::Method::GET,
        &format!("{f}/v1/cluster/health"),
        None,
    )
    .await;
    assert_eq!(s, 503, "{v}");
    let problems = v["problems"].as_array().cloned().unwrap_or_default();
    assert!(
        problems.contains(&json!(format!("node {follower} lease expired"))),
        "{v}"
    );
    // The web console's form (issue #20): the same body with 200.
    let (s, v2) = call(
        reqwest::Method::GET,
        &format!("{f}/v1/cluster/health?always_200=true"),
        None,
    )
    .await;
    assert_eq!((s, v2["healthy"].clone()), (200, json!(false)), "{v2}");
    assert_eq!(v2["problems"], v["problems"]);
    // Delete.
    let (s, _) = call(
        reqwest::Method::DELETE,
        &format!("{f}/v1/topics/orders"),
        None,
    )
    .await;
    assert_eq!(s, 204);
    assert!(eventually(|| c.node(leader).state.metadata().topics.is_empty()).await);
    c.stop().await;
}

async fn call_with(
    method: reqwest::Method,
    url: &str,
    body: Option<String>,
    token: Option<&str>,
) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut req = client.request(method, url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b);
    }
    let resp = req.send().await.expect("http");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_token_guards_every_mutating_route_and_peers_send_it() {
    // A leader is elected at all only if the peers' Raft RPCs (POSTs) carry the token.
    let c = Cluster::start_with_token(3, Some("s3cret")).await;
    let (leader, follower) = (c.leader(), c.follower());
    c.node(leader)
        .propose(Command::RegisterNode {
            id: leader,
            endpoints: c.voters[&leader].clone(),
            now_ms: 0,
            lease_ms: u64::MAX / 2,
            incarnation: 0,
        })
        .await
        .expect("commits")
        .expect("registers");
    let f = c.http(follower);
    let topic = format!("{f}/v1/topics/guarded");
    for (token, why) in [(None, "no token"), (Some("guess"), "wrong token")] {
        let (s, v) = call_with(reqwest::Method::POST, &topic, None, token).await;
        assert_eq!(s, 401, "{why}: {v}");
        assert_eq!(v["code"], json!("unauthorized"), "{why}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
        let (s, _) = call_with(reqwest::Method::DELETE, &topic, None, token).await;
        assert_eq!(s, 401, "{why}");
        let (s, _) = call_with(
            reqwest::Method::POST,
            &format!("{f}/v1/cluster/nodes"),
            Some(r#"{"id": 7, "http": "127.0.0.1:1"}"#.into()),
            token,
        )
        .await;
        assert_eq!(s, 401, "{why}");
        // The internal routes are guarded too: no way around the token.
        let (s, _) = call_with(
            reqwest::Method::POST,
            &format!("{f}/v1/internal/propose"),
            Some(r#"{"DeleteTopic": {"name": "x"}}"#.into()),
            token,
        )
        .await;
        assert_eq!(s, 401, "{why}");
    }
    assert!(c.node(leader).state.metadata().topics.is_empty());
    // Reads stay open.
    let (s, _) = call_with(reqwest::Method::GET, &format!("{f}/v1/topics"), None, None).await;
    assert_eq!(s, 200);
    // With the token, a follower forwards the write to the leader (which checks it again).
    let (s, v) = call_with(reqwest::Method::POST, &topic, None, Some("s3cret")).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["name"], json!("guarded"));
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extractor_rejections_are_json_errors_too() {
    let c = Cluster::start(1).await;
    let base = c.http(1);
    // The last voter cannot be removed: a conflict, not a server error.
    let (s, v) = call_with(
        reqwest::Method::DELETE,
        &format!("{base}/v1/cluster/nodes/1"),
        None,
        None,
    )
    .await;
    assert_eq!((s, v["code"].clone()), (409, json!("last_voter")), "{v}");
    for (method, url, body, status, code) in [
        (
            reqwest::Method::GET,
            format!("{base}/v1/topics?consistent=maybe"),
            None,
            400,
            "bad_request",
        ),
        (
            reqwest::Method::DELETE,
            format!("{base}/v1/cluster/nodes/abc"),
            None,
            400,
            "bad_request",
        ),
        (
            reqwest::Method::POST,
            format!("{base}/v1/topics/big"),
            Some(format!(r#"{{"x": "{}"}}"#, "y".repeat(3 << 20))),
            413,
            "payload_too_large",
        ),
        (
            reqwest::Method::POST,
            format!("{base}/v1/internal/propose"),
            Some("not json".to_owned()),
            400,
            "bad_request",
        ),
    ] {
        let (s, v) = call_with(method, &url, body, None).await;
        assert_eq!(s, status, "{url}: {v}");
        assert_eq!(v["code"], json!(code), "{url}: {v}");
        assert!(
            v["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{url}: {v}"
        );
    }
    c.stop().await;
}
