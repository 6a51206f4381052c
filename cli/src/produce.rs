//! `zper produce`: send messages `[id][payload]` to a topic, optionally waiting for acks.

use std::io::BufRead;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use zper_client::{endpoint, AckMode, Endpoints, Producer, ProducerOptions};

use crate::duration::parse_duration;

/// Options of `zper produce`.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Topic (1-64 ASCII letters or digits).
    #[arg(long, short = 't')]
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
    /// Messages to send; stdin lines when none are given.
    pub messages: Vec<String>,
}

/// Runs `zper produce`. Each message is two frames: its index as ASCII (the message id the acks
/// echo) and the text.
///
/// Errors: an unreachable writer, a refusal (naming the message), a missing ack.
pub fn run(args: ProduceArgs, targets: &Endpoints) -> Result<()> {
    let messages: Vec<String> = if args.messages.is_empty() {
        std::io::stdin().lock().lines().collect::<Result<_, _>>()?
    } else {
        args.messages.clone()
    };
    let ctx = zmq::Context::new();
    let ep = endpoint(args.writer.as_deref().unwrap_or(&targets.writer));
    let opts =
        ProducerOptions::new(&args.topic, AckMode::from_byte(args.mode)).timeout(args.timeout);
    let producer = Producer::connect(&ctx, &[ep], &opts)?;
    for (i, text) in messages.iter().enumerate() {
        let id = i.to_string();
        producer
            .send(&[id.as_bytes(), text.as_bytes()])
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
    let n = messages.len() as u64;
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
    Ok(())
}
