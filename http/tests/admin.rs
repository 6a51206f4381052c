//! The admin API over HTTP against a 3-member cluster: every route, including error bodies.

mod common;

use common::*;
use serde_json::{json, Value};
use zper_raft::metadata::Command;

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
        (
            reqwest::Method::GET,
            "/v1/topics?consistent=true",
            None,
            503,
            "not_leader",
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
    ] {
        let (s, v) = call(method.clone(), &format!("{f}{path}"), body).await;
        assert_eq!(s, status, "{method} {path}: {v}");
        assert_eq!(v["code"], json!(code), "{method} {path}: {v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
    // Consistent read on the leader.
    let (s, _) = call(
        reqwest::Method::GET,
        &format!("{}/v1/topics?consistent=true", c.http(leader)),
        None,
    )
    .await;
    assert_eq!(s, 200);
    // A node whose lease ended makes the cluster unhealthy, naming it.
    c.node(leader)
        .propose(Command::RegisterNode {
            id: 9,
            endpoints: c.voters[&1].clone(),
            now_ms: 0,
            lease_ms: 1,
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
    assert_eq!(v["problems"], json!(["node 9 lease expired"]));
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
