//! The idempotent producer against a fake writer (a ROUTER on 127.0.0.1 that answers as a node
//! would, frame by frame).

use super::*;

#[test]
fn message_ids_are_24_bytes_producer_then_big_endian_sequence() {
    let id = MessageId {
        producer: [7; 16],
        sequence: 258,
    };
    let b = id.to_bytes();
    assert_eq!(&b[16..], &[0, 0, 0, 0, 0, 0, 1, 2]);
    assert_eq!(MessageId::from_bytes(&b), Some(id));
    assert_eq!(MessageId::from_bytes(&b[..23]), None);
}

/// A message the fake writer received: the sender's routing id and the message id.
fn receive(router: &zmq::Socket) -> Option<(Vec<u8>, MessageId)> {
    let frames = router.recv_multipart(0).ok()?;
    let id = MessageId::from_bytes(frames.get(1)?)?;
    Some((frames[0].clone(), id))
}

#[test]
fn a_late_ack_for_the_old_producer_id_does_not_cover_the_renumbered_messages() {
    let ctx = zmq::Context::new();
    let router = ctx.socket(zmq::ROUTER).expect("router");
    // A reconnecting producer keeps its identity: the new connection takes it over.
    router.set_router_handover(true).expect("handover");
    router.set_rcvtimeo(5_000).expect("rcvtimeo");
    router.bind("tcp://127.0.0.1:*").expect("bind");
    let endpoint = router
        .get_last_endpoint()
        .expect("endpoint")
        .expect("utf-8 endpoint");
    let old = zper_wire::idempotent::producer_id([0x11; 16]);
    let writer = std::thread::spawn(move || -> Result<bool, String> {
        // Sequences 5, 6, 7 of a producer id the node does not know: 106, expected 0.
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(receive(&router).ok_or("no message")?);
        }
        let (peer, first) = got[0].clone();
        if got.iter().map(|(_, m)| m.sequence).collect::<Vec<_>>() != [5, 6, 7] {
            return Err(format!("expected 5, 6, 7: {got:?}"));
        }
        let refusal = [
            peer.clone(),
            first.to_bytes().to_vec(),
            vec![Status::OutOfSequence.byte()],
            0u64.to_be_bytes().to_vec(),
        ];
        router
            .send_multipart(refusal, 0)
            .map_err(|e| e.to_string())?;
        // The same three, renumbered 0, 1, 2 under a new producer id.
        let mut renumbered = Vec::new();
        for _ in 0..3 {
            renumbered.push(receive(&router).ok_or("no renumbered message")?.1);
        }
        let new = renumbered[2];
        if new.producer == old || new.sequence != 2 {
            return Err(format!("not renumbered: {renumbered:?}"));
        }
        // A late ack for the old id's sequence 7: nothing of the new id is stored.
        let stale = MessageId {
            producer: old,
            sequence: 7,
        };
        router
            .send_multipart([peer, stale.to_bytes().to_vec()], 0)
            .map_err(|e| e.to_string())?;
        // The producer must still wait, then send its messages again.
        let Some((peer, _)) = receive(&router) else {
            return Ok(false);
        };
        router
            .send_multipart([peer, new.to_bytes().to_vec()], 0)
            .map_err(|e| e.to_string())?;
        Ok(true)
    });
    let mut opts = IdempotentOptions::new("t", AckMode::PerFlush);
    opts.timeout = Duration::from_millis(300);
    opts.deadline = Duration::from_secs(8);
    opts.resume = Some(MessageId {
        producer: old,
        sequence: 5,
    });
    let mut p = IdempotentProducer::connect(&ctx, &[endpoint], opts).expect("producer");
    for i in 0..3u8 {
        p.send(&[&[i][..]]).expect("queued");
    }
    let flushed = p.flush();
    let sent_again = writer.join().expect("writer thread").expect("writer");
    assert!(
        sent_again,
        "the old id's ack was taken for the new id's: flush returned {flushed:?} with nothing stored"
    );
    assert!(flushed.is_ok(), "{flushed:?}");
    assert_eq!(p.renumbered, 3);
}

#[test]
fn resume_must_name_an_idempotent_producer_id() {
    let ctx = zmq::Context::new();
    let mut opts = IdempotentOptions::new("t", AckMode::PerFlush);
    opts.resume = Some(MessageId {
        producer: [0; 16],
        sequence: 1,
    });
    let endpoints = ["tcp://127.0.0.1:1".to_owned()];
    assert!(matches!(
        IdempotentProducer::connect(&ctx, &endpoints, opts),
        Err(ClientError::Invalid(_))
    ));
}
