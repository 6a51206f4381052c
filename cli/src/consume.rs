//! `zper consume`: print a topic's messages from an offset, following the log if asked.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use zper_client::{endpoint, Endpoints, ReaderClient, Timestamp};
use zper_wire::Records;

/// Options of `zper consume`.
#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// Reader endpoint (default: from --config, else tcp://127.0.0.1:5556).
    #[arg(long, short = 'r')]
    pub reader: Option<String>,
    /// Where to start: earliest, latest, or a byte offset.
    #[arg(long, default_value = "earliest")]
    pub from: String,
    /// Keep polling for new messages at the end of the log.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Stop after this many messages (0: no limit).
    #[arg(long, short = 'n', default_value_t = 0)]
    pub max_messages: u64,
    /// FETCH size, bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub fetch_size: u64,
    /// Print each message's offset before it.
    #[arg(long)]
    pub offsets: bool,
    /// Reply timeout, ms.
    #[arg(long, default_value_t = 5000)]
    pub timeout: i32,
}

/// Runs `zper consume`: one line per message, its frames (lossy UTF-8) joined by a tab.
pub fn run(args: ConsumeArgs, targets: &Endpoints) -> Result<()> {
    let ctx = zmq::Context::new();
    let reader = endpoint(args.reader.as_deref().unwrap_or(&targets.reader));
    let client = ReaderClient::connect(
        &ctx,
        &reader,
        &args.topic,
        Duration::from_millis(args.timeout.max(0) as u64),
    )?;
    let mut offset = match args.from.as_str() {
        "earliest" => client.offset(Timestamp::Earliest)?,
        "latest" => client.offset(Timestamp::Latest)?,
        n => match n.parse() {
            Ok(n) => n,
            Err(_) => bail!("--from must be earliest, latest or a byte offset, not {n:?}"),
        },
    };
    let mut fetch_size = args.fetch_size.max(16);
    let mut seen = 0u64;
    let out = std::io::stdout();
    let mut out = out.lock();
    // Frames of a message that continues in the next FETCH: progress is frame-granular (spec
    // §5.3), so a message larger than one FETCH is read in several.
    let mut frames: Vec<String> = Vec::new();
    let mut msg_start = offset;
    loop {
        let Some(data) = client.fetch(offset, fetch_size)? else {
            bail!(
                "offset {offset} is not readable in topic {} (101)",
                args.topic
            );
        };
        let mut it = Records::new(&data);
        for rec in it.by_ref() {
            if frames.is_empty() {
                msg_start = offset;
            }
            offset += rec.stored_len() as u64;
            frames.push(String::from_utf8_lossy(rec.payload).into_owned());
            if !rec.more {
                if args.offsets {
                    write!(out, "{msg_start}\t")?;
                }
                writeln!(out, "{}", frames.join("\t"))?;
                frames.clear();
                seen += 1;
                if args.max_messages > 0 && seen >= args.max_messages {
                    return Ok(());
                }
            }
        }
        if it.valid_bytes() == 0 {
            if data.len() as u64 >= fetch_size {
                fetch_size = fetch_size.saturating_mul(2); // one record larger than the FETCH
                continue;
            }
            if !data.is_empty() {
                bail!("offset {offset}: a record larger than the node serves in one FETCH");
            }
            if !args.follow {
                return Ok(());
            }
            out.flush()?;
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
