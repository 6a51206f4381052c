//! Clients and peers reach a node at different addresses (issue #15 "Compose": host clients of
//! a compose cluster are told published ports, nodes keep the network's names): the
//! `*.advertise` keys change what clients are told (`/v1/brokers`, the controller), peers keep
//! the bound ports; and a leader-only admin request on a follower is answered by the leader.

mod common;

use common::*;

#[test]
fn clients_are_told_the_advertised_endpoints_and_peers_keep_the_bound_ones() {
    // Node 2 tells clients endpoints where nothing listens: what it forwards to and from its
    // peers must still work, so peers cannot be using them.
    let unused: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let c = TestCluster::start_each(|i| {
        if i == 1 {
            format!(
                "writer.advertise = tcp://127.0.0.1:{}\nreader.advertise = tcp://127.0.0.1:{}\n\
                 relay.advertise = tcp://127.0.0.1:{}\n",
                unused[0], unused[1], unused[2]
            )
        } else {
            String::new()
        }
    });
    let brokers = get_json(&c.http(1), "/v1/brokers");
    let node2 = brokers
        .as_array()
        .expect("brokers")
        .iter()
        .find(|b| b["id"] == 2)
        .expect("node 2")
        .clone();
    assert_eq!(
        node2["endpoints"]["writer"],
        format!("tcp://127.0.0.1:{}", unused[0])
    );
    assert_eq!(
        node2["endpoints"]["reader"],
        format!("tcp://127.0.0.1:{}", unused[1])
    );
    assert_eq!(
        node2["endpoints"]["relay"],
        format!("tcp://127.0.0.1:{}", unused[2])
    );
    // A topic led by node 2, written and read through node 1: node 1 forwards to node 2's
    // bound writer and reader.
    let topic = (0..12)
        .map(|k| format!("adv{k}"))
        .find(|t| c.create(t, 1) == 2)
        .expect("a topic led by node 2");
    let acked = c.produce_all(1, &topic, 0..20);
    assert_eq!(acked.len(), 20, "forwarded writes acknowledged");
    let reader = c.nodes[0].reader.clone();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_zper"))
        .args([
            "consume",
            "-t",
            &topic,
            "-r",
            &reader,
            "--fragment",
            "0",
            "--json",
        ])
        .output()
        .expect("zper consume");
    assert!(o.status.success(), "{o:?}");
    // One JSON object per message (the binary ids may hold a newline byte).
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 20);
}

#[test]
fn a_leader_only_request_on_a_follower_is_answered_by_the_leader() {
    let c = TestCluster::start();
    let leader = raft_leader(&c.http(1)).expect("a leader");
    let follower = (1..=3u64).find(|n| *n != leader).expect("a follower");
    let (s, body) = http("PUT", &c.http(leader), "/v1/kv/color", Some("blue")).expect("answer");
    assert_eq!(s, 200, "{body}");
    // A consistent read needs the leader: the follower forwards it.
    let (s, body) = http(
        "GET",
        &c.http(follower),
        "/v1/kv/color?consistent=true",
        None,
    )
    .expect("answer");
    assert_eq!(s, 200, "{body}");
    assert!(body.contains("blue"), "{body}");
    // Removing a node is leader-only: the leader's own answer (404, not a voter) comes back.
    let (s, body) =
        http("DELETE", &c.http(follower), "/v1/cluster/nodes/99", None).expect("answer");
    assert_eq!(s, 404, "{body}");
    assert!(body.contains("unknown_node"), "{body}");
    // The CLI against the follower: consistent topic read and cluster commands work.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_zper"))
        .args(["cluster", "remove-node", "99", "--admin", &c.http(follower)])
        .output()
        .expect("zper");
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a voter"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
