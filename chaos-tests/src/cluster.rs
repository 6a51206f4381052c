//! A 3-node zper cluster in containers on a private Docker network.
//!
//! The image (`zper:chaos`) is built once per test process by `scripts/docker-image.sh` from
//! the `zper` binary under test (`$ZPER_BIN`, else the one cargo built beside this test), so it
//! never needs a registry. Containers are started with testcontainers and removed when the
//! [`Cluster`] drops (also when a test fails), then the network is removed.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use testcontainers::core::{Mount, WaitFor};
use testcontainers::runners::SyncRunner;
use testcontainers::{Container, GenericImage, ImageExt};

use crate::disk::{DiskKind, NodeDisk};
use crate::docker;
use crate::security::{Security, KEYS};

/// The image the tests run.
pub const IMAGE: (&str, &str) = ("zper", "chaos");
/// HTTP admin port inside the containers.
pub const HTTP: u16 = 9644;

/// Builds `zper:chaos` from the binary under test, once per process.
pub fn ensure_image() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        crate::require_docker();
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root")
            .to_owned();
        let out = std::process::Command::new(root.join("scripts/docker-image.sh"))
            .env("ZPER_BIN", zper_testkit::zper_binary())
            .env("IMAGE", format!("{}:{}", IMAGE.0, IMAGE.1))
            .output()
            .expect("run scripts/docker-image.sh");
        assert!(
            out.status.success(),
            "scripts/docker-image.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// One node: its container and where the host reaches it.
pub struct Node {
    /// 1-based node id.
    pub id: u64,
    /// Container (and host) name on the cluster network.
    pub name: String,
    /// Its address on the network, as the host reaches it (changes after a reconnect).
    pub ip: String,
    container: Container<GenericImage>,
}

impl Node {
    /// `tcp://<ip>:<port>`.
    pub fn tcp(&self, port: u16) -> String {
        format!("tcp://{}:{port}", self.ip)
    }

    /// `<ip>:9644`.
    pub fn http(&self) -> String {
        format!("{}:{HTTP}", self.ip)
    }

    /// The container id.
    pub fn container_id(&self) -> &str {
        self.container.id()
    }
}

/// Three zper nodes, each an initial voter, on network `network`.
pub struct Cluster {
    /// The nodes, index = id - 1.
    pub nodes: Vec<Node>,
    /// The Docker network.
    pub network: String,
    /// Each node's `/data` on the host, index = id - 1 (dropped after the containers).
    pub disks: Vec<NodeDisk>,
    /// What clients present (none unless started with [`Cluster::start_secured`]).
    pub security: Security,
}

fn http_get(addr: &str, path: &str) -> Option<(u16, Value)> {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?;
    let resp = client.get(format!("http://{addr}{path}")).send().ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.json().unwrap_or(Value::Null)))
}

/// Polls `cond` every 100 ms until it holds or `limit` passes.
pub fn wait_until(limit: Duration, cond: impl FnMut() -> bool) -> bool {
    zper_testkit::eventually_every(limit, Duration::from_millis(100), cond)
}

impl Cluster {
    /// Starts three nodes named `<prefix>n1..3`, each with its data in a plain host directory,
    /// and waits (at most 60 s) until all are ready and registered as live.
    pub fn start(prefix: &str) -> Cluster {
        Cluster::start_on(prefix, [DiskKind::Dir; 3])
    }

    /// As [`Cluster::start`], node `i`'s data on a disk of kind `disks[i]`.
    pub fn start_on(prefix: &str, disks: [DiskKind; 3]) -> Cluster {
        Cluster::start_with(prefix, disks, Security::default())
    }

    /// As [`Cluster::start`] with security on (issue #19): CURVE on every ZMQ endpoint and an
    /// admin token, from keys made for this cluster ([`Security::generate`]).
    pub fn start_secured(prefix: &str) -> Cluster {
        Cluster::start_with(prefix, [DiskKind::Dir; 3], Security::generate())
    }

    /// As [`Cluster::start_on`], with `security`'s node settings and keys.
    pub fn start_with(prefix: &str, disks: [DiskKind; 3], security: Security) -> Cluster {
        ensure_image();
        let disks: Vec<NodeDisk> = disks.into_iter().map(NodeDisk::new).collect();
        let network = format!("{prefix}-net");
        let _ = docker(&["network", "rm", &network]);
        docker(&["network", "create", &network]).expect("create network");
        let names: Vec<String> = (1..=3).map(|i| format!("{prefix}n{i}")).collect();
        let voters = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{}={n}:{HTTP}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let nodes = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let _ = docker(&["rm", "-f", "-v", name]);
                let mut args = vec![
                    "run".to_owned(),
                    "--node-id".into(),
                    (i + 1).to_string(),
                    "--voters".into(),
                    voters.clone(),
                    "--set".into(),
                    format!("http.advertise={name}:{HTTP}"),
                    "--set".into(),
                    "flush_interval=50".into(),
                    "--set".into(),
                    "node.lease_ms=1500".into(),
                    // Small segments: the runs seal several, so faults meet closed ones too.
                    "--set".into(),
                    "segment_size=65536".into(),
                ];
                // More settings for every node, `key=value` separated by spaces (e.g.
                // ZPER_CHAOS_SET='reader.engine=zmtp' runs the suite on the other reader).
                for kv in std::env::var("ZPER_CHAOS_SET")
                    .unwrap_or_default()
                    .split_whitespace()
                {
                    args.extend(["--set".to_owned(), kv.to_owned()]);
                }
                for kv in security.node_settings() {
                    args.extend(["--set".to_owned(), kv]);
                }
                // Root in the container: the host directory (a LazyFs or tmpfs mount among
                // them) belongs to root.
                let log = std::env::var("ZPER_CHAOS_RUST_LOG")
                    .unwrap_or_else(|_| "info,openraft=error".to_owned());
                let mut image = GenericImage::new(IMAGE.0, IMAGE.1)
                    .with_wait_for(WaitFor::Nothing)
                    .with_network(network.clone())
                    .with_env_var("RUST_LOG", log)
                    .with_container_name(name.clone())
                    .with_user("0")
                    .with_mount(Mount::bind_mount(
                        disks[i].path.display().to_string(),
                        "/data",
                    ))
                    .with_cmd(args);
                if let Some(keys) = security.host_dir() {
                    image = image.with_mount(
                        Mount::bind_mount(keys.display().to_string(), KEYS)
                            .with_access_mode(testcontainers::core::AccessMode::ReadOnly),
                    );
                }
                let container = image
                    .start()
                    .unwrap_or_else(|e| panic!("start {name}: {e}"));
                Node {
                    id: i as u64 + 1,
                    name: name.clone(),
                    ip: String::new(),
                    container,
                }
            })
            .collect();
        let mut c = Cluster {
            nodes,
            network,
            disks,
            security,
        };
        for i in 0..3 {
            c.refresh_ip(i);
        }
        assert!(
            c.wait_healthy(Duration::from_secs(60)),
            "the cluster did not become ready"
        );
        c
    }

    /// Re-reads node `i`'s address on the network (after a restart or reconnect).
    pub fn refresh_ip(&mut self, i: usize) {
        let name = self.nodes[i].name.clone();
        let format = format!(
            "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
            self.network
        );
        let ok = wait_until(Duration::from_secs(20), || {
            match docker(&["inspect", "-f", &format, &name]) {
                Ok(ip) if !ip.is_empty() && ip != "<no value>" => {
                    self.nodes[i].ip = ip;
                    true
                }
                _ => false,
            }
        });
        assert!(ok, "no address for {name}");
    }

    /// Every node ready, three live brokers, a Raft leader.
    pub fn healthy(&self) -> bool {
        self.nodes.iter().all(|n| {
            http_get(&n.http(), "/v1/status/ready").is_some_and(|(s, _)| s == 200)
                && http_get(&n.http(), "/v1/brokers").is_some_and(|(_, b)| {
                    b.as_array()
                        .is_some_and(|a| a.iter().filter(|x| x["live"] == true).count() == 3)
                })
        })
    }

    /// Waits until [`Cluster::healthy`]; false after `limit`.
    pub fn wait_healthy(&self, limit: Duration) -> bool {
        wait_until(limit, || self.healthy())
    }

    /// `GET path` on node `i` as JSON (Null when it does not answer).
    pub fn get(&self, i: usize, path: &str) -> Value {
        http_get(&self.nodes[i].http(), path).map_or(Value::Null, |(_, v)| v)
    }

    /// The Raft leader's index, as the first answering node sees it.
    pub fn raft_leader(&self) -> Option<usize> {
        (0..3)
            .find_map(|i| self.get(i, "/v1/raft")["leader"].as_u64())
            .map(|l| l as usize - 1)
    }

    /// The leader of `topic`'s fragment 0.
    pub fn fragment_leader(&self, topic: &str) -> Option<usize> {
        (0..3)
            .find_map(|i| {
                self.get(i, &format!("/v1/topics/{topic}"))["fragments"][0]["leader"].as_u64()
            })
            .map(|l| l as usize - 1)
    }

    /// Creates `topic` with 3 replicas through node 0..3 (whichever answers).
    pub fn create_topic(&self, topic: &str) {
        let client = reqwest::blocking::Client::new();
        let ok = wait_until(Duration::from_secs(20), || {
            self.nodes.iter().any(|n| {
                let mut post = client.post(format!("http://{}/v1/topics/{topic}", n.http()));
                if let Some(t) = &self.security.token {
                    post = post.bearer_auth(t);
                }
                post.body(r#"{"replication_factor": 3}"#)
                    .timeout(Duration::from_secs(5))
                    .send()
                    .is_ok_and(|r| r.status().is_success() || r.status().as_u16() == 409)
            })
        });
        assert!(ok, "create topic {topic}: {}", self.describe("/v1/raft"));
        let path = format!("/v1/topics/{topic}");
        // Generous: on a loaded 2-core runner a follower's apply may lag; what each node
        // answers goes into the message when it never catches up.
        assert!(
            wait_until(Duration::from_secs(60), || (0..3)
                .all(|i| self.get(i, &path)["fragments"][0]["leader"].is_u64())),
            "every node knows {topic}'s leader: {}; {}",
            self.describe(&path),
            self.describe("/v1/raft")
        );
    }

    /// What each node answers to `GET path` (status and body, shortened), for failure messages.
    pub fn describe(&self, path: &str) -> String {
        self.nodes
            .iter()
            .map(|n| match http_get(&n.http(), path) {
                Some((status, body)) => {
                    let body: String = body.to_string().chars().take(400).collect();
                    format!("{} {path} -> {status} {body}", n.name)
                }
                None => format!("{} {path} -> no answer in 2 s", n.name),
            })
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// SIGKILL of node `i` (its container stops; its volume stays).
    pub fn kill(&self, i: usize) {
        docker(&["kill", "-s", "KILL", &self.nodes[i].name]).expect("docker kill");
    }

    /// Starts node `i`'s stopped container again.
    pub fn start_again(&mut self, i: usize) {
        docker(&["start", &self.nodes[i].name]).expect("docker start");
        self.refresh_ip(i);
    }

    /// Freezes node `i`: `docker pause` (the cgroup freezer), retried; when the freezer keeps
    /// failing (seen: "OCI runtime pause failed: unable to freeze"), SIGSTOP to its process.
    pub fn pause(&self, i: usize) {
        let name = &self.nodes[i].name;
        let mut last = String::new();
        for _ in 0..3 {
            match docker(&["pause", name]) {
                Ok(_) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        eprintln!("docker pause failed ({last}); freezing {name} with SIGSTOP instead");
        docker(&["kill", "-s", "STOP", name]).expect("SIGSTOP");
    }

    /// Thaws node `i` (whichever way [`Cluster::pause`] froze it).
    pub fn unpause(&self, i: usize) {
        let name = &self.nodes[i].name;
        let _ = docker(&["unpause", name]);
        let _ = docker(&["kill", "-s", "CONT", name]);
    }

    /// Cuts node `i` off the network (a partition: it keeps running alone).
    pub fn disconnect(&self, i: usize) {
        docker(&["network", "disconnect", &self.network, &self.nodes[i].name])
            .expect("network disconnect");
    }

    /// Heals the partition of node `i`.
    pub fn reconnect(&mut self, i: usize) {
        docker(&["network", "connect", &self.network, &self.nodes[i].name])
            .expect("network connect");
        self.refresh_ip(i);
    }

    /// Power loss of the nodes `which` at once: each container is killed, then everything its
    /// disk never fsynced is dropped (their disks must be [`DiskKind::Lazy`]), then they start
    /// again. Returns what each disk dropped.
    pub fn power_loss(&mut self, which: &[usize]) -> Vec<String> {
        for &i in which {
            self.kill(i);
        }
        let dropped = which.iter().map(|&i| self.disks[i].power_loss()).collect();
        for &i in which {
            self.start_again(i);
        }
        dropped
    }

    /// Whether node `i`'s container is running.
    pub fn running(&self, i: usize) -> bool {
        docker(&["inspect", "-f", "{{.State.Running}}", &self.nodes[i].name])
            .is_ok_and(|s| s == "true")
    }

    /// Graceful restart of node `i` (SIGTERM, at most 10 s, then start).
    pub fn restart(&mut self, i: usize) {
        docker(&["restart", "-t", "10", &self.nodes[i].name]).expect("docker restart");
        self.refresh_ip(i);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &self.nodes {
            let _ = docker(&["unpause", &n.name]);
        }
        // A failed scenario keeps the nodes' logs (stderr) for the post-mortem.
        if std::thread::panicking() {
            let dir = std::env::temp_dir().join(format!("zper-chaos-logs-{}", self.network));
            if std::fs::create_dir_all(&dir).is_ok() {
                for n in &self.nodes {
                    if let Ok(out) = std::process::Command::new("docker")
                        .args(["logs", &n.name])
                        .output()
                    {
                        // The CI output is all a remote run leaves: each node's last
                        // warnings and errors go there too.
                        let text = String::from_utf8_lossy(&out.stderr);
                        let worst: Vec<&str> = text
                            .lines()
                            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                            .collect();
                        for line in &worst[worst.len().saturating_sub(15)..] {
                            eprintln!("{}: {line}", n.name);
                        }
                        let _ = std::fs::write(dir.join(format!("{}.log", n.name)), out.stderr);
                    }
                }
                eprintln!("node logs kept in {}", dir.display());
            }
        }
        // The containers go with their testcontainers handles; then the network.
        for n in self.nodes.drain(..) {
            drop(n.container);
            let _ = docker(&["rm", "-f", "-v", &n.name]);
        }
        let _ = docker(&["network", "rm", &self.network]);
    }
}
