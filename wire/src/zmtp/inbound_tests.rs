//! Inbound tests: the stored bytes and events against a plain model of the writer's rules,
//! for any split of the stream across reads.

use super::*;
use crate::record::encode_record;
use crate::zmtp::command::encode_ping;
use proptest::prelude::*;

const LIMITS: Limits = Limits {
    max_message: 300,
    max_buffered: 1024,
    allow_empty_message: false,
};

/// Encodes one frame as a peer might: `long` forces the long form even for a short body
/// (allowed by RFC 23; libzmq never does it).
fn frame(body: &[u8], more: bool, long: bool, out: &mut Vec<u8>) {
    if long || body.len() > 255 {
        out.push(u8::from(more) | 0x02);
        out.extend_from_slice(&(body.len() as u64).to_be_bytes());
    } else {
        out.extend_from_slice(&[u8::from(more), body.len() as u8]);
    }
    out.extend_from_slice(body);
}

/// Feeds `input` in pieces cut at `cuts`; returns the stored bytes and a summary per event.
fn feed(version: Version, limits: Limits, input: &[u8], cuts: &[usize]) -> (Vec<u8>, Vec<String>) {
    let mut inbound = Inbound::new(version, limits);
    let mut out = Vec::new();
    let mut events = Vec::new();
    let mut buffer: Vec<u8> = Vec::new();
    for piece in crate::zmtp::pieces(input, cuts) {
        buffer.extend_from_slice(piece);
        loop {
            let (used, event) = inbound.next(&buffer, &mut out).expect("valid stream");
            let summary = match event {
                Some(Event::Message {
                    first_frame,
                    envelope,
                    ..
                }) => Some(format!("msg id={:?} env={envelope}", &out[first_frame])),
                Some(Event::Dropped(why)) => Some(format!("{why:?}")),
                Some(Event::Command(c)) => Some(format!("{c:?}")),
                None => None,
            };
            buffer.drain(..used);
            match summary {
                Some(s) => events.push(s),
                None => break,
            }
        }
        assert!(
            buffer.len() as u64 <= limits.max_buffered + 9,
            "buffered {}",
            buffer.len()
        );
    }
    (out, events)
}

#[test]
fn frames_are_stored_as_received_and_a_req_envelope_is_left_out() {
    let mut input = Vec::new();
    frame(b"one", false, false, &mut input);
    frame(b"", true, false, &mut input); // REQ envelope
    frame(b"id", true, false, &mut input);
    frame(b"two", false, false, &mut input);
    let (out, events) = feed(Version::V2, LIMITS, &input, &[]);
    let mut expected = Vec::new();
    encode_record(b"one", false, &mut expected);
    encode_record(b"id", true, &mut expected);
    encode_record(b"two", false, &mut expected);
    assert_eq!(out, expected);
    assert_eq!(
        events,
        vec![
            "msg id=[111, 110, 101] env=false",
            "msg id=[105, 100] env=true"
        ]
    );
}

#[test]
fn an_oversized_frame_drops_its_message_and_the_next_one_is_stored() {
    let mut input = Vec::new();
    frame(b"head", true, false, &mut input);
    frame(&[7u8; 301], true, false, &mut input);
    frame(b"tail", false, false, &mut input);
    frame(b"next", false, false, &mut input);
    let (out, events) = feed(Version::V2, LIMITS, &input, &[3, 40, 200]);
    let mut expected = Vec::new();
    encode_record(b"next", false, &mut expected);
    assert_eq!(out, expected);
    assert_eq!(
        events,
        vec!["OversizedFrame", "msg id=[110, 101, 120, 116] env=false"]
    );
}

#[test]
fn a_huge_frame_is_skipped_not_buffered_and_a_2_pow_63_length_is_an_error() {
    let mut input = vec![0x02];
    input.extend_from_slice(&MAX_DECLARED_LEN.to_be_bytes());
    input.extend_from_slice(&[0u8; 5000]);
    let (out, events) = feed(Version::V3 { minor: 1 }, LIMITS, &input, &[100, 2000]);
    assert!(out.is_empty());
    assert_eq!(events, vec!["OversizedFrame"]);
    // 2^63, as the first frame or as a later frame of a message being skipped: the connection
    // must be closed, not kept skipping for ever.
    for prefix in [&[][..], &[0x03, 0, 0, 0, 0, 0, 0, 0x10, 0][..]] {
        let mut input = prefix.to_vec();
        input.extend_from_slice(&[0u8; 0x1000]);
        input.push(0x02);
        input.extend_from_slice(&(1u64 << 63).to_be_bytes());
        let mut inbound = Inbound::new(Version::V2, LIMITS);
        let mut buffer = &input[..];
        let err = loop {
            match inbound.next(buffer, &mut Vec::new()) {
                Ok((0, None)) => panic!("the 2^63 length was accepted"),
                Ok((used, _)) => buffer = &buffer[used..],
                Err(e) => break e,
            }
        };
        assert!(
            matches!(err, InboundError::Frame(FrameError::TooLong { .. })),
            "{err}"
        );
    }
}

#[test]
fn many_small_frames_past_the_buffer_limit_drop_the_message() {
    let mut input = Vec::new();
    for _ in 0..600 {
        frame(b"x", true, false, &mut input);
    }
    frame(b"x", false, false, &mut input);
    frame(b"ok", false, false, &mut input);
    let (out, events) = feed(Version::V2, LIMITS, &input, &[500, 1000, 1500]);
    assert_eq!(
        events,
        vec!["OversizedMessage", "msg id=[111, 107] env=false"]
    );
    assert_eq!(out, b"\x00\x02ok");
}

#[test]
fn empty_messages_follow_allow_empty_message_and_long_headers_are_made_short() {
    let mut input = Vec::new();
    frame(b"", false, false, &mut input);
    frame(b"abc", false, true, &mut input);
    let (out, events) = feed(Version::V2, LIMITS, &input, &[]);
    assert_eq!(
        events,
        vec!["EmptyMessage", "msg id=[97, 98, 99] env=false"]
    );
    assert_eq!(out, b"\x00\x03abc");
    let allow = Limits {
        allow_empty_message: true,
        ..LIMITS
    };
    let (out, _) = feed(Version::V2, allow, &input, &[]);
    assert_eq!(out, b"\x00\x00\x00\x03abc");
}

#[test]
fn a_ping_between_messages_is_handed_back_and_one_inside_a_message_is_an_error() {
    let mut input = Vec::new();
    encode_ping(10, b"c", &mut input);
    frame(b"m", false, false, &mut input);
    let (out, events) = feed(Version::V3 { minor: 1 }, LIMITS, &input, &[1]);
    assert_eq!(out, b"\x00\x01m");
    assert_eq!(events[0], "Ping { ttl_ds: 10, context: [99] }");
    let mut bad = Vec::new();
    frame(b"m", true, false, &mut bad);
    encode_ping(10, b"", &mut bad);
    let mut inbound = Inbound::new(Version::V3 { minor: 1 }, LIMITS);
    assert_eq!(
        inbound.next(&bad, &mut Vec::new()),
        Err(InboundError::CommandInsideMessage)
    );
    // ZMTP/2.0 has no commands: the COMMAND bit is a reserved bit there.
    let mut inbound = Inbound::new(Version::V2, LIMITS);
    assert!(matches!(
        inbound.next(&[0x04, 0x00], &mut Vec::new()),
        Err(InboundError::Frame(FrameError::ReservedFlags(0x04)))
    ));
}

fn arb_message() -> impl Strategy<Value = Vec<(Vec<u8>, bool)>> {
    proptest::collection::vec(
        (
            prop_oneof![
                4 => proptest::collection::vec(any::<u8>(), 0..20),
                1 => proptest::collection::vec(any::<u8>(), 250..320),
            ],
            any::<bool>(),
        ),
        1..4,
    )
}

proptest! {
    #[test]
    fn any_split_stores_what_the_model_says(
        messages in proptest::collection::vec(arb_message(), 0..12),
        cuts in proptest::collection::vec(0usize..3000, 0..10),
        v3: bool,
    ) {
        let mut input = Vec::new();
        let mut expected = Vec::new();
        let mut expected_events = Vec::new();
        for message in &messages {
            let n = message.len();
            for (i, (body, long)) in message.iter().enumerate() {
                frame(body, i + 1 < n, *long, &mut input);
            }
            let wire_len: usize = message
                .iter()
                .map(|(b, long)| b.len() + if *long || b.len() > 255 { 9 } else { 2 })
                .sum();
            let envelope = n > 1 && message[0].0.is_empty();
            let stored = if envelope { &message[1..] } else { &message[..] };
            if message.iter().any(|(b, _)| b.len() > 300) {
                expected_events.push("OversizedFrame".to_string());
            } else if wire_len > 1024 {
                expected_events.push("OversizedMessage".to_string());
            } else if message[n - 1].0.is_empty() {
                expected_events.push("EmptyMessage".to_string());
            } else {
                for (i, (body, _)) in stored.iter().enumerate() {
                    encode_record(body, i + 1 < stored.len(), &mut expected);
                }
                expected_events.push(format!("msg id={:?} env={envelope}", stored[0].0));
            }
        }
        let version = if v3 { Version::V3 { minor: 1 } } else { Version::V2 };
        let (out, events) = feed(version, LIMITS, &input, &cuts);
        prop_assert_eq!(events, expected_events);
        prop_assert_eq!(out, expected);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_never_buffer_past_the_limit(
        input in proptest::collection::vec(any::<u8>(), 0..2000),
        v3: bool,
    ) {
        let version = if v3 { Version::V3 { minor: 1 } } else { Version::V2 };
        let mut inbound = Inbound::new(version, LIMITS);
        let mut out = Vec::new();
        let mut at = 0;
        while let Ok((used, Some(_))) = inbound.next(&input[at..], &mut out) {
            at += used;
        }
        prop_assert!(out.len() <= input.len());
    }
}

#[test]
fn a_message_dropped_for_its_size_tells_whether_it_began_with_a_req_envelope() {
    let big = LIMITS.max_message + 1;
    let mut oversized = vec![0x02];
    oversized.extend_from_slice(&big.to_be_bytes());
    oversized.extend(std::iter::repeat_n(7u8, big as usize));
    for (prefix, envelope) in [
        (&[0x01, 0x00][..], true),
        (&[][..], false),
        (&[0x01, 0x01, b'x'][..], false),
    ] {
        let mut input = prefix.to_vec();
        input.extend_from_slice(&oversized);
        input.extend_from_slice(&[0x00, 0x01, b'z']); // a next message, kept
        let mut inbound = Inbound::new(Version::V3 { minor: 1 }, LIMITS);
        let mut out = Vec::new();
        let (used, event) = inbound.next(&input, &mut out).expect("valid");
        assert_eq!(event, Some(Event::Dropped(Dropped::OversizedFrame)));
        assert_eq!(inbound.dropped_envelope(), envelope, "{prefix:?}");
        // The body is skipped and the next message read.
        let (_, event) = inbound.next(&input[used..], &mut out).expect("valid");
        assert!(matches!(event, Some(Event::Message { .. })), "{event:?}");
    }
}
