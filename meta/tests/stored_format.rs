//! The stored format of the metadata (issue #14): the Raft log holds each entry's [`Command`]
//! and snapshots hold the [`Metadata`] as `serde_json`, and followers forward commands and
//! read their [`CommandResult`]s as JSON. The literals below were written by the code before
//! the metadata moved into this crate; they must keep parsing to the same values and
//! serializing to the same bytes, or nodes could not read their own logs and snapshots after
//! an upgrade.

use std::collections::BTreeMap;

use zper_meta::{
    Applied, Command, CommandResult, DollyRequest, FragmentPolicy, Metadata, MetadataError,
    NodeEndpoints, NodeId, PlacementReason,
};

/// The endpoints the literals carry for node `id`.
fn endpoints(id: NodeId) -> NodeEndpoints {
    NodeEndpoints {
        name: format!("n{id}"),
        writer: format!("tcp://10.0.0.{id}:5555"),
        reader: format!("tcp://10.0.0.{id}:5556"),
        ack: format!("tcp://10.0.0.{id}:5557"),
        controller: format!("tcp://10.0.0.{id}:5558"),
        dolly_requests: format!("tcp://10.0.0.{id}:5559"),
        dolly_updates: format!("tcp://10.0.0.{id}:5560"),
        dolly_snapshots: format!("tcp://10.0.0.{id}:5561"),
        http: format!("10.0.0.{id}:9644"),
        replica: format!("tcp://10.0.0.{id}:5562"),
        relay: format!("tcp://10.0.0.{id}:5563"),
        peer: None,
    }
}

/// One command of every kind, as `serde_json::to_vec` wrote it into the log.
fn stored_commands() -> Vec<(&'static str, Command)> {
    vec![
        (
            r#"{"RegisterNode":{"id":1,"endpoints":{"name":"n1","writer":"tcp://10.0.0.1:5555","reader":"tcp://10.0.0.1:5556","ack":"tcp://10.0.0.1:5557","controller":"tcp://10.0.0.1:5558","dolly_requests":"tcp://10.0.0.1:5559","dolly_updates":"tcp://10.0.0.1:5560","dolly_snapshots":"tcp://10.0.0.1:5561","http":"10.0.0.1:9644","replica":"tcp://10.0.0.1:5562","relay":"tcp://10.0.0.1:5563"},"now_ms":1700000000000,"lease_ms":10000,"incarnation":1700000000000123}}"#,
            Command::RegisterNode {
                id: 1,
                endpoints: endpoints(1),
                now_ms: 1_700_000_000_000,
                lease_ms: 10_000,
                incarnation: 1_700_000_000_000_123,
            },
        ),
        (
            r#"{"Heartbeat":{"id":2,"now_ms":1700000001000,"lease_ms":10000}}"#,
            Command::Heartbeat {
                id: 2,
                now_ms: 1_700_000_001_000,
                lease_ms: 10_000,
            },
        ),
        (
            r#"{"ExpireLeases":{"now_ms":1700000020000}}"#,
            Command::ExpireLeases {
                now_ms: 1_700_000_020_000,
            },
        ),
        (
            r#"{"RemoveNode":{"id":3,"now_ms":1700000030000}}"#,
            Command::RemoveNode {
                id: 3,
                now_ms: 1_700_000_030_000,
            },
        ),
        (
            r#"{"CreateTopic":{"name":"orders","fragments":4,"replication_factor":null,"retain_hours":24,"policy":"distribution","now_ms":1700000002000}}"#,
            Command::CreateTopic {
                name: "orders".into(),
                fragments: Some(4),
                replication_factor: None,
                retain_hours: Some(24),
                policy: FragmentPolicy::Distribution,
                now_ms: 1_700_000_002_000,
            },
        ),
        (
            r#"{"SetRetention":{"name":"orders","retain_hours":48}}"#,
            Command::SetRetention {
                name: "orders".into(),
                retain_hours: 48,
            },
        ),
        (
            r#"{"DeleteTopic":{"name":"orders"}}"#,
            Command::DeleteTopic {
                name: "orders".into(),
            },
        ),
        (
            r#"{"SetDollyLeader":{"id":1}}"#,
            Command::SetDollyLeader { id: 1 },
        ),
        (
            r#"{"DollyPut":{"key":[99,111,108,111,114],"value":[0,255,7],"request":{"origin":2,"serial":1700000000000001},"deadline_ms":1700000005000}}"#,
            Command::DollyPut {
                key: b"color".to_vec(),
                value: vec![0, 255, 7],
                request: Some(DollyRequest {
                    origin: 2,
                    serial: 1_700_000_000_000_001,
                }),
                deadline_ms: 1_700_000_005_000,
            },
        ),
        (
            r#"{"DollyPut":{"key":[107],"value":[],"request":null,"deadline_ms":0}}"#,
            Command::DollyPut {
                key: b"k".to_vec(),
                value: Vec::new(),
                request: None,
                deadline_ms: 0,
            },
        ),
        (
            r#"{"DollyCancel":{"request":{"origin":2,"serial":9},"now_ms":1700000006000}}"#,
            Command::DollyCancel {
                request: DollyRequest {
                    origin: 2,
                    serial: 9,
                },
                now_ms: 1_700_000_006_000,
            },
        ),
        (
            r#"{"Subscribe":{"topic":"orders","group":"billing","subscriber":"worker-1","now_ms":1700000003000,"lease_ms":30000}}"#,
            Command::Subscribe {
                topic: "orders".into(),
                group: "billing".into(),
                subscriber: "worker-1".into(),
                now_ms: 1_700_000_003_000,
                lease_ms: 30_000,
            },
        ),
        (
            r#"{"Unsubscribe":{"topic":"orders","group":"billing","subscriber":"worker-1","now_ms":1700000004000}}"#,
            Command::Unsubscribe {
                topic: "orders".into(),
                group: "billing".into(),
                subscriber: "worker-1".into(),
                now_ms: 1_700_000_004_000,
            },
        ),
        (
            r#"{"CommitOffset":{"topic":"orders","group":"billing","subscriber":"worker-1","fragment":2,"offset":4096}}"#,
            Command::CommitOffset {
                topic: "orders".into(),
                group: "billing".into(),
                subscriber: "worker-1".into(),
                fragment: 2,
                offset: 4096,
            },
        ),
        (
            r#"{"SetIsr":{"topic":"orders","fragment":1,"leader_epoch":3,"isr":[2,1]}}"#,
            Command::SetIsr {
                topic: "orders".into(),
                fragment: 1,
                leader_epoch: 3,
                isr: vec![2, 1],
            },
        ),
        (
            r#"{"LeaveIsr":{"topic":"orders","fragment":0,"node":2}}"#,
            Command::LeaveIsr {
                topic: "orders".into(),
                fragment: 0,
                node: 2,
            },
        ),
    ]
}

#[test]
fn stored_commands_parse_to_the_same_commands_and_serialize_to_the_same_bytes() {
    for (json, expected) in stored_commands() {
        let parsed: Command = serde_json::from_str(json).expect(json);
        assert_eq!(parsed, expected, "{json}");
        let written = serde_json::to_string(&expected).expect("a command serializes");
        assert_eq!(written, json);
    }
}

#[test]
fn commands_written_before_optional_fields_existed_still_parse() {
    // Nodes that predate incarnations and the replica/relay endpoints.
    let old = r#"{"RegisterNode":{"id":4,"endpoints":{"name":"n4","writer":"w","reader":"r","ack":"a","controller":"c","dolly_requests":"dr","dolly_updates":"du","dolly_snapshots":"ds","http":"h:1"},"now_ms":5,"lease_ms":6}}"#;
    let parsed: Command = serde_json::from_str(old).expect("an old RegisterNode parses");
    assert_eq!(
        parsed,
        Command::RegisterNode {
            id: 4,
            endpoints: NodeEndpoints {
                name: "n4".into(),
                writer: "w".into(),
                reader: "r".into(),
                ack: "a".into(),
                controller: "c".into(),
                dolly_requests: "dr".into(),
                dolly_updates: "du".into(),
                dolly_snapshots: "ds".into(),
                http: "h:1".into(),
                replica: String::new(),
                relay: String::new(),
                peer: None,
            },
            now_ms: 5,
            lease_ms: 6,
            incarnation: 0,
        }
    );
    // A Dolly Put from before request ids and deadlines.
    let old = r#"{"DollyPut":{"key":[1,2],"value":[3]}}"#;
    let parsed: Command = serde_json::from_str(old).expect("an old DollyPut parses");
    assert_eq!(
        parsed,
        Command::DollyPut {
            key: vec![1, 2],
            value: vec![3],
            request: None,
            deadline_ms: 0,
        }
    );
}

#[test]
fn stored_command_results_parse_and_serialize_the_same() {
    let results: [(&str, CommandResult); 5] = [
        (
            r#"{"Ok":{"Placement":[]}}"#,
            Ok(Applied::Placement(Vec::new())),
        ),
        (r#"{"Ok":"Done"}"#, Ok(Applied::Done)),
        (
            r#"{"Ok":{"Subscription":{"fragments":{"0":0,"1":0},"revision":14}}}"#,
            Ok(Applied::Subscription {
                fragments: BTreeMap::from([(0, 0), (1, 0)]),
                revision: 14,
            }),
        ),
        (
            r#"{"Ok":{"DollyPut":{"sequence":20}}}"#,
            Ok(Applied::DollyPut { sequence: 20 }),
        ),
        (
            r#"{"Err":{"UnknownTopic":"x"}}"#,
            Err(MetadataError::UnknownTopic("x".into())),
        ),
    ];
    for (json, expected) in results {
        let parsed: CommandResult = serde_json::from_str(json).expect(json);
        assert_eq!(parsed, expected, "{json}");
        let written = serde_json::to_string(&expected).expect("a result serializes");
        assert_eq!(written, json);
    }
    // A placed topic, as CreateTopic answers it.
    let topic = r#"{"Ok":{"Topic":{"replication_factor":2,"retain_hours":168,"policy":"distribution","fragments":[{"id":0,"leader":1,"leader_epoch":0,"replicas":[1,2],"isr":[1,2],"last_change":{"kind":"created"}},{"id":1,"leader":2,"leader_epoch":0,"replicas":[2,1],"isr":[2,1],"last_change":{"kind":"created"}}]}}}"#;
    let parsed: CommandResult = serde_json::from_str(topic).expect("a topic result parses");
    let Ok(Applied::Topic(t)) = &parsed else {
        panic!("not a topic: {parsed:?}");
    };
    assert_eq!((t.replication_factor, t.retain_hours), (2, 168));
    assert_eq!(t.fragments[1].last_change, Some(PlacementReason::Created));
    assert_eq!(serde_json::to_string(&parsed).expect("serializes"), topic);
}

/// The metadata of a snapshot, as `serde_json::to_vec` wrote it: two nodes, a topic with a
/// damaged copy, the Dolly leader, a Dolly key of raw bytes with an applied and a cancelled
/// request, and a subscription group with a committed offset.
const SNAPSHOT: &str = r#"{"nodes":{"1":{"endpoints":{"name":"n1","writer":"tcp://10.0.0.1:5555","reader":"tcp://10.0.0.1:5556","ack":"tcp://10.0.0.1:5557","controller":"tcp://10.0.0.1:5558","dolly_requests":"tcp://10.0.0.1:5559","dolly_updates":"tcp://10.0.0.1:5560","dolly_snapshots":"tcp://10.0.0.1:5561","http":"10.0.0.1:9644","replica":"tcp://10.0.0.1:5562","relay":"tcp://10.0.0.1:5563"},"lease_until_ms":11000,"incarnation":11},"2":{"endpoints":{"name":"n2","writer":"tcp://10.0.0.2:5555","reader":"tcp://10.0.0.2:5556","ack":"tcp://10.0.0.2:5557","controller":"tcp://10.0.0.2:5558","dolly_requests":"tcp://10.0.0.2:5559","dolly_updates":"tcp://10.0.0.2:5560","dolly_snapshots":"tcp://10.0.0.2:5561","http":"10.0.0.2:9644","replica":"tcp://10.0.0.2:5562","relay":"tcp://10.0.0.2:5563"},"lease_until_ms":11000,"incarnation":22}},"topics":{"orders":{"replication_factor":2,"retain_hours":168,"policy":"distribution","fragments":[{"id":0,"leader":1,"leader_epoch":0,"replicas":[1,2],"isr":[1],"last_change":{"kind":"damaged_copy","node":2}},{"id":1,"leader":2,"leader_epoch":0,"replicas":[2,1],"isr":[2,1],"last_change":{"kind":"created"}}]}},"dolly_leader":1,"dolly":[[[0,98,255],{"sequence":20,"value":[98,108,117,101]}]],"dolly_sequence":20,"dolly_requests":{"1":{"77":{"deadline_ms":5000,"sequence":20}},"2":{"5":{"deadline_ms":5100,"sequence":null}}},"subscriptions":{"orders":{"billing":{"members":{"w1":31200},"assignment":{"0":["w1"],"1":["w1"]},"offsets":{"1":512},"member_offsets":{}}}}}"#;

#[test]
fn a_stored_snapshot_parses_and_serializes_to_the_same_bytes() {
    let m: Metadata = serde_json::from_str(SNAPSHOT).expect("the snapshot parses");
    assert_eq!(m.nodes.len(), 2);
    assert_eq!(m.nodes[&1].endpoints, endpoints(1));
    assert_eq!(
        (m.nodes[&2].lease_until_ms, m.nodes[&2].incarnation),
        (11_000, 22)
    );
    let orders = &m.topics["orders"];
    assert_eq!(orders.policy, FragmentPolicy::Distribution);
    assert_eq!(orders.fragments[0].isr, vec![1]);
    assert_eq!(
        orders.fragments[0].last_change,
        Some(PlacementReason::DamagedCopy(2))
    );
    assert_eq!(m.dolly_leader, Some(1));
    let record = &m.dolly[[0u8, 98, 255].as_slice()];
    assert_eq!(
        (record.sequence, record.value.as_slice()),
        (20, b"blue".as_slice())
    );
    assert_eq!(m.dolly_sequence, 20);
    assert_eq!(m.dolly_requests[&1][&77].sequence, Some(20));
    assert_eq!(m.dolly_requests[&2][&5].sequence, None);
    let billing = &m.subscriptions["orders"]["billing"];
    assert_eq!(billing.members["w1"], 31_200);
    assert_eq!(
        billing.committed(FragmentPolicy::Distribution, "w1", 1),
        512
    );
    assert_eq!(serde_json::to_string(&m).expect("serializes"), SNAPSHOT);
    // The hash every node compares is over these bytes, so it is pinned too.
    assert_eq!(m.state_hash(), 18_342_441_714_491_978_302);
}

#[test]
fn a_snapshot_from_before_dolly_and_subscriptions_still_parses() {
    let old = r#"{"nodes":{},"topics":{},"dolly_leader":null}"#;
    let m: Metadata = serde_json::from_str(old).expect("an old snapshot parses");
    assert_eq!(m, Metadata::default());
}

/// Endpoints with peer addresses (issue #15: clients told published ports) keep a stable JSON
/// shape, and without them the JSON is exactly the older one (pinned above).
#[test]
fn peer_endpoints_are_stored_only_when_set() {
    let mut e = endpoints(2);
    e.writer = "tcp://127.0.0.1:15555".into();
    e.peer = Some(zper_meta::PeerEndpoints {
        writer: "tcp://zper2:5555".into(),
        reader: "tcp://zper2:5556".into(),
        relay: "tcp://zper2:5559".into(),
    });
    let json = serde_json::to_string(&e).expect("json");
    assert!(
        json.ends_with(r#","peer":{"writer":"tcp://zper2:5555","reader":"tcp://zper2:5556","relay":"tcp://zper2:5559"}}"#),
        "{json}"
    );
    let back: NodeEndpoints = serde_json::from_str(&json).expect("parses");
    assert_eq!(back, e);
    assert_eq!(back.peer_writer(), "tcp://zper2:5555");
    assert_eq!(endpoints(2).peer_writer(), "tcp://10.0.0.2:5555");
    assert!(!serde_json::to_string(&endpoints(2))
        .expect("json")
        .contains("peer"));
}
