//! Answers controller requests (`zper_wire::controller`) from the applied metadata: a pure
//! function, so the node's controller endpoint only moves frames.

use zper_wire::controller::{
    AssignedFragment, ControllerReply, ControllerRequest, FragmentInfo, NodeInfo, ReplicaInfo,
    SubscriptionInfo,
};
use zper_wire::Status;

use crate::metadata::Metadata;
use crate::NodeId;

fn node_info(meta: &Metadata, id: NodeId, now_ms: u64) -> Option<NodeInfo> {
    let n = meta.nodes.get(&id)?;
    let e = &n.endpoints;
    Some(NodeInfo {
        id,
        live: n.lease_until_ms > now_ms,
        name: e.name.clone(),
        endpoints: [
            e.writer.clone(),
            e.reader.clone(),
            e.ack.clone(),
            e.controller.clone(),
            e.dolly_requests.clone(),
            e.dolly_updates.clone(),
            e.dolly_snapshots.clone(),
            e.http.clone(),
        ],
    })
}

/// The SUBSCRIBE / KEEPALIVE reply for a subscriber's fragments (`fragment -> committed
/// offset`, from [`crate::metadata::Applied::Subscription`]): each with the relay endpoints of
/// the nodes holding a copy, the fragment's leader first, then the other in-sync replicas, then
/// the rest (nodes that advertise no relay are left out).
pub fn subscription_info(
    meta: &Metadata,
    topic: &str,
    fragments: &std::collections::BTreeMap<u32, u64>,
    lease_ms: u64,
    revision: u64,
) -> SubscriptionInfo {
    let placed = meta.topics.get(topic);
    let relays = |id: u32| -> Vec<String> {
        let Some(f) = placed.and_then(|t| t.fragments.iter().find(|f| f.id == id)) else {
            return Vec::new();
        };
        let mut order: Vec<NodeId> = vec![f.leader];
        order.extend(f.isr.iter().filter(|n| **n != f.leader));
        order.extend(
            f.replicas
                .iter()
                .filter(|n| !f.isr.contains(n) && **n != f.leader),
        );
        order
            .iter()
            .filter_map(|n| meta.nodes.get(n))
            .map(|n| n.endpoints.relay.clone())
            .filter(|r| !r.is_empty())
            .collect()
    };
    SubscriptionInfo {
        lease_ms,
        revision,
        fragments: fragments
            .iter()
            .map(|(id, offset)| AssignedFragment {
                id: *id,
                offset: *offset,
                relays: relays(*id),
            })
            .collect(),
    }
}

/// The reply to `request` given the metadata, the Raft leader as this node knows it, and the
/// time (for liveness), ms since the epoch.
pub fn answer(
    meta: &Metadata,
    leader: Option<NodeId>,
    request: &ControllerRequest,
    now_ms: u64,
) -> ControllerReply {
    match request {
        ControllerRequest::Nodes => ControllerReply::Nodes(
            meta.nodes
                .keys()
                .filter_map(|id| node_info(meta, *id, now_ms))
                .collect(),
        ),
        ControllerRequest::Leader => match leader.and_then(|l| node_info(meta, l, now_ms)) {
            Some(n) => ControllerReply::Leader(Box::new(n)),
            None => ControllerReply::Status(Status::InvalidOffset),
        },
        // Answered by the node after a Raft proposal (see `subscription_info`); reaching here
        // is a caller's mistake, answered as malformed rather than by panicking.
        ControllerRequest::Subscribe(_)
        | ControllerRequest::KeepAlive(_)
        | ControllerRequest::Unsubscribe(_) => ControllerReply::Status(Status::InvalidCommand),
        ControllerRequest::Topic(name) => match meta.topics.get(name) {
            None => ControllerReply::Status(Status::InvalidOffset),
            Some(t) => ControllerReply::Topic(
                t.fragments
                    .iter()
                    .map(|f| FragmentInfo {
                        id: f.id,
                        leader: f.leader,
                        leader_epoch: f.leader_epoch,
                        replicas: f
                            .replicas
                            .iter()
                            .map(|r| {
                                let e = meta.nodes.get(r).map(|n| &n.endpoints);
                                ReplicaInfo {
                                    id: *r,
                                    writer: e.map(|e| e.writer.clone()).unwrap_or_default(),
                                    reader: e.map(|e| e.reader.clone()).unwrap_or_default(),
                                }
                            })
                            .collect(),
                    })
                    .collect(),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{Command, FragmentPolicy};
    use crate::NodeEndpoints;

    fn cluster() -> Metadata {
        let mut m = Metadata::default();
        for id in 1..=3 {
            m.apply(&Command::RegisterNode {
                id,
                endpoints: NodeEndpoints {
                    name: format!("n{id}"),
                    writer: format!("tcp://h{id}:5555"),
                    reader: format!("tcp://h{id}:5556"),
                    relay: format!("tcp://h{id}:5559"),
                    ..Default::default()
                },
                now_ms: 0,
                lease_ms: 1000,
                incarnation: 0,
            })
            .expect("register");
        }
        m.apply(&Command::CreateTopic {
            name: "orders".into(),
            fragments: Some(2),
            replication_factor: Some(2),
            retain_hours: None,
            policy: FragmentPolicy::Default,
            now_ms: 1,
        })
        .expect("create");
        m
    }

    #[test]
    fn topic_reply_names_leaders_and_replica_endpoints() {
        let m = cluster();
        let ControllerReply::Topic(f) =
            answer(&m, Some(1), &ControllerRequest::Topic("orders".into()), 5)
        else {
            unreachable!("a known topic answers with its fragments");
        };
        assert_eq!(f.len(), 2);
        for frag in &f {
            assert_eq!(frag.replicas[0].id, frag.leader);
            assert_eq!(
                frag.replicas[0].reader,
                format!("tcp://h{}:5556", frag.leader)
            );
            assert_eq!(frag.replicas.len(), 2);
        }
        assert_eq!(
            answer(&m, Some(1), &ControllerRequest::Topic("nope".into()), 5),
            ControllerReply::Status(Status::InvalidOffset)
        );
    }

    #[test]
    fn leader_and_nodes_replies_report_liveness() {
        let m = cluster();
        let ControllerReply::Leader(l) = answer(&m, Some(2), &ControllerRequest::Leader, 5) else {
            unreachable!("a known leader");
        };
        assert_eq!((l.id, l.live, l.name.as_str()), (2, true, "n2"));
        assert_eq!(
            answer(&m, None, &ControllerRequest::Leader, 5),
            ControllerReply::Status(Status::InvalidOffset)
        );
        let ControllerReply::Nodes(n) = answer(&m, None, &ControllerRequest::Nodes, 5000) else {
            unreachable!("nodes");
        };
        assert_eq!(n.len(), 3);
        assert!(n.iter().all(|n| !n.live), "leases of 1 s ended before 5 s");
    }

    #[test]
    fn subscription_info_lists_relays_leader_first() {
        let m = cluster();
        let fragments: std::collections::BTreeMap<u32, u64> = [(0, 10), (1, 0)].into();
        let info = subscription_info(&m, "orders", &fragments, 3000, 12);
        assert_eq!((info.lease_ms, info.revision), (3000, 12));
        assert_eq!(info.fragments.len(), 2);
        for (f, placed) in info.fragments.iter().zip(&m.topics["orders"].fragments) {
            assert_eq!(f.id, placed.id);
            assert_eq!(f.relays.len(), 2);
            assert_eq!(f.relays[0], format!("tcp://h{}:5559", placed.leader));
        }
        assert_eq!(info.fragments[0].offset, 10);
        // Unknown fragments (a topic deleted meanwhile) have no relays, not a panic.
        let gone = subscription_info(&m, "nope", &fragments, 3000, 12);
        assert!(gone.fragments.iter().all(|f| f.relays.is_empty()));
    }
}
