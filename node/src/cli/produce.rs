//! `zper produce`: send messages `[id][payload]` to a topic, optionally waiting for acks.

use std::io::BufRead;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use super::client::{endpoint, identity, Targets};

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
    /// How long to wait for the writer to be reachable and for acks, ms.
    #[arg(long, default_value_t = 10_000)]
    pub timeout: u64,
    /// Messages to send; stdin lines when none are given.
    pub messages: Vec<String>,
}

/// Runs `zper produce`. Each message is two frames: its index as ASCII (the message id the acks
/// echo) and the text.
pub fn run(args: ProduceArgs, targets: &Targets) -> Result<()> {
    let messages: Vec<String> = if args.messages.is_empty() {
        std::io::stdin().lock().lines().collect::<Result<_, _>>()?
    } else {
        args.messages.clone()
    };
    let ctx = zmq::Context::new();
    let kind = if args.mode == 2 {
        zmq::REQ
    } else {
        zmq::DEALER
    };
    let s = ctx.socket(kind)?;
    let timeout = args.timeout.min(i32::MAX as u64) as i32;
    s.set_identity(&identity(&args.topic, args.mode)?)?;
    // Queue only on a live connection and give up after --timeout, instead of waiting forever
    // for a node that is down.
    s.set_immediate(true)?;
    s.set_sndtimeo(timeout)?;
    s.set_linger(timeout)?;
    s.set_rcvtimeo(timeout)?;
    let ep = endpoint(args.writer.as_deref().unwrap_or(&targets.writer));
    s.connect(&ep)
        .with_context(|| format!("connect to writer {ep}"))?;
    for (i, text) in messages.iter().enumerate() {
        let id = i.to_string();
        s.send_multipart([id.as_bytes(), text.as_bytes()], 0)
            .map_err(|e| match e {
                zmq::Error::EAGAIN => {
                    anyhow::anyhow!("writer {ep} not reachable within {timeout} ms")
                }
                e => e.into(),
            })?;
        if args.mode == 2 {
            let mut reply = s
                .recv_multipart(0)
                .context("no reply from writer (timed out)")?;
            if reply.first().is_some_and(Vec::is_empty) {
                reply.remove(0); // REQ envelope
            }
            super::client::check_writer_reply(&reply, id.as_bytes())
                .with_context(|| format!("message {id}"))?;
        }
    }
    let deadline = Instant::now() + Duration::from_millis(args.timeout);
    if args.mode == 1 && !messages.is_empty() {
        let last = (messages.len() - 1).to_string();
        loop {
            if Instant::now() > deadline {
                bail!("timed out waiting for the ack of message {last}");
            }
            let ack = s
                .recv_multipart(0)
                .context("no ack from writer (timed out)")?;
            if ack.len() > 1 {
                super::client::check_writer_reply(&ack, &ack[0])?;
            }
            if ack[..] == [last.as_bytes().to_vec()] {
                break;
            }
        }
    }
    let how = match args.mode {
        0 => "sent",
        _ => "durable",
    };
    eprintln!("{} messages {how} to topic {}", messages.len(), args.topic);
    Ok(())
}
