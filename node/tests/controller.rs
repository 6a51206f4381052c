//! Controller endpoint as a client sees it: NODES, TOPIC, LEADER answered from the Raft metadata
//! (frames in docs/protocol.md), and malformed input answered with 102 while it keeps serving.

mod common;

use common::*;
use zper_wire::controller::{ControllerReply, ControllerRequest};

fn ask(s: &zmq::Socket, req: &ControllerRequest) -> ControllerReply {
    let frames = req.encode();
    s.send_multipart(&frames, 0).expect("send");
    let reply = s.recv_multipart(0).expect("reply within 5 s");
    ControllerReply::decode(req, &reply).unwrap_or_else(|| panic!("malformed reply {reply:?}"))
}

#[test]
fn nodes_leader_and_topic_come_from_the_raft_metadata() {
    let n = TestNode::start();
    let http = n.node().endpoints().http.clone();
    let controller = n.node().endpoints().controller.clone();
    let s = client(&n.ctx, zmq::DEALER, &[], &controller);
    assert!(eventually(
        || matches!(ask(&s, &ControllerRequest::Nodes), ControllerReply::Nodes(v) if v.len() == 1)
    ));
    let ControllerReply::Nodes(nodes) = ask(&s, &ControllerRequest::Nodes) else {
        unreachable!("checked above");
    };
    assert_eq!(nodes[0].id, 1);
    assert!(nodes[0].live);
    assert_eq!(nodes[0].endpoints[0], n.writer, "writer endpoint");
    assert_eq!(nodes[0].endpoints[1], n.reader, "reader endpoint");
    assert_eq!(nodes[0].endpoints[7], http, "http address");
    let ControllerReply::Leader(leader) = ask(&s, &ControllerRequest::Leader) else {
        panic!("a leader");
    };
    assert_eq!(leader.id, 1);

    let topic = ControllerRequest::Topic("orders".into());
    assert_eq!(
        ask(&s, &topic),
        ControllerReply::Status(zper_wire::Status::InvalidOffset)
    );
    let (status, body) = http_post(&http, "/v1/topics/orders", r#"{"fragments": 2}"#);
    assert_eq!(status, 201, "{body}");
    let ControllerReply::Topic(fragments) = ask(&s, &topic) else {
        panic!("topic known");
    };
    assert_eq!(fragments.len(), 2);
    assert!(fragments
        .iter()
        .all(|f| f.leader == 1 && f.replicas[0].reader == n.reader));
}

fn http_post(addr: &str, path: &str, body: &str) -> (u16, String) {
    http("POST", addr, path, Some(body)).expect("http answer")
}

#[test]
fn malformed_controller_requests_get_102_and_it_keeps_serving() {
    let n = TestNode::start();
    let controller = n.node().endpoints().controller.clone();
    let s = client(&n.ctx, zmq::DEALER, &[], &controller);
    for bad in [
        vec![b"BOGUS".to_vec()],
        vec![b"TOPIC".to_vec()],
        vec![b"TOPIC".to_vec(), b"no-such".to_vec()],
        vec![b"NODES".to_vec(), b"extra".to_vec()],
        vec![b"LEADER".to_vec(), vec![0xff; 3]],
        vec![Vec::new()],
    ] {
        s.send_multipart(&bad, 0).expect("send");
        assert_eq!(
            s.recv_multipart(0).expect("reply"),
            vec![vec![102]],
            "{bad:?}"
        );
    }
    // REQ clients get their envelope back.
    let r = client(&n.ctx, zmq::REQ, &[], &controller);
    assert!(matches!(
        ask(&r, &ControllerRequest::Nodes),
        ControllerReply::Nodes(_)
    ));
    assert!(matches!(
        ask(&s, &ControllerRequest::Nodes),
        ControllerReply::Nodes(_)
    ));
}
