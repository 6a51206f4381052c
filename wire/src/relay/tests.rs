//! Round trips and malformed input of the relay frames (`zper_wire::relay`).

use super::*;
use proptest::prelude::*;

fn stream() -> StreamRequest {
    StreamRequest {
        topic: "orders".into(),
        group: "g".into(),
        subscriber: "s1".into(),
        fragment: 2,
        offset: 1234,
        max_batch: 2,
        flush_ms: 500,
        window: 100,
        revision: 9,
    }
}

#[test]
fn requests_round_trip_and_bad_ones_are_errors() {
    let reqs = [
        RelayRequest::Stream(stream()),
        RelayRequest::Ack(AckRequest {
            topic: "orders".into(),
            group: "g".into(),
            subscriber: "s1".into(),
            fragment: 2,
            offset: 99,
        }),
        RelayRequest::Result(ResultMessage {
            topic: "orders".into(),
            fragment: 1,
            offset: 5,
            id: b"id-1".to_vec(),
            payload: b"done".to_vec(),
        }),
        RelayRequest::Results {
            topic: "orders".into(),
            prefix: b"p".to_vec(),
        },
    ];
    for r in reqs {
        assert_eq!(RelayRequest::decode(&r.encode()), Ok(r.clone()));
    }
    let frames = RelayRequest::Stream(stream()).encode();
    assert_eq!(frames[4], 2u32.to_be_bytes());
    assert_eq!(frames[5], 1234u64.to_be_bytes());
    let mut zero_window = frames.clone();
    zero_window[8] = 0u32.to_be_bytes().to_vec();
    assert_eq!(
        RelayRequest::decode(&zero_window),
        Err(RelayError::Range("window"))
    );
    let mut short = frames.clone();
    short[5] = vec![1, 2];
    assert!(RelayRequest::decode(&short).is_err());
    assert!(RelayRequest::decode(&frames[..9]).is_err());
    assert!(RelayRequest::decode(&[b"FETCH".to_vec()]).is_err());
    assert_eq!(RelayRequest::decode::<Vec<u8>>(&[]), Err(RelayError::Empty));
}

#[test]
fn a_batch_carries_whole_stored_messages_that_split_with_their_offsets() {
    let mut records = Vec::new();
    crate::encode_record(b"id", true, &mut records);
    crate::encode_record(b"body", false, &mut records);
    let second = records.len() as u64;
    crate::encode_record(b"x", false, &mut records);
    let batch = RelayReply::Records {
        topic: "orders".into(),
        fragment: 1,
        offset: 10,
        end: 10 + records.len() as u64,
        records: records.clone(),
    };
    let frames = batch.clone().into_frames();
    assert_eq!(frames[0], b"RECORDS");
    assert_eq!(frames[3], 10u64.to_be_bytes());
    assert_eq!(frames[5], records);
    assert_eq!(RelayReply::decode(&frames), Some(batch));
    assert_eq!(
        split_messages(10, &records),
        Some(vec![
            PushedMessage {
                offset: 10,
                frames: vec![b"id".to_vec(), b"body".to_vec()],
            },
            PushedMessage {
                offset: 10 + second,
                frames: vec![b"x".to_vec()],
            },
        ])
    );
    // A length that disagrees with the offsets, or a cut message, is malformed.
    let mut bad = frames.clone();
    bad[4] = 99u64.to_be_bytes().to_vec();
    assert_eq!(RelayReply::decode(&bad), None);
    assert_eq!(split_messages(10, &records[..3]), None);
    assert_eq!(split_messages(10, &records[..records.len() - 1]), None);
}

proptest! {
    #[test]
    fn decoders_never_panic(frames in proptest::collection::vec(
        proptest::collection::vec(any::<u8>(), 0..14), 0..12)) {
        let _ = RelayRequest::decode(&frames);
        let _ = RelayReply::decode(&frames);
        if let Some(f) = frames.first() {
            let _ = split_messages(0, f);
        }
    }
}
