//! `zper perf consume` (ConsumerPerformance, `zper.md` §10.3).

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;
use zper_client::{endpoint, fetch_messages, Endpoints, ReaderClient, Timestamp};

use super::report::{interrupted, progress, summary};

/// Options of `zper perf consume` (names as ConsumerPerformance, §10.3).
#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Topic.
    #[arg(long, short = 't', value_parser = crate::topic_name::topic_name)]
    pub topic: String,
    /// Reader endpoint (default: from --config, else 127.0.0.1:5556).
    #[arg(long = "readerinfo", visible_alias = "reader", short = 'r')]
    pub reader: Option<String>,
    /// Stop after this many messages (or at the end of the log).
    #[arg(long, short = 'n', default_value_t = 1_000_000)]
    pub messages: u64,
    /// FETCH size, bytes.
    #[arg(long = "fetch-size", short = 's', default_value_t = 1 << 20)]
    pub fetch_size: u64,
    /// Give up on a reply after this long (`10s`, `500ms`, or a number of ms); an unreachable
    /// reader fails then, naming its endpoint.
    #[arg(long, default_value = "10s", value_parser = crate::duration::parse_duration)]
    pub timeout: Duration,
}

/// Runs `zper perf consume`: FETCHes from the earliest offset until `--messages` are read.
///
/// Errors: an unreachable reader; a log that ends before `--messages`.
pub fn run(a: ConsumeArgs, targets: &Endpoints) -> Result<()> {
    let ctx = zmq::Context::new();
    let reader = endpoint(a.reader.as_deref().unwrap_or(&targets.reader));
    let client = ReaderClient::connect_with(
        &ctx,
        &reader,
        &a.topic,
        0,
        a.timeout,
        targets.curve.as_ref(),
    )?;
    let pb = progress(a.messages);
    let start = Instant::now();
    let offset = client.offset(Timestamp::Earliest)?;
    let (count, bytes) = fetch_messages(&client, offset, a.fetch_size, a.messages, |n| {
        pb.set_position(n);
        !interrupted()
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
    if count < a.messages && !interrupted() {
        bail!("the log ended after {count} of {} messages", a.messages);
    }
    Ok(())
}
