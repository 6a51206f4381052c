//! A cluster of Raft members in one process, each with its HTTP server on 127.0.0.1.
#![allow(dead_code, missing_docs)]

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::net::TcpListener;
use zper_raft::{ClusterConfig, ClusterNode, NodeEndpoints, NodeId};

pub struct Member {
    pub node: ClusterNode,
    pub server: tokio::task::JoinHandle<()>,
}

pub struct Cluster {
    pub dirs: Vec<tempfile::TempDir>,
    pub voters: BTreeMap<NodeId, NodeEndpoints>,
    pub members: Vec<Option<Member>>,
}

pub fn endpoints(id: NodeId, http: &str) -> NodeEndpoints {
    NodeEndpoints {
        name: format!("node{id}"),
        http: http.to_owned(),
        ..Default::default()
    }
}

pub async fn start_member(
    id: NodeId,
    listener: TcpListener,
    voters: &BTreeMap<NodeId, NodeEndpoints>,
    dir: &std::path::Path,
    token: Option<&str>,
) -> Member {
    let mut config = ClusterConfig::single(id, voters[&id].clone(), dir.to_owned());
    config.voters = voters.clone();
    config.admin_token = token.map(str::to_owned);
    let node = ClusterNode::start(&config).await.expect("raft starts");
    let app = zper_http::router_with(
        node.clone(),
        zper_http::AdminOptions {
            admin_token: token.map(str::to_owned),
            ..Default::default()
        },
    );
    let server = zper_http::serve_router(listener, app);
    Member { node, server }
}

impl Cluster {
    /// Starts `n` voters (ids 1..=n) and waits for a leader.
    pub async fn start(n: u64) -> Cluster {
        Self::start_with_token(n, None).await
    }

    /// As [`Cluster::start`], every member with admin token `token`.
    pub async fn start_with_token(n: u64, token: Option<&str>) -> Cluster {
        let dirs: Vec<tempfile::TempDir> = (0..n)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let mut listeners = Vec::new();
        let mut voters = BTreeMap::new();
        for id in 1..=n {
            let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            voters.insert(
                id,
                endpoints(id, &l.local_addr().expect("addr").to_string()),
            );
            listeners.push(l);
        }
        let mut members = Vec::new();
        for (i, l) in listeners.into_iter().enumerate() {
            members.push(Some(
                start_member(i as u64 + 1, l, &voters, dirs[i].path(), token).await,
            ));
        }
        let c = Cluster {
            dirs,
            voters,
            members,
        };
        c.node(1)
            .wait_for_leader(Duration::from_secs(10))
            .await
            .expect("a leader within 10 s");
        // Settled: every member names the same leader, and that leader knows it leads.
        let settled = || {
            let leaders: Vec<Option<NodeId>> = c
                .members
                .iter()
                .flatten()
                .map(|m| m.node.leader())
                .collect();
            leaders.windows(2).all(|w| w[0] == w[1])
                && leaders[0].is_some_and(|l| c.node(l).leader() == Some(l))
        };
        assert!(eventually(settled).await, "members agree on a leader");
        c
    }

    pub fn node(&self, id: NodeId) -> ClusterNode {
        self.members[id as usize - 1]
            .as_ref()
            .expect("member running")
            .node
            .clone()
    }

    pub fn leader(&self) -> NodeId {
        self.node(1).leader().expect("leader known")
    }

    pub fn follower(&self) -> NodeId {
        let leader = self.leader();
        (1..=self.voters.len() as u64)
            .find(|id| *id != leader)
            .expect("a follower")
    }

    /// Voter and learner ids in `id`'s current membership.
    pub fn membership(&self, id: NodeId) -> (Vec<NodeId>, Vec<NodeId>) {
        let m = self.node(id).raft.metrics().borrow().clone();
        let members = m.membership_config.membership();
        (
            members.voter_ids().collect(),
            members.learner_ids().collect(),
        )
    }

    pub fn http(&self, id: NodeId) -> String {
        format!("http://{}", self.voters[&id].http)
    }

    /// True when every running member has the same metadata.
    pub fn converged(&self) -> bool {
        let hashes: Vec<u64> = self
            .members
            .iter()
            .flatten()
            .map(|m| m.node.state.metadata().state_hash())
            .collect();
        hashes.windows(2).all(|w| w[0] == w[1])
    }

    pub async fn stop(self) {
        for m in self.members.into_iter().flatten() {
            m.server.abort();
            let _ = m.node.raft.shutdown().await;
        }
    }
}

pub async fn eventually<F: Fn() -> bool>(f: F) -> bool {
    for _ in 0..200 {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
