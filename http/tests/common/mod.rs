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

/// TLS on the members' admin ports: a CA and one certificate for 127.0.0.1 that every member
/// serves (issue #19), all made here with rcgen.
pub struct TestTls {
    pub dir: tempfile::TempDir,
    pub server: std::sync::Arc<rustls::ServerConfig>,
    pub peers: zper_raft::tls::PeerTls,
}

impl TestTls {
    pub fn new() -> TestTls {
        let ca_key = rcgen::KeyPair::generate().expect("ca key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "zper test CA");
        let ca_cert = ca.self_signed(&ca_key).expect("ca cert");
        let key = rcgen::KeyPair::generate().expect("node key");
        let params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .expect("node params");
        let cert = params
            .signed_by(&key, &ca_cert, &ca_key)
            .expect("node cert");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).expect("write");
        std::fs::write(dir.path().join("node.pem"), cert.pem()).expect("write");
        std::fs::write(dir.path().join("node.key"), key.serialize_pem()).expect("write");
        let server = zper_raft::tls::server_config(
            &dir.path().join("node.pem"),
            &dir.path().join("node.key"),
        )
        .expect("server config");
        let peers = zper_raft::tls::PeerTls::trusting(&dir.path().join("ca.pem")).expect("trust");
        TestTls { dir, server, peers }
    }

    pub fn ca(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.pem")
    }
}

pub async fn start_member(
    id: NodeId,
    listener: TcpListener,
    voters: &BTreeMap<NodeId, NodeEndpoints>,
    dir: &std::path::Path,
    token: Option<&str>,
) -> Member {
    start_member_with(id, listener, voters, dir, token, None).await
}

/// As [`start_member`], its admin port over TLS when `tls` is given.
pub async fn start_member_with(
    id: NodeId,
    listener: TcpListener,
    voters: &BTreeMap<NodeId, NodeEndpoints>,
    dir: &std::path::Path,
    token: Option<&str>,
    tls: Option<&TestTls>,
) -> Member {
    let mut config = ClusterConfig::single(id, voters[&id].clone(), dir.to_owned());
    config.voters = voters.clone();
    config.admin_token = token.map(str::to_owned);
    config.tls = tls.map(|t| t.peers.clone()).unwrap_or_default();
    let node = ClusterNode::start(&config).await.expect("raft starts");
    let app = zper_http::router_with(
        node.clone(),
        zper_http::AdminOptions {
            admin_token: token.map(str::to_owned),
            ..Default::default()
        },
    );
    let server = zper_http::serve_router_tls(listener, app, tls.map(|t| t.server.clone()));
    Member { node, server }
}

impl Cluster {
    /// Starts `n` voters (ids 1..=n) and waits for a leader.
    pub async fn start(n: u64) -> Cluster {
        Self::start_with_token(n, None).await
    }

    /// As [`Cluster::start`], every member with admin token `token`.
    pub async fn start_with_token(n: u64, token: Option<&str>) -> Cluster {
        Self::start_with(n, token, None).await
    }

    /// As [`Cluster::start_with_token`], the admin ports over TLS when `tls` is given.
    pub async fn start_with(n: u64, token: Option<&str>, tls: Option<&TestTls>) -> Cluster {
        let dirs: Vec<tempfile::TempDir> = (0..n)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let (listeners, voters) = bind_voters(n).await;
        let mut members = Vec::new();
        for (i, l) in listeners.into_iter().enumerate() {
            members.push(Some(
                start_member_with(i as u64 + 1, l, &voters, dirs[i].path(), token, tls).await,
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

/// Registers the three members with a long lease, so topics can be placed.
pub async fn register_all(c: &Cluster) {
    for id in 1..=3u64 {
        register(&c.node(c.leader()), id, &c.voters[&id]).await;
    }
}

/// Registers member `id` at `endpoints` with a long lease through `leader`.
pub async fn register(leader: &ClusterNode, id: NodeId, endpoints: &NodeEndpoints) {
    leader
        .write(zper_raft::metadata::Command::RegisterNode {
            id,
            endpoints: endpoints.clone(),
            now_ms: 1_000,
            lease_ms: u64::MAX / 4,
            incarnation: 0,
        })
        .await
        .expect("commits")
        .expect("registers");
}

/// Binds `n` admin listeners on 127.0.0.1 and names voters 1..=n at their addresses.
pub async fn bind_voters(n: u64) -> (Vec<TcpListener>, BTreeMap<NodeId, NodeEndpoints>) {
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
    (listeners, voters)
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
