//! Where `zper consume` starts in a fragment (issue #15): `earliest`, `latest`, a byte offset,
//! an RFC 3339 time (through the OFFSET command, spec `zper.md` §5.4) or `-N` (the last N
//! messages); and, for an offset the reader refuses (101), the valid range and the nearest
//! message boundaries instead of a bare 101.

use anyhow::{bail, Result};
use zper_client::{ReaderClient, Timestamp};
use zper_wire::reader::{ReaderReply, ReaderRequest};
use zper_wire::{Records, Status};

/// A parsed `--from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// The fragment's first message.
    Earliest,
    /// The fragment's readable end (only new messages).
    Latest,
    /// A byte offset (must be a message boundary).
    Offset(u64),
    /// Milliseconds since the Unix epoch.
    Time(i64),
    /// The last N messages of the fragment.
    Last(u64),
}

impl std::str::FromStr for From {
    type Err = String;

    /// `earliest`, `latest`, a byte offset, an RFC 3339 time (`2026-12-02T10:00:00Z`,
    /// `2026-12-02T11:00:00+01:00`) or `-N`.
    fn from_str(s: &str) -> Result<From, String> {
        let s = s.trim();
        let hint = "write earliest, latest, a byte offset, -N (the last N messages) or an RFC \
                    3339 time such as 2026-12-02T10:00:00Z";
        match s {
            "earliest" => return Ok(From::Earliest),
            "latest" => return Ok(From::Latest),
            _ => {}
        }
        if let Some(n) = s.strip_prefix('-') {
            return match n.parse::<u64>() {
                Ok(n) if n > 0 => Ok(From::Last(n)),
                _ => Err(format!(
                    "--from {s:?}: -N needs a count of messages >= 1; {hint}"
                )),
            };
        }
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            return s
                .parse()
                .map(From::Offset)
                .map_err(|_| format!("--from {s:?}: offset too large"));
        }
        match chrono::DateTime::parse_from_rfc3339(s) {
            Ok(t) => Ok(From::Time(t.timestamp_millis())),
            Err(e) => Err(format!("--from {s:?} ({e}): {hint}")),
        }
    }
}

/// The OFFSET reply for `timestamp` with no entry limit; `None` for 101.
///
/// Errors: the reader's errors, or a reply that is not offsets.
fn offsets(client: &ReaderClient, timestamp: Timestamp) -> Result<Option<Vec<u64>>> {
    match client.request(&ReaderRequest::Offset {
        timestamp,
        max_entries: None,
    })? {
        ReaderReply::Offsets(o) if !o.is_empty() => Ok(Some(o)),
        ReaderReply::Status(Status::InvalidOffset) => Ok(None),
        other => bail!("OFFSET failed: {other:?}"),
    }
}

/// Every segment start of the fragment and its readable end: `(starts, end)`.
fn segments(client: &ReaderClient) -> Result<(Vec<u64>, u64)> {
    let end = client.offset(Timestamp::Latest)?;
    // A time after every segment's last write lists all starts, then the flushed end.
    let far = i64::MAX / 2;
    let mut starts = offsets(client, Timestamp::At(far))?.unwrap_or_default();
    starts.pop();
    if starts.is_empty() {
        starts.push(client.offset(Timestamp::Earliest)?);
    }
    Ok((starts, end))
}

/// Calls `f` with the start offset of every whole message in `[from, to)`; `from` must be a
/// message boundary.
///
/// Errors: the reader's errors; an offset it refuses.
fn message_starts(
    client: &ReaderClient,
    from: u64,
    to: u64,
    fetch_size: u64,
    mut f: impl FnMut(u64),
) -> Result<()> {
    let (mut offset, mut fetch_size, mut start) = (from, fetch_size.max(16), from);
    while offset < to {
        let Some(data) = client.fetch(offset, fetch_size)? else {
            bail!("offset {offset} not readable (101)");
        };
        let mut it = Records::new(&data);
        for rec in it.by_ref() {
            if offset >= to {
                break;
            }
            offset += rec.stored_len() as u64;
            if !rec.more {
                f(start);
                start = offset;
            }
        }
        if it.valid_bytes() == 0 {
            if data.len() as u64 >= fetch_size {
                fetch_size = fetch_size.saturating_mul(2);
                continue;
            }
            break;
        }
    }
    Ok(())
}

/// The offset to start reading a fragment from.
///
/// Errors: the reader's errors.
pub fn start(client: &ReaderClient, from: From, fetch_size: u64) -> Result<u64> {
    Ok(match from {
        From::Earliest => client.offset(Timestamp::Earliest)?,
        From::Latest => client.offset(Timestamp::Latest)?,
        From::Offset(n) => n,
        // Segment granularity (§5.4): OFFSET names the last segment last written before the
        // time (its messages are all older) or the readable end when no segment was written
        // since; start at the segment after it, the first written at or after the time. The
        // earliest when every segment is newer.
        From::Time(ms) => match offsets(client, Timestamp::At(ms.max(0)))? {
            Some(o) => {
                let before = o[o.len() - 1];
                let (starts, end) = segments(client)?;
                if before >= end {
                    end
                } else {
                    starts.into_iter().find(|s| *s > before).unwrap_or(end)
                }
            }
            None => client.offset(Timestamp::Earliest)?,
        },
        From::Last(n) => last_messages(client, n, fetch_size)?,
    })
}

/// The start of the N-th message from the end (the earliest when there are fewer), counting
/// segment by segment from the newest.
fn last_messages(client: &ReaderClient, n: u64, fetch_size: u64) -> Result<u64> {
    let (starts, end) = segments(client)?;
    let mut later = 0u64; // messages in the segments after the one being counted
    for (k, &seg_start) in starts.iter().enumerate().rev() {
        let seg_end = starts.get(k + 1).copied().unwrap_or(end);
        let mut in_segment = Vec::new();
        message_starts(client, seg_start, seg_end, fetch_size, |o| {
            in_segment.push(o)
        })?;
        let count = in_segment.len() as u64;
        if later + count >= n {
            return Ok(in_segment[(later + count - n) as usize]);
        }
        later += count;
    }
    Ok(starts.first().copied().unwrap_or(0))
}

/// Why `offset` cannot be read in a fragment: outside `[earliest, end]`, or not a message
/// boundary (with the nearest boundaries before and after it).
pub fn explain_unreadable(client: &ReaderClient, offset: u64, fetch_size: u64) -> String {
    let explain = || -> Result<String, anyhow::Error> {
        let (starts, end) = segments(client)?;
        let earliest = starts.first().copied().unwrap_or(0);
        if offset < earliest || offset > end {
            return Ok(format!(
                "offset {offset} is outside the fragment: valid offsets are {earliest} to {end} \
                 (message boundaries; `--from earliest` or `--from latest`)"
            ));
        }
        let seg = starts
            .iter()
            .rev()
            .find(|&&s| s <= offset)
            .copied()
            .unwrap_or(earliest);
        let (mut before, mut after) = (seg, None);
        message_starts(client, seg, end, fetch_size, |o| {
            if o <= offset {
                before = o;
            } else if after.is_none() {
                after = Some(o);
            }
        })?;
        let after = after.map(|a| format!(" or {a}")).unwrap_or_default();
        Ok(format!(
            "offset {offset} is not the start of a message (offsets are byte positions; valid \
             offsets are {earliest} to {end}); the nearest message boundaries are {before}{after}"
        ))
    };
    match explain() {
        Ok(text) => text,
        Err(e) => format!("offset {offset} is not readable (101; the valid range is unknown: {e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::From;

    #[test]
    fn from_takes_names_offsets_times_and_counts() {
        assert_eq!("earliest".parse(), Ok(From::Earliest));
        assert_eq!("latest".parse(), Ok(From::Latest));
        assert_eq!("120".parse(), Ok(From::Offset(120)));
        assert_eq!("-5".parse(), Ok(From::Last(5)));
        assert_eq!("1970-01-01T00:00:01Z".parse(), Ok(From::Time(1000)));
        assert_eq!("1970-01-01T01:00:01+01:00".parse(), Ok(From::Time(1000)));
        for bad in ["-0", "-x", "yesterday", "", "2026-13-01T00:00:00Z"] {
            let e = bad.parse::<From>().expect_err(bad);
            assert!(e.contains("--from"), "{bad}: {e}");
        }
    }
}
