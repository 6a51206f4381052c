//! `zper perf produce` (ProducerPerformance, `zper.md` §10.2): messages of a 5-byte header and
//! `x` payload through [`zper_client::PlainProducer`]s; with an ack mode only acknowledged-durable
//! messages count.

use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use zper_client::{
    endpoint, AckMode, Endpoints, IdempotentOptions, IdempotentProducer, PlainProducer,
    ProducerOptions,
};

use super::report::{header, interrupted, progress, seq_of, summary, Latencies};

/// Options of `zper perf produce` (names as ProducerPerformance, §10.2).
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Topic.
    #[arg(long, short = 't', value_parser = crate::topic_name::topic_name)]
    pub topic: String,
    /// Writer endpoints, comma-separated (`host:port` or `tcp://host:port`; default: from
    /// --config, else 127.0.0.1:5555).
    #[arg(long = "writerinfo", visible_alias = "writer", short = 'w')]
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
    /// Give up waiting for an ack after this long: `30s`, `500ms`, or a number of ms.
    #[arg(long, default_value = "30s", value_parser = crate::duration::parse_duration)]
    pub timeout: std::time::Duration,
    /// Idempotent producers (modes 1 and 2; docs/protocol.md): each message id is
    /// `[producer id][sequence]` and the leader stores each once (mode 1 keeps at most 65,536
    /// in flight, whatever --window says).
    #[arg(long)]
    pub idempotent: bool,
}

/// Runs `zper perf produce`: `--threads` producers (one connection each, one shared zmq
/// context) send `--messages` in all and one summary line is printed.
///
/// Errors: bad arguments; a writer that is unreachable, refuses or stops acknowledging.
pub fn run(a: ProduceArgs, targets: &Endpoints) -> Result<()> {
    if a.threads == 0 || a.messages < a.threads {
        bail!("--threads must be between 1 and --messages");
    }
    if a.idempotent && a.mode == 0 {
        bail!("--idempotent needs acks: add --mode 1 or --mode 2");
    }
    let writer = a.writer.clone().unwrap_or_else(|| targets.writer.clone());
    let endpoints: Vec<String> = writer.split(',').map(endpoint).collect();
    // Exactly -n in all (issue #15): the first `messages % threads` threads send one more.
    let (base, extra) = (a.messages / a.threads, a.messages % a.threads);
    let pb = progress(a.messages);
    let start = Instant::now();
    let mut handles = Vec::new();
    // One context (two I/O threads) for every sender: 64 REQ clients with a context each would
    // measure the client's own thread scheduling on a small machine, not the broker.
    let shared = zmq::Context::new();
    shared.set_io_threads(2)?;
    let mut opts = ProducerOptions::new(&a.topic, AckMode::from_byte(a.mode))
        .timeout(a.timeout)
        .curve(targets.curve.clone());
    opts.unbounded = true;
    for i in 0..a.threads {
        let (eps, opts, pb, ctx) = (endpoints.clone(), opts.clone(), pb.clone(), shared.clone());
        let per_thread = base + u64::from(i < extra);
        let (size, window) = (a.size, a.window);
        let idempotent = a.idempotent;
        handles.push(std::thread::spawn(move || -> Result<(u64, Latencies)> {
            if idempotent {
                return idempotent_sender(&ctx, &eps, &opts, per_thread, size, &pb);
            }
            let producer = PlainProducer::connect(&ctx, &eps, &opts)?;
            let payload = vec![b'x'; size];
            // An error after Ctrl-C (EINTR) ends the run with what was counted.
            let stop = |e: zper_client::ClientError| -> Result<()> {
                if interrupted() {
                    Ok(())
                } else {
                    Err(e.into())
                }
            };
            let mut done = 0u64;
            let lat = match producer.mode() {
                AckMode::None => {
                    while done < per_thread && !(done.is_multiple_of(1024) && interrupted()) {
                        if let Err(e) = producer.send(&[&header(done)[..], &payload[..]]) {
                            stop(e)?;
                            break;
                        }
                        done += 1;
                        if done.is_multiple_of(1024) {
                            pb.inc(1024);
                        }
                    }
                    Latencies::new()
                }
                AckMode::PerFlush => {
                    done = pipelined(&producer, per_thread, window, &payload, &pb)?;
                    Latencies::new()
                }
                AckMode::PerMessage => {
                    let mut lat = Latencies::new();
                    while done < per_thread && !interrupted() {
                        let t0 = Instant::now();
                        if let Err(e) = producer.send(&[&header(done)[..], &payload[..]]) {
                            stop(e)?;
                            break;
                        }
                        lat.record(t0.elapsed());
                        done += 1;
                        pb.inc(1);
                    }
                    lat
                }
            };
            drop(producer); // linger: waits until everything queued reached TCP
            Ok((done, lat))
        }));
    }
    let mut lat = Latencies::new();
    let mut total = 0u64;
    for h in handles {
        let (done, thread_lat) = h.join().map_err(|_| anyhow!("sender thread panicked"))??;
        total += done;
        lat.merge(&thread_lat);
    }
    let secs = start.elapsed().as_secs_f64();
    pb.finish_and_clear();
    let bytes = total as f64 * (a.size + 5) as f64;
    let mut fields = vec![
        ("mode", a.mode.to_string()),
        ("idempotent", a.idempotent.to_string()),
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
        fields.push(("p50_ms", format!("{:.3}", lat.ms(0.50))));
        fields.push(("p99_ms", format!("{:.3}", lat.ms(0.99))));
    }
    summary("produce", &fields);
    Ok(())
}

/// Mode 1: keeps at most `window` messages sent and not yet acknowledged, until all `count`
/// are acknowledged (or Ctrl-C). Returns how many were acknowledged.
fn pipelined(
    producer: &PlainProducer,
    count: u64,
    window: u64,
    payload: &[u8],
    pb: &indicatif::ProgressBar,
) -> Result<u64> {
    let (mut sent, mut acked) = (0u64, 0u64);
    while acked < count {
        if interrupted() {
            return Ok(acked);
        }
        while sent < count && sent - acked < window {
            producer.send(&[&header(sent)[..], payload])?;
            sent += 1;
            if sent % 4096 == 0 {
                break; // look at acks now and then
            }
        }
        let wait = !(sent < count && sent - acked < window);
        let ack = match producer.next_ack(wait) {
            Err(_) if interrupted() => return Ok(acked),
            ack => ack.with_context(|| format!("{acked} of {count} acknowledged"))?,
        };
        let Some(id) = ack else {
            continue;
        };
        let seq = seq_of(&id).ok_or_else(|| anyhow!("bad ack {id:?}"))?;
        if seq + 1 > acked {
            pb.inc(seq + 1 - acked);
            acked = seq + 1;
        }
    }
    Ok(acked)
}

/// One `--idempotent` sender: `count` messages through an [`IdempotentProducer`]; mode 2
/// records each message's latency, mode 1 waits for every ack at the end.
fn idempotent_sender(
    ctx: &zmq::Context,
    endpoints: &[String],
    opts: &ProducerOptions,
    count: u64,
    size: usize,
    pb: &indicatif::ProgressBar,
) -> Result<(u64, Latencies)> {
    let mut o = IdempotentOptions::new(&opts.topic, opts.mode);
    o.deadline = opts.timeout;
    o.curve = opts.curve.clone();
    let mut producer = IdempotentProducer::connect(ctx, endpoints, o)?;
    let payload = vec![b'x'; size];
    let mut lat = Latencies::new();
    let mut done = 0u64;
    while done < count && !interrupted() {
        let t0 = Instant::now();
        producer.send(&[&payload[..]])?;
        if opts.mode == AckMode::PerMessage {
            lat.record(t0.elapsed());
            pb.inc(1);
        }
        done += 1;
    }
    if opts.mode == AckMode::PerFlush {
        producer.flush()?;
        pb.inc(done);
    }
    Ok((done, lat))
}
