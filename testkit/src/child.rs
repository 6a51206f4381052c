//! `zper` nodes as child processes (kill -9, SIGSTOP, restart on the same ports), and their
//! resident memory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::{eventually, free_port};

/// The zper binary under test: `$ZPER_BIN`, else `target/<profile>/zper` beside the running
/// test (`target/<profile>/deps/<test>`). Cargo builds it for the tests of the `zper` package
/// (`cli/`), whose end-to-end tests spawn it, and for `cargo test --workspace`.
///
/// Panics (a test set-up failure) when the binary is not there.
pub fn zper_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("ZPER_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable");
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|p| p.join("zper"))
        .expect("target dir");
    assert!(
        bin.exists(),
        "{} not built: run `cargo test -p zper` (or `cargo test --workspace`), or set ZPER_BIN",
        bin.display()
    );
    bin
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
        let child = Command::new(zper_binary())
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
