//! The engine front alone, with the test standing in for its worker and its ack queue: the
//! bound on unanswered mode-2 messages (`super::super::credit`) holds a pipelining producer
//! back until its replies come.

use std::io::{Read, Write};
use std::time::Duration;

use crossbeam_channel::Receiver;

use super::*;
use crate::produce::credit::MAX_UNANSWERED;

/// An engine front on 127.0.0.1 with one worker channel (returned) and an ack queue fed by
/// the returned PUSH socket; the front thread runs until `stop`.
fn front(
    ctx: &zmq::Context,
    max_connections: usize,
    idle_eviction: Duration,
) -> (
    std::net::SocketAddr,
    Receiver<WriteBatch>,
    zmq::Socket,
    Arc<AtomicBool>,
    JoinHandle<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let acks = ctx.socket(zmq::PULL).expect("pull");
    let endpoint = format!("inproc://engine-test-{}", addr.port());
    acks.bind(&endpoint).expect("bind acks");
    let push = ctx.socket(zmq::PUSH).expect("push");
    push.connect(&endpoint).expect("connect acks");
    let (tx, rx) = crossbeam_channel::bounded(16);
    let stop = Arc::new(AtomicBool::new(false));
    let engine = EngineFront {
        listener,
        acks,
        senders: vec![tx],
        producers: Producers::default(),
        limits: Limits {
            max_message: 1 << 20,
            max_buffered: 2 << 20,
            allow_empty_message: true,
        },
        counters: Arc::new(Counters::default()),
        stop: stop.clone(),
        max_connections,
        idle_eviction,
        curve: None,
    };
    let thread = std::thread::spawn(move || engine.run(Vec::new()));
    (addr, rx, push, stop, thread)
}

/// A ZMTP/2.0 DEALER handshake (spec §2) for `identity`; the server's 14 bytes are read.
fn connect(addr: std::net::SocketAddr, identity: &[u8]) -> std::net::TcpStream {
    try_connect(addr, identity).expect("handshake")
}

/// As [`connect`]; `None` when the server closed the connection instead.
fn try_connect(addr: std::net::SocketAddr, identity: &[u8]) -> Option<std::net::TcpStream> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let mut hello = vec![0xff];
    hello.extend_from_slice(&(identity.len() as u64 + 1).to_be_bytes());
    hello.extend_from_slice(&[0x7f, 0x01, 0x05, 0x00, identity.len() as u8]);
    hello.extend_from_slice(identity);
    s.write_all(&hello).ok()?;
    let mut server = [0u8; 14];
    s.read_exact(&mut server).ok()?;
    Some(s)
}

#[test]
fn a_pipelining_mode_2_producer_is_read_only_as_far_as_its_replies_allow() {
    let ctx = zmq::Context::new();
    let (addr, batches, push, stop, thread) = front(&ctx, MAX_CONNECTIONS, IDLE_EVICTION);
    let id = zper_wire::Identity::new("credit", 2, &[7u8; 16])
        .expect("identity")
        .to_bytes();
    let mut producer = connect(addr, &id);
    const SENT: u32 = 10_000;
    let mut all = Vec::new();
    for m in 0..SENT {
        all.extend_from_slice(&[0x00, 4]);
        all.extend_from_slice(&m.to_be_bytes());
    }
    producer.write_all(&all).expect("messages"); // 60 kB: the socket buffers hold it
    let (mut received, mut answered) = (0u32, 0u32);
    while received < SENT {
        let batch = batches
            .recv_timeout(Duration::from_secs(30))
            .expect("a batch");
        received += batch.appends.iter().map(|a| a.messages as u32).sum::<u32>();
        assert!(
            received <= answered + MAX_UNANSWERED,
            "{received} messages taken with {answered} answered"
        );
        if received == answered + MAX_UNANSWERED || received == SENT {
            // At the bound: answer the oldest 1,000 (or the rest), as a worker would.
            let upto = (answered + 1000).min(received);
            for m in answered..upto {
                push.send_multipart([id.clone(), Vec::new(), m.to_be_bytes().to_vec()], 0)
                    .expect("ack");
            }
            answered = upto;
        }
    }
    for m in answered..SENT {
        push.send_multipart([id.clone(), Vec::new(), m.to_be_bytes().to_vec()], 0)
            .expect("ack");
    }
    // Every reply reached the producer, in order.
    let mut replies = vec![0u8; SENT as usize * 8];
    producer.read_exact(&mut replies).expect("replies");
    for (m, reply) in replies.chunks(8).enumerate() {
        let mut want = vec![0x01, 0x00, 0x00, 0x04];
        want.extend_from_slice(&(m as u32).to_be_bytes());
        assert_eq!(reply, want, "reply {m}");
    }
    stop.store(true, Ordering::Relaxed);
    drop(batches);
    thread.join().expect("front");
}

/// True when the server closed `s` (end of stream or reset) within the read timeout.
fn closed(s: &mut std::net::TcpStream) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
    }
}

#[test]
fn at_the_connection_limit_the_longest_idle_connection_makes_room() {
    let ctx = zmq::Context::new();
    let (addr, batches, _push, stop, thread) = front(&ctx, 2, Duration::ZERO);
    let identity = |topic: &str| {
        zper_wire::Identity::new(topic, 0, &[1u8; 16])
            .expect("identity")
            .to_bytes()
    };
    let mut idle = connect(addr, &identity("idle"));
    let mut busy = connect(addr, &identity("busy"));
    busy.write_all(&[0x00, 1, b'x']).expect("message");
    let batch = batches
        .recv_timeout(Duration::from_secs(30))
        .expect("batch");
    assert_eq!(batch.bytes, [0x00, 1, b'x']);
    // A third connection: the idle one is closed for it, the busy one stays.
    let mut third = connect(addr, &identity("third"));
    assert!(closed(&mut idle), "the idle connection was kept");
    third.write_all(&[0x00, 1, b'y']).expect("message");
    busy.write_all(&[0x00, 1, b'z']).expect("message");
    let mut got = Vec::new();
    while got.len() < 6 {
        let batch = batches
            .recv_timeout(Duration::from_secs(30))
            .expect("batch");
        got.extend_from_slice(&batch.bytes);
    }
    got.sort_unstable();
    assert_eq!(got, [0, 0, 1, 1, b'y', b'z']);
    stop.store(true, Ordering::Relaxed);
    drop(batches);
    thread.join().expect("front");
}

#[test]
fn at_the_connection_limit_with_none_idle_long_enough_a_new_connection_is_refused() {
    let ctx = zmq::Context::new();
    let (addr, batches, _push, stop, thread) = front(&ctx, 1, Duration::from_secs(3600));
    let id = zper_wire::Identity::new("only", 0, &[1u8; 16])
        .expect("identity")
        .to_bytes();
    let mut first = connect(addr, &id);
    let mut refused = std::net::TcpStream::connect(addr).expect("connect");
    refused
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    assert!(closed(&mut refused), "a connection past the limit was kept");
    first.write_all(&[0x00, 1, b'k']).expect("message");
    let batch = batches
        .recv_timeout(Duration::from_secs(30))
        .expect("batch");
    assert_eq!(batch.bytes, [0x00, 1, b'k']);
    stop.store(true, Ordering::Relaxed);
    drop(batches);
    thread.join().expect("front");
}

/// A TCP connection to `addr` from the local address `from` (another loopback address).
fn connect_from(from: &str, addr: std::net::SocketAddr) -> std::net::TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    let stream = rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4().expect("socket");
        s.bind(format!("{from}:0").parse().expect("addr"))
            .expect("bind");
        s.connect(addr).await.expect("connect")
    });
    let std = stream.into_std().expect("std");
    std.set_nonblocking(false).expect("blocking");
    std
}

#[test]
fn one_address_cannot_hold_more_than_its_share_of_connections_in_handshake() {
    // Attack finding: half-open handshakes from one host held every slot until the handshake
    // timeout. Past MAX_HANDSHAKES_PER_ADDRESS from one address, new ones are closed; another
    // address, and the first once its handshakes are done, are served.
    let ctx = zmq::Context::new();
    let (addr, batches, _push, stop, thread) = front(&ctx, 4096, Duration::from_secs(3600));
    let limit = crate::zmtp::peers::MAX_HANDSHAKES_PER_ADDRESS;
    // Accepted in order: by the time the next one is taken, these all wait in their handshake.
    let silent: Vec<std::net::TcpStream> = (0..limit)
        .map(|_| std::net::TcpStream::connect(addr).expect("connect"))
        .collect();
    let mut one_more = std::net::TcpStream::connect(addr).expect("connect");
    one_more
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    assert!(closed(&mut one_more), "one handshake too many was kept");
    // Another address is served meanwhile.
    let id = zper_wire::Identity::new("other", 0, &[2u8; 16])
        .expect("identity")
        .to_bytes();
    let mut other = connect_from("127.0.0.2", addr);
    other
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut hello = vec![0xff];
    hello.extend_from_slice(&(id.len() as u64 + 1).to_be_bytes());
    hello.extend_from_slice(&[0x7f, 0x01, 0x05, 0x00, id.len() as u8]);
    hello.extend_from_slice(&id);
    other.write_all(&hello).expect("greeting");
    let mut server = [0u8; 14];
    other.read_exact(&mut server).expect("server greeting");
    other.write_all(&[0x00, 1, b'o']).expect("message");
    let batch = batches
        .recv_timeout(Duration::from_secs(30))
        .expect("batch");
    assert_eq!(batch.bytes, [0x00, 1, b'o']);
    // Once the silent ones are gone, the first address is served again.
    drop(silent);
    let id = zper_wire::Identity::new("back", 0, &[3u8; 16])
        .expect("identity")
        .to_bytes();
    let mut back = None;
    for _ in 0..200 {
        if let Some(mut s) = try_connect(addr, &id) {
            if s.write_all(&[0x00, 1, b'b']).is_ok() {
                back = Some(s);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(back.is_some(), "the first address was not served again");
    let batch = batches
        .recv_timeout(Duration::from_secs(30))
        .expect("batch");
    assert_eq!(batch.bytes, [0x00, 1, b'b']);
    stop.store(true, Ordering::Relaxed);
    drop(batches);
    thread.join().expect("front");
}
