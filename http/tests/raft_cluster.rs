//! Three Raft members in one process, talking over real HTTP on 127.0.0.1: election, writes,
//! leader loss, restart from the data dir and catch-up (issue #3, cluster formation).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::net::TcpListener;
use zper_raft::metadata::{Applied, Command, FragmentPolicy};
use zper_raft::{ClusterConfig, ClusterError, ClusterNode, NodeEndpoints, NodeId};

struct Member {
    node: ClusterNode,
    server: tokio::task::JoinHandle<()>,
}

fn endpoints(id: NodeId, http: &str) -> NodeEndpoints {
    NodeEndpoints {
        name: format!("node{id}"),
        http: http.to_owned(),
        ..Default::default()
    }
}

async fn start(
    id: NodeId,
    listener: TcpListener,
    voters: &BTreeMap<NodeId, NodeEndpoints>,
    dir: &std::path::Path,
) -> Member {
    let mut config = ClusterConfig::single(id, voters[&id].clone(), dir.to_owned());
    config.voters = voters.clone();
    let node = ClusterNode::start(&config).await.expect("raft starts");
    let server = zper_http::serve(listener, node.clone());
    Member { node, server }
}

async fn eventually<F: Fn() -> bool>(f: F) -> bool {
    for _ in 0..200 {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

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
    let dirs: Vec<tempfile::TempDir> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let mut listeners = Vec::new();
    let mut voters = BTreeMap::new();
    for id in 1..=3u64 {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        voters.insert(
            id,
            endpoints(id, &l.local_addr().expect("addr").to_string()),
        );
        listeners.push(l);
    }
    let mut members = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        members.push(Some(start(i as u64 + 1, l, &voters, dirs[i].path()).await));
    }
    let leader = members[0]
        .as_ref()
        .expect("m")
        .node
        .wait_for_leader(Duration::from_secs(10))
        .await
        .expect("a leader");
    let lead = |members: &[Option<Member>], id: NodeId| {
        members[id as usize - 1]
            .as_ref()
            .expect("running")
            .node
            .clone()
    };

    // Writes through the leader commit and apply on every member.
    for id in 1..=3u64 {
        let r = lead(&members, leader)
            .write(Command::RegisterNode {
                id,
                endpoints: voters[&id].clone(),
                now_ms: 1_000,
                lease_ms: 60_000,
            })
            .await
            .expect("commits");
        assert_eq!(r, Ok(Applied::Done));
    }
    let r = lead(&members, leader)
        .write(create("alpha", 2_000))
        .await
        .expect("commits");
    assert!(matches!(r, Ok(Applied::Topic(_))), "{r:?}");
    let same = |members: &[Option<Member>]| {
        let hashes: Vec<u64> = members
            .iter()
            .flatten()
            .map(|m| m.node.state.metadata().state_hash())
            .collect();
        hashes.windows(2).all(|w| w[0] == w[1])
    };
    assert!(
        eventually(|| same(&members)).await,
        "state machines converge"
    );

    // A follower refuses writes and names the leader.
    let follower = (1..=3u64).find(|id| *id != leader).expect("a follower");
    match lead(&members, follower).write(create("beta", 3_000)).await {
        Err(ClusterError::NotLeader {
            leader: Some(l), ..
        }) => assert_eq!(l, leader),
        other => panic!("expected NotLeader, got {other:?}"),
    }

    // Kill the leader: the other two elect a new one and keep committing.
    let old = members[leader as usize - 1].take().expect("leader running");
    old.server.abort();
    old.node.raft.shutdown().await.expect("shutdown");
    drop(old); // releases its RocksDB so the restart below can open it
    let other = lead(&members, follower);
    assert!(
        eventually(|| other.leader().is_some_and(|l| l != leader)).await,
        "a new leader after the old one is gone"
    );
    let new_leader = other.leader().expect("leader");
    let r = lead(&members, new_leader)
        .write(create("gamma", 4_000))
        .await
        .expect("commits");
    assert!(matches!(r, Ok(Applied::Topic(_))));

    // The old leader restarts from its data dir on its address and catches up.
    let addr = voters[&leader].http.clone();
    let listener = TcpListener::bind(&addr).await.expect("rebind");
    members[leader as usize - 1] =
        Some(start(leader, listener, &voters, dirs[leader as usize - 1].path()).await);
    assert!(
        eventually(|| same(&members)).await,
        "restarted member catches up"
    );
    let meta = lead(&members, leader).state.metadata();
    assert!(meta.topics.contains_key("gamma") && meta.topics.contains_key("alpha"));
    for m in members.into_iter().flatten() {
        m.server.abort();
        let _ = m.node.raft.shutdown().await;
    }
}
