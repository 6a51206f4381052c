//! `zper consume`: print a topic's messages from an offset, every fragment by default,
//! following the log if asked (issue #15).
//!
//! How many fragments a topic has comes from the admin API (`GET /v1/topics/{name}`); the same
//! answer tells a topic that does not exist, which is an error (exit 1) unless `--wait`. Each
//! fragment is read through the reader endpoint with the fragment in the identity's mode byte
//! (docs/protocol.md), which any node forwards to the fragment's leader.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use zper_client::{endpoint, AdminClient, Endpoints, ReaderClient};
use zper_wire::Records;

use crate::duration::parse_duration;
use crate::position::{self, From};

/// Options of `zper consume`.
#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Topic.
    #[arg(long, short = 't', value_parser = crate::topic_name::topic_name)]
    pub topic: String,
    /// Reader endpoint (default: from --config, else tcp://127.0.0.1:5556).
    #[arg(long, short = 'r')]
    pub reader: Option<String>,
    /// HTTP admin address `host:port`, asked how many fragments the topic has (default: from
    /// --config, else 127.0.0.1:9644).
    #[arg(long)]
    pub admin: Option<String>,
    /// Read only this fragment (default: every fragment of the topic).
    #[arg(long)]
    pub fragment: Option<u8>,
    /// Where to start in each fragment: `earliest`, `latest`, `-N` (the last N messages), an
    /// RFC 3339 time (`2026-12-02T10:00:00Z`; segment granularity, through OFFSET) or a byte
    /// offset (a message boundary; with one fragment or --fragment).
    #[arg(long, default_value = "earliest", allow_hyphen_values = true)]
    pub from: From,
    /// How to print each frame: `text` (UTF-8; invalid bytes as U+FFFD), `hex` or `base64`
    /// (for binary payloads).
    #[arg(long, value_enum, default_value_t)]
    pub payload: crate::payload::Encoding,
    /// Keep polling for new messages at the end of every fragment.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Wait for a topic that does not exist yet instead of failing.
    #[arg(long)]
    pub wait: bool,
    /// Stop after this many messages (0: no limit).
    #[arg(long, short = 'n', default_value_t = 0)]
    pub max_messages: u64,
    /// FETCH size, bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub fetch_size: u64,
    /// Print each message's offset before it (`fragment:offset` for a topic of several
    /// fragments).
    #[arg(long)]
    pub offsets: bool,
    /// Reply timeout: `5s`, `500ms`, or a number of ms.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// The fragments to read, from `--fragment` or the admin API.
///
/// Errors: the topic does not exist (and `--wait` was not given); the admin API refused.
fn fragments(args: &ConsumeArgs, targets: &Endpoints, reader: &str) -> Result<Vec<u8>> {
    if let Some(f) = args.fragment {
        return Ok(vec![f]);
    }
    let admin_addr = args.admin.as_deref().unwrap_or(&targets.admin);
    let admin = AdminClient::new(admin_addr, None, Duration::from_secs(5))?;
    let fragment_0 = |why: &str| {
        eprintln!(
            "zper: note: {why}, so reading fragment 0 only (pass --admin HOST:PORT to read every \
             fragment, or --fragment N)"
        );
        Ok(vec![0])
    };
    // Without `--admin` the admin address is a default (or the config's), which may be
    // another cluster's node whose answer says nothing of this topic: use it only if it lists
    // a node with this reader.
    if args.admin.is_none() {
        match admin.brokers() {
            Ok(brokers)
                if brokers
                    .iter()
                    .any(|b| same_endpoint(&b.endpoints.reader, reader)) => {}
            Ok(_) => {
                return fragment_0(&format!(
                    "the admin API at {admin_addr} is not the cluster of reader {reader}"
                ))
            }
            Err(_) => return fragment_0(&format!("admin API at {admin_addr} not reachable")),
        }
    }
    let mut waited = false;
    loop {
        match admin.topic(&args.topic) {
            Ok(view) => {
                let n = view.fragments.len().clamp(1, 256);
                return Ok((0..n).map(|f| f as u8).collect());
            }
            Err(e) if e.status() == Some(404) => {
                if !args.wait {
                    bail!(
                        "topic {:?} does not exist (admin API at {admin_addr}); produce to it or \
                         `zper topics create {}` first, or pass --wait to wait for it",
                        args.topic,
                        args.topic
                    );
                }
                if !waited {
                    eprintln!("zper: waiting for topic {:?} to exist...", args.topic);
                    waited = true;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(zper_client::admin::AdminError::Unreachable { .. }) => {
                return fragment_0(&format!("admin API at {admin_addr} not reachable"));
            }
            Err(e) => return Err(e).context(format!("topic {:?}", args.topic)),
        }
    }
}

/// True when two ZeroMQ endpoints name the same host and port (`*`, `0.0.0.0`, `localhost` and
/// `127.0.0.1` all count as this machine).
fn same_endpoint(a: &str, b: &str) -> bool {
    fn split(e: &str) -> Option<(&str, &str)> {
        let e = e.strip_prefix("tcp://").unwrap_or(e);
        let (host, port) = e.rsplit_once(':')?;
        let local = matches!(host, "*" | "0.0.0.0" | "localhost" | "127.0.0.1");
        Some((if local { "127.0.0.1" } else { host }, port))
    }
    split(a).is_some() && split(a) == split(b)
}

/// One fragment being read: where it is, and the frames of a message split over FETCHes.
struct Cursor {
    fragment: u8,
    client: ReaderClient,
    offset: u64,
    fetch_size: u64,
    frames: Vec<String>,
    msg_start: u64,
}

/// What one FETCH of a cursor gave.
enum Step {
    /// Messages were printed (how many).
    Read(u64),
    /// The end of the fragment.
    End,
}

/// Runs `zper consume`: one line per message, its frames (lossy UTF-8, or `--payload hex` /
/// `base64`) joined by a tab.
pub fn run(args: ConsumeArgs, targets: &Endpoints) -> Result<()> {
    let ctx = zmq::Context::new();
    let reader = endpoint(args.reader.as_deref().unwrap_or(&targets.reader));
    let from = args.from;
    let fragments = fragments(&args, targets, &reader)?;
    let several = fragments.len() > 1;
    let timeout = args.timeout;
    let mut cursors = Vec::with_capacity(fragments.len());
    for fragment in fragments {
        let client = ReaderClient::connect_with(
            &ctx,
            &reader,
            &args.topic,
            fragment,
            timeout,
            targets.curve.as_ref(),
        )?;
        let offset = match from {
            From::Offset(n) if several => bail!(
                "--from {n}: a byte offset is a position in one fragment, and topic {:?} has \
                 several; add --fragment N",
                args.topic
            ),
            from => position::start(&client, from, args.fetch_size)?,
        };
        cursors.push(Cursor {
            fragment,
            client,
            offset,
            fetch_size: args.fetch_size.max(16),
            frames: Vec::new(),
            msg_start: offset,
        });
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    let mut seen = 0u64;
    let limit = (args.max_messages > 0).then_some(args.max_messages);
    loop {
        let mut read_any = false;
        for c in &mut cursors {
            // Each fragment to its end (or the limit) before the next.
            loop {
                let left = limit.map(|l| l - seen);
                match step(c, &args, several, left, &mut out)? {
                    Step::Read(n) => {
                        seen += n;
                        read_any |= n > 0;
                        if limit.is_some_and(|l| seen >= l) {
                            return Ok(());
                        }
                    }
                    Step::End => break,
                }
            }
        }
        if !args.follow {
            return Ok(());
        }
        if !read_any {
            out.flush()?;
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One FETCH on `c`: prints the whole messages it holds (at most `left`).
fn step(
    c: &mut Cursor,
    args: &ConsumeArgs,
    several: bool,
    left: Option<u64>,
    out: &mut impl Write,
) -> Result<Step> {
    let Some(data) = c.client.fetch(c.offset, c.fetch_size)? else {
        bail!(
            "fragment {} of topic {}: {}",
            c.fragment,
            args.topic,
            position::explain_unreadable(&c.client, c.offset, c.fetch_size)
        );
    };
    let mut it = Records::new(&data);
    let mut printed = 0u64;
    // Frames of a message that continues in the next FETCH: progress is frame-granular (spec
    // §5.3), so a message larger than one FETCH is read in several.
    for rec in it.by_ref() {
        if c.frames.is_empty() {
            c.msg_start = c.offset;
        }
        c.offset += rec.stored_len() as u64;
        c.frames.push(args.payload.encode(rec.payload));
        if !rec.more {
            if crate::output::json_output() {
                // One object per message: {"fragment", "offset", "frames": [text...]}.
                let line = serde_json::json!({
                    "fragment": c.fragment, "offset": c.msg_start, "frames": c.frames,
                });
                writeln!(out, "{line}")?;
            } else if args.offsets && several {
                write!(out, "{}:{}\t", c.fragment, c.msg_start)?;
            } else if args.offsets {
                write!(out, "{}\t", c.msg_start)?;
            }
            if !crate::output::json_output() {
                writeln!(out, "{}", c.frames.join("\t"))?;
            }
            c.frames.clear();
            printed += 1;
            if left.is_some_and(|l| printed >= l) {
                return Ok(Step::Read(printed));
            }
        }
    }
    if it.valid_bytes() > 0 {
        return Ok(Step::Read(printed));
    }
    if data.len() as u64 >= c.fetch_size {
        c.fetch_size = c.fetch_size.saturating_mul(2); // one record larger than the FETCH
        return Ok(Step::Read(0));
    }
    if !data.is_empty() {
        bail!(
            "offset {}: a record larger than the node serves in one FETCH",
            c.offset
        );
    }
    Ok(Step::End)
}

#[cfg(test)]
mod tests {
    use super::same_endpoint;

    #[test]
    fn endpoints_on_this_machine_match_by_port() {
        assert!(same_endpoint(
            "tcp://127.0.0.1:5556",
            "tcp://localhost:5556"
        ));
        assert!(same_endpoint("tcp://0.0.0.0:5556", "127.0.0.1:5556"));
        assert!(!same_endpoint(
            "tcp://127.0.0.1:5556",
            "tcp://127.0.0.1:6556"
        ));
        assert!(!same_endpoint("tcp://10.0.0.1:5556", "tcp://10.0.0.2:5556"));
        assert!(!same_endpoint("nonsense", "nonsense"));
    }
}
