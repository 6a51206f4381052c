use super::*;

/// A connected client connection (its peer is returned too, to keep it open).
fn client(in_progress: usize) -> (Client, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let peer = std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    server.set_nonblocking(true).expect("nonblocking");
    let handshake = Handshake::new(SocketType::Router, &READER_PEERS, Null);
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
