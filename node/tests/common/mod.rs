//! Shared test harness: an in-process node on ephemeral loopback ports, raw zmq clients, and a
//! guard for nodes run as child processes.
#![allow(dead_code, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zper::{Node, NodeConfig};
use zper_wire::Identity;

pub const UUID: [u8; 16] = [
    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
];

/// A node on 127.0.0.1 ephemeral ports over a temporary data directory.
pub struct TestNode {
    pub node: Option<Node>,
    pub dir: tempfile::TempDir,
    pub ctx: zmq::Context,
    pub writer: String,
    pub reader: String,
    pub ack: String,
}

/// Config for tests: loopback ephemeral binds, small flush thresholds.
pub fn test_config(dir: &Path) -> NodeConfig {
    let mut c = NodeConfig::default();
    c.store.base_dir = dir.to_owned();
    c.store.flush.flush_messages = 1000;
    c.store.flush.flush_interval = Duration::from_millis(50);
    c.writer_bind = "tcp://127.0.0.1:*".into();
    c.reader_bind = "tcp://127.0.0.1:*".into();
    c.ack_bind = "tcp://127.0.0.1:*".into();
    c.controller_bind = "tcp://127.0.0.1:*".into();
    c.replica_bind = "tcp://127.0.0.1:*".into();
    c.relay_bind = "tcp://127.0.0.1:*".into();
    c.dolly_requests_bind = "tcp://127.0.0.1:*".into();
    c.dolly_updates_bind = "tcp://127.0.0.1:*".into();
    c.dolly_snapshots_bind = "tcp://127.0.0.1:*".into();
    c.writer_workers = 3;
    c.reader_workers = 2;
    c.cluster.http_bind = "127.0.0.1:0".into();
    c
}

impl TestNode {
    pub fn start() -> TestNode {
        Self::start_with(|_| {})
    }

    pub fn start_with(tweak: impl FnOnce(&mut NodeConfig)) -> TestNode {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = test_config(dir.path());
        tweak(&mut c);
        let node = Node::start(&c).expect("node starts");
        let e = node.endpoints().clone();
        TestNode {
            node: Some(node),
            dir,
            ctx: zmq::Context::new(),
            writer: e.writer,
            reader: e.reader,
            ack: e.ack,
        }
    }

    pub fn node(&self) -> &Node {
        self.node.as_ref().expect("running")
    }

    pub fn segment(&self, topic: &str, start: u64) -> PathBuf {
        self.dir.path().join(topic).join(format!("{start:020}.dat"))
    }

    /// A socket of `kind` with the ZPER identity for (topic, mode), connected to `endpoint`.
    pub fn client(
        &self,
        kind: zmq::SocketType,
        topic: &str,
        mode: u8,
        endpoint: &str,
    ) -> zmq::Socket {
        client(&self.ctx, kind, &identity(topic, mode), endpoint)
    }

    pub fn reader_dealer(&self, topic: &str) -> zmq::Socket {
        self.client(zmq::DEALER, topic, 0, &self.reader.clone())
    }

    pub fn writer_client(&self, kind: zmq::SocketType, topic: &str, mode: u8) -> zmq::Socket {
        self.client(kind, topic, mode, &self.writer.clone())
    }

    /// Bytes of the topic readable through the reader (FETCH from 0 in a loop).
    pub fn read_all(&self, topic: &str) -> Vec<u8> {
        read_all(&self.reader_dealer(topic))
    }

    /// Waits (bounded) until the reader serves at least `len` bytes of `topic`.
    pub fn wait_readable(&self, topic: &str, len: usize) -> Vec<u8> {
        let s = self.reader_dealer(topic);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let data = read_all(&s);
            if data.len() >= len || Instant::now() > deadline {
                return data;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if let Some(n) = self.node.take() {
            let _ = n.shutdown();
        }
    }
}

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

/// Polls `cond` every 20 ms for up to 10 s; returns its last value.
pub fn eventually(cond: impl FnMut() -> bool) -> bool {
    eventually_within(Duration::from_secs(10), cond)
}

/// Polls `cond` every 20 ms for up to `limit`; returns its last value. For catching up under
/// load (three 3-process clusters share CI's two cores), where 10 s can be too short.
pub fn eventually_within(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A free loopback TCP port (bound then released), below Linux's ephemeral range (32768+):
/// a port from that range may be taken by any outgoing connection before the node binds it.
/// Test binaries run in parallel start at different places (by process id).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = 10_000 + (std::process::id() % 200) * 100;
    for _ in 0..20_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 10_000 + (base - 10_000 + n) % 22_000;
        if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok()
            && std::net::TcpListener::bind(("0.0.0.0", port as u16)).is_ok()
        {
            return port as u16;
        }
    }
    panic!("no free port below 32000")
}

/// A `zper` child process; killed on drop.
pub struct ChildNode {
    pub child: Child,
    pub writer: String,
    pub reader: String,
    pub ack: String,
    pub config: PathBuf,
    /// Arguments after `--config FILE` (e.g. `run --node-id 4`).
    pub args: Vec<String>,
}

impl ChildNode {
    /// Writes a config for `data_dir` with fresh ports plus `extra` lines, and starts the binary.
    pub fn start(data_dir: &Path, extra: &str) -> ChildNode {
        Self::start_on(data_dir, free_port(), extra)
    }

    /// As [`ChildNode::start`] with the HTTP admin on 127.0.0.1:`h`.
    pub fn start_on(data_dir: &Path, h: u16, extra: &str) -> ChildNode {
        Self::start_on_with_args(data_dir, h, extra, &[])
    }

    /// As [`ChildNode::start_on`], with command-line `args` after `--config FILE`.
    pub fn start_on_with_args(data_dir: &Path, h: u16, extra: &str, args: &[&str]) -> ChildNode {
        let (w, r, a) = (free_port(), free_port(), free_port());
        let config = data_dir.with_extension("properties");
        // With a peers.json (`dolly.peers`) the Dolly ports come from it.
        let dolly = if extra.contains("dolly.peers") {
            String::new()
        } else {
            format!(
                "dolly.requests.bind = tcp://127.0.0.1:{}\ndolly.updates.bind = tcp://127.0.0.1:{}\n\
                 dolly.snapshots.bind = tcp://127.0.0.1:{}\n",
                free_port(),
                free_port(),
                free_port()
            )
        };
        // A test that proxies replication sets replica.bind itself.
        let replica = if extra.contains("replica.bind") {
            String::new()
        } else {
            format!("replica.bind = tcp://127.0.0.1:{}\n", free_port())
        };
        std::fs::write(
            &config,
            format!(
                "base_dir = {}\nwriter.bind = tcp://127.0.0.1:{w}\nreader.bind = tcp://127.0.0.1:{r}\n\
                 ack.bind = tcp://127.0.0.1:{a}\nhttp.bind = 127.0.0.1:{h}\n\
                 controller.bind = tcp://127.0.0.1:{c}\n{replica}\
                 relay.bind = tcp://127.0.0.1:{rl}\n\
                 {dolly}{extra}\n",
                data_dir.display(),
                c = free_port(),
                rl = free_port(),
            ),
        )
        .expect("write config");
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        Self::spawn_with_args(&config, w, r, a, args)
    }

    pub fn spawn(config: &Path, w: u16, r: u16, a: u16) -> ChildNode {
        Self::spawn_with_args(config, w, r, a, Vec::new())
    }

    pub fn spawn_with_args(config: &Path, w: u16, r: u16, a: u16, args: Vec<String>) -> ChildNode {
        // The node's log goes beside its config (`<config>.log`, appended across restarts).
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(config.with_extension("log"))
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null());
        let child = Command::new(env!("CARGO_BIN_EXE_zper"))
            .arg("--config")
            .arg(config)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn zper");
        let node = ChildNode {
            child,
            writer: format!("tcp://127.0.0.1:{w}"),
            reader: format!("tcp://127.0.0.1:{r}"),
            ack: format!("tcp://127.0.0.1:{a}"),
            config: config.to_owned(),
            args,
        };
        assert!(
            eventually(|| std::net::TcpStream::connect(("127.0.0.1", r)).is_ok()),
            "zper did not start listening: {}",
            std::fs::read_to_string(config.with_extension("log"))
                .unwrap_or_default()
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        );
        node
    }

    /// Restarts the same config on the same ports.
    pub fn restart(&mut self) {
        let port = |e: &str| {
            e.rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("port")
        };
        let (w, r, a) = (port(&self.writer), port(&self.reader), port(&self.ack));
        let config = self.config.clone();
        let args = std::mem::take(&mut self.args);
        *self = Self::spawn_with_args(&config, w, r, a, args);
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }

    /// SIGSTOP: the process freezes (its sockets stay open, nothing answers).
    pub fn pause(&self) {
        let _ = Command::new("kill")
            .args(["-STOP", &self.child.id().to_string()])
            .status();
    }

    /// SIGCONT after [`ChildNode::pause`].
    pub fn resume(&self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        self.child.wait().expect("wait")
    }
}

impl Drop for ChildNode {
    fn drop(&mut self) {
        self.resume();
        let _ = self.child.kill();
        let _ = self.child.wait();
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

/// A minimal HTTP/1.1 request to `addr` (`host:port`): (status, body), or None when the node
/// does not answer (connection refused, reset).
pub fn http(method: &str, addr: &str, path: &str, body: Option<&str>) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let status = resp.split_whitespace().nth(1)?.parse().ok()?;
    let body = resp
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Some((status, body))
}

/// GET `path` as JSON (Null when the node does not answer or the body is not JSON).
pub fn get_json(addr: &str, path: &str) -> serde_json::Value {
    http("GET", addr, path, None)
        .and_then(|(_, b)| serde_json::from_str(&b).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// A loopback TCP proxy a test can cut: connections to `listen` are forwarded to `target`
/// until [`CutProxy::cut`], which closes every connection and refuses new ones until
/// [`CutProxy::heal`]. It stands for a blocked port (a firewall rule) without root.
pub struct CutProxy {
    pub port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl CutProxy {
    /// Listens on 127.0.0.1:`port` and forwards to 127.0.0.1:`target`.
    pub fn start(port: u16, target: u16) -> CutProxy {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("proxy bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let cut = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (cut.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                if c.load(Ordering::Relaxed) {
                    drop(client);
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (
                        client.try_clone().expect("clone"),
                        server.try_clone().expect("clone"),
                    ),
                    (server, client),
                ] {
                    let (c, s) = (c.clone(), s.clone());
                    let _ = from.set_nonblocking(false);
                    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 64 * 1024];
                        while !c.load(Ordering::Relaxed) && !s.load(Ordering::Relaxed) {
                            match from.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    // Cut: what was read after the cut is lost, as behind
                                    // a firewall rule.
                                    if c.load(Ordering::Relaxed) || to.write_all(&buf[..n]).is_err()
                                    {
                                        break;
                                    }
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock
                                            | std::io::ErrorKind::TimedOut
                                    ) => {}
                                Err(_) => break,
                            }
                        }
                        let _ = from.shutdown(std::net::Shutdown::Both);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        CutProxy { port, cut, stop }
    }

    /// Closes every forwarded connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Forwards again.
    pub fn heal(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Resident set of process `pid`, bytes (`VmRSS` of /proc/<pid>/status; 0 when unreadable).
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
