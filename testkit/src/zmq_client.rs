//! Raw ZPER clients as tests write them: identities with a known UUID, sockets with timeouts,
//! reader requests, and a ZMTP/2.0 peer speaking bytes (JeroMQ 0.3.x).

use std::time::Duration;

use zper_wire::Identity;

pub const UUID: [u8; 16] = [
    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
];

pub fn identity(topic: &str, mode: u8) -> Vec<u8> {
    // A distinct uuid per socket so identities never collide between clients of one test.
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let mut uuid = UUID;
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    uuid[8..].copy_from_slice(&n.to_be_bytes());
    Identity::new(topic, mode, &uuid)
        .expect("valid topic")
        .to_bytes()
}

pub fn client(ctx: &zmq::Context, kind: zmq::SocketType, id: &[u8], endpoint: &str) -> zmq::Socket {
    let s = ctx.socket(kind).expect("socket");
    if !id.is_empty() {
        s.set_identity(id).expect("identity");
    }
    s.set_linger(1000).expect("linger");
    s.set_rcvtimeo(5000).expect("rcvtimeo");
    s.connect(endpoint).expect("connect");
    s
}

/// Sends `frames` and returns the reply frames (5 s timeout).
pub fn request(s: &zmq::Socket, frames: &[&[u8]]) -> Vec<Vec<u8>> {
    s.send_multipart(frames, 0).expect("send");
    s.recv_multipart(0).expect("a reply within 5 s")
}

pub fn fetch_frames(offset: i64, max: i64) -> Vec<Vec<u8>> {
    vec![
        b"FETCH".to_vec(),
        offset.to_be_bytes().to_vec(),
        max.to_be_bytes().to_vec(),
    ]
}

/// Reads a topic from 0 as ZPER's `MsgIterator` clients do: FETCH, keep the complete records,
/// continue at offset + valid bytes (spec §5.3), until an empty or unusable reply.
pub fn read_all(s: &zmq::Socket) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let f = fetch_frames(out.len() as i64, 1 << 20);
        let refs: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
        let reply = request(s, &refs);
        if reply[0] != [100] || reply.len() != 2 {
            return out;
        }
        let valid = zper_wire::valid_bytes(&reply[1]);
        if valid == 0 {
            return out;
        }
        out.extend_from_slice(&reply[1][..valid]);
    }
}

/// A raw ZMTP/2.0 peer over TCP, as JeroMQ 0.3.x speaks it (spec `zper.md` §2): greeting
/// `ff <8-byte BE identity length + 1> 7f 01 <socket type>`, then the identity as a frame, then
/// frames `[flags][len:1 or 8][payload]`.
pub struct Zmtp2 {
    pub stream: std::net::TcpStream,
    /// The 12-byte greeting and identity frame the server sent.
    pub server_greeting: Vec<u8>,
}

impl Zmtp2 {
    pub const REQ: u8 = 3;
    pub const DEALER: u8 = 5;
    pub const PUSH: u8 = 8;

    /// Connects to `tcp://host:port` and does the ZMTP/2.0 handshake.
    pub fn connect(endpoint: &str, socket_type: u8, identity: &[u8]) -> Zmtp2 {
        use std::io::{Read, Write};
        let addr = endpoint.trim_start_matches("tcp://");
        let mut stream = std::net::TcpStream::connect(addr).expect("tcp connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut greeting = vec![0xff];
        greeting.extend_from_slice(&(identity.len() as u64 + 1).to_be_bytes());
        greeting.extend_from_slice(&[0x7f, 0x01, socket_type]);
        greeting.extend_from_slice(&[0x00, identity.len() as u8]);
        greeting.extend_from_slice(identity);
        stream.write_all(&greeting).expect("greeting");
        // Server: 12-byte greeting, then its (empty) identity frame `00 00`.
        let mut server_greeting = vec![0u8; 14];
        stream
            .read_exact(&mut server_greeting)
            .expect("server greeting");
        Zmtp2 {
            stream,
            server_greeting,
        }
    }

    /// Sends one multipart message.
    pub fn send(&mut self, frames: &[&[u8]]) {
        use std::io::Write;
        let mut out = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            zper_wire::encode_record(f, i + 1 < frames.len(), &mut out);
        }
        self.stream.write_all(&out).expect("send");
    }

    /// Receives one multipart message (5 s timeout).
    pub fn recv(&mut self) -> Vec<Vec<u8>> {
        use std::io::Read;
        let mut frames = Vec::new();
        loop {
            let mut h = [0u8; 2];
            self.stream.read_exact(&mut h).expect("frame header");
            let len = if h[0] & 0x02 != 0 {
                let mut l = [0u8; 8];
                l[0] = h[1];
                self.stream.read_exact(&mut l[1..]).expect("long length");
                u64::from_be_bytes(l) as usize
            } else {
                h[1] as usize
            };
            let mut payload = vec![0u8; len];
            self.stream.read_exact(&mut payload).expect("payload");
            frames.push(payload);
            if h[0] & 0x01 == 0 {
                return frames;
            }
        }
    }
}
