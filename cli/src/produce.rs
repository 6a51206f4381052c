//! `zper produce`: send messages `[id][payload]` to a topic, optionally waiting for acks.

use std::io::BufRead;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use zper_client::{
    endpoint, AckMode, Endpoints, IdempotentOptions, IdempotentProducer, PlainProducer,
    ProducerOptions,
};

use crate::duration::parse_duration;

/// Options of `zper produce`.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Topic (1-64 ASCII letters or digits).
    #[arg(long, short = 't', value_parser = crate::topic_name::topic_name)]
    pub topic: String,
    /// Writer endpoint (default: from --config, else tcp://127.0.0.1:5555).
    #[arg(long, short = 'w')]
    pub writer: Option<String>,
    /// Ack mode: 0 none, 1 one ack per flush (DEALER), 2 one reply per message (REQ).
    #[arg(long, short = 'm', default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub mode: u8,
    /// How long to wait for the writer to be reachable and for acks: `10s`, `500ms`, or a number
    /// of ms.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// How to read each message: `text` (sent as its UTF-8 bytes), `hex` or `base64` (for
    /// binary payloads).
    #[arg(long, value_enum, default_value_t)]
    pub payload: crate::payload::Encoding,
    /// Idempotent producer (modes 1 and 2; docs/protocol.md): each message's id frame is
    /// `[producer id:16][sequence:8]` instead of its index, it is sent again until durable
    /// (moving to the next writer of a comma-separated -w after a failure), and the leader
    /// stores it once however often it arrives.
    #[arg(long)]
    pub idempotent: bool,
    /// Messages to send; stdin lines when none are given.
    pub messages: Vec<String>,
}

/// Runs `zper produce`. Each message is two frames: its index as ASCII (the message id the acks
/// echo) and the payload (the text, or the bytes `--payload hex|base64` decodes).
///
/// Errors: an unreachable writer, a refusal (naming the message), a missing ack.
pub fn run(args: ProduceArgs, targets: &Endpoints) -> Result<()> {
    let messages: Vec<String> = if args.messages.is_empty() {
        std::io::stdin().lock().lines().collect::<Result<_, _>>()?
    } else {
        args.messages.clone()
    };
    // Every message decoded before the first is sent: a bad line stores nothing.
    let payloads = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            args.payload
                .decode(m)
                .with_context(|| format!("message {i}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let ctx = zmq::Context::new();
    if args.idempotent {
        return idempotent(&args, &ctx, targets, &payloads);
    }
    let ep = endpoint(args.writer.as_deref().unwrap_or(&targets.writer));
    let opts = ProducerOptions::new(&args.topic, AckMode::from_byte(args.mode))
        .timeout(args.timeout)
        .curve(targets.curve.clone());
    let producer = PlainProducer::connect(&ctx, &[ep], &opts)?;
    for (i, payload) in payloads.iter().enumerate() {
        let id = i.to_string();
        producer
            .send(&[id.as_bytes(), payload])
            .with_context(|| format!("message {id}"))?;
    }
    let deadline = Instant::now() + args.timeout;
    if producer.mode() == AckMode::PerFlush && !messages.is_empty() {
        let last = (messages.len() - 1).to_string();
        while producer.next_ack(true)?.as_deref() != Some(last.as_bytes()) {
            if Instant::now() > deadline {
                bail!("timed out waiting for the ack of message {last}");
            }
        }
    }
    let how = match args.mode {
        0 => "sent",
        _ => "durable",
    };
    report(&args, messages.len() as u64, how);
    Ok(())
}

/// `--idempotent`: every payload through an [`IdempotentProducer`], then waits until all are
/// durable.
fn idempotent(
    args: &ProduceArgs,
    ctx: &zmq::Context,
    targets: &Endpoints,
    payloads: &[Vec<u8>],
) -> Result<()> {
    if args.mode == 0 {
        bail!("--idempotent needs acks: add --mode 1 or --mode 2");
    }
    let writers = args.writer.as_deref().unwrap_or(&targets.writer);
    let endpoints: Vec<String> = writers.split(',').map(endpoint).collect();
    let mut opts = IdempotentOptions::new(&args.topic, AckMode::from_byte(args.mode));
    opts.deadline = args.timeout;
    opts.curve = targets.curve.clone();
    let mut producer = IdempotentProducer::connect(ctx, &endpoints, opts)?;
    for (i, payload) in payloads.iter().enumerate() {
        producer
            .send(&[payload])
            .with_context(|| format!("message {i}"))?;
    }
    producer.flush().context("waiting for acks")?;
    report(args, payloads.len() as u64, "durable");
    Ok(())
}

/// The summary line (stderr), or a JSON object with --json.
fn report(args: &ProduceArgs, n: u64, how: &str) {
    if crate::output::json_output() {
        crate::output::json_line(&serde_json::json!({
            "topic": args.topic, "messages": n, "mode": args.mode, "result": how,
        }));
    } else {
        eprintln!(
            "{} {how} to topic {}",
            crate::output::count(n, "message", "messages"),
            args.topic
        );
    }
}
