//! Tests of the idempotent-producer window ([`super`]).

use super::*;

const A: ProducerId = zper_wire::idempotent::producer_id([1; 16]);
const B: ProducerId = zper_wire::idempotent::producer_id([2; 16]);

/// Producer `n`'s id.
fn pid(n: u64) -> ProducerId {
    let mut b = [0u8; 16];
    b[8..].copy_from_slice(&n.to_be_bytes());
    zper_wire::idempotent::producer_id(b)
}

/// An empty window of at most `max_producers` producers, other bounds the defaults.
fn window_of(max_producers: usize) -> Window {
    Window::new(Bounds {
        max_producers,
        ..Bounds::default()
    })
}

fn id(pid: &ProducerId, seq: u64) -> Vec<u8> {
    zper_wire::idempotent::message_id(pid, seq).to_vec()
}

#[test]
fn producer_ids_spread_over_the_hash_tables_buckets() {
    // The low bits pick the bucket: random producer ids must not share them (zper's fixed
    // bits once made every id fall in one bucket group).
    use std::hash::{BuildHasher, BuildHasherDefault};
    let build = BuildHasherDefault::<IdHasher>::default();
    let mut buckets = std::collections::HashSet::new();
    let mut x: u64 = 0x1234_5678;
    for _ in 0..4096 {
        let mut b = [0u8; 16];
        for byte in &mut b {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *byte = x as u8;
        }
        buckets.insert(build.hash_one(zper_wire::idempotent::producer_id(b)) & 0xfff);
    }
    assert!(buckets.len() > 2000, "{} of 4096 buckets", buckets.len());
}

#[test]
fn ids_are_exactly_a_producer_and_a_big_endian_sequence() {
    assert_eq!(parse_id(&id(&A, 258)), Some((A, 258)));
    assert_eq!(parse_id(&id(&A, 1)[..23]), None);
    assert_eq!(parse_id(b"7"), None);
    assert_eq!(
        parse_id(&id(&[1; 16], 0)),
        None,
        "not a producer id of zper's"
    );
    assert_eq!(
        parse_id(&id(&A, u64::MAX)),
        None,
        "no next sequence after it"
    );
}

#[test]
fn a_rebuilt_window_past_its_producer_bound_keeps_the_newest_producers() {
    // Rebuilding finds every message at the same instant: the producers forgotten must
    // be those found first in the log, never the ones still sending (their retries would
    // be told to start again at 0 and store their messages twice).
    let now = Instant::now();
    let bounds = Bounds {
        max_producers: 10,
        ..Bounds::default()
    };
    let mut w = Window::new(bounds);
    for n in 0..100 {
        w.found(&pid(n), 0, n * 10 + 10, now);
    }
    assert_eq!(w.producers(), 10);
    for n in 90..100 {
        assert_eq!(
            w.admit(&pid(n), 0, now),
            Verdict::Duplicate(Some(n * 10 + 10)),
            "producer {n}"
        );
    }
    // And live: within one batch (one instant) the one admitted first is forgotten first.
    assert_eq!(w.admit(&pid(500), 0, now), Verdict::New);
    assert_eq!(
        w.lookup(&pid(90), 0),
        Lookup::Unknown,
        "90 was used the longest ago"
    );
    assert_eq!(w.lookup(&pid(91), 0), Lookup::Stored { end: 920 });
}

#[test]
fn a_retry_is_a_duplicate_with_the_first_outcome_and_gaps_are_refused() {
    let now = Instant::now();
    let mut w = Window::new(Bounds::default());
    assert_eq!(w.admit(&A, 0, now), Verdict::New);
    assert_eq!(w.admit(&A, 0, now), Verdict::Duplicate(None), "same batch");
    w.stored(&A, 0, 100);
    assert_eq!(w.admit(&A, 1, now), Verdict::New);
    w.stored(&A, 1, 200);
    for _ in 0..1000 {
        assert_eq!(w.admit(&A, 0, now), Verdict::Duplicate(Some(100)));
    }
    assert_eq!(w.admit(&A, 3, now), Verdict::OutOfSequence { expected: 2 });
    assert_eq!(w.admit(&B, 0, now), Verdict::New, "producers are apart");
    assert_eq!(w.lookup(&A, 1), Lookup::Stored { end: 200 });
    assert_eq!(w.lookup(&A, 2), Lookup::NotStored);
    assert_eq!(w.lookup(&[9; 16], 0), Lookup::Unknown);
}

#[test]
fn a_producer_the_window_does_not_know_starts_at_zero() {
    // Its message 0 lost in flight, message 1 must not be stored over the gap: an ack
    // for 1 would cover 0.
    let now = Instant::now();
    let mut w = Window::new(Bounds::default());
    assert_eq!(w.admit(&A, 1, now), Verdict::OutOfSequence { expected: 0 });
    assert_eq!(w.admit(&A, 5, now), Verdict::OutOfSequence { expected: 0 });
    assert_eq!(w.producers(), 0, "a refusal remembers nothing");
    assert_eq!(w.admit(&A, 0, now), Verdict::New);
    assert_eq!(w.admit(&A, 1, now), Verdict::New);
}

#[test]
fn a_message_not_stored_frees_its_sequence_and_the_later_ones() {
    let now = Instant::now();
    let mut w = Window::new(Bounds::default());
    for seq in 0..5 {
        assert_eq!(w.admit(&A, seq, now), Verdict::New);
    }
    w.failed(&A, 3);
    assert_eq!(w.admit(&A, 5, now), Verdict::OutOfSequence { expected: 3 });
    assert_eq!(w.admit(&A, 3, now), Verdict::New);
    w.failed(&A, 0);
    assert_eq!(w.admit(&A, 1, now), Verdict::OutOfSequence { expected: 0 });
    assert_eq!(w.admit(&A, 0, now), Verdict::New);
}

#[test]
fn the_window_forgets_by_count_age_and_producers() {
    let t0 = Instant::now();
    let bounds = Bounds {
        per_producer: 3,
        max_age: Duration::from_secs(10),
        max_producers: 2,
    };
    let mut w = Window::new(bounds);
    for seq in 0..5 {
        assert_eq!(w.admit(&A, seq, t0), Verdict::New);
        w.stored(&A, seq, seq * 10);
    }
    assert_eq!(w.lookup(&A, 1), Lookup::Unknown, "only the newest 3");
    assert_eq!(w.lookup(&A, 2), Lookup::Stored { end: 20 });
    assert_eq!(
        w.admit(&A, 1, t0),
        Verdict::Duplicate(Some(10)),
        "older than the window: a duplicate acknowledged once the newest forgotten end is durable"
    );
    let later = t0 + Duration::from_secs(11);
    assert_eq!(
        w.admit(&A, 77, later),
        Verdict::OutOfSequence { expected: 5 },
        "all aged out: the next sequence stays"
    );
    assert_eq!(w.lookup(&A, 4), Lookup::Unknown);
    assert_eq!(
        w.admit(&A, 4, later),
        Verdict::Duplicate(Some(40)),
        "aged out, still stored"
    );
    assert_eq!(w.admit_at(&A, 5, later, Some(50)), Verdict::New);
    w.admit(&B, 0, later + Duration::from_secs(1));
    w.admit(&[3; 16], 0, later + Duration::from_secs(2));
    assert_eq!(w.producers(), 2, "A, used the longest ago, was forgotten");
    assert_eq!(w.lookup(&A, 5), Lookup::Unknown);
    assert_eq!(w.forgotten(), 1, "... and summed up");
    assert_eq!(
        w.admit(&A, 7, later),
        Verdict::OutOfSequence { expected: 6 }
    );
    assert_eq!(w.admit(&A, 6, later), Verdict::New, "it goes on");
}

#[test]
fn a_producer_pushed_out_by_others_is_not_stored_twice_when_it_comes_back() {
    // Found by an attack on #18: with max_producers 4, producer A's 0 and 1 were stored,
    // five others pushed A out, and A's retries of 0 and 1 were stored a second time.
    let now = Instant::now();
    let mut w = window_of(4);
    assert_eq!(w.admit_at(&A, 0, now, Some(100)), Verdict::New);
    assert_eq!(w.admit_at(&A, 1, now, Some(200)), Verdict::New);
    for n in 0..5u8 {
        let other = zper_wire::idempotent::producer_id([10 + n; 16]);
        assert_eq!(w.admit_at(&other, 0, now, Some(300)), Verdict::New);
    }
    assert_eq!(w.lookup(&A, 0), Lookup::Unknown, "A was pushed out");
    for seq in [0, 1, 0] {
        assert_eq!(
            w.admit_at(&A, seq, now, Some(400)),
            Verdict::Duplicate(Some(200)),
            "retry of {seq}: acknowledged once A's newest is durable, not stored"
        );
    }
    assert_eq!(
        w.admit_at(&A, 3, now, Some(400)),
        Verdict::OutOfSequence { expected: 2 }
    );
    assert_eq!(w.admit_at(&A, 2, now, Some(400)), Verdict::New);
    assert_eq!(
        w.admit_at(&A, 1, now, Some(500)),
        Verdict::Duplicate(Some(200))
    );
    assert_eq!(
        w.admit_at(&A, 2, now, Some(500)),
        Verdict::Duplicate(Some(400))
    );
}

#[test]
fn producers_pushed_out_are_summed_up_within_a_bound() {
    let now = Instant::now();
    let mut w = window_of(4);
    for n in 0..1000 {
        w.admit_at(&pid(n), 0, now, Some(n + 1));
        assert!(w.forgotten() <= 8, "at most twice max_producers");
    }
    assert_eq!(w.producers(), 4);
    assert!(w.forgotten() >= 4);
    assert_eq!(
        w.admit_at(&pid(990), 0, now, None),
        Verdict::Duplicate(Some(991))
    );
    assert_eq!(
        w.admit_at(&pid(0), 1, now, None),
        Verdict::OutOfSequence { expected: 0 },
        "summed up so long ago it is unknown again: it must start at 0"
    );
}

#[test]
fn a_rebuild_sums_up_the_producers_it_pushes_out() {
    // After a restart the window is rebuilt from the log; the producers found first are
    // pushed out, and must still not have their retries stored twice.
    let now = Instant::now();
    let mut w = window_of(4);
    w.found(&A, 0, 10, now);
    w.found(&A, 1, 20, now);
    for n in 0..4u8 {
        w.found(
            &zper_wire::idempotent::producer_id([10 + n; 16]),
            0,
            30,
            now,
        );
    }
    assert_eq!(
        w.admit_at(&A, 0, now, Some(40)),
        Verdict::Duplicate(Some(20))
    );
    assert_eq!(w.admit_at(&A, 2, now, Some(40)), Verdict::New);
    // Found first past its sequence 0: the earlier ones were stored before the scan.
    w.found(&B, 7, 50, now);
    assert_eq!(
        w.admit_at(&B, 3, now, Some(60)),
        Verdict::Duplicate(Some(50))
    );
}

#[test]
fn rebuilding_from_the_log_keeps_each_producers_newest_run() {
    let now = Instant::now();
    let mut w = Window::new(Bounds::default());
    w.found(&A, 0, 10, now);
    w.found(&A, 1, 20, now);
    w.found(&B, 7, 30, now);
    w.found(&A, 0, 40, now); // the producer started over
    w.found(&A, 1, 50, now);
    assert_eq!(w.lookup(&A, 1), Lookup::Stored { end: 50 });
    assert_eq!(w.admit(&A, 1, now), Verdict::Duplicate(Some(50)));
    assert_eq!(w.admit(&A, 2, now), Verdict::New);
    assert_eq!(w.admit(&B, 8, now), Verdict::New);
}
