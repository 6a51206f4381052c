//! Issue #16: the Raft transport (a persistent binary stream opened as an HTTP upgrade on the
//! admin port) and batched proposals, on three members in one process over 127.0.0.1.

mod common;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zper_raft::metadata::{Applied, Command, FragmentPolicy, MetadataError};
use zper_raft::transport::{
    read_frame, write_frame, RpcRequest, RpcResponse, PROTOCOL, STREAM_PATH,
};

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

/// Opens a connection and sends an upgrade request with `headers`; returns the connection and
/// the answer's head.
async fn upgrade(http: &str, headers: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(http.trim_start_matches("http://"))
        .await
        .expect("connect");
    let req =
        format!("POST {STREAM_PATH} HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: 0\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await.expect("read") == 0 {
            break;
        }
        head.push(byte[0]);
    }
    (s, String::from_utf8_lossy(&head).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_replicate_over_the_stream_and_it_refuses_what_it_cannot_read() {
    let c = Cluster::start(3).await;
    let leader = c.leader();
    register_all(&c).await;
    for i in 0..5 {
        c.node(leader)
            .write(create(&format!("t{i}")))
            .await
            .expect("commits")
            .expect("applies");
    }
    assert!(
        eventually(|| c.converged()).await,
        "followers apply over the stream"
    );
    let t = &c.node(leader).transport;
    use std::sync::atomic::Ordering::Relaxed;
    assert!(
        t.connects.load(Relaxed) >= 2,
        "one stream per follower at least"
    );
    assert!(t.sent.load(Relaxed) > 5);

    let http = c.http(c.follower());
    // Not an upgrade: 400 with a JSON body naming the header.
    let (_, head) = upgrade(&http, "").await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    // An upgrade, then a frame that is not MessagePack of a request: answered Refused, closed.
    let (mut s, head) = upgrade(
        &http,
        &format!("Connection: Upgrade\r\nUpgrade: {PROTOCOL}\r\n"),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(&[0, 0, 0, 3, 0xc1, 0xc1, 0xc1])
        .await
        .expect("write");
    match read_frame::<_, RpcResponse>(&mut s).await {
        Ok(Some(RpcResponse::Refused(why))) => assert!(why.contains("undecodable"), "{why}"),
        other => panic!("expected Refused, got {other:?}"),
    }
    assert!(read_frame::<_, RpcResponse>(&mut s)
        .await
        .expect("clean close")
        .is_none());
    // A length over the limit is refused before anything is read into memory.
    let (mut s, _) = upgrade(
        &http,
        &format!("Connection: Upgrade\r\nUpgrade: {PROTOCOL}\r\n"),
    )
    .await;
    s.write_all(&u32::MAX.to_be_bytes()).await.expect("write");
    match read_frame::<_, RpcResponse>(&mut s).await {
        Ok(Some(RpcResponse::Refused(why))) => assert!(why.contains("over the limit"), "{why}"),
        other => panic!("expected Refused, got {other:?}"),
    }
    // The cluster is unharmed.
    c.node(c.leader())
        .write(create("after"))
        .await
        .expect("commits")
        .expect("applies");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_needs_the_admin_token_like_every_mutating_request() {
    let c = Cluster::start_with_token(3, Some("s3cret")).await;
    // The members elected a leader, so their streams carry the token; a stranger's does not.
    let http = c.http(c.follower());
    let (_, head) = upgrade(
        &http,
        &format!("Connection: Upgrade\r\nUpgrade: {PROTOCOL}\r\n"),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    let (_, head) = upgrade(
        &http,
        &format!("Connection: Upgrade\r\nUpgrade: {PROTOCOL}\r\nAuthorization: Bearer s3cret\r\n"),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    c.stop().await;
}

/// Concurrent proposals share Raft entries: 300 topic creates at once, through the leader and
/// a follower, each get their own result, and the log grows by far fewer than 300 entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_proposals_share_entries_and_keep_their_own_results() {
    let c = Cluster::start(3).await;
    let (leader, follower) = (c.leader(), c.follower());
    register_all(&c).await;
    let last_index = |c: &Cluster| {
        c.node(leader)
            .raft
            .metrics()
            .borrow()
            .last_log_index
            .unwrap_or(0)
    };
    let before = last_index(&c);
    let mut tasks = Vec::new();
    for i in 0..300 {
        let node = c.node(if i % 2 == 0 { leader } else { follower });
        // Every tenth is a duplicate of the one before: refused on its own, the rest apply.
        let name = if i % 10 == 9 {
            format!("b{}", i - 2)
        } else {
            format!("b{i}")
        };
        tasks.push(tokio::spawn(
            async move { node.propose(create(&name)).await },
        ));
    }
    let (mut created, mut refused) = (0, 0);
    for t in tasks {
        match t.await.expect("task").expect("commits") {
            Ok(Applied::Topic(_)) => created += 1,
            Err(e) => {
                assert!(e.to_string().contains("exists"), "{e}");
                refused += 1
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((created, refused), (270, 30));
    let after = last_index(&c);
    assert!(
        after - before < 150,
        "300 proposals took {} entries",
        after - before
    );
    assert!(eventually(|| c.converged()).await);
    assert_eq!(c.node(follower).state.metadata().topics.len(), 270);
    // The follower's half went to the leader over the binary stream, not HTTP.
    let forwarded = c
        .node(follower)
        .transport
        .forwarded
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(forwarded >= 1, "forwarded over the stream: {forwarded}");
    c.stop().await;
}

/// Whether the leader's applied metadata has topic `name`.
fn has_topic(c: &Cluster, name: &str) -> bool {
    c.node(c.leader())
        .state
        .metadata()
        .topics
        .contains_key(name)
}

/// A `Propose` frame, as a follower forwards it: the leader writes it and answers `Proposed`
/// with the result; a follower answers with its refusal (it never forwards a forwarded one);
/// the connection stays usable for the next frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_propose_frame_is_written_by_the_leader_only() {
    let c = Cluster::start(3).await;
    register_all(&c).await;
    let open = |id| {
        let http = c.http(id);
        async move {
            let (s, head) = upgrade(
                &http,
                &format!("Connection: Upgrade\r\nUpgrade: {PROTOCOL}\r\n"),
            )
            .await;
            assert!(head.starts_with("HTTP/1.1 101"), "{head}");
            s
        }
    };
    let mut s = open(c.leader()).await;
    for name in ["p1", "p1"] {
        write_frame(&mut s, &RpcRequest::Propose(create(name)))
            .await
            .expect("write");
        match read_frame::<_, RpcResponse>(&mut s).await {
            Ok(Some(RpcResponse::Proposed(Ok(_)))) => {}
            other => panic!("expected Proposed(Ok), got {other:?}"),
        }
    }
    assert!(has_topic(&c, "p1"));
    let mut s = open(c.follower()).await;
    write_frame(&mut s, &RpcRequest::Propose(create("p2")))
        .await
        .expect("write");
    match read_frame::<_, RpcResponse>(&mut s).await {
        Ok(Some(RpcResponse::Proposed(Err(why)))) => assert!(why.contains("leader"), "{why}"),
        other => panic!("expected Proposed(Err), got {other:?}"),
    }
    assert!(!has_topic(&c, "p2"));
    // A batch inside a batch is refused, also when it is the batch's only command (it was
    // written as the entry then, its commands applied: helper-14).
    let mut s = open(c.leader()).await;
    let nested = Command::Batch(vec![Command::Batch(vec![create("p3")])]);
    write_frame(&mut s, &RpcRequest::Propose(nested))
        .await
        .expect("write");
    match read_frame::<_, RpcResponse>(&mut s).await {
        Ok(Some(RpcResponse::Proposed(Ok(Ok(Applied::Batch(results)))))) => assert!(
            matches!(results.as_slice(), [Err(MetadataError::NestedBatch)]),
            "{results:?}"
        ),
        other => panic!("expected the batch's results, got {other:?}"),
    }
    assert!(!has_topic(&c, "p3"));
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_refuses_our_token_is_retried_with_backoff_not_at_once() {
    // Member 3 has another admin token: the leader's stream upgrades to it are refused (401).
    // Before, each refusal was a NetworkError, which openraft retries at once: a new
    // connection every few ms (an attack found ~320 a second, each a TLS handshake with TLS
    // on). Now it is Unreachable, which openraft backs off from.
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("tmp")).collect();
    let (listeners, voters) = bind_voters(3).await;
    let mut members = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let token = if i == 2 { "other" } else { "s3cret" };
        members.push(start_member(i as u64 + 1, l, &voters, dirs[i].path(), Some(token)).await);
    }
    let leader = members[0]
        .node
        .wait_for_leader(std::time::Duration::from_secs(20))
        .await
        .expect("members 1 and 2 elect a leader");
    assert_ne!(leader, 3);
    let node = members[leader as usize - 1].node.clone();
    let failures = || {
        node.transport
            .failures
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // Let the first refusals happen, then count two seconds' worth.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let before = failures();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let refused = failures() - before;
    assert!(
        refused < 100,
        "{refused} refused connections to member 3 in 2 s: no backoff"
    );
    // The leader names the peer that refuses its token (a health warning, not a 503).
    assert_eq!(node.transport.peers_refusing_token(), vec![3]);
    let health: serde_json::Value =
        reqwest::get(format!("http://{}/v1/cluster/health", voters[&leader].http))
            .await
            .expect("health")
            .json()
            .await
            .expect("json");
    assert!(
        health["warnings"].as_array().is_some_and(|w| w
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.starts_with("node 3 refuses")))),
        "{health}"
    );
    for m in members {
        m.server.abort();
        let _ = m.node.raft.shutdown().await;
    }
}
