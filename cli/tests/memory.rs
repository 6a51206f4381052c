//! Bounded memory (issue #13, defect 5): clients that pipeline large FETCHes and never read
//! their replies must not take the node past `memory_budget`, and the node gives the memory
//! back once they are gone. Before the fix one such DEALER with 300 FETCH(8 MiB) took a node to
//! 1.08 GB, and 0.36-1.2 GB stayed resident after it closed.

mod common;

use std::time::{Duration, Instant};

use common::*;

const MIB: u64 = 1 << 20;

#[test]
fn clients_pipelining_large_fetches_without_reading_stay_within_the_memory_budget_libzmq() {
    // The libzmq reader queues replies towards the clients; past the budget it refuses.
    pipelining_clients_stay_within_the_budget("libzmq");
}

#[test]
fn clients_pipelining_large_fetches_without_reading_stay_within_the_memory_budget_zmtp() {
    // zper's reader engine (issue #17) stops reading such a client (TCP holds it back) and
    // sends these FETCHes from the segment file: others are served meanwhile.
    pipelining_clients_stay_within_the_budget("zmtp");
}

/// Three clients pipeline 60 FETCH(8 MiB) each and never read, against a node whose reader
/// runs `engine` with a 128 MiB memory budget.
fn pipelining_clients_stay_within_the_budget(engine: &str) {
    const BUDGET: u64 = 128 * MIB;
    const CLIENTS: usize = 3;
    const REQUESTS: usize = 60;
    let dir = tempfile::tempdir().expect("tempdir");
    let node = ChildNode::start(
        &dir.path().join("n"),
        &format!("memory_budget = {BUDGET}\nflush_interval = 10\nreader.engine = {engine}\n"),
    );
    let pid = node.child.id();
    let ctx = zmq::Context::new();

    // 32 MiB of data, so each FETCH(0, 8 MiB) is answered with 8 MiB.
    let w = client(&ctx, zmq::DEALER, &identity("big", 2), &node.writer);
    let body = vec![b'b'; MIB as usize];
    for id in 0u32..32 {
        let reply = request(&w, &[b"", &id.to_be_bytes(), &body]);
        assert_eq!(reply.len(), 2, "message {id} acknowledged: {reply:?}");
    }
    let probe = client(&ctx, zmq::DEALER, &identity("big", 0), &node.reader);
    let first = request(
        &probe,
        &[
            b"FETCH",
            &0i64.to_be_bytes(),
            &(8 * MIB as i64).to_be_bytes(),
        ],
    );
    assert_eq!(first[0], [100u8], "a normal FETCH works");
    assert!(first[1].len() as u64 > 7 * MIB, "{} bytes", first[1].len());
    std::thread::sleep(Duration::from_secs(1));
    let baseline = rss_bytes(pid);

    // Each attacker sends its requests at once and reads nothing; its own socket takes in one
    // reply at most, so the replies pile up on the node's side.
    let attackers: Vec<zmq::Socket> = (0..CLIENTS)
        .map(|_| {
            let s = ctx.socket(zmq::DEALER).expect("socket");
            s.set_identity(&identity("big", 0)).expect("identity");
            s.set_rcvhwm(1).expect("rcvhwm");
            s.set_rcvbuf(64 * 1024).expect("rcvbuf");
            s.set_linger(0).expect("linger");
            s.connect(&node.reader).expect("connect");
            s
        })
        .collect();
    let big_fetch = fetch_frames(0, 8 * MIB as i64);
    for s in &attackers {
        for _ in 0..REQUESTS {
            s.send_multipart(&big_fetch, 0).expect("send");
        }
    }
    // Watch the node for a while (bounded): its resident size is sampled throughout.
    let mut peak = 0;
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        peak = peak.max(rss_bytes(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    let metrics = http("GET", &node_http(&node), "/metrics", None)
        .map(|r| r.1)
        .unwrap_or_default();
    let overloaded = metrics
        .lines()
        .find(|l| l.starts_with(r#"zper_rejected_total{reason="overloaded"}"#))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    eprintln!(
        "baseline {} MiB, peak {} MiB with {CLIENTS} x {REQUESTS} unread FETCH(8 MiB) \
         ({} MiB asked for), budget {} MiB, {overloaded} requests refused",
        baseline / MIB,
        peak / MIB,
        (CLIENTS * REQUESTS) as u64 * 8,
        BUDGET / MIB
    );
    // The budget, plus what the reader workers may be building at once (5 x 8 MiB), plus the
    // allocator's own slack.
    assert!(
        peak < baseline + BUDGET + 96 * MIB,
        "the node reached {} MiB (baseline {} MiB, budget {} MiB)",
        peak / MIB,
        baseline / MIB,
        BUDGET / MIB
    );
    if engine == "libzmq" {
        assert!(
            overloaded > 0,
            "requests past the budget are refused and counted"
        );
    } else {
        // Held back, not refused; a client that reads is served while they wait.
        let during = request(
            &probe,
            &[
                b"FETCH",
                &0i64.to_be_bytes(),
                &(8 * MIB as i64).to_be_bytes(),
            ],
        );
        assert_eq!(during[0], [100u8], "served during the attack");
        assert_eq!(overloaded, 0, "nothing refused");
    }

    // The clients go: the memory goes back to the system (bounded wait), and others are served.
    drop(attackers);
    let mut now = 0;
    let released = eventually_within(Duration::from_secs(60), || {
        now = rss_bytes(pid);
        now < baseline + 48 * MIB
    });
    assert!(
        released,
        "resident size {} MiB after the clients closed (baseline {} MiB)",
        now / MIB,
        baseline / MIB
    );
    let again = request(
        &probe,
        &[
            b"FETCH",
            &0i64.to_be_bytes(),
            &(8 * MIB as i64).to_be_bytes(),
        ],
    );
    assert_eq!(again[0], [100u8], "served again");
}

/// The node's HTTP address from its config file.
fn node_http(node: &ChildNode) -> String {
    std::fs::read_to_string(&node.config)
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("http.bind = ").map(str::to_owned))
        })
        .expect("http.bind in the config")
}
