//! `zper subscribe`: join a subscription group (issue #7) and print the records pushed to this
//! member, acknowledging each batch once printed (so the group's committed offset follows what
//! was printed), optionally sending a result back to each record's producer.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use zper_client::{endpoint, Endpoints, Event, Subscriber, SubscriberOptions};

use crate::duration::parse_duration_or_zero;

/// Options of `zper subscribe`.
#[derive(Debug, Args)]
pub struct SubscribeArgs {
    /// Topic.
    #[arg(long, short = 't', value_parser = crate::topic_name::topic_name)]
    pub topic: String,
    /// Subscription group: members share a `distribution` topic's fragments; every member of a
    /// `default` topic gets every fragment.
    #[arg(long, short = 'g', default_value = "zper-cli")]
    pub group: String,
    /// This member's id within the group (default: zper-<pid>).
    #[arg(long)]
    pub id: Option<String>,
    /// Controller endpoints, comma-separated (default: from --config, else
    /// tcp://127.0.0.1:5558).
    #[arg(long, short = 'C', value_delimiter = ',')]
    pub controller: Vec<String>,
    /// Messages per pushed batch.
    #[arg(long, default_value_t = 100)]
    pub batch: u32,
    /// How long a partial batch may wait for more: `50ms`, `1s`, or a number of ms (0: push at
    /// once). `--flush-ms` is the old spelling.
    #[arg(long = "flush", alias = "flush-ms", default_value = "0", value_parser = parse_duration_or_zero)]
    pub flush: Duration,
    /// Messages pushed and not yet acknowledged before the node pauses.
    #[arg(long, default_value_t = 1000)]
    pub window: u32,
    /// Stop after this many messages (0: run until interrupted).
    #[arg(long, short = 'n', default_value_t = 0)]
    pub max_messages: u64,
    /// Stop after this long without a message: `2s`, `500ms`, or a number of ms (0: never).
    /// `--idle-ms` is the old spelling.
    #[arg(long = "idle", alias = "idle-ms", default_value = "0", value_parser = parse_duration_or_zero)]
    pub idle: Duration,
    /// Print each message's fragment and offset before it.
    #[arg(long)]
    pub offsets: bool,
    /// Send this text, appended to each record's last frame, back to its producer as a
    /// result (Pirius' retrievable pattern; producers listen with a RESULTS registration).
    #[arg(long)]
    pub result_suffix: Option<String>,
    /// Give up on the controller after this long (`10s`, `500ms`, or a number of ms).
    #[arg(long, default_value = "10s", value_parser = crate::duration::parse_duration)]
    pub timeout: Duration,
    /// Leave the group when done (otherwise the session simply lapses after its lease).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leave: bool,
}

/// A line on stderr; a closed stderr is ignored (eprintln! would panic).
fn note(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Runs `zper subscribe`: one line per message, its frames (lossy UTF-8) joined by a tab.
pub fn run(args: SubscribeArgs, targets: &Endpoints) -> Result<()> {
    let max = zper_wire::relay::MAX_WINDOW;
    if args.batch == 0 || args.window == 0 || args.batch > max || args.window > max {
        bail!("--batch and --window must be between 1 and {max}");
    }
    let flush_ms = u32::try_from(args.flush.as_millis()).unwrap_or(u32::MAX);
    if flush_ms > zper_wire::relay::MAX_FLUSH_MS {
        bail!(
            "--flush must be at most {} ms (a minute)",
            zper_wire::relay::MAX_FLUSH_MS
        );
    }
    // Ctrl-C or SIGTERM ends the loop, so the member leaves its group at once (its fragments
    // move to the others) instead of holding them until its lease ends.
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupted.clone()).context("install signal handler")?;
    }
    let controllers: Vec<String> = if args.controller.is_empty() {
        vec![targets.controller.clone()]
    } else {
        args.controller.iter().map(|c| endpoint(c)).collect()
    };
    let id = args
        .id
        .clone()
        .unwrap_or_else(|| format!("zper-{}", std::process::id()));
    let mut opts = SubscriberOptions::new(controllers.clone(), &args.topic, &args.group, &id);
    opts.max_batch = args.batch;
    opts.flush_ms = flush_ms;
    opts.window = args.window;
    opts.timeout = args.timeout;
    opts.curve = targets.curve.clone();
    let mut sub = Subscriber::subscribe(opts).with_context(|| {
        format!(
            "subscribing to {} as {}/{} through {}",
            args.topic,
            args.group,
            id,
            controllers.join(",")
        )
    })?;
    note(&format!(
        "subscribed to {} as {}/{}: fragments {:?}",
        args.topic,
        args.group,
        id,
        sub.fragments()
    ));
    let out = std::io::stdout();
    let mut out = out.lock();
    let mut seen = 0u64;
    let mut last = Instant::now();
    let printed = print_records(
        &args,
        &mut sub,
        &mut out,
        &mut seen,
        &mut last,
        &interrupted,
    );
    // A closed stdout (`| head`) ends the run like -n does.
    let failed = match printed {
        Err(e) if is_broken_pipe(&e) => None,
        Err(e) => Some(e),
        Ok(()) => None,
    };
    // Give the last acknowledgement a moment to commit before leaving.
    let deadline = Instant::now() + Duration::from_secs(2);
    while failed.is_none() && Instant::now() < deadline {
        if sub
            .poll(Duration::from_millis(100))?
            .iter()
            .any(|e| matches!(e, Event::Acked { .. }))
        {
            break;
        }
    }
    if args.leave {
        sub.unsubscribe().context("leaving the group")?;
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

/// The receive loop: prints and acknowledges batches until -n, --idle-ms or a signal.
fn print_records(
    args: &SubscribeArgs,
    sub: &mut Subscriber,
    out: &mut impl Write,
    seen: &mut u64,
    last: &mut Instant,
    interrupted: &AtomicBool,
) -> Result<()> {
    'outer: loop {
        if interrupted.load(Ordering::Relaxed) {
            break;
        }
        for event in sub.poll(Duration::from_millis(100))? {
            match event {
                Event::Batch {
                    fragment,
                    messages,
                    end,
                } => {
                    *last = Instant::now();
                    for m in &messages {
                        if args.offsets {
                            write!(out, "{fragment}\t{}\t", m.offset)?;
                        }
                        let text: Vec<String> = m
                            .frames
                            .iter()
                            .map(|f| String::from_utf8_lossy(f).into_owned())
                            .collect();
                        writeln!(out, "{}", text.join("\t"))?;
                        if let Some(suffix) = &args.result_suffix {
                            let id = m.frames.first().cloned().unwrap_or_default();
                            let mut payload = m.frames.last().cloned().unwrap_or_default();
                            payload.extend_from_slice(suffix.as_bytes());
                            sub.send_result(fragment, m.offset, &id, &payload)?;
                        }
                        *seen += 1;
                        if args.max_messages > 0 && *seen >= args.max_messages {
                            out.flush()?;
                            // Acknowledge only up to what was printed.
                            let upto = messages
                                .iter()
                                .find(|x| x.offset > m.offset)
                                .map_or(end, |x| x.offset);
                            sub.ack(fragment, upto)?;
                            break 'outer;
                        }
                    }
                    out.flush()?;
                    sub.ack(fragment, end)?;
                }
                Event::Assigned(f) => note(&format!("fragments now {f:?}")),
                Event::Revoked { fragment, reason } => {
                    note(&format!("fragment {fragment} revoked: {reason}"))
                }
                Event::Error(reason) => bail!("the relay refused a request: {reason}"),
                Event::Acked { .. } | Event::Result(_) | Event::RawBatch { .. } => {}
            }
        }
        if !args.idle.is_zero() && last.elapsed() >= args.idle {
            break;
        }
    }
    Ok(())
}
