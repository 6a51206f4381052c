//! Handshake tests: what JeroMQ 0.3 (ZMTP/2.0) and libzmq 4 (ZMTP/3.x) clients send, byte by
//! byte, split anywhere; and hostile greetings.

use super::*;
use crate::zmtp::command::{encode_ready, Command};
use crate::zmtp::frame::FrameHeader;
use crate::zmtp::mechanism::Null;
use proptest::prelude::*;

const WRITER_PEERS: [SocketType; 3] = [SocketType::Dealer, SocketType::Req, SocketType::Push];

fn writer() -> Handshake<Null> {
    Handshake::new(SocketType::Router, &WRITER_PEERS, Null)
}

/// What a ZMTP/2.0 client (JeroMQ 0.3.x, spec §2) sends: the signature carrying
/// identity length + 1, revision 1, its socket type, then its identity frame.
fn v2_client(socket_type: u8, identity: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0xff];
    bytes.extend_from_slice(&(identity.len() as u64 + 1).to_be_bytes());
    bytes.extend_from_slice(&[0x7f, 0x01, socket_type, 0x00, identity.len() as u8]);
    bytes.extend_from_slice(identity);
    bytes
}

/// What a libzmq 4 client sends: the 64-byte ZMTP/3.1 greeting with `mechanism`, then READY.
fn v3_client(mechanism: &[u8], properties: &[(&str, &[u8])]) -> Vec<u8> {
    let mut bytes = SIGNATURE.to_vec();
    bytes.extend_from_slice(&[3, 1]);
    let mut name = [0u8; 20];
    name[..mechanism.len()].copy_from_slice(mechanism);
    bytes.extend_from_slice(&name);
    bytes.push(0);
    bytes.extend_from_slice(&[0u8; 31]);
    encode_ready(properties, &mut bytes);
    bytes
}

/// Runs the whole handshake on `input` cut into pieces at `cuts`; returns the outcome, the
/// bytes consumed in all and what the server sent.
fn run(input: &[u8], cuts: &[usize]) -> (Result<Progress, HandshakeError>, usize, Vec<u8>) {
    let mut hs = writer();
    let mut out = Vec::new();
    hs.open(&mut out);
    let mut buffer = Vec::new();
    let mut consumed = 0;
    for piece in crate::zmtp::pieces(input, cuts) {
        buffer.extend_from_slice(piece);
        match hs.advance(&buffer, &mut out) {
            Ok((used, Progress::NeedMore)) => {
                buffer.drain(..used);
                consumed += used;
            }
            Ok((used, done)) => return (Ok(done), consumed + used, out),
            Err(e) => return (Err(e), consumed, out),
        }
    }
    (Ok(Progress::NeedMore), consumed, out)
}

#[test]
fn a_jeromq_dealer_gets_the_originals_greeting_and_its_identity_is_taken_spec_2() {
    let mut input = v2_client(5, b"\x00\x04test");
    let handshake_len = input.len();
    input.extend_from_slice(&[0x00, 0x03, b'a', b'b', b'c']);
    let (outcome, consumed, out) = run(&input, &[]);
    assert_eq!(
        outcome,
        Ok(Progress::Done(Peer {
            version: Version::V2,
            socket_type: SocketType::Dealer,
            identity: b"\x00\x04test".to_vec(),
        }))
    );
    assert_eq!(
        consumed, handshake_len,
        "the data frame stays for the decoder"
    );
    // Spec §2, byte for byte what the original sends: `ff 00 00 00 00 00 00 00 01 7f 01 06`
    // and the empty identity frame.
    assert_eq!(
        out,
        b"\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f\x01\x06\x00\x00"
    );
}

#[test]
fn a_libzmq4_push_socket_is_accepted_over_zmtp3() {
    let input = v3_client(b"NULL", &[("Socket-Type", b"PUSH")]);
    let (outcome, consumed, out) = run(&input, &[]);
    assert_eq!(
        outcome,
        Ok(Progress::Done(Peer {
            version: Version::V3 { minor: 1 },
            socket_type: SocketType::Push,
            identity: Vec::new(),
        }))
    );
    assert_eq!(consumed, input.len());
    assert_eq!(
        &out[..11],
        &b"\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f\x03"[..]
    );
    assert_eq!(out[11], 1, "minor version");
    assert_eq!(&out[12..32], b"NULL\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
    let header = FrameHeader::decode(&out[64..], true, 1 << 10)
        .expect("valid")
        .expect("valid");
    let body = &out[64 + header.header_len..];
    let Ok(Command::Ready(properties)) = Command::parse(body) else {
        panic!("not a READY: {body:?}");
    };
    assert_eq!(properties.get("Socket-Type"), Some(&b"ROUTER"[..]));
}

#[test]
fn a_libzmq4_push_with_an_identity_is_answered_as_zmtp2_and_sends_its_identity_frame() {
    // libzmq 4: signature with identity length + 1, then its major version 3 at once; on our
    // revision 1 it falls back to ZMTP/2.0: socket type (PUSH, 8) and the identity frame.
    let identity = b"\x00\x04test";
    let mut input = vec![0xff];
    input.extend_from_slice(&(identity.len() as u64 + 1).to_be_bytes());
    input.extend_from_slice(&[0x7f, 0x03, 0x08, 0x00, identity.len() as u8]);
    input.extend_from_slice(identity);
    let (outcome, consumed, out) = run(&input, &[]);
    assert_eq!(
        outcome,
        Ok(Progress::Done(Peer {
            version: Version::V2,
            socket_type: SocketType::Push,
            identity: identity.to_vec(),
        }))
    );
    assert_eq!(consumed, input.len());
    assert_eq!(&out[10..], b"\x01\x06\x00\x00");
}

#[test]
fn a_libzmq4_dealer_presents_its_identity_in_ready() {
    let input = v3_client(
        b"NULL",
        &[("Socket-Type", b"DEALER"), ("Identity", b"\x01\x04test")],
    );
    let (outcome, _, _) = run(&input, &[]);
    let Ok(Progress::Done(peer)) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(peer.identity, b"\x01\x04test");
}

#[test]
fn a_zmtp1_peer_is_refused_at_its_first_byte() {
    let (outcome, _, _) = run(&[0x01, 0x00], &[]);
    assert_eq!(outcome, Err(HandshakeError::Zmtp1));
    // A ZMTP/1.0 long length: 0xff, 8 bytes, then a flags byte with bit 0 clear.
    let (outcome, _, _) = run(&[0xff, 0, 0, 0, 0, 0, 0, 1, 0, 0x00], &[]);
    assert_eq!(outcome, Err(HandshakeError::Zmtp1));
}

#[test]
fn a_pub_socket_is_refused_with_an_error_command() {
    let input = v3_client(b"NULL", &[("Socket-Type", b"PUB")]);
    let (outcome, _, out) = run(&input, &[]);
    assert_eq!(
        outcome,
        Err(HandshakeError::SocketTypeRefused(SocketType::Pub))
    );
    let ready_len = {
        let h = FrameHeader::decode(&out[64..], true, 1 << 10)
            .expect("valid")
            .expect("valid");
        h.frame_len() as usize
    };
    let error = &out[64 + ready_len..];
    let h = FrameHeader::decode(error, true, 1 << 10)
        .expect("decodes")
        .expect("whole header");
    assert!(matches!(
        Command::parse(&error[h.header_len..]),
        Ok(Command::Error(_))
    ));
    // ZMTP/2.0: SUB (2) is refused too.
    let (outcome, _, _) = run(&v2_client(2, b""), &[]);
    assert_eq!(
        outcome,
        Err(HandshakeError::SocketTypeRefused(SocketType::Sub))
    );
}

#[test]
fn curve_and_plain_are_refused_while_the_endpoint_runs_null() {
    let (outcome, _, _) = run(&v3_client(b"CURVE", &[("Socket-Type", b"DEALER")]), &[]);
    assert_eq!(
        outcome,
        Err(HandshakeError::MechanismMismatch {
            ours: "NULL".into(),
            theirs: "CURVE".into()
        })
    );
}

#[test]
fn a_ready_without_socket_type_or_with_a_2_pow_63_length_is_refused() {
    let (outcome, _, _) = run(&v3_client(b"NULL", &[("Identity", b"x")]), &[]);
    assert_eq!(outcome, Err(HandshakeError::MissingSocketType));
    let mut input = v3_client(b"NULL", &[]);
    input.truncate(64);
    input.push(0x06);
    input.extend_from_slice(&(1u64 << 63).to_be_bytes());
    let (outcome, _, _) = run(&input, &[]);
    assert!(
        matches!(
            outcome,
            Err(HandshakeError::Frame(FrameError::TooLong { .. }))
        ),
        "{outcome:?}"
    );
}

#[test]
fn an_identity_over_255_bytes_is_refused() {
    let long = vec![b'x'; 256];
    let input = v3_client(b"NULL", &[("Socket-Type", b"DEALER"), ("Identity", &long)]);
    let (outcome, _, _) = run(&input, &[]);
    assert_eq!(outcome, Err(HandshakeError::IdentityTooLong(256)));
    let mut v2 = v2_client(5, b"");
    v2.truncate(12);
    v2.push(0x02);
    v2.extend_from_slice(&300u64.to_be_bytes());
    let (outcome, _, _) = run(&v2, &[]);
    assert_eq!(outcome, Err(HandshakeError::IdentityTooLong(300)));
}

proptest! {
    #[test]
    fn any_split_of_a_valid_handshake_gives_the_same_peer(
        v3: bool,
        identity in proptest::collection::vec(any::<u8>(), 0..40),
        cuts in proptest::collection::vec(0usize..200, 0..8),
    ) {
        let input = if v3 {
            v3_client(b"NULL", &[("Socket-Type", b"DEALER"), ("Identity", &identity)])
        } else {
            v2_client(5, &identity)
        };
        let (whole, whole_used, whole_out) = run(&input, &[]);
        let (split, split_used, split_out) = run(&input, &cuts);
        prop_assert_eq!(&split, &whole);
        prop_assert_eq!(split_used, whole_used);
        prop_assert_eq!(split_out, whole_out);
        let Ok(Progress::Done(peer)) = whole else {
            return Err(TestCaseError::fail("not done"));
        };
        prop_assert_eq!(peer.identity, identity);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_the_reply_stays_small(
        prefix_v3: bool,
        tail in proptest::collection::vec(any::<u8>(), 0..300),
        cuts in proptest::collection::vec(0usize..400, 0..6),
    ) {
        // Valid up to some point, then anything: a greeting cut anywhere and continued with noise.
        let mut input = if prefix_v3 { v3_client(b"NULL", &[]) } else { v2_client(5, b"") };
        input.truncate(tail.len() % input.len());
        input.extend_from_slice(&tail);
        let (_, used, out) = run(&input, &cuts);
        prop_assert!(used <= input.len());
        prop_assert!(out.len() <= 64 + 64 + 300, "reply of {} bytes", out.len());
    }
}
