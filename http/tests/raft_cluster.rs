//! Three Raft members in one process, talking over real HTTP on 127.0.0.1: election, writes,
//! leader loss, restart from the data dir and catch-up (issue #3, cluster formation).

mod common;

use common::*;
use tokio::net::TcpListener;
use zper_raft::metadata::{Applied, Command, FragmentPolicy};
use zper_raft::ClusterError;

fn create(name: &str, now_ms: u64) -> Command {
    Command::CreateTopic {
        name: name.into(),
        fragments: Some(3),
        replication_factor: None,
        retain_hours: None,
        policy: FragmentPolicy::Default,
        now_ms,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_elect_commit_fail_over_and_catch_up() {
    let mut c = Cluster::start(3).await;
    let leader = c.leader();
    // Writes through the leader commit and apply on every member.
    for id in 1..=3u64 {
        let r = c
            .node(leader)
            .write(Command::RegisterNode {
                id,
                endpoints: c.voters[&id].clone(),
                now_ms: 1_000,
                lease_ms: 60_000,
                incarnation: 0,
            })
            .await
            .expect("commits");
        assert!(matches!(r, Ok(Applied::Placement(_))), "{r:?}");
    }
    let r = c
        .node(leader)
        .write(create("alpha", 2_000))
        .await
        .expect("commits");
    assert!(matches!(r, Ok(Applied::Topic(_))), "{r:?}");
    assert!(
        eventually(|| c.converged()).await,
        "state machines converge"
    );

    // A follower refuses local writes and names the leader; propose forwards to it.
    let follower = c.follower();
    match c.node(follower).write(create("beta", 3_000)).await {
        Err(ClusterError::NotLeader {
            leader: Some(l), ..
        }) => assert_eq!(l, leader),
        other => panic!("expected NotLeader, got {other:?}"),
    }
    let r = c
        .node(follower)
        .propose(create("beta", 3_000))
        .await
        .expect("forwarded");
    assert!(matches!(r, Ok(Applied::Topic(_))), "{r:?}");

    // Kill the leader: the other two elect a new one and keep committing.
    let old = c.members[leader as usize - 1]
        .take()
        .expect("leader running");
    old.server.abort();
    old.node.raft.shutdown().await.expect("shutdown");
    drop(old); // releases its RocksDB so the restart below can open it
    let other = c.node(follower);
    assert!(
        eventually(|| other.leader().is_some_and(|l| l != leader)).await,
        "a new leader after the old one is gone"
    );
    let r = other
        .propose(create("gamma", 4_000))
        .await
        .expect("commits");
    assert!(matches!(r, Ok(Applied::Topic(_))));

    // The old leader restarts from its data dir on its address and catches up.
    let listener = TcpListener::bind(&c.voters[&leader].http)
        .await
        .expect("rebind");
    let member = start_member(
        leader,
        listener,
        &c.voters,
        c.dirs[leader as usize - 1].path(),
        None,
    )
    .await;
    c.members[leader as usize - 1] = Some(member);
    assert!(
        eventually(|| c.converged()).await,
        "restarted member catches up"
    );
    let meta = c.node(leader).state.metadata();
    assert!(["alpha", "beta", "gamma"]
        .iter()
        .all(|t| meta.topics.contains_key(*t)));
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_node_joins_as_learner_then_voter_and_is_removed() {
    let mut c = Cluster::start(3).await;
    let leader = c.leader();
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
    let created = c
        .node(leader)
        .propose(create("before", 1_000))
        .await
        .expect("commits");
    assert!(matches!(created, Ok(Applied::Topic(_))), "{created:?}");
    // Node 4 starts with an empty log and is not an initial voter: it waits to be added.
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let mut voters = c.voters.clone();
    voters.insert(4, endpoints(4, &addr));
    let mut config = zper_raft::ClusterConfig::single(4, voters[&4].clone(), dir.path().to_owned());
    config.voters = c.voters.clone();
    let four = zper_raft::ClusterNode::start(&config)
        .await
        .expect("starts");
    let server = zper_http::serve(listener, four.clone());

    let client = reqwest::Client::new();
    let url = format!("{}/v1/cluster/nodes", c.http(leader));
    // A node that does not exist, or answers with another id, is refused and changes nothing.
    for (body, why) in [
        (
            r#"{"id": 5, "http": "127.0.0.1:1"}"#.to_owned(),
            "no node there",
        ),
        (
            format!(r#"{{"id": 7, "http": "{addr}"}}"#),
            "node 4 is there, not 7",
        ),
    ] {
        let resp = client.post(&url).body(body).send().await.expect("http");
        assert_eq!(resp.status().as_u16(), 400, "{why}");
        let v: serde_json::Value = resp.json().await.expect("json");
        assert_eq!(
            v["code"],
            serde_json::json!("node_unreachable"),
            "{why}: {v}"
        );
    }
    assert_eq!(c.membership(leader), (vec![1, 2, 3], vec![]));
    let resp = client
        .post(&url)
        .body(format!(r#"{{"id": 4, "http": "{addr}"}}"#))
        .send()
        .await
        .expect("http");
    assert_eq!(resp.status().as_u16(), 201);
    let v: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(v["voters"], serde_json::json!([1, 2, 3, 4]));
    assert!(eventually(|| four.state.metadata().topics.contains_key("before")).await);

    // Remove it again; removing an unknown node is a 404 with a JSON body.
    let resp = client
        .delete(format!("{url}/4"))
        .send()
        .await
        .expect("http");
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(c.membership(leader).0, vec![1, 2, 3]);
    // The removed node no longer calls itself ready.
    let ready = format!("http://{addr}/v1/status/ready");
    let mut last = serde_json::Value::Null;
    for _ in 0..100 {
        let resp = client.get(&ready).send().await.expect("http");
        let status = resp.status().as_u16();
        last = resp.json().await.expect("json");
        if status == 503 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // It may never see the entry that removed it, but it loses its leader.
    assert_eq!(last["ready"], serde_json::json!(false), "{last}");
    let resp = client
        .delete(format!("{url}/9"))
        .send()
        .await
        .expect("http");
    assert_eq!(resp.status().as_u16(), 404);
    let v: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(v["code"], serde_json::json!("unknown_node"));
    server.abort();
    let _ = four.raft.shutdown().await;
    c.members.push(None);
    c.stop().await;
}
