//! A chaos scenario (issues #6, #13, #19): a cluster, the workload, faults, and the check of
//! everything acknowledged once the cluster has healed. The tests in `tests/chaos.rs` pick
//! the faults.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::check::print_row;
use crate::cluster::wait_until;
use crate::disk::DiskKind;
use crate::workload::TOPIC;
use crate::{check, require_docker, Cluster, Workload};

/// One scenario at a time.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// What one fault did: how many faults it injected (a power loss of three nodes is three) and
/// a description for the row.
pub struct Fault {
    count: usize,
    what: String,
}

/// A fault of `count` injections described as `what`, for an `inject` closure's answer.
pub fn fault(count: usize, what: impl Into<String>) -> Option<Fault> {
    Some(Fault {
        count,
        what: what.into(),
    })
}

/// Starts a cluster on `disks` and the workload, lets it run, then up to `rounds` times
/// applies `inject` (which heals before it returns; `None`: no more faults), waits until the cluster is healthy and
/// acknowledging again, and finally checks everything the workload recorded. `after` runs on
/// the healed cluster before the check (extra assertions of a scenario).
pub fn scenario_with(
    name: &str,
    disks: [DiskKind; 3],
    rounds: usize,
    inject: impl FnMut(&mut Cluster, &Workload, usize) -> Option<Fault>,
    after: impl FnOnce(&Cluster),
) {
    run(name, |p| Cluster::start_on(p, disks), rounds, inject, after);
}

/// As [`scenario`] on a cluster with security on (issue #19, [`Cluster::start_secured`]):
/// CURVE on every ZMQ endpoint, the workload's clients with an admitted key, and an admin
/// token on every mutating HTTP request, Raft's included.
pub fn scenario_secured(
    name: &str,
    rounds: usize,
    inject: impl FnMut(&mut Cluster, &Workload, usize) -> Option<Fault>,
) {
    run(name, Cluster::start_secured, rounds, inject, |_| {});
}

fn run(
    name: &str,
    start: impl FnOnce(&str) -> Cluster,
    rounds: usize,
    mut inject: impl FnMut(&mut Cluster, &Workload, usize) -> Option<Fault>,
    after: impl FnOnce(&Cluster),
) {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_docker();
    let prefix = format!("zc{}{}", std::process::id(), name.len());
    let mut c = start(&format!("{prefix}{}", &name[..3]));
    c.create_topic(TOPIC);
    let w = Workload::start(&c);
    assert!(
        wait_until(Duration::from_secs(60), || w.acked_messages() >= 200),
        "{name}: the workload gets acknowledgements before the fault"
    );
    let (mut faults, mut whats, mut recover) = (0, Vec::new(), Duration::ZERO);
    for round in 0..rounds {
        let Some(f) = inject(&mut c, &w, round) else {
            break;
        };
        faults += f.count;
        if !whats.contains(&f.what) {
            whats.push(f.what);
        }
        for (i, n) in c.nodes.iter().enumerate() {
            w.set_ip(i, &n.ip);
        }
        let healed = Instant::now();
        let healthy = c.wait_healthy(Duration::from_secs(60));
        recover = recover.max(healed.elapsed());
        assert!(healthy, "{name}: healthy again after fault {}", round + 1);
        let before = w.acked_messages();
        assert!(
            !w.expired(),
            "{name}: the workload ran out of time ({:?}) before fault {} was over",
            crate::workload::LIMIT,
            round + 1
        );
        assert!(
            wait_until(Duration::from_secs(30), || w.acked_messages()
                >= before + 50),
            "{name}: writes are acknowledged again after fault {}",
            round + 1
        );
    }
    after(&c);
    let acked = w.finish();
    let r = check(&c, &acked);
    print_row(name, faults, &whats.join("; "), &r, recover);
    assert_eq!(
        r.lost_messages, 0,
        "{name}: acknowledged messages lost: {r:?}"
    );
    assert_eq!(
        r.duplicated, 0,
        "{name}: acknowledged messages duplicated: {r:?}"
    );
    assert!(r.identical_logs, "{name}: the copies differ: {r:?}");
    assert_eq!(
        (r.idempotent_lost, r.idempotent_duplicates),
        (0, 0),
        "{name}: idempotent producer's messages lost or stored twice: {r:?}"
    );
    assert_eq!(
        r.lost_puts, 0,
        "{name}: acknowledged Dolly Puts lost: {r:?}"
    );
    assert_eq!(
        r.lost_topics, 0,
        "{name}: acknowledged topics missing: {r:?}"
    );
    assert_eq!(r.split_epochs, 0, "{name}: two leaders in one epoch: {r:?}");
    assert_eq!(
        r.split_terms, 0,
        "{name}: two Raft leaders in one term: {r:?}"
    );
    assert_eq!(
        r.phantom_reads, 0,
        "{name}: a consumer read data that is gone or moved (dirty reads): {r:?}"
    );
    assert!(r.consumed > 0, "{name}: the consumer read along: {r:?}");
    assert!(r.acked_puts > 0 && r.acked_topics > 0, "{name}: {r:?}");
}

/// [`scenario_with`] on plain host directories, with no extra check.
pub fn scenario(
    name: &str,
    rounds: usize,
    inject: impl FnMut(&mut Cluster, &Workload, usize) -> Option<Fault>,
) {
    scenario_with(name, [DiskKind::Dir; 3], rounds, inject, |_| {});
}

/// Waits 3 s: a fault lasts this long before it heals.
pub fn settle() {
    std::thread::sleep(Duration::from_secs(3));
}
