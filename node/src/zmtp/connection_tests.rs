//! Connection tests: input buffer sizing, file ranges and commands queued in order.

use super::*;
use zper_wire::zmtp::SocketType;

fn pair(limits: Limits) -> (Connection, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let peer = std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    server.set_nonblocking(true).expect("nonblocking");
    let handshake = Handshake::new(
        SocketType::Router,
        &[SocketType::Dealer],
        Security::Null(zper_wire::zmtp::Null),
    );
    let conn = Connection::accept(TcpStream::from_std(server), handshake, limits);
    (conn, peer)
}

/// Reads until `want` bytes arrived in all (bounded: 5 s).
fn read_until(conn: &mut Connection, want: usize) {
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    let mut got = 0;
    while got < want && Instant::now() < deadline {
        got += conn.fill(usize::MAX).expect("fill").bytes;
    }
    assert_eq!(got, want);
}

#[test]
fn a_quiet_connection_holds_a_small_buffer_and_a_large_message_is_given_back() {
    let limits = Limits {
        max_message: 1 << 20,
        max_buffered: 2 << 20,
        allow_empty_message: true,
    };
    let (mut conn, mut peer) = pair(limits);
    let identity = b"\x00\x00\x01a0123456789abcdef";
    let mut hello = vec![0xff];
    hello.extend_from_slice(&(identity.len() as u64 + 1).to_be_bytes());
    hello.extend_from_slice(&[0x7f, 0x01, 0x05, 0x00, identity.len() as u8]);
    hello.extend_from_slice(identity);
    peer.write_all(&hello).expect("greeting");
    read_until(&mut conn, hello.len());
    assert!(conn.handshake().expect("handshake").is_some());
    assert_eq!(conn.input.len(), MIN_INPUT, "a handshake needs no more");
    // One 512 KiB frame: the buffer grows while the incomplete frame fills it ...
    let body = vec![7u8; 512 * 1024];
    let mut frame = vec![0x02];
    frame.extend_from_slice(&(body.len() as u64).to_be_bytes());
    frame.extend_from_slice(&body);
    let writer = std::thread::spawn(move || {
        peer.write_all(&frame).expect("frame");
        peer
    });
    let mut out = Vec::new();
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    while out.is_empty() && Instant::now() < deadline {
        conn.fill(usize::MAX).expect("fill");
        while conn.next_event(&mut out).expect("valid").is_some() {}
    }
    let _peer = writer.join().expect("writer");
    assert_eq!(out.len(), 9 + body.len());
    assert!(conn.input.len() > READ_CHUNK);
    // ... and is given back once the message is taken.
    let _ = conn.fill(usize::MAX).expect("fill");
    assert_eq!(conn.input.len(), READ_CHUNK);
}

/// Flushes `conn` while `peer` reads `total` bytes (bounded: 10 s); the bytes read.
fn flush_to(conn: &mut Connection, mut peer: std::net::TcpStream, total: usize) -> Vec<u8> {
    let reader = std::thread::spawn(move || {
        let mut got = vec![0u8; total];
        peer.read_exact(&mut got).expect("all bytes");
        got
    });
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while conn.unsent() > 0 && Instant::now() < deadline {
        conn.flush().expect("flush");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    reader.join().expect("reader")
}

/// Appends the header of a last frame of `len` bytes to `out`.
fn last_frame_header(len: u64, out: &mut Vec<u8>) {
    let mut head = [0u8; 9];
    let n = zper_wire::zmtp::frame::encode_header(false, false, len, &mut head);
    out.extend_from_slice(&head[..n]);
}

#[test]
fn a_file_range_goes_out_between_queued_replies_in_order() {
    use std::io::Write as _;
    let limits = Limits {
        max_message: 1 << 20,
        max_buffered: 2 << 20,
        allow_empty_message: true,
    };
    let (mut conn, peer) = pair(limits);
    let mut file = tempfile::tempfile().expect("tmp");
    let content: Vec<u8> = (0..=250u8).cycle().take(3 << 20).collect();
    file.write_all(&content).expect("write");
    let file = Arc::new(file);
    // 3 MiB - 1000 bytes from position 1000: more than the socket takes at once.
    let (at, len) = (1000u64, (3 << 20) - 1000u64);
    let mut want = conn.output.clone(); // the greeting queued at accept
    conn.queue(&[b"first".to_vec()]);
    conn.queue_file(&[vec![], vec![100]], file.clone(), at, len);
    conn.queue(&[b"after".to_vec(), b"it".to_vec()]);
    encode_frame(false, false, b"first", &mut want);
    encode_frame(true, false, b"", &mut want);
    encode_frame(true, false, &[100], &mut want);
    last_frame_header(len, &mut want);
    want.extend_from_slice(&content[at as usize..]);
    encode_frame(true, false, b"after", &mut want);
    encode_frame(false, false, b"it", &mut want);
    assert_eq!(conn.unsent(), want.len());
    let got = flush_to(&mut conn, peer, want.len());
    assert_eq!(conn.unsent(), 0);
    assert!(got == want, "bytes differ");
    // A range past the file's end cannot complete its frame: the connection must close.
    conn.queue_file(&[vec![100]], file, 3 << 20, 10);
    assert!(conn.flush().is_err());
}

#[test]
fn a_command_queued_while_a_file_range_is_pending_goes_out_after_it() {
    use std::io::Write as _;
    let limits = Limits {
        max_message: 1 << 20,
        max_buffered: 2 << 20,
        allow_empty_message: true,
    };
    let (mut conn, peer) = pair(limits);
    let mut file = tempfile::tempfile().expect("tmp");
    file.write_all(&vec![9u8; 32 << 20]).expect("write");
    let mut want = conn.output.clone();
    conn.queue_file(&[vec![100]], Arc::new(file), 0, 32 << 20);
    // Part of the range goes out; the socket buffers (a few MiB) fill before the rest.
    conn.flush().expect("flush");
    assert!(conn.unsent() > 0, "the peer reads nothing yet");
    conn.send_pong(b"ctx");
    encode_frame(true, false, &[100], &mut want);
    last_frame_header(32 << 20, &mut want);
    want.extend(std::iter::repeat_n(9u8, 32 << 20));
    zper_wire::zmtp::command::encode_pong(b"ctx", &mut want);
    let got = flush_to(&mut conn, peer, want.len());
    assert!(got == want, "the PONG moved");
}

/// Reads one whole ZMTP frame (header and body) from `s` (blocking).
fn read_frame(s: &mut std::net::TcpStream) -> Vec<u8> {
    let mut head = [0u8; 2];
    s.read_exact(&mut head).expect("frame header");
    let mut frame = head.to_vec();
    let len = if head[0] & 0x02 != 0 {
        let mut rest = [0u8; 7];
        s.read_exact(&mut rest).expect("long length");
        frame.extend_from_slice(&rest);
        u64::from_be_bytes(frame[1..9].try_into().expect("8 bytes")) as usize
    } else {
        head[1] as usize
    };
    let at = frame.len();
    frame.resize(at + len, 0);
    s.read_exact(&mut frame[at..]).expect("frame body");
    frame
}

/// The body of a frame read by [`read_frame`].
fn body(frame: &[u8]) -> &[u8] {
    &frame[if frame[0] & 0x02 != 0 { 9 } else { 2 }..]
}

/// Flushes `conn` and pumps it until `peer`'s read of `n` frames is done (bounded: 5 s).
fn handshake_step(conn: &mut Connection, peer: &mut std::net::TcpStream, send: &[u8]) {
    peer.write_all(send).expect("send");
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    while conn.in_handshake() && Instant::now() < deadline {
        conn.fill(usize::MAX).expect("fill");
        let before = conn.output.len();
        let done = conn.handshake().expect("handshake").is_some();
        conn.flush().expect("flush");
        if done || conn.output.len() != before || conn.sent > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    conn.flush().expect("flush");
}

#[test]
fn a_curve_connection_keeps_only_the_unread_part_of_what_it_decrypted() {
    use zper_wire::zmtp::curve::{Authorizer, CurveClient, CurveKeyPair, CurveServer};
    struct Any;
    impl Authorizer for Any {
        fn allows(&self, _: &[u8; 32]) -> bool {
            true
        }
    }
    let limits = Limits {
        max_message: 1 << 20,
        max_buffered: 2 << 20,
        allow_empty_message: true,
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut peer =
        std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    server.set_nonblocking(true).expect("nonblocking");
    let keys = std::sync::Arc::new(CurveKeyPair::generate());
    let mechanism = CurveServer::new(keys.clone(), std::sync::Arc::new(Any));
    let handshake = Handshake::new(
        SocketType::Router,
        &[SocketType::Dealer],
        Security::Curve(Box::new(mechanism)),
    );
    let mut conn = Connection::accept(TcpStream::from_std(server), handshake, limits);
    // Greetings and HELLO; the server's greeting and WELCOME come back.
    let mut client = CurveClient::new(CurveKeyPair::generate(), keys.public());
    let mut hello = zper_wire::zmtp::handshake::SIGNATURE.to_vec();
    hello.extend_from_slice(&[3, 0]);
    let mut name = [0u8; 20];
    name[..5].copy_from_slice(b"CURVE");
    hello.extend_from_slice(&name);
    hello.extend_from_slice(&[0u8; 32]);
    client.hello(&mut hello);
    handshake_step(&mut conn, &mut peer, &hello);
    let mut greeting = [0u8; 64];
    peer.read_exact(&mut greeting).expect("server greeting");
    let welcome = read_frame(&mut peer);
    let mut initiate = Vec::new();
    client
        .receive(body(&welcome), &[("Socket-Type", b"DEALER")], &mut initiate)
        .expect("welcome");
    handshake_step(&mut conn, &mut peer, &initiate);
    assert!(!conn.in_handshake(), "the handshake is done");
    let ready = read_frame(&mut peer);
    client
        .receive(body(&ready), &[], &mut Vec::new())
        .expect("ready");
    let mut session = client.into_session().expect("session");

    // 300 two-frame messages of 2 x 8 KiB; every write ends 10 bytes before the end of a
    // message, so each read leaves a whole first frame unread behind the messages taken
    // (what a steady producer's stream does now and then).
    let frame = vec![7u8; 8 * 1024];
    let mut wire = Vec::new();
    let mut ends = Vec::new();
    for _ in 0..300 {
        session.seal_frame(true, false, &frame, &mut wire);
        session.seal_frame(false, false, &frame, &mut wire);
        ends.push(wire.len() - 10);
    }
    ends.push(wire.len());
    let mut out = Vec::new();
    let (mut messages, mut largest, mut from) = (0, 0, 0);
    for end in ends {
        let piece = &wire[from..end];
        from = end;
        peer.write_all(piece).expect("write");
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        let mut got = 0;
        while got < piece.len() && Instant::now() < deadline {
            got += conn.fill(usize::MAX).expect("fill").bytes;
        }
        while let Some(event) = conn.next_event(&mut out).expect("valid") {
            if matches!(event, Event::Message { .. }) {
                messages += 1;
            }
        }
        out.clear();
        largest = largest.max(conn.curve.as_ref().map_or(0, |c| c.plain.len()));
    }
    assert_eq!(messages, 300);
    // Before the fix the decrypted bytes piled up: about 300 x 16 KiB here.
    assert!(
        largest < 128 * 1024,
        "the plain buffer held {largest} bytes"
    );
}
