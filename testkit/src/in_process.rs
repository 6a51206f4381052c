//! A node started in this process ([`zper_node::Node`]) on ephemeral loopback ports.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zper_node::{Node, NodeConfig};

use crate::{client, identity, read_all};

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
