//! `zper perf subscribe`: push delivery (issue #7) against FETCH polling, same topic, same
//! number of readers. K subscribers of one `default`-policy group (each gets every record) or,
//! with `--fetch`, K reader connections each FETCH-polling the topic from its start; every
//! reader reads N messages. Reports the aggregate messages/s delivered (K x N over the time the
//! slowest reader took).

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use clap::Args;
use zper_wire::Records;

use zper_client::{
    endpoint, fetch_messages, Endpoints, Event, ReaderClient, Subscriber, SubscriberOptions,
    Timestamp,
};

use super::report::{interrupted, summary};

/// Options of `zper perf subscribe`.
#[derive(Debug, Args)]
pub struct SubscribePerfArgs {
    /// Topic (already written, at least N messages).
    #[arg(long, short = 't', value_parser = crate::topic_name::topic_name)]
    pub topic: String,
    /// Controller endpoints for push mode, comma-separated (default: from --config, else
    /// 127.0.0.1:5558).
    #[arg(long, short = 'C', value_delimiter = ',')]
    pub controller: Vec<String>,
    /// Reader endpoint for --fetch (default: from --config, else 127.0.0.1:5556).
    #[arg(long, short = 'r')]
    pub reader: Option<String>,
    /// FETCH polling instead of push.
    #[arg(long)]
    pub fetch: bool,
    /// Readers (subscribers or FETCH connections), each on its own thread.
    #[arg(long, short = 'k', default_value_t = 1)]
    pub readers: u32,
    /// Messages each reader reads.
    #[arg(long, short = 'n', default_value_t = 1_000_000)]
    pub messages: u64,
    /// Push: messages per batch (a batch is also cut at 1 MiB, the FETCH size).
    #[arg(long, default_value_t = 10_000)]
    pub batch: u32,
    /// Push: messages pushed and not yet acknowledged.
    #[arg(long, default_value_t = 100_000)]
    pub window: u32,
    /// FETCH size, bytes.
    #[arg(long = "fetch-size", default_value_t = 1 << 20)]
    pub fetch_size: u64,
    /// Give up on the controller or reader after this long (`10s`, `500ms`, or a number of
    /// ms), naming the endpoint.
    #[arg(long, default_value = "10s", value_parser = crate::duration::parse_duration)]
    pub timeout: Duration,
}

/// One reader's result: messages, payload bytes, time.
type Read = (u64, u64, Duration);

fn push_reader(
    a: &SubscribePerfArgs,
    controllers: Vec<String>,
    i: u32,
    start: &Barrier,
) -> Result<Read> {
    let mut opts = SubscriberOptions::new(
        controllers,
        &a.topic,
        &format!("perf-{}", std::process::id()),
        &format!("r{i}"),
    );
    opts.max_batch = a.batch;
    opts.window = a.window;
    opts.raw = true; // parse records in place, as the FETCH reader does
    opts.timeout = a.timeout;
    let joined = opts.controllers.join(",");
    let mut sub =
        Subscriber::subscribe(opts).map_err(|e| anyhow!("reader {i}: controller {joined}: {e}"))?;
    start.wait();
    let t0 = Instant::now();
    let (mut count, mut bytes) = (0u64, 0u64);
    let deadline = t0 + Duration::from_secs(600);
    while count < a.messages && !interrupted() {
        if Instant::now() > deadline {
            bail!("reader {i}: {count} of {} messages in 600 s", a.messages);
        }
        for ev in sub.poll(Duration::from_millis(100))? {
            if let Event::RawBatch {
                fragment,
                end,
                records,
                ..
            } = ev
            {
                // Exactly N (issue #15): the rest of the last batch is acknowledged, not counted.
                for rec in Records::new(&records) {
                    if count == a.messages {
                        break;
                    }
                    bytes += rec.payload.len() as u64;
                    if !rec.more {
                        count += 1;
                    }
                }
                sub.ack(fragment, end)?;
            }
        }
    }
    let took = t0.elapsed();
    let _ = sub.unsubscribe();
    Ok((count, bytes, took))
}

fn fetch_reader(a: &SubscribePerfArgs, reader: &str, start: &Barrier) -> Result<Read> {
    let ctx = zmq::Context::new();
    let client = ReaderClient::connect(&ctx, reader, &a.topic, a.timeout)?;
    let offset = client.offset(Timestamp::Earliest)?;
    start.wait();
    let t0 = Instant::now();
    let (count, bytes) = fetch_messages(&client, offset, a.fetch_size, a.messages, |_| {
        !interrupted()
    })?;
    if count < a.messages && !interrupted() {
        bail!("the log ended after {count} of {} messages", a.messages);
    }
    Ok((count, bytes, t0.elapsed()))
}

/// Runs `zper perf subscribe`.
pub fn run(a: SubscribePerfArgs, targets: &Endpoints) -> Result<()> {
    if a.readers == 0 || a.messages == 0 {
        bail!("--readers and --messages must be at least 1");
    }
    let controllers: Vec<String> = if a.controller.is_empty() {
        vec![targets.controller.clone()]
    } else {
        a.controller.iter().map(|c| endpoint(c)).collect()
    };
    let reader = endpoint(a.reader.as_deref().unwrap_or(&targets.reader));
    let a = Arc::new(a);
    let start = Arc::new(Barrier::new(a.readers as usize));
    let threads: Vec<_> = (0..a.readers)
        .map(|i| {
            let (a, start, controllers, reader) = (
                a.clone(),
                start.clone(),
                controllers.clone(),
                reader.clone(),
            );
            std::thread::spawn(move || {
                if a.fetch {
                    fetch_reader(&a, &reader, &start)
                } else {
                    push_reader(&a, controllers, i, &start)
                }
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in threads {
        results.push(t.join().map_err(|_| anyhow!("a reader panicked"))??);
    }
    let count: u64 = results.iter().map(|r| r.0).sum();
    let bytes: u64 = results.iter().map(|r| r.1).sum();
    let secs = results
        .iter()
        .map(|r| r.2.as_secs_f64())
        .fold(0.0, f64::max)
        .max(1e-9);
    summary(
        if a.fetch {
            "fetch-readers"
        } else {
            "subscribe"
        },
        &[
            ("readers", a.readers.to_string()),
            ("messages_per_reader", a.messages.to_string()),
            ("messages", count.to_string()),
            ("seconds", format!("{secs:.3}")),
            ("msg_per_s", format!("{:.0}", count as f64 / secs)),
            (
                "mb_per_s",
                format!("{:.2}", bytes as f64 / secs / 1048576.0),
            ),
        ],
    );
    Ok(())
}
