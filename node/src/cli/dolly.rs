//! `zper dolly get|put`: a Dolly client (`dolly.md` §6) over Dolly's own protocol (a DEALER to a
//! node's requests port, 4-frame messages, §4), and `zper perf dolly-put|dolly-get`, issue #5's
//! benchmark: pipelined requests from many DEALERs.
//!
//! The client prints Dolly's lines (`K set in state N`, `K = V (state N)`, `could not get K:
//! MSG`), but unlike the original it applies `--timeout` and exits 1 when a request failed.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use zper_wire::dolly::{Message, Method};

use super::client::{endpoint, Targets};
use super::perf::{percentile, summary};

/// Which node to ask, as Dolly's `-p/-n` or an endpoint.
#[derive(Debug, Args)]
pub struct DollyTarget {
    /// A node's Dolly requests endpoint (`host:port` or `tcp://host:port`; default: from
    /// --config, else 127.0.0.1:3266).
    #[arg(long, short = 'e', global = true)]
    pub endpoint: Option<String>,
    /// Dolly's peers.json: with --name, ask that peer at `tcp://<address>:<requests>`.
    #[arg(long, short = 'p', global = true, value_name = "FILE")]
    pub peers: Option<PathBuf>,
    /// The peer's name in --peers.
    #[arg(long, short = 'n', global = true)]
    pub name: Option<String>,
    /// How long to wait for each reply: `2s`, `500ms` or a number of ms.
    #[arg(long, short = 't', global = true, default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// `zper dolly` subcommands.
#[derive(Debug, Subcommand)]
pub enum DollyCommand {
    /// Read keys (one request each, in order).
    Get {
        /// Keys.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Write one key.
    Put {
        /// Key.
        key: String,
        /// Value.
        value: String,
    },
}

/// Parses `2s`, `1500ms`, `1m` or a bare number of milliseconds.
///
/// Errors: anything else, or zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 2s or 500ms"))?;
    let d = match unit {
        "" | "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => return Err(format!("invalid duration {s:?}: units are ms, s, m")),
    };
    if d.is_zero() {
        return Err("the duration must be more than 0".into());
    }
    Ok(d)
}

/// The requests endpoint named by `t`.
///
/// Errors: `--name` without `--peers` (or the reverse), an unreadable or invalid peers.json, an
/// unknown name.
pub fn resolve(t: &DollyTarget, targets: &Targets) -> Result<String> {
    match (&t.peers, &t.name, &t.endpoint) {
        (Some(_), _, Some(_)) => bail!("give either --endpoint or --peers/--name, not both"),
        (Some(path), Some(name), None) => {
            let peers = crate::dolly_peers::load(path)?;
            let peer = peers
                .iter()
                .find(|p| &p.name == name)
                .with_context(|| format!("could not find replica named {name}"))?;
            if peer.requests == 0 {
                bail!("peer {name} has no requests port");
            }
            let host = if peer.address.is_empty() {
                "127.0.0.1"
            } else {
                &peer.address
            };
            Ok(format!("tcp://{host}:{}", peer.requests))
        }
        (Some(_), None, None) => bail!("--peers needs --name (the peer to ask)"),
        (None, Some(_), _) => bail!("--name needs --peers"),
        (None, None, Some(e)) => Ok(endpoint(e)),
        (None, None, None) => Ok(targets.dolly.clone()),
    }
}

fn dealer(ctx: &zmq::Context, at: &str) -> Result<zmq::Socket> {
    let s = ctx.socket(zmq::DEALER)?;
    s.set_linger(0)?;
    s.connect(at).with_context(|| format!("connect to {at}"))?;
    Ok(s)
}

/// One request, one reply within `timeout`.
fn call(s: &zmq::Socket, request: &Message, timeout: Duration, at: &str) -> Result<Message> {
    s.send_multipart(request.to_frames(), 0)?;
    if s.poll(zmq::POLLIN, timeout.as_millis() as i64)? == 0 {
        bail!(
            "no reply from {at} within {} ms{}",
            timeout.as_millis(),
            if request.method == Method::Put {
                " (the put may still apply)"
            } else {
                ""
            }
        );
    }
    let frames = s.recv_multipart(0)?;
    Message::decode(&frames).with_context(|| format!("malformed reply from {at}"))
}

/// Runs `zper dolly ...`.
///
/// Errors: bad target; no reply in time; any `Error` reply (after printing it).
pub fn run(command: DollyCommand, target: &DollyTarget, targets: &Targets) -> Result<()> {
    let at = resolve(target, targets)?;
    let ctx = zmq::Context::new();
    let s = dealer(&ctx, &at)?;
    match command {
        DollyCommand::Put { key, value } => {
            let reply = call(
                &s,
                &Message::new(Method::Put, 0, key.as_bytes(), value.as_bytes()),
                target.timeout,
                &at,
            )?;
            match reply.method {
                Method::Put => println!("{key} set in state {}", reply.sequence),
                _ => bail!(
                    "could not put {key}: {}",
                    String::from_utf8_lossy(&reply.body)
                ),
            }
        }
        DollyCommand::Get { keys } => {
            let mut failed = 0;
            for key in &keys {
                let reply = call(
                    &s,
                    &Message::new(Method::Get, 0, key.as_bytes(), b""),
                    target.timeout,
                    &at,
                )?;
                match reply.method {
                    Method::Put => println!(
                        "{key} = {} (state {})",
                        String::from_utf8_lossy(&reply.body),
                        reply.sequence
                    ),
                    _ => {
                        eprintln!(
                            "could not get {key}: {}",
                            String::from_utf8_lossy(&reply.body)
                        );
                        failed += 1;
                    }
                }
            }
            if failed > 0 {
                bail!("{failed} of {} keys not read", keys.len());
            }
        }
    }
    Ok(())
}

/// Options of `zper perf dolly-put` and `zper perf dolly-get`.
#[derive(Debug, Args)]
pub struct DollyPerfArgs {
    /// Dolly requests endpoints, comma-separated; DEALER i connects to endpoint i mod count
    /// (default: from --config, else 127.0.0.1:3266).
    #[arg(long, short = 'e')]
    pub endpoints: Option<String>,
    /// Requests in all.
    #[arg(long, short = 'n', default_value_t = 20_000)]
    pub requests: u64,
    /// DEALER sockets (one thread each).
    #[arg(long, short = 'c', default_value_t = 16)]
    pub dealers: u64,
    /// Requests in flight per DEALER.
    #[arg(long, short = 'w', default_value_t = 8)]
    pub window: u64,
    /// Distinct keys (`key<i>`); gets read keys put by an earlier dolly-put run.
    #[arg(long, default_value_t = 1000)]
    pub keys: u64,
    /// Value bytes (puts).
    #[arg(long = "value-size", short = 's', default_value_t = 100)]
    pub value_size: usize,
    /// Give up on a reply after this long: `10s`, `500ms`.
    #[arg(long, short = 't', default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
}

struct DealerResult {
    latencies: Vec<Duration>,
    errors: u64,
    last_error: Option<String>,
}

/// Runs the benchmark (`method` Put or Get) and prints one `perf dolly-put|dolly-get ...` line:
/// requests/s, p50/p99/max latency in ms, errors.
///
/// Errors: bad arguments; a DEALER waited longer than --timeout for a reply; nothing succeeded.
pub fn perf(a: DollyPerfArgs, method: Method, targets: &Targets) -> Result<()> {
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
    let mut latencies = Vec::new();
    let (mut errors, mut last_error) = (0, None);
    for h in handles {
        let r = h
            .join()
            .map_err(|_| anyhow::anyhow!("a dealer thread panicked"))??;
        latencies.extend(r.latencies);
        errors += r.errors;
        if r.last_error.is_some() {
            last_error = r.last_error;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    if latencies.is_empty() {
        bail!(
            "no request succeeded: {}",
            last_error.unwrap_or_else(|| "?".into())
        );
    }
    latencies.sort_unstable();
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
            ("p50_ms", format!("{:.3}", percentile(&latencies, 0.50))),
            ("p99_ms", format!("{:.3}", percentile(&latencies, 0.99))),
            ("max_ms", format!("{:.3}", percentile(&latencies, 1.0))),
        ],
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
    let s = dealer(ctx, at)?;
    let value = vec![b'v'; size];
    let mut pending: VecDeque<(Vec<u8>, Instant)> = VecDeque::new();
    let mut out = DealerResult {
        latencies: Vec::with_capacity(count as usize),
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
            Method::Put => out.latencies.push(started.elapsed()),
            _ => {
                out.errors += 1;
                out.last_error = Some(String::from_utf8_lossy(&reply.body).into_owned());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_dolly_writes_them() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("750"), Ok(Duration::from_millis(750)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        for bad in ["", "xyz", "2h", "0s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
