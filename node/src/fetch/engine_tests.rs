use super::*;
use zper_wire::zmtp::{Handshake, Null, Security};

/// A connected client connection (its peer is returned too, to keep it open).
fn client(in_progress: usize) -> (Client, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let peer = std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    server.set_nonblocking(true).expect("nonblocking");
    let handshake = Handshake::new(SocketType::Router, &READER_PEERS, Security::Null(Null));
    let limits = Limits {
        max_message: MAX_REQUEST,
        max_buffered: 2 * MAX_REQUEST,
        allow_empty_message: true,
    };
    let mut conn = Connection::accept(mio::net::TcpStream::from_std(server), handshake, limits);
    conn.flush().expect("the greeting goes out"); // nothing left unsent
    let c = Client {
        conn,
        routing_id: b"id".to_vec(),
        in_progress,
        in_flight: 0,
        active: Instant::now(),
    };
    (c, peer)
}

#[test]
fn a_connection_is_held_at_its_share_the_node_total_or_unsent_bytes() {
    let mut clients = Clients::default();
    let (a, _pa) = client(PER_CONNECTION - 1);
    let (b, _pb) = client(PER_CONNECTION);
    clients.by_token.insert(Token(2), a);
    clients.by_token.insert(Token(3), b);
    clients.total = 2 * PER_CONNECTION - 1;
    assert!(!clients.held(Token(2)));
    assert!(clients.held(Token(3)));
    // Replies not taken by the peer hold it back too.
    if let Some(c) = clients.by_token.get_mut(&Token(2)) {
        c.conn.queue(&[vec![0u8; OUTPUT_PAUSE]]);
    }
    assert!(clients.held(Token(2)));
    // A connection whose requests in progress may bring MAX_IN_FLIGHT reply bytes waits.
    let (mut d, _pd) = client(1);
    d.in_flight = MAX_IN_FLIGHT;
    clients.by_token.insert(Token(5), d);
    assert!(clients.held(Token(5)));
    if let Some(d) = clients.by_token.get_mut(&Token(5)) {
        d.in_flight = MAX_IN_FLIGHT - 1;
    }
    assert!(!clients.held(Token(5)));
    // The node's total holds every connection.
    let (c, _pc) = client(0);
    clients.by_token.insert(Token(4), c);
    assert!(!clients.held(Token(4)));
    clients.total = IN_PROGRESS;
    assert!(clients.held(Token(4)));
}

#[test]
fn paused_connections_resume_once_they_may_be_read_and_closed_ones_are_forgotten() {
    let mut clients = Clients::default();
    let (a, _pa) = client(PER_CONNECTION);
    let (b, _pb) = client(0);
    clients.by_token.insert(Token(2), a);
    clients.by_token.insert(Token(3), b);
    clients.total = PER_CONNECTION;
    clients.paused.extend([Token(2), Token(3), Token(9)]);
    assert_eq!(clients.resumable(), vec![Token(3)]);
    assert_eq!(clients.paused.len(), 1, "Token(9) (closed) is dropped");
    if let Some(c) = clients.by_token.get_mut(&Token(2)) {
        c.in_progress -= 1;
    }
    assert_eq!(clients.resumable(), vec![Token(2)]);
    assert!(clients.paused.is_empty());
    // Settled: nothing in progress, nothing unsent.
    assert!(!clients.settled(Token(2)));
    assert!(clients.settled(Token(3)));
}

#[test]
fn a_reply_to_a_req_client_starts_with_the_empty_envelope_frame() {
    assert_eq!(
        with_envelope(true, vec![vec![100], vec![1]]),
        vec![vec![], vec![100], vec![1]]
    );
    assert_eq!(with_envelope(false, vec![vec![101]]), vec![vec![101]]);
}

#[test]
fn at_its_connection_limit_the_engine_closes_the_connection_idle_the_longest() {
    use std::io::Read;
    let (listener, bound) = crate::zmtp::listener::bind("tcp://127.0.0.1:0").expect("bind");
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let engine = ReaderEngine {
        listener,
        cap: 1 << 20,
        limits: Limits {
            max_message: MAX_REQUEST,
            max_buffered: 2 * MAX_REQUEST,
            allow_empty_message: true,
        },
        counters: counters.clone(),
        stop: stop.clone(),
        max_connections: 2,
        idle_eviction: Duration::from_millis(200),
        curve: None,
    };
    let poll = Poll::new().expect("poll");
    let (jobs, _job_rx) = crossbeam_channel::bounded::<Job>(IN_PROGRESS);
    let (_done_tx, done) = crossbeam_channel::bounded::<Done>(IN_PROGRESS);
    let thread = std::thread::spawn(move || engine.run(poll, jobs, done, Vec::new()));
    let id = zper_testkit::identity("t", 0);
    let first = zper_testkit::Zmtp2::connect(&bound, zper_testkit::Zmtp2::DEALER, &id);
    std::thread::sleep(Duration::from_millis(50));
    let _second = zper_testkit::Zmtp2::connect(&bound, zper_testkit::Zmtp2::DEALER, &id);
    std::thread::sleep(Duration::from_millis(300));
    // Both idle past 200 ms: the third connection is taken and the oldest (first) closed;
    // Zmtp2::connect itself fails if the node never answers the third.
    let _third = zper_testkit::Zmtp2::connect(&bound, zper_testkit::Zmtp2::DEALER, &id);
    let mut s = first.stream;
    let mut buf = [0u8; 16];
    assert_eq!(s.read(&mut buf).expect("closed, not timed out"), 0);
    assert_eq!(Counters::get(&counters.zmtp_idle_closed), 1);
    assert_eq!(Counters::get(&counters.zmtp_refused_connections), 0);
    // The second, idle as long, makes room for a fourth; then the two left are new, so a
    // fifth is refused.
    let _fourth = zper_testkit::Zmtp2::connect(&bound, zper_testkit::Zmtp2::DEALER, &id);
    assert_eq!(Counters::get(&counters.zmtp_idle_closed), 2);
    let mut fifth = std::net::TcpStream::connect(bound.trim_start_matches("tcp://")).expect("tcp");
    fifth
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    assert_eq!(fifth.read(&mut buf).expect("closed at once"), 0);
    assert_eq!(Counters::get(&counters.zmtp_refused_connections), 1);
    stop.store(true, Ordering::Relaxed);
    thread.join().expect("engine thread");
}
