//! A stalled subscriber costs the node bounded memory (issue #7): a member stops reading while
//! producers write 1 GiB; the node's resident set stays far below what it would take to buffer
//! the data, and the subscriber then catches up with every message, in order.

mod common;

use std::time::{Duration, Instant};

use common::*;
use zper_client::{Event, Subscriber, SubscriberOptions};

const MESSAGE: usize = 16 * 1024;
const COUNT: u64 = 65_536; // 1 GiB of payload

#[test]
fn a_stalled_subscriber_costs_bounded_memory_and_catches_up_on_1_gib() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = free_port();
    let node = ChildNode::start_on(
        &dir.path().join("n1"),
        h,
        "flush_messages = 1000\nflush_interval = 50\nsubscription.lease_ms = 600000\n\
         segment_size = 268435456\n",
    );
    let http_addr = format!("127.0.0.1:{h}");
    assert!(
        eventually(|| matches!(
            http("POST", &http_addr, "/v1/topics/bulk", Some("{}")),
            Some((201, _))
        )),
        "topic created once the node is live"
    );
    let brokers = get_json(&http_addr, "/v1/brokers");
    let controller = brokers[0]["endpoints"]["controller"]
        .as_str()
        .expect("controller")
        .to_owned();
    let mut opts = SubscriberOptions::new(vec![controller], "bulk", "g", "slow");
    opts.max_batch = 100;
    opts.window = 1000;
    let mut sub = Subscriber::subscribe(opts).expect("subscribe");
    assert_eq!(sub.fragments(), [0]);
    let pid = node.child.id();
    let baseline = rss_bytes(pid);

    // Producers write 1 GiB while the subscriber reads nothing.
    let ctx = zmq::Context::new();
    let writer = client(&ctx, zmq::DEALER, &identity("bulk", 0), &node.writer);
    let payload = vec![b'x'; MESSAGE];
    let sampler_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = sampler_stop.clone();
    let sampler = std::thread::spawn(move || {
        let mut peak = 0;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            peak = peak.max(rss_bytes(pid));
            std::thread::sleep(Duration::from_millis(50));
        }
        peak
    });
    for i in 0..COUNT {
        writer
            .send_multipart([i.to_be_bytes().as_slice(), &payload], 0)
            .expect("send");
    }
    let end = COUNT * (2 + 8 + 9 + MESSAGE as u64);
    let deadline = Instant::now() + Duration::from_secs(300);
    assert!(
        {
            let mut done = false;
            while !done && Instant::now() < deadline {
                let v = get_json(&http_addr, "/v1/topics/bulk");
                done = v["fragments"][0]["end_offset"].as_u64() == Some(end);
                std::thread::sleep(Duration::from_millis(200));
            }
            done
        },
        "all 1 GiB stored"
    );
    sampler_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().expect("sampler");
    eprintln!(
        "node RSS: {} MiB before, peak {} MiB while 1 GiB was written to a stalled subscriber",
        baseline >> 20,
        peak >> 20
    );
    // Buffering the data for the subscriber would take over 1 GiB; the window (1000 messages
    // of 16 KiB = 16 MiB) plus the writer's own buffers bound what the node holds.
    assert!(
        peak < baseline + (256 << 20),
        "peak RSS {} MiB over a baseline of {} MiB",
        peak >> 20,
        baseline >> 20
    );

    // The subscriber catches up: every message once, in order.
    let mut next = 0u64;
    let deadline = Instant::now() + Duration::from_secs(300);
    while next < COUNT && Instant::now() < deadline {
        for ev in sub.poll(Duration::from_millis(100)).expect("poll") {
            if let Event::Batch {
                fragment,
                messages,
                end,
            } = ev
            {
                for m in &messages {
                    assert_eq!(m.frames[0], next.to_be_bytes(), "message {next} in order");
                    assert_eq!(m.frames[1].len(), MESSAGE);
                    next += 1;
                }
                sub.ack(fragment, end).expect("ack");
            }
        }
    }
    assert_eq!(next, COUNT, "caught up completely");
    let after = rss_bytes(pid);
    eprintln!("node RSS after catching up: {} MiB", after >> 20);
    // Flow control did the bounding: the relay paused on the full window.
    let (_, metrics) = http("GET", &http_addr, "/metrics", None).expect("metrics");
    let paused = metrics
        .lines()
        .find(|l| l.starts_with("zper_relay_events_total{event=\"window_full\"}"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(paused > 0.0, "the relay paused on a full window");
}
