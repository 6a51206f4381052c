//! Answers controller requests (`zper_wire::controller`) from the applied metadata: a pure
//! function, so the node's controller endpoint only moves frames.

use zper_wire::controller::{
    ControllerReply, ControllerRequest, FragmentInfo, NodeInfo, ReplicaInfo,
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
                    ..Default::default()
                },
                now_ms: 0,
                lease_ms: 1000,
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
}
