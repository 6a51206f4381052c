//! Issue #19: TLS on the admin port. Three members whose admin ports speak only TLS elect a
//! leader over the Raft stream, forward a follower's proposals and leader-only admin requests
//! to the leader, and answer an HTTPS client that trusts their CA; a plain-HTTP client and a
//! client trusting another CA get nothing, and the members keep serving.

mod common;

use common::*;
use serde_json::Value;
use zper_raft::metadata::{Command, FragmentPolicy};

fn create(name: &str) -> Command {
    Command::CreateTopic {
        name: name.into(),
        fragments: Some(1),
        replication_factor: Some(1),
        retain_hours: None,
        policy: FragmentPolicy::Default,
        now_ms: 1_000,
    }
}

/// An HTTPS client trusting only the CA in `ca` (PEM).
fn https_client(ca: &[u8]) -> reqwest::Client {
    let certs = reqwest::Certificate::from_pem_bundle(ca).expect("pem");
    certs
        .into_iter()
        .fold(
            reqwest::Client::builder()
                .use_rustls_tls()
                .tls_built_in_root_certs(false),
            |b, c| b.add_root_certificate(c),
        )
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_whose_admin_ports_speak_tls_elects_forwards_and_serves_only_tls_clients() {
    let tls = TestTls::new();
    // A leader and agreement on it: Raft's vote and append RPCs went over the TLS stream.
    let c = Cluster::start_with(3, Some("s3cret"), Some(&tls)).await;
    let follower = c.follower();
    register_all(&c).await;

    // A follower's proposal reaches the leader over the TLS forward stream.
    c.node(follower)
        .propose(create("secured"))
        .await
        .expect("commits")
        .expect("creates");
    assert!(eventually(|| c.converged()).await, "members converge");
    let forwarded = c
        .node(follower)
        .transport
        .forwarded
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(forwarded >= 1, "forwarded over the stream: {forwarded}");

    // An HTTPS client trusting the CA: a consistent read on the follower is answered by the
    // leader (the follower forwards it over TLS).
    let addr = &c.voters[&follower].http;
    let ca = std::fs::read(tls.ca()).expect("ca");
    let resp = https_client(&ca)
        .get(format!("https://{addr}/v1/topics?consistent=true"))
        .send()
        .await
        .expect("https answers");
    assert_eq!(resp.status().as_u16(), 200);
    let v: Value = resp.json().await.expect("json");
    assert_eq!(v[0]["name"], "secured", "{v}");

    // Plain HTTP gets no answer (the server expects a TLS handshake)...
    let plain = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .expect("client")
        .get(format!("http://{addr}/v1/raft"))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    // ...and a client that trusts another CA refuses the node's certificate.
    let other = TestTls::new();
    let untrusted = https_client(&std::fs::read(other.ca()).expect("ca"))
        .get(format!("https://{addr}/v1/raft"))
        .send()
        .await;
    assert!(untrusted.is_err(), "an untrusted certificate was accepted");

    // Clients that connect and never start their handshake hold only their own connections:
    // a trusting client is still answered while 50 of them wait.
    let mut silent = Vec::new();
    for _ in 0..50 {
        silent.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
    }
    let resp = https_client(&ca)
        .get(format!("https://{addr}/v1/raft"))
        .send()
        .await
        .expect("answered beside silent connections");
    assert_eq!(resp.status().as_u16(), 200);
    drop(silent);

    // The members still serve: another proposal commits after the bad clients.
    c.node(follower)
        .propose(create("after"))
        .await
        .expect("commits")
        .expect("creates");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_speaks_plain_http_cannot_join_a_tls_cluster_as_a_peer() {
    // Two members with TLS and one without (its admin port and its peer connections are
    // plain): no stream opens between it and the others, while the two TLS members elect a
    // leader between them and commit.
    let tls = TestTls::new();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("tmp")).collect();
    let (listeners, voters) = bind_voters(3).await;
    let mut members = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        let secured = (id != 3).then_some(&tls);
        members.push(start_member_with(id, l, &voters, dirs[i].path(), None, secured).await);
    }
    let leader = members[0]
        .node
        .wait_for_leader(std::time::Duration::from_secs(20))
        .await
        .expect("the TLS members elect a leader");
    assert_ne!(
        leader, 3,
        "the plain member cannot win votes it cannot ask for"
    );
    for id in 1..=2u64 {
        register(&members[leader as usize - 1].node, id, &voters[&id]).await;
    }
    members[leader as usize - 1]
        .node
        .write(create("twoofthree"))
        .await
        .expect("commits on the two TLS members")
        .expect("creates");
    // The plain member's own stream upgrades to its TLS peers all failed.
    let connects = members[2]
        .node
        .transport
        .connects
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(connects, 0, "a plain member opened a stream to a TLS peer");
    for m in members {
        m.server.abort();
        let _ = m.node.raft.shutdown().await;
    }
}

/// A CA, and a certificate for `names` signed by it valid until `not_after` (year), written as
/// `ca.pem` and `node.pem` in `dir`.
fn signed(dir: &std::path::Path, names: &[&str], not_after: i32) {
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).expect("ca");
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .expect("params");
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(not_after, 1, 1);
    let cert = params.signed_by(&key, &ca_cert, &ca_key).expect("cert");
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).expect("write");
    std::fs::write(dir.join("node.pem"), cert.pem()).expect("write");
}

#[test]
fn the_node_names_what_its_peers_would_refuse_in_its_own_certificate() {
    // Attack finding of issue #19: an expired certificate, or one without the advertised
    // host, let the node start; only the peers' logs said why. The node now checks its own
    // certificate as a peer would (at start, logged, and in /v1/cluster/health's problems).
    let dir = tempfile::tempdir().expect("tmp");
    let (cert, ca) = (dir.path().join("node.pem"), dir.path().join("ca.pem"));
    let check = |advertise: &str| zper_raft::tls::check_own_certificate(&cert, &ca, advertise);
    signed(dir.path(), &["127.0.0.1", "zper1"], 2200);
    assert_eq!(check("127.0.0.1:9644"), None);
    assert_eq!(check("zper1:9644"), None);
    let other = check("zper2:9644").expect("another host is refused");
    assert!(other.contains("zper2"), "{other}");
    signed(dir.path(), &["127.0.0.1"], 2021);
    let expired = check("127.0.0.1:9644").expect("an expired certificate is refused");
    assert!(expired.to_lowercase().contains("expired"), "{expired}");
    std::fs::write(&ca, "not pem").expect("write");
    assert!(
        check("127.0.0.1:9644").is_some(),
        "an unreadable CA is named"
    );
}
