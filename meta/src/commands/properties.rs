//! Property test of apply: placement stays safe, deterministic and settled under any script.

use proptest::prelude::*;

use crate::NodeEndpoints;
use crate::{Applied, Command, Metadata};
use crate::{Fragment, FragmentPolicy};

fn command() -> impl Strategy<Value = Command> {
    let t = 0u64..100;
    prop_oneof![
        (1u64..=5, t.clone()).prop_map(|(id, s)| Command::RegisterNode {
            id,
            endpoints: NodeEndpoints::default(),
            now_ms: s * 1000,
            lease_ms: 10_000,
            incarnation: 0,
        }),
        (1u64..=5, t.clone()).prop_map(|(id, s)| Command::Heartbeat {
            id,
            now_ms: s * 1000,
            lease_ms: 10_000,
        }),
        t.clone()
            .prop_map(|s| Command::ExpireLeases { now_ms: s * 1000 }),
        (1u64..=5, t.clone()).prop_map(|(id, s)| Command::RemoveNode {
            id,
            now_ms: s * 1000
        }),
        (0u8..4, 1u32..6, proptest::option::of(1u32..4), t.clone()).prop_map(|(n, f, rf, s)| {
            Command::CreateTopic {
                name: format!("t{n}"),
                fragments: Some(f),
                replication_factor: rf,
                retain_hours: None,
                policy: FragmentPolicy::Default,
                now_ms: s * 1000,
            }
        }),
        (0u8..4).prop_map(|n| Command::DeleteTopic {
            name: format!("t{n}")
        }),
        (0u8..4, 0u32..3).prop_map(|(n, h)| Command::SetRetention {
            name: format!("t{n}"),
            retain_hours: h,
        }),
        (0u64..8, 0u8..4, t.clone()).prop_map(|(serial, k, s)| Command::DollyPut {
            key: vec![k],
            value: serial.to_le_bytes().to_vec(),
            request: Some(crate::DollyRequest { origin: 1, serial }),
            deadline_ms: s * 1000,
        }),
        (0u8..4, 0u8..2, 0u8..4, t.clone()).prop_map(|(n, g, m, s)| Command::Subscribe {
            topic: format!("t{n}"),
            group: format!("g{g}"),
            subscriber: format!("m{m}"),
            now_ms: s * 1000,
            lease_ms: 5_000,
        }),
        (0u8..4, 0u8..2, 0u8..4, t.clone()).prop_map(|(n, g, m, s)| Command::Unsubscribe {
            topic: format!("t{n}"),
            group: format!("g{g}"),
            subscriber: format!("m{m}"),
            now_ms: s * 1000,
        }),
        (0u64..8, t).prop_map(|(serial, s)| Command::DollyCancel {
            request: crate::DollyRequest { origin: 1, serial },
            now_ms: s * 1000,
        }),
    ]
}

fn check(f: &Fragment) -> Result<(), TestCaseError> {
    let mut distinct = f.replicas.clone();
    distinct.sort_unstable();
    distinct.dedup();
    prop_assert_eq!(distinct.len(), f.replicas.len(), "replicas distinct");
    prop_assert_eq!(f.replicas.first(), Some(&f.leader), "leader first");
    prop_assert_eq!(f.isr.first(), Some(&f.leader), "leader in sync");
    prop_assert!(
        f.isr.iter().all(|n| f.replicas.contains(n)),
        "isr in replicas"
    );
    Ok(())
}

proptest! {
    #[test]
    fn placement_stays_safe_deterministic_and_settled(script in proptest::collection::vec(command(), 1..40)) {
        let mut m = Metadata::default();
        let mut twin = Metadata::default();
        for c in &script {
            let before = m.clone();
            let result = m.apply(c);
            prop_assert_eq!(&result, &twin.apply(c), "same result on every node");
            prop_assert_eq!(m.state_hash(), twin.state_hash());
            if let Ok(Applied::Placement(changes)) = &result {
                for ch in changes {
                    if ch.leader != ch.old_leader {
                        let old = &before.topics[&ch.topic].fragments[ch.fragment as usize];
                        prop_assert!(old.isr.contains(&ch.leader), "new leader was in sync: {:?}", ch);
                        prop_assert_eq!(ch.leader_epoch, old.leader_epoch + 1);
                    }
                }
                // A settled placement: running it again at the same time changes nothing
                // (only the lease check fences, so a join is settled against itself).
                if let Command::ExpireLeases { now_ms } = c {
                    let again = m.clone().apply(&Command::ExpireLeases { now_ms: *now_ms });
                    prop_assert_eq!(again, Ok(Applied::Placement(Vec::new())));
                }
                if let Command::RegisterNode { .. } = c {
                    prop_assert_eq!(m.clone().apply(c), Ok(Applied::Placement(Vec::new())));
                }
            }
            if result.is_err() {
                prop_assert_eq!(&m, &before, "a refused command changes nothing");
            }
            for f in m.topics.values().flat_map(|t| &t.fragments) {
                check(f)?;
            }
        }
    }
}
