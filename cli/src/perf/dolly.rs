//! `zper perf dolly-put|dolly-get` (issue #5's benchmark): pipelined Dolly requests from many
//! DEALERs over one or more nodes, through [`zper_client::DollyClient`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use zper_client::{endpoint, DollyClient, Endpoints};
use zper_wire::dolly::{Message, Method};

use super::report::{summary, Latencies};
use crate::duration::parse_duration;

/// Options of `zper perf dolly-put` and `zper perf dolly-get`.
#[derive(Debug, Args)]
pub struct DollyPerfArgs {
    /// Dolly requests endpoints, comma-separated; DEALER i connects to endpoint i mod count
    /// (default: from --config, else 127.0.0.1:3266).
    #[arg(long, visible_alias = "endpoint", short = 'e')]
    pub endpoints: Option<String>,
    /// Requests in all.
    #[arg(long, short = 'n', default_value_t = 20_000)]
    pub requests: u64,
    /// DEALER sockets (one thread each).
    #[arg(long, short = 'c', default_value_t = 16)]
    pub dealers: u64,
    /// Requests in flight per DEALER.
    #[arg(long, default_value_t = 8)]
    pub window: u64,
    /// Distinct keys (`key<i>`); gets read keys put by an earlier dolly-put run.
    #[arg(long, default_value_t = 1000)]
    pub keys: u64,
    /// Value bytes (puts).
    #[arg(long = "value-size", short = 's', default_value_t = 100)]
    pub value_size: usize,
    /// Give up on a reply after this long: `10s`, `500ms`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
}

struct DealerResult {
    latencies: Latencies,
    errors: u64,
    last_error: Option<String>,
}

/// Runs the benchmark (`method` Put or Get) and prints one `perf dolly-put|dolly-get ...` line:
/// requests/s, p50/p99/max latency in ms, errors.
///
/// Errors: bad arguments; a DEALER waited longer than --timeout for a reply; nothing succeeded.
pub fn perf(a: DollyPerfArgs, method: Method, targets: &Endpoints) -> Result<()> {
    if a.dealers == 0 || a.requests < a.dealers || a.window == 0 || a.keys == 0 {
        bail!("need 1 <= --dealers <= --requests, --window >= 1, --keys >= 1");
    }
    let endpoints: Vec<String> = a
        .endpoints
        .clone()
        .unwrap_or_else(|| targets.dolly.clone())
        .split(',')
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(endpoint)
        .collect();
    if endpoints.is_empty() {
        bail!("--endpoints needs at least one endpoint");
    }
    let per_dealer = a.requests / a.dealers;
    let ctx = zmq::Context::new();
    let start = Instant::now();
    let handles: Vec<_> = (0..a.dealers)
        .map(|d| {
            let at = endpoints[d as usize % endpoints.len()].clone();
            let ctx = ctx.clone();
            let (window, keys, size, timeout) = (a.window, a.keys, a.value_size, a.timeout);
            std::thread::spawn(move || {
                drive(
                    &ctx, &at, d, per_dealer, window, keys, size, timeout, method,
                )
            })
        })
        .collect();
    let mut latencies = Latencies::new();
    let (mut errors, mut last_error) = (0, None);
    for h in handles {
        let r = h
            .join()
            .map_err(|_| anyhow::anyhow!("a dealer thread panicked"))??;
        latencies.merge(&r.latencies);
        errors += r.errors;
        if r.last_error.is_some() {
            last_error = r.last_error;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    if latencies.len() == 0 {
        bail!(
            "no request succeeded: {}",
            last_error.unwrap_or_else(|| "?".into())
        );
    }
    let ok = latencies.len() as f64;
    summary(
        if method == Method::Put {
            "dolly-put"
        } else {
            "dolly-get"
        },
        &[
            ("requests", latencies.len().to_string()),
            ("errors", errors.to_string()),
            ("dealers", a.dealers.to_string()),
            ("window", a.window.to_string()),
            ("seconds", format!("{elapsed:.3}")),
            ("per_second", format!("{:.0}", ok / elapsed)),
        ]
        .into_iter()
        .chain(latencies.fields())
        .collect::<Vec<_>>(),
    );
    if let Some(e) = last_error {
        eprintln!("last error reply: {e}");
    }
    Ok(())
}

/// One DEALER: keeps `window` requests in flight; replies come back in order per connection
/// for Gets, and in commit order for Puts, so each reply is matched by its key.
#[allow(clippy::too_many_arguments)]
fn drive(
    ctx: &zmq::Context,
    at: &str,
    dealer_no: u64,
    count: u64,
    window: u64,
    keys: u64,
    size: usize,
    timeout: Duration,
    method: Method,
) -> Result<DealerResult> {
    let client = DollyClient::connect(ctx, at)?;
    let s = client.socket();
    let value = vec![b'v'; size];
    let mut pending: VecDeque<(Vec<u8>, Instant)> = VecDeque::new();
    let mut out = DealerResult {
        latencies: Latencies::new(),
        errors: 0,
        last_error: None,
    };
    let (mut sent, mut received) = (0u64, 0u64);
    while received < count {
        while sent < count && (pending.len() as u64) < window {
            let key = format!("key{}", (dealer_no * count + sent) % keys).into_bytes();
            let body: &[u8] = if method == Method::Put { &value } else { b"" };
            s.send_multipart(Message::new(method, 0, &key, body).to_frames(), 0)?;
            pending.push_back((key, Instant::now()));
            sent += 1;
        }
        if s.poll(zmq::POLLIN, timeout.as_millis() as i64)? == 0 {
            bail!("{at}: no reply within {} ms", timeout.as_millis());
        }
        let reply = Message::decode(&s.recv_multipart(0)?)
            .with_context(|| format!("malformed reply from {at}"))?;
        received += 1;
        // Puts may complete out of order: match by key (a key repeats in the window only
        // when --keys is smaller than the window, then the oldest is taken).
        let at_index = pending
            .iter()
            .position(|(k, _)| *k == reply.key)
            .unwrap_or(0);
        let Some((_, started)) = pending.remove(at_index) else {
            bail!("{at}: a reply nobody asked for");
        };
        match reply.method {
            Method::Put => out.latencies.record(started.elapsed()),
            _ => {
                out.errors += 1;
                out.last_error = Some(String::from_utf8_lossy(&reply.body).into_owned());
            }
        }
    }
    Ok(out)
}
