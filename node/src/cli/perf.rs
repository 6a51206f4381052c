//! `zper perf`: throughput and latency tools in the spirit of ZPER's ProducerPerformance and
//! ConsumerPerformance (spec `zper.md` §10) and kafka-producer-perf-test, plus the baselines the
//! benchmark compares against (raw libzmq PUSH/PULL, fdatasync latency).
//!
//! Messages are two frames like the original tool's: a 5-byte header (`00` + a 4-byte big-endian
//! sequence number instead of the CRC, so acks can be counted) and the payload of `x` bytes; a
//! 100-byte payload is stored as 109 bytes, as in §10.2. Every tool prints one summary line of
//! `key=value` fields; with an ack mode the producer counts only messages the broker acknowledged
//! as durable.

use std::fs::OpenOptions;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use zper_wire::{Records, Timestamp};

use super::client::{endpoint, identity, ReaderClient, Targets};

/// Perf subcommands.
#[derive(Debug, Subcommand)]
pub enum PerfCommand {
    /// Produce messages and report msg/s, MB/s (and p50/p99 latency in mode 2).
    Produce(ProduceArgs),
    /// Consume a topic from the earliest offset and report msg/s, MB/s.
    Consume(ConsumeArgs),
    /// Baseline: raw libzmq PUSH -> PULL over loopback TCP, same message count and size.
    Raw(RawArgs),
    /// Baseline: latency of one small append + fdatasync in a directory.
    Fsync(FsyncArgs),
    /// Raft metadata commits/s and latency through the HTTP admin API (create/delete topics);
    /// with --retry-ms, the time to the first commit (run right after killing the leader).
    Metadata(super::perf_metadata::MetadataArgs),
    /// Dolly Puts/s and latency: pipelined Puts from many DEALERs over one or more nodes.
    DollyPut(super::dolly::DollyPerfArgs),
    /// Dolly Gets/s and latency (of keys an earlier dolly-put wrote).
    DollyGet(super::dolly::DollyPerfArgs),
    /// Records/s pushed to K subscribers of a group (issue #7), or with --fetch read by K FETCH
    /// pollers: the same topic, every reader reads N messages.
    Subscribe(super::perf_subscribe::SubscribePerfArgs),
}

/// Options of `zper perf produce` (names as ProducerPerformance, §10.2).
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// Writer endpoints, comma-separated (`host:port` or `tcp://host:port`; default: from
    /// --config, else 127.0.0.1:5555).
    #[arg(long = "writerinfo", short = 'w')]
    pub writer: Option<String>,
    /// Total messages (each thread sends messages / threads).
    #[arg(long, short = 'n', default_value_t = 1_000_000)]
    pub messages: u64,
    /// Payload bytes.
    #[arg(long = "message-size", short = 's', default_value_t = 100)]
    pub size: usize,
    /// Sender threads (each with its own connection).
    #[arg(long, short = 'c', default_value_t = 1)]
    pub threads: u64,
    /// Ack mode: 0 none (send rate), 1 pipelined DEALER acked per flush, 2 REQ per message.
    #[arg(long, short = 'm', default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub mode: u8,
    /// Mode 1: most messages in flight (sent, not yet acknowledged) per thread.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub window: u64,
    /// Give up waiting for an ack after this many ms.
    #[arg(long, default_value_t = 30_000)]
    pub timeout: i32,
}

/// Options of `zper perf consume` (names as ConsumerPerformance, §10.3).
#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// Reader endpoint (default: from --config, else 127.0.0.1:5556).
    #[arg(long = "readerinfo", short = 'r')]
    pub reader: Option<String>,
    /// Stop after this many messages (or at the end of the log).
    #[arg(long, short = 'n', default_value_t = 1_000_000)]
    pub messages: u64,
    /// FETCH size, bytes.
    #[arg(long = "fetch-size", short = 's', default_value_t = 1 << 20)]
    pub fetch_size: u64,
}

/// Options of `zper perf raw`.
#[derive(Debug, Args)]
pub struct RawArgs {
    /// Messages.
    #[arg(long, short = 'n', default_value_t = 1_000_000)]
    pub messages: u64,
    /// Payload bytes.
    #[arg(long = "message-size", short = 's', default_value_t = 100)]
    pub size: usize,
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

/// Runs a perf subcommand.
pub fn run(cmd: PerfCommand, targets: &Targets) -> Result<()> {
    match cmd {
        PerfCommand::Produce(a) => produce(a, targets),
        PerfCommand::Consume(a) => consume(a, targets),
        PerfCommand::Raw(a) => raw(a),
        PerfCommand::Fsync(a) => fsync(a),
        PerfCommand::Metadata(a) => super::perf_metadata::run(a, targets),
        PerfCommand::DollyPut(a) => super::dolly::perf(a, zper_wire::dolly::Method::Put, targets),
        PerfCommand::DollyGet(a) => super::dolly::perf(a, zper_wire::dolly::Method::Get, targets),
        PerfCommand::Subscribe(a) => super::perf_subscribe::run(a, targets),
    }
}

fn header(seq: u64) -> [u8; 5] {
    let s = (seq as u32).to_be_bytes();
    [0, s[0], s[1], s[2], s[3]]
}

fn seq_of(id: &[u8]) -> Option<u64> {
    let b: [u8; 4] = id.get(1..5)?.try_into().ok()?;
    Some(u64::from(u32::from_be_bytes(b)))
}

fn progress(total: u64) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

/// The `p` quantile (0..=1) of ascending `sorted` durations, in ms (0 when empty).
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

/// Prints `perf <tool> key=value ...`.
pub(crate) fn summary(tool: &str, fields: &[(&str, String)]) {
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("perf {tool} {}", body.join(" "));
}

fn produce(a: ProduceArgs, targets: &Targets) -> Result<()> {
    if a.threads == 0 || a.messages < a.threads {
        bail!("--threads must be between 1 and --messages");
    }
    let writer = a.writer.clone().unwrap_or_else(|| targets.writer.clone());
    let endpoints: Vec<String> = writer.split(',').map(endpoint).collect();
    let per_thread = a.messages / a.threads;
    let total = per_thread * a.threads;
    let pb = progress(total);
    let start = Instant::now();
    let mut handles = Vec::new();
    // One context (two I/O threads) for every sender: 64 REQ clients with a context each would
    // measure the client's own thread scheduling on a small machine, not the broker.
    let shared = zmq::Context::new();
    shared.set_io_threads(2)?;
    for _ in 0..a.threads {
        let (eps, topic, pb) = (endpoints.clone(), a.topic.clone(), pb.clone());
        let ctx = shared.clone();
        let (size, mode, window, timeout) = (a.size, a.mode, a.window, a.timeout);
        handles.push(std::thread::spawn(move || -> Result<Vec<Duration>> {
            let kind = if mode == 2 { zmq::REQ } else { zmq::DEALER };
            let s = ctx.socket(kind)?;
            s.set_identity(&identity(&topic, mode)?)?;
            s.set_sndhwm(0)?;
            s.set_immediate(true)?; // fail after --timeout when no writer is reachable
            s.set_sndtimeo(timeout)?;
            s.set_linger(timeout)?;
            s.set_rcvtimeo(timeout)?;
            for ep in &eps {
                s.connect(ep).with_context(|| format!("connect {ep}"))?;
            }
            let payload = vec![b'x'; size];
            let lat = match mode {
                0 => {
                    for seq in 0..per_thread {
                        s.send(&header(seq)[..], zmq::SNDMORE)?;
                        s.send(&payload[..], 0)?;
                        if seq % 1024 == 1023 {
                            pb.inc(1024);
                        }
                    }
                    Vec::new()
                }
                1 => {
                    let (mut sent, mut acked) = (0u64, 0u64);
                    while acked < per_thread {
                        while sent < per_thread && sent - acked < window {
                            s.send(&header(sent)[..], zmq::SNDMORE)?;
                            s.send(&payload[..], 0)?;
                            sent += 1;
                            if sent % 4096 == 0 {
                                break; // look at acks now and then
                            }
                        }
                        let flags = if sent < per_thread && sent - acked < window {
                            zmq::DONTWAIT
                        } else {
                            0
                        };
                        match s.recv_multipart(flags) {
                            Ok(reply) => {
                                let id = reply.first().cloned().unwrap_or_default();
                                if reply.len() > 1 {
                                    super::client::check_writer_reply(&reply, &id)?;
                                }
                                let seq = seq_of(&id).ok_or_else(|| anyhow!("bad ack {id:?}"))?;
                                if seq + 1 > acked {
                                    pb.inc(seq + 1 - acked);
                                    acked = seq + 1;
                                }
                            }
                            Err(zmq::Error::EAGAIN) if flags == zmq::DONTWAIT => {}
                            Err(zmq::Error::EAGAIN) => {
                                bail!("no ack within {timeout} ms ({acked} of {per_thread} acknowledged)")
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                    Vec::new()
                }
                _ => {
                    let mut lat = Vec::with_capacity(per_thread as usize);
                    for seq in 0..per_thread {
                        let t0 = Instant::now();
                        s.send(&header(seq)[..], zmq::SNDMORE)?;
                        s.send(&payload[..], 0)?;
                        let reply = s.recv_multipart(0).map_err(|e| match e {
                            zmq::Error::EAGAIN => anyhow!("no reply within {timeout} ms"),
                            e => e.into(),
                        })?;
                        super::client::check_writer_reply(&reply, &header(seq))?;
                        lat.push(t0.elapsed());
                        pb.inc(1);
                    }
                    lat
                }
            };
            drop(s); // linger: waits until everything queued reached TCP
            Ok(lat)
        }));
    }
    let mut lat = Vec::new();
    for h in handles {
        lat.extend(h.join().map_err(|_| anyhow!("sender thread panicked"))??);
    }
    let secs = start.elapsed().as_secs_f64();
    pb.finish_and_clear();
    lat.sort_unstable();
    let bytes = total as f64 * (a.size + 5) as f64;
    let mut fields = vec![
        ("mode", a.mode.to_string()),
        ("messages", total.to_string()),
        ("size", a.size.to_string()),
        ("threads", a.threads.to_string()),
        ("seconds", format!("{secs:.3}")),
        ("msg_per_s", format!("{:.0}", total as f64 / secs)),
        ("mb_per_s", format!("{:.2}", bytes / secs / 1048576.0)),
        (
            "counted",
            if a.mode == 0 {
                "sent"
            } else {
                "acknowledged-durable"
            }
            .to_owned(),
        ),
    ];
    if a.mode == 2 {
        fields.push(("p50_ms", format!("{:.3}", percentile(&lat, 0.50))));
        fields.push(("p99_ms", format!("{:.3}", percentile(&lat, 0.99))));
    }
    summary("produce", &fields);
    Ok(())
}

fn consume(a: ConsumeArgs, targets: &Targets) -> Result<()> {
    let ctx = zmq::Context::new();
    let reader = endpoint(a.reader.as_deref().unwrap_or(&targets.reader));
    let client = ReaderClient::connect(&ctx, &reader, &a.topic, 10_000)?;
    let pb = progress(a.messages);
    let start = Instant::now();
    let offset = client.offset(Timestamp::Earliest)?;
    let (count, bytes) = fetch_messages(&client, offset, a.fetch_size, a.messages, |n| {
        pb.set_position(n)
    })?;
    let secs = start.elapsed().as_secs_f64();
    pb.finish_and_clear();
    summary(
        "consume",
        &[
            ("messages", count.to_string()),
            ("fetch_size", a.fetch_size.to_string()),
            ("seconds", format!("{secs:.3}")),
            ("msg_per_s", format!("{:.0}", count as f64 / secs)),
            (
                "mb_per_s",
                format!("{:.2}", bytes as f64 / secs / 1048576.0),
            ),
        ],
    );
    if count < a.messages {
        bail!("the log ended after {count} of {} messages", a.messages);
    }
    Ok(())
}

/// Reads from `offset` with FETCHes of `fetch_size` bytes until `messages` messages are read or
/// the log ends, calling `progress` with the count after each FETCH. Returns (messages,
/// payload bytes).
///
/// Errors: an offset the reader answers 101 for; the reader's errors.
pub(crate) fn fetch_messages(
    client: &ReaderClient,
    mut offset: u64,
    fetch_size: u64,
    messages: u64,
    mut progress: impl FnMut(u64),
) -> Result<(u64, u64)> {
    let (mut count, mut bytes, mut fetch_size) = (0u64, 0u64, fetch_size.max(16));
    while count < messages {
        let Some(data) = client.fetch(offset, fetch_size)? else {
            bail!("offset {offset} not readable (101)");
        };
        // Frame-granular progress (spec §5.3): a message may span FETCHes.
        let mut it = Records::new(&data);
        for rec in it.by_ref() {
            bytes += rec.payload.len() as u64;
            if !rec.more {
                count += 1;
            }
        }
        if it.valid_bytes() == 0 {
            if data.len() as u64 >= fetch_size {
                fetch_size = fetch_size.saturating_mul(2); // one record larger than the FETCH
                continue;
            }
            break; // end of the log
        }
        offset += it.valid_bytes() as u64;
        progress(count);
    }
    Ok((count, bytes))
}

fn raw(a: RawArgs) -> Result<()> {
    let ctx = zmq::Context::new();
    let pull = ctx.socket(zmq::PULL)?;
    pull.set_rcvhwm(0)?;
    pull.bind("tcp://127.0.0.1:*")?;
    let ep = pull
        .get_last_endpoint()?
        .map_err(|_| anyhow!("no endpoint"))?;
    let start = Instant::now();
    let (n, size) = (a.messages, a.size);
    // The sender gets its own context (its own I/O thread), as a separate producer process and
    // the node would have: one shared I/O thread would halve the baseline on a small machine.
    let sender = std::thread::spawn(move || -> Result<()> {
        let ctx2 = zmq::Context::new();
        let push = ctx2.socket(zmq::PUSH)?;
        push.set_sndhwm(0)?;
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
            ("messages", n.to_string()),
            ("size", size.to_string()),
            ("seconds", format!("{secs:.3}")),
            ("msg_per_s", format!("{:.0}", n as f64 / secs)),
        ],
    );
    Ok(())
}

fn fsync(a: FsyncArgs) -> Result<()> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("create {}", a.dir.display()))?;
    let path = a.dir.join(".zper-perf-fsync.tmp");
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    let mut lat = Vec::with_capacity(a.count as usize);
    for _ in 0..a.count {
        let t0 = Instant::now();
        f.write_all(&[b'x'; 109])?;
        f.sync_data()?;
        lat.push(t0.elapsed());
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    lat.sort_unstable();
    summary(
        "fsync",
        &[
            ("count", a.count.to_string()),
            ("p50_ms", format!("{:.3}", percentile(&lat, 0.50))),
            ("p99_ms", format!("{:.3}", percentile(&lat, 0.99))),
        ],
    );
    Ok(())
}
