//! The checks after a fault heals: on every node, each acknowledged message exactly once at
//! the same offset, byte-identical logs, each successful Put readable with its value, each
//! created topic known, no leader epoch with two leaders, no Raft term with two leaders, and
//! every message a consumer read still there at the offset it read it (no dirty read).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use zper_client::dolly::DollyReply;
use zper_client::{ClientError, DollyClient, ReaderClient};

use crate::cluster::{wait_until, Cluster};
use crate::logs::{idempotent_messages, messages};
use crate::workload::{Acked, DOLLY, READER, TOPIC};

/// The outcome of [`check`].
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Messages acknowledged during the run.
    pub acked_messages: usize,
    /// Acknowledged messages missing on some node.
    pub lost_messages: usize,
    /// Acknowledged messages stored more than once on some node.
    pub duplicated: usize,
    /// Dolly Puts acknowledged.
    pub acked_puts: usize,
    /// Acknowledged Puts not readable with their value on some node.
    pub lost_puts: usize,
    /// Topic creations acknowledged.
    pub acked_topics: usize,
    /// Acknowledged topics missing on some node.
    pub lost_topics: usize,
    /// Leader epochs seen with more than one leader.
    pub split_epochs: usize,
    /// Raft terms in which more than one node said it leads.
    pub split_terms: usize,
    /// Whether every node's copy of the topic is byte-identical.
    pub identical_logs: bool,
    /// Each node's readable copy of the topic: (bytes, first offset where it differs from
    /// node 1's), to tell a lagging high-water mark (a shorter prefix) from a fork.
    pub copies: Vec<(usize, Option<usize>)>,
    /// Each node's leader-epoch history of the topic (`/v1/topics/chaos`), to find who wrote
    /// what when the copies differ.
    pub epochs: Vec<String>,
    /// Messages a consumer read during the run.
    pub consumed: usize,
    /// Messages a consumer read that are missing afterwards, or stored at another offset than
    /// where they were read (a dirty read: data above a durable high-water mark).
    pub phantom_reads: usize,
    /// Up to 10 dirty reads: (id, offset read at, offset in the final log if any).
    pub dirty_sample: Vec<(u64, usize, Option<usize>)>,
    /// The idempotent producer's acknowledged messages (issue #18).
    pub idempotent_acked: usize,
    /// ... missing on some node, or stored there with another payload.
    pub idempotent_lost: usize,
    /// (producer id, sequence) pairs stored more than once on some node, acknowledged or not:
    /// an idempotent producer's retries must never store a message twice.
    pub idempotent_duplicates: usize,
    /// Up to 20 lost ids, with the ack mode they were acknowledged in and the node index they
    /// were sent to (mode 1).
    pub lost_sample: Vec<(u64, u8, usize)>,
}

/// Reads node `ip`'s whole copy of [`TOPIC`] with FETCH from 0.
fn read_log(
    ctx: &zmq::Context,
    ip: &str,
    curve: Option<&zper_client::ClientCurve>,
) -> Option<Vec<u8>> {
    let at = format!("tcp://{ip}:{READER}");
    let r = ReaderClient::connect_with(ctx, &at, TOPIC, 0, Duration::from_secs(3), curve).ok()?;
    let mut out = Vec::new();
    loop {
        let data = match r.fetch(out.len() as u64, 1 << 20) {
            Ok(Some(data)) => data,
            // 101 past the end, or another status: the log read so far.
            Ok(None) | Err(ClientError::Malformed { .. }) => return Some(out),
            Err(_) => return None,
        };
        let valid = zper_wire::valid_bytes(&data);
        if valid == 0 {
            return Some(out);
        }
        out.extend_from_slice(&data[..valid]);
    }
}

/// Checks everything `acked` recorded against every node of `cluster`, once the copies have
/// converged (at most 60 s).
pub fn check(cluster: &Cluster, acked: &Acked) -> CheckReport {
    let ctx = zmq::Context::new();
    let mut logs: Vec<Vec<u8>> = Vec::new();
    let identical = wait_until(Duration::from_secs(60), || {
        logs = cluster
            .nodes
            .iter()
            .map(|n| read_log(&ctx, &n.ip, cluster.security.curve.as_ref()).unwrap_or_default())
            .collect();
        logs.windows(2).all(|w| w[0] == w[1])
    });
    let mut r = CheckReport {
        acked_messages: acked.messages.len(),
        acked_puts: acked.puts.len(),
        acked_topics: acked.topics.len(),
        identical_logs: identical,
        copies: logs
            .iter()
            .map(|l| {
                let first = logs.first().map_or(&[][..], Vec::as_slice);
                let differs = l.iter().zip(first).position(|(a, b)| a != b);
                (l.len(), differs)
            })
            .collect(),
        epochs: (0..cluster.nodes.len())
            .map(|i| {
                let v = cluster.get(i, &format!("/v1/topics/{TOPIC}"));
                v["fragments"][0]["epochs"].to_string()
            })
            .collect(),
        ..Default::default()
    };
    let mut lost = BTreeSet::new();
    let mut dup = BTreeSet::new();
    let mut offsets: BTreeMap<u64, usize> = BTreeMap::new();
    for log in &logs {
        let mut count: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (id, off) in messages(log) {
            count.entry(id).or_default().push(off);
        }
        for id in &acked.messages {
            match count.get(id).map(Vec::as_slice) {
                None => {
                    lost.insert(*id);
                }
                Some([off]) => {
                    // The same offset on every node.
                    if *offsets.entry(*id).or_insert(*off) != *off {
                        dup.insert(*id);
                    }
                }
                Some(_) => {
                    dup.insert(*id);
                }
            }
        }
    }
    r.lost_messages = lost.len();
    let stored: BTreeMap<u64, usize> = logs
        .first()
        .map(|l| messages(l).into_iter().collect())
        .unwrap_or_default();
    r.consumed = acked.consumed.len();
    let dirty: Vec<(u64, usize, Option<usize>)> = acked
        .consumed
        .iter()
        .filter(|(id, at)| stored.get(id) != Some(at))
        .map(|(id, at)| (*id, *at, stored.get(id).copied()))
        .collect();
    r.phantom_reads = dirty.len();
    r.dirty_sample = dirty.into_iter().take(10).collect();
    r.lost_sample = lost
        .iter()
        .take(20)
        .map(|id| match acked.mode1.get(id) {
            Some(via) => (*id, 1, *via),
            None => (*id, 2, 9),
        })
        .collect();
    r.duplicated = dup.len();
    // Idempotent producer: every sequence at most once, every acknowledged one with its payload.
    r.idempotent_acked = acked.idempotent.len() + acked.idempotent_mode1.len();
    let (mut idem_lost, mut idem_dup) = (BTreeSet::new(), BTreeSet::new());
    for log in &logs {
        let mut seen: BTreeMap<([u8; 16], u64), u64> = BTreeMap::new();
        for (key, payload) in idempotent_messages(log) {
            if seen.insert(key, payload).is_some() {
                idem_dup.insert(key);
            }
        }
        for (key, payload) in &acked.idempotent {
            if seen.get(key) != Some(payload) {
                idem_lost.insert(*key);
            }
        }
        let payloads: BTreeSet<u64> = seen.values().copied().collect();
        for payload in acked.idempotent_mode1.difference(&payloads) {
            idem_lost.insert(([0; 16], *payload));
        }
    }
    r.idempotent_lost = idem_lost.len();
    r.idempotent_duplicates = idem_dup.len();
    // Dolly: every acknowledged Put readable on every node.
    let mut lost_puts = BTreeSet::new();
    for n in &cluster.nodes {
        let at = format!("tcp://{}:{DOLLY}", n.ip);
        let Ok(client) = DollyClient::connect_with(&ctx, &at, cluster.security.curve.as_ref())
        else {
            lost_puts.extend(acked.puts.keys().cloned());
            continue;
        };
        for (k, v) in &acked.puts {
            let ok = matches!(
                client.get(k, Duration::from_secs(3)),
                Ok(DollyReply::Value { value, .. }) if value == *v
            );
            if !ok {
                lost_puts.insert(k.clone());
            }
        }
    }
    r.lost_puts = lost_puts.len();
    // Metadata: every acknowledged topic on every node.
    let mut lost_topics = BTreeSet::new();
    for i in 0..cluster.nodes.len() {
        let known: BTreeSet<String> = cluster
            .get(i, "/v1/topics")
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        lost_topics.extend(acked.topics.difference(&known).cloned());
    }
    r.lost_topics = lost_topics.len();
    r.split_epochs = acked.epochs.values().filter(|l| l.len() > 1).count();
    r.split_terms = acked.terms.values().filter(|l| l.len() > 1).count();
    r
}

/// Prints the table header once per process.
pub fn print_header() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        eprintln!(
            "{:<20} {:>6} {:>6} {:>5} {:>6} {:>5} {:>5} {:>5} {:>6} {:>9}  faults",
            "scenario",
            "faults",
            "acked",
            "lost",
            "read",
            "dirty",
            "puts",
            "lost",
            "topics",
            "recover_s"
        );
    });
}

/// One table row: `faults` injected (described by `what`), and the longest recovery after one.
pub fn print_row(scenario: &str, faults: usize, what: &str, r: &CheckReport, recover: Duration) {
    print_header();
    eprintln!(
        "{:<20} {:>6} {:>6} {:>5} {:>6} {:>5} {:>5} {:>5} {:>6} {:>9.1}  {}",
        scenario,
        faults,
        r.acked_messages,
        r.lost_messages,
        r.consumed,
        r.phantom_reads,
        r.acked_puts,
        r.lost_puts,
        r.acked_topics,
        recover.as_secs_f64(),
        what
    );
}
