//! Leader failover across three `zper` processes (issues #4 and #13): a SIGKILLed or
//! restarted former leader drops its unacknowledged tail and never serves or acknowledges what
//! is then cut, a producer through a survivor loses no acknowledged message, and a leader that
//! lost a tail to a power loss leads again in a new epoch so the replicas cut it too.

mod common;

use common::*;
use serde_json::json;

/// Ids from here on are probes whose outcome may be unknown; readers skip them.
const PROBE_IDS: u32 = 5000;

/// Reads `topic` from `offset` on `reader`, message by message, until `count` message ids
/// arrived (bounded by 10 s); returns them and the offset just after the last one.
fn consume_ids(
    ctx: &zmq::Context,
    reader: &str,
    topic: &str,
    offset: u64,
    count: usize,
) -> (Vec<u32>, u64) {
    let r = client(ctx, zmq::DEALER, &identity(topic, 0), reader);
    let (mut ids, mut off) = (Vec::new(), offset);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while ids.len() < count && std::time::Instant::now() < deadline {
        let f = fetch_frames(off as i64, 4096);
        let refs: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
        if r.send_multipart(refs, 0).is_err() {
            break;
        }
        let Ok(reply) = r.recv_multipart(0) else {
            break;
        };
        if reply.len() != 2 || reply[0] != [100] || reply[1].is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(20));
            continue;
        }
        let (mut len, mut id) = (0u64, None);
        for rec in zper_wire::Records::new(&reply[1]) {
            if ids.len() == count {
                break;
            }
            if id.is_none() {
                id = Some(rec.payload.to_vec());
            }
            len += rec.stored_len() as u64;
            if !rec.more {
                let first = id.take().unwrap_or_default();
                let mut b = [0u8; 4];
                if first.len() == 4 {
                    b.copy_from_slice(&first);
                }
                let n = u32::from_be_bytes(b);
                // Probe messages (ids from PROBE_IDS) are not counted.
                if n < PROBE_IDS {
                    ids.push(n);
                }
                off += len;
                len = 0;
            }
        }
    }
    (ids, off)
}

#[test]
fn a_diverged_former_leader_drops_its_unacknowledged_tail_and_a_consumer_moves_nodes() {
    // With both followers frozen the leader cannot renew its lease: 3 s (not 1.5) leaves room
    // to append the tail below on a loaded machine (CI once saw the lease lapse first, and
    // the tail refused).
    let mut c = TestCluster::start_with("node.lease_ms = 3000\n");
    let leader = c.create("div", 3);
    let acked = c.produce_all(leader, "div", 0..50);
    assert_eq!(acked.len(), 50);

    // A consumer reads the first 30 messages from the leader.
    let (first, offset) = consume_ids(&c.ctx, &c.nodes[leader as usize - 1].reader, "div", 0, 30);
    assert_eq!(first, (0..30).collect::<Vec<u32>>());

    // Freeze the followers: the leader goes on appending alone (nothing of it is acknowledged).
    let others: Vec<u64> = (1..=3).filter(|n| *n != leader).collect();
    for n in &others {
        c.nodes[*n as usize - 1].pause();
    }
    // Fetches the followers sent just before they froze are answered within the leader's park
    // time (100 ms), empty: wait them out, so the tail below reaches no follower at all (a
    // follower that did receive it would rightly keep it as a replica of the old epoch).
    std::thread::sleep(std::time::Duration::from_millis(400));
    let w = client(
        &c.ctx,
        zmq::DEALER,
        &identity("div", 0),
        &c.nodes[leader as usize - 1].writer,
    );
    for id in 1000u32..1010 {
        w.send_multipart([&id.to_be_bytes()[..], b"unacknowledged"], 0)
            .expect("send");
    }
    let leader_dir = c.data[leader as usize - 1].join("div");
    assert!(
        eventually(|| ids_in(&concat(&segment_files(&leader_dir))).len() == 60),
        "the leader stored its tail"
    );
    // The leader dies; the followers come back and elect a new leader from the ISR.
    c.node(leader).kill9();
    for n in &others {
        c.nodes[*n as usize - 1].resume();
    }
    let survivor = others[0];
    let new_leader = c.new_leader(survivor, "div", leader);
    // The other survivor was frozen too: its lease may have lapsed, leaving the new leader
    // alone in the ISR (below min_insync 2, so acked writes get 103) until it rejoins.
    // Probes with ids of their own: a probe refused with 104 after a forward timed out has an
    // unknown outcome and may still be stored later (docs/protocol.md), so its id must not be
    // one the checks below count.
    let mut probe = PROBE_IDS;
    assert!(eventually(|| {
        probe += 1;
        c.produce_acked(new_leader, "div", probe..probe + 1) == [probe]
    }));
    let more = c.produce_acked(new_leader, "div", 50..80);
    assert_eq!(more.len(), 30);

    // The consumer moves to another node and continues at its offset: no gap, no duplicate.
    let reader = c.nodes[new_leader as usize - 1].reader.clone();
    let (rest, _) = consume_ids(&c.ctx, &reader, "div", offset, 50);
    assert_eq!(rest, (30..80).collect::<Vec<u32>>());

    // The former leader returns: its unacknowledged tail is cut and it catches up.
    c.node(leader).restart();
    assert!(
        eventually(|| {
            let a = c.segments(new_leader, "div");
            (1..=3).all(|n| c.segments(n, "div") == a)
        }),
        "copies converge"
    );
    let all: Vec<u32> = ids_in(&concat(&c.segments(leader, "div")))
        .into_iter()
        .filter(|id| *id < PROBE_IDS)
        .collect();
    assert_eq!(
        all,
        (0..80).collect::<Vec<u32>>(),
        "the unacknowledged tail is gone"
    );
}

#[test]
fn a_restarted_former_leader_never_acknowledges_what_it_then_cuts() {
    let mut c = TestCluster::start();
    let leader = c.create("fence", 3);
    assert_eq!(c.produce_all(leader, "fence", 0..10).len(), 10);
    c.node(leader).kill9();
    let survivor = (1..=3).find(|n| *n != leader).expect("survivor");
    c.new_leader(survivor, "fence", leader);
    // Its metadata on disk still names it leader: right after the restart it must neither
    // append nor acknowledge as leader (its lease is not current) until it has caught up with
    // the cluster; then it forwards to the new leader.
    c.node(leader).restart();
    let acked = c.produce_acked(leader, "fence", 100..130);
    assert!(
        eventually(|| {
            let a = c.segments(survivor, "fence");
            (1..=3).all(|n| c.segments(n, "fence") == a)
        }),
        "copies converge"
    );
    let stored = ids_in(&concat(&c.segments(leader, "fence")));
    for id in (0..10).chain(acked.iter().copied()) {
        assert!(
            stored.contains(&id),
            "acknowledged {id} is stored: {stored:?}"
        );
    }
    let mut sorted = stored.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), stored.len(), "no duplicates: {stored:?}");
}

#[test]
fn producing_through_a_survivor_while_the_leader_is_killed_loses_no_acknowledged_message() {
    let mut c = TestCluster::start();
    let leader = c.create("live", 3);
    let via = (1..=3).find(|n| *n != leader).expect("a follower");
    let writer = c.nodes[via as usize - 1].writer.clone();
    let ctx = c.ctx.clone();
    // A producer on a follower (forwarded to the leader), mode 2, one id per message, never
    // resent; bounded in count and time.
    let producer = std::thread::spawn(move || {
        let mut s = client(&ctx, zmq::REQ, &identity("live", 2), &writer);
        let mut acked = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        for id in 0u32..600 {
            if std::time::Instant::now() > deadline {
                break;
            }
            let key = id.to_be_bytes();
            if s.send_multipart([&key[..], b"live"], 0).is_err() {
                s = client(&ctx, zmq::REQ, &identity("live", 2), &writer);
                continue;
            }
            match s.recv_multipart(0) {
                Ok(reply) if reply == [key.to_vec()] => acked.push(id),
                Ok(_) => {} // refused (104/103): not acknowledged
                Err(_) => s = client(&ctx, zmq::REQ, &identity("live", 2), &writer),
            }
        }
        acked
    });
    assert!(
        eventually(|| ids_in(&concat(&c.segments(leader, "live"))).len() >= 100),
        "producing"
    );
    c.node(leader).kill9();
    c.new_leader(via, "live", leader);
    c.node(leader).restart();
    let acked = producer.join().expect("producer");
    assert!(acked.len() > 100, "{} acknowledged", acked.len());
    assert!(
        eventually(|| {
            let a = c.segments(via, "live");
            (1..=3).all(|n| c.segments(n, "live") == a)
        }),
        "copies converge"
    );
    let stored = ids_in(&concat(&c.segments(leader, "live")));
    assert!(
        stored.windows(2).all(|w| w[0] < w[1]),
        "in order, no duplicates"
    );
    for id in &acked {
        assert!(stored.contains(id), "acknowledged {id} is stored");
    }
}

/// Issue #13, defect 1: a restarted node opened its topics with no high-water mark, so for a
/// moment its reader served its whole flushed tail, including messages never acknowledged
/// that replication then cut. Every id a reader sees right after the restart must be in the
/// final log.
#[test]
fn a_restarted_former_leader_serves_nothing_that_is_then_cut() {
    let (mut c, proxies) = TestCluster::start_proxied("");
    let leader = c.create("dirty", 3);
    assert_eq!(c.produce_all(leader, "dirty", 0..10).len(), 10);
    let others: Vec<u64> = (1..=3).filter(|n| *n != leader).collect();
    // Its replicas can no longer fetch: what it appends now, nobody confirms.
    proxies[leader as usize - 1].cut();
    let dealer = client(
        &c.ctx,
        zmq::DEALER,
        &identity("dirty", 0),
        &c.nodes[leader as usize - 1].writer,
    );
    for id in 1000u32..1050 {
        dealer
            .send_multipart([&id.to_be_bytes()[..], b"unconfirmed"], 0)
            .expect("send");
    }
    assert!(
        eventually(|| ids_in(&concat(&c.segments(leader, "dirty"))).len() == 60),
        "appended on the leader alone"
    );
    std::thread::sleep(std::time::Duration::from_millis(200)); // flushed (flush_interval 50)
    c.node(leader).kill9();
    proxies[leader as usize - 1].heal();
    let survivor = others[0];
    c.new_leader(survivor, "dirty", leader);
    // The old leader comes back while the others are frozen: it cannot learn that its tail
    // was never confirmed, so all it may serve is what it had seen confirmed.
    for n in &others {
        c.nodes[*n as usize - 1].pause();
    }
    c.node(leader).restart();
    let r = client(
        &c.ctx,
        zmq::DEALER,
        &identity("dirty", 0),
        &c.nodes[leader as usize - 1].reader,
    );
    let mut seen = std::collections::BTreeSet::new();
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_millis(1500) {
        seen.extend(ids_in(&read_all(&r)));
    }
    for n in &others {
        c.nodes[*n as usize - 1].resume();
    }
    assert!(
        eventually(|| {
            let a = c.segments(survivor, "dirty");
            (1..=3).all(|n| c.segments(n, "dirty") == a)
        }),
        "copies converge"
    );
    let fin: std::collections::BTreeSet<u32> = ids_in(&concat(&c.segments(survivor, "dirty")))
        .into_iter()
        .collect();
    let dirty: Vec<&u32> = seen.difference(&fin).collect();
    assert!(
        dirty.is_empty(),
        "read after the restart, then cut: {dirty:?}"
    );
    assert!(
        (0..10).all(|id| fin.contains(&id)),
        "acknowledged ones kept"
    );
}

/// Issue #13 (randomized nemesis: copies of equal length that differed in the middle, with no
/// truncation logged anywhere): a leader that loses power loses what it wrote and had not
/// flushed, which its replicas may already hold. Restarted within its lease, it led again in
/// the same leader epoch and wrote new messages at those offsets; a replica fetching at its
/// end found nothing to cut (same epoch, offset within the leader's log), so it kept the lost
/// messages where the leader now had others. A new run of a node must lead in a new epoch.
#[test]
fn a_leader_restarted_within_its_lease_leads_in_a_new_epoch_so_replicas_cut_what_it_lost() {
    leader_loses_a_tail_and_restarts(false);
}

/// Issue #13 (attack on the fix above): the restart before the power loss recorded a new
/// epoch at the end of a recovered tail that was not yet durable; the power loss kept the
/// entry and lost the tail, so the next epoch was recorded past the log end as well and the
/// replicas were not cut. Recovery now makes the kept tail durable first, and a reopened log
/// drops epochs that start past its end.
#[test]
fn an_epoch_recorded_past_the_end_a_power_loss_left_is_dropped_and_replicas_still_cut() {
    leader_loses_a_tail_and_restarts(true);
}

/// Three nodes, 20 messages of one size on every copy; the leader loses the last 5 in a
/// power loss (after a first plain restart when `restarted_before`: its new epoch entry
/// names the old end) and comes back, within its lease, with the others frozen for a moment.
/// Every copy must end byte-identical, with every acknowledged message.
fn leader_loses_a_tail_and_restarts(restarted_before: bool) {
    let mut c = TestCluster::start_with("node.lease_ms = 5000\n");
    let leader = c.create("lost", 3);
    let others: Vec<u64> = (1..=3).filter(|n| *n != leader).collect();
    // Every message the same size ("message NN"), as in the chaos workload: offsets alone
    // cannot tell one from another.
    assert_eq!(c.produce_all(leader, "lost", 10..25).len(), 15);
    c.produce_unacked(leader, "lost", 25..30);
    assert!(
        eventually(|| {
            let a = c.segments(leader, "lost");
            ids_in(&concat(&a)).len() == 20 && (1..=3).all(|n| c.segments(n, "lost") == a)
        }),
        "every copy holds 20 messages"
    );
    let mut epoch_before = c.fragment(leader, "lost")["leader_epoch"]
        .as_u64()
        .expect("epoch");
    let dir = c.data[leader as usize - 1].join("lost");
    if restarted_before {
        let end = concat(&c.segments(leader, "lost")).len();
        c.node(leader).kill9();
        c.node(leader).restart();
        // Its new epoch is recorded at the end of what it recovered.
        assert!(
            eventually(
                || std::fs::read_to_string(dir.join(zper_store::EPOCHS_FILE))
                    .is_ok_and(|h| h.ends_with(&format!(" {end}\n")))
                    && c.fragment(leader, "lost")["leader"] == json!(leader)
            ),
            "the restarted leader records a new epoch at {end}"
        );
        epoch_before = c.fragment(leader, "lost")["leader_epoch"]
            .as_u64()
            .expect("epoch");
    }
    // Power loss on the leader alone: messages 25-29 had reached the replicas but not the
    // leader's disk (nor its checksum sidecar, nor its high-water checkpoint).
    c.node(leader).kill9();
    let (name, bytes) = c
        .segments(leader, "lost")
        .into_iter()
        .next_back()
        .expect("a segment");
    assert_eq!(name, format!("{:020}.dat", 0), "one segment");
    let cut = message_ends(&bytes)[&24];
    std::fs::write(dir.join(&name), &bytes[..cut as usize]).expect("cut the segment");
    let crc = dir.join(format!("{:020}.crc", 0));
    let sums = std::fs::read(&crc).expect("sidecar");
    let keep = sums[8..]
        .chunks_exact(16)
        .take_while(|e| u64::from_le_bytes(e[..8].try_into().expect("8 bytes")) <= cut)
        .count();
    std::fs::write(&crc, &sums[..8 + keep * 16]).expect("cut the sidecar");
    std::fs::write(dir.join(zper_store::HIGH_WATER_FILE), format!("{cut}")).expect("mark");
    // It comes back while the others are frozen, its previous lease still running, and is
    // asked to write five messages of the same size at once.
    for n in &others {
        c.nodes[*n as usize - 1].pause();
    }
    c.node(leader).restart();
    c.produce_unacked(leader, "lost", 40..45);
    std::thread::sleep(std::time::Duration::from_millis(500));
    for n in &others {
        c.nodes[*n as usize - 1].resume();
    }
    assert_eq!(c.produce_all(leader, "lost", 50..55).len(), 5);
    let same = eventually(|| {
        let a = c.segments(leader, "lost");
        (1..=3).all(|n| c.segments(n, "lost") == a)
    });
    let listing: Vec<(u64, Vec<u32>)> = (1..=3)
        .map(|n| (n, ids_in(&concat(&c.segments(n, "lost")))))
        .collect();
    assert!(same, "copies are byte-identical: {listing:?}");
    let fin = ids_in(&concat(&c.segments(leader, "lost")));
    assert!(
        (10..25).chain(50..55).all(|id| fin.contains(&id)),
        "{fin:?}"
    );
    let f = c.fragment(leader, "lost");
    assert!(
        f["leader_epoch"].as_u64().expect("epoch") > epoch_before,
        "the restarted leader leads in a new epoch: {f}"
    );
}
