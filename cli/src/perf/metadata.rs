//! `zper perf metadata`: Raft metadata commit rate and latency through the HTTP admin API
//! (issue #3's benchmark). Each writer thread alternates `POST /v1/topics/<name>` and
//! `DELETE /v1/topics/<name>` (one committed Raft entry each, so the metadata stays small),
//! round-robin over the given admin addresses: requests to a follower are forwarded to the
//! leader, as a client's would be. With `--retry-ms` every write is retried until it commits,
//! which measures failover: the summary's `first_commit_ms` is the time from start to the first
//! committed write.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;

use zper_client::admin::CreateTopicRequest;
use zper_client::{AdminClient, AdminError, Endpoints};

use super::report::{summary, Latencies};

/// Options of `zper perf metadata`.
#[derive(Debug, Args)]
pub struct MetadataArgs {
    /// HTTP admin addresses, comma-separated (default: from --config, else 127.0.0.1:9644).
    #[arg(long)]
    pub admin: Option<String>,
    /// Metadata writes (commits) in all.
    #[arg(long, short = 'n', default_value_t = 2000)]
    pub commits: u64,
    /// Writer threads, each with its own connection pool.
    #[arg(long, short = 'c', default_value_t = 1)]
    pub concurrency: u64,
    /// Retry each write until it commits, for at most this long: `5s`, `500ms`, or a number of
    /// ms (0: count failures). `--retry-ms` is the old spelling.
    #[arg(long = "retry", alias = "retry-ms", default_value = "0", value_parser = crate::duration::parse_duration_or_zero)]
    pub retry: std::time::Duration,
    /// Topic name prefix (ASCII letters and digits).
    #[arg(long, default_value = "perfmeta")]
    pub prefix: String,
    /// Admin token for nodes with `http.admin_token`.
    #[arg(long, env = "ZPER_ADMIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

struct Outcome {
    latencies: Latencies,
    errors: u64,
    first_commit: Option<Instant>,
    last_error: Option<String>,
}

/// Runs the benchmark and prints one `perf metadata ...` summary line.
///
/// Errors: bad arguments; no write committed at all.
pub fn run(a: MetadataArgs, targets: &Endpoints) -> Result<()> {
    if a.concurrency == 0 || a.commits < a.concurrency {
        bail!("--concurrency must be between 1 and --commits");
    }
    if a.prefix.is_empty() || !a.prefix.bytes().all(|b| b.is_ascii_alphanumeric()) {
        bail!("--prefix must be ASCII letters or digits");
    }
    let admins: Vec<String> = a
        .admin
        .clone()
        .unwrap_or_else(|| targets.admin.clone())
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    if admins.is_empty() {
        bail!("--admin needs at least one host:port");
    }
    let token = a.token.clone().or_else(|| targets.admin_token.clone());
    let start = Instant::now();
    let per_thread = a.commits / a.concurrency;
    let handles: Vec<_> = (0..a.concurrency)
        .map(|t| {
            let (admins, token, prefix) = (admins.clone(), token.clone(), a.prefix.clone());
            let retry = a.retry;
            std::thread::spawn(move || writer(t, per_thread, &admins, token, &prefix, retry))
        })
        .collect();
    let mut latencies = Latencies::new();
    let (mut errors, mut first, mut last_error) = (0, None::<Instant>, None);
    for h in handles {
        match h.join() {
            Ok(Ok(o)) => {
                latencies.merge(&o.latencies);
                errors += o.errors;
                first = match (first, o.first_commit) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                last_error = o.last_error.or(last_error);
            }
            Ok(Err(e)) => bail!("writer thread: {e}"),
            Err(_) => bail!("a writer thread panicked"),
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    if latencies.len() == 0 {
        bail!(
            "no metadata write committed ({errors} failed; last: {})",
            last_error.unwrap_or_default()
        );
    }
    let committed = latencies.len();
    summary(
        "metadata",
        &[
            ("commits", committed.to_string()),
            ("errors", errors.to_string()),
            ("concurrency", a.concurrency.to_string()),
            ("elapsed_s", format!("{elapsed:.3}")),
            (
                "commits_per_s",
                format!("{:.0}", committed as f64 / elapsed),
            ),
        ]
        .into_iter()
        .chain(latencies.fields())
        .chain([(
            "first_commit_ms",
            format!(
                "{:.1}",
                first.map_or(0.0, |f| (f - start).as_secs_f64() * 1000.0)
            ),
        )])
        .collect::<Vec<_>>(),
    );
    Ok(())
}

fn writer(
    thread: u64,
    writes: u64,
    admins: &[String],
    token: Option<String>,
    prefix: &str,
    retry: Duration,
) -> Result<Outcome> {
    let clients = admins
        .iter()
        .map(|admin| AdminClient::new(admin, token.clone(), Duration::from_secs(15)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Outcome {
        latencies: Latencies::new(),
        errors: 0,
        first_commit: None,
        last_error: None,
    };
    let topic = format!("{prefix}{thread}");
    for i in 0..writes {
        let create = i % 2 == 0;
        let started = Instant::now();
        let mut attempt = 0usize;
        loop {
            let client = &clients[(i as usize + attempt + thread as usize) % clients.len()];
            let answer = if create {
                client
                    .create_topic(&topic, &CreateTopicRequest::default())
                    .map(drop)
            } else {
                client.delete_topic(&topic)
            };
            let result = match answer {
                Ok(_) => Ok(()),
                // A retried write may have committed before its answer was lost.
                Err(AdminError::Api { status, .. })
                    if attempt > 0 && matches!(status, 404 | 409) =>
                {
                    Ok(())
                }
                Err(e @ AdminError::Api { .. }) => Err(e.to_string()),
                Err(AdminError::Unreachable { source, .. }) => Err(source.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match result {
                Ok(()) => {
                    let now = Instant::now();
                    out.latencies.record(now - started);
                    out.first_commit.get_or_insert(now);
                    break;
                }
                Err(e) if started.elapsed() < retry => {
                    out.last_error = Some(e);
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => {
                    out.errors += 1;
                    out.last_error = Some(e);
                    break;
                }
            }
        }
    }
    Ok(out)
}
