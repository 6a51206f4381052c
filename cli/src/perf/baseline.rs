//! The baselines `bench/` compares zper with: raw libzmq PUSH -> PULL of the same messages (in
//! clear, or CurveZMQ-encrypted on both ends: libzmq's own cost of CURVE, bench/curve.sh), and
//! the latency of one small append + fdatasync.

use std::fs::OpenOptions;
use std::io::Write;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use clap::Args;

use super::report::{header, summary, Latencies};

/// Options of `zper perf raw`.
#[derive(Debug, Args)]
pub struct RawArgs {
    /// Messages.
    #[arg(long, short = 'n', default_value_t = 1_000_000)]
    pub messages: u64,
    /// Payload bytes.
    #[arg(long = "message-size", short = 's', default_value_t = 100)]
    pub size: usize,
    /// Encrypt with CURVE (RFC 26): the PULL is a CURVE server and the PUSH its client, each
    /// with a fresh key pair; libzmq admits any client key (no ZAP handler).
    #[arg(long)]
    pub curve: bool,
}

/// Options of `zper perf fsync`.
#[derive(Debug, Args)]
pub struct FsyncArgs {
    /// Directory to write a scratch file in (use the node's data disk).
    #[arg(long, default_value = ".")]
    pub dir: std::path::PathBuf,
    /// Appends + fdatasync calls.
    #[arg(long, short = 'n', default_value_t = 500)]
    pub count: u64,
}

/// Runs `zper perf raw`.
///
/// Errors: libzmq failures.
pub fn raw(a: RawArgs) -> Result<()> {
    let ctx = zmq::Context::new();
    let pull = ctx.socket(zmq::PULL)?;
    pull.set_rcvhwm(0)?;
    let server = zmq::CurveKeyPair::new()?;
    if a.curve {
        pull.set_curve_server(true)?;
        pull.set_curve_secretkey(&server.secret_key)?;
    }
    pull.bind("tcp://127.0.0.1:*")?;
    let ep = pull
        .get_last_endpoint()?
        .map_err(|_| anyhow!("no endpoint"))?;
    let start = Instant::now();
    let (n, size, curve) = (a.messages, a.size, a.curve);
    // The sender gets its own context (its own I/O thread), as a separate producer process and
    // the node would have: one shared I/O thread would halve the baseline on a small machine.
    let sender = std::thread::spawn(move || -> Result<()> {
        let ctx2 = zmq::Context::new();
        let push = ctx2.socket(zmq::PUSH)?;
        push.set_sndhwm(0)?;
        if curve {
            let client = zmq::CurveKeyPair::new()?;
            push.set_curve_serverkey(&server.public_key)?;
            push.set_curve_publickey(&client.public_key)?;
            push.set_curve_secretkey(&client.secret_key)?;
        }
        push.connect(&ep)?;
        let payload = vec![b'x'; size];
        for seq in 0..n {
            push.send(&header(seq)[..], zmq::SNDMORE)?;
            push.send(&payload[..], 0)?;
        }
        Ok(())
    });
    let mut msg = zmq::Message::new();
    let mut got = 0u64;
    while got < n {
        pull.recv(&mut msg, 0)?;
        if !pull.get_rcvmore()? {
            got += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    sender.join().map_err(|_| anyhow!("sender panicked"))??;
    summary(
        "raw",
        &[
            ("curve", curve.to_string()),
            ("messages", n.to_string()),
            ("size", size.to_string()),
            ("seconds", format!("{secs:.3}")),
            ("msg_per_s", format!("{:.0}", n as f64 / secs)),
        ],
    );
    Ok(())
}

/// Runs `zper perf fsync`.
///
/// Errors: the directory or file cannot be written.
pub fn fsync(a: FsyncArgs) -> Result<()> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("create {}", a.dir.display()))?;
    let path = a.dir.join(".zper-perf-fsync.tmp");
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    let mut lat = Latencies::new();
    for _ in 0..a.count {
        let t0 = Instant::now();
        f.write_all(&[b'x'; 109])?;
        f.sync_data()?;
        lat.record(t0.elapsed());
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    summary(
        "fsync",
        &[
            ("count", a.count.to_string()),
            ("p50_ms", format!("{:.3}", lat.ms(0.50))),
            ("p99_ms", format!("{:.3}", lat.ms(0.99))),
        ],
    );
    Ok(())
}
