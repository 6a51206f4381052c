//! Dolly Puts through Raft with an honest outcome (issue #5, `dolly.md` §9 W2, §10): a Put is
//! answered with its sequence once applied; a Put that does not commit before its deadline is
//! cancelled through the log, so an error reply means it never applies, not even later.
//!
//! Why a cancel entry: a Put's entry may sit uncommitted in some logs when its reply times out
//! (a leader died, a forward was slow) and a later leader may still commit it. The cancel is a
//! second entry with the same request id; the log orders the two, so either the Put applied
//! first (the cancel reports its sequence and the client gets a success) or the Put, if it ever
//! reaches the log after the cancel, is refused on apply.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use thiserror::Error;
use tracing::warn;

use crate::metadata::{Applied, Command, DollyRequest};
use crate::ClusterNode;

/// Longest time spent settling a timed-out Put (committing its cancel) before giving up with
/// [`DollyPutError::Unknown`].
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest Dolly key, bytes. The map lives in every node's memory and every Raft snapshot, so
/// it is for configuration-sized data (the original had no limit, `dolly.md` §9 W13).
pub const MAX_KEY_BYTES: usize = 4096;
/// Largest Dolly value, bytes (1 MiB).
pub const MAX_VALUE_BYTES: usize = 1 << 20;

/// Why a Dolly Put got no sequence.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DollyPutError {
    /// The key or value is over [`MAX_KEY_BYTES`] / [`MAX_VALUE_BYTES`]; nothing was proposed.
    #[error("{what} of {bytes} bytes is over the limit of {limit} bytes")]
    TooLarge {
        /// `key` or `value`.
        what: &'static str,
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Not applied and never will be (its cancel committed first).
    #[error("put not applied: {why}")]
    NotApplied {
        /// What held it up.
        why: String,
    },
    /// Neither the Put nor its cancel committed within [`SETTLE_TIMEOUT`] (no quorum): the
    /// outcome is unknown; do not tell the client it failed.
    #[error("put outcome unknown (no metadata quorum): {why}")]
    Unknown {
        /// The last error.
        why: String,
    },
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The next request serial of this process: starts at the boot time in microseconds, so a
/// restarted node does not reuse a serial its previous run may have left in the log.
fn next_serial() -> u64 {
    static SERIAL: OnceLock<AtomicU64> = OnceLock::new();
    SERIAL
        .get_or_init(|| {
            let micros = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64);
            AtomicU64::new(micros)
        })
        .fetch_add(1, Ordering::Relaxed)
}

impl ClusterNode {
    /// Puts `value` under `key` through Raft and returns the sequence it got (the Raft index
    /// that applied it). Waits at most `timeout` for the Put itself; after that the Put is
    /// cancelled through the log (at most [`SETTLE_TIMEOUT`] more), and the cancel's outcome
    /// is the answer: the sequence if the Put had applied, else `NotApplied`.
    ///
    /// Errors: `TooLarge` (not proposed), `NotApplied` (it never applies), `Unknown` (no
    /// quorum to settle it).
    pub async fn dolly_put(
        &self,
        key: Vec<u8>,
        value: Vec<u8>,
        timeout: Duration,
    ) -> Result<u64, DollyPutError> {
        for (what, bytes, limit) in [
            ("key", key.len(), MAX_KEY_BYTES),
            ("value", value.len(), MAX_VALUE_BYTES),
        ] {
            if bytes > limit {
                return Err(DollyPutError::TooLarge { what, bytes, limit });
            }
        }
        let request = DollyRequest {
            origin: self.id,
            serial: next_serial(),
        };
        let put = Command::DollyPut {
            key,
            value,
            request: Some(request),
            deadline_ms: now_ms() + timeout.as_millis() as u64,
        };
        let why = match tokio::time::timeout(timeout, self.propose(put)).await {
            Ok(Ok(Ok(Applied::DollyPut { sequence }))) => return Ok(sequence),
            Ok(Ok(Ok(other))) => format!("unexpected result {other:?}"),
            Ok(Ok(Err(refused))) => refused.to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("not committed within {} ms", timeout.as_millis()),
        };
        let give_up = tokio::time::Instant::now() + SETTLE_TIMEOUT;
        loop {
            let cancel = Command::DollyCancel {
                request,
                now_ms: now_ms(),
            };
            match self.propose(cancel).await {
                Ok(Ok(Applied::DollyPut { sequence })) => return Ok(sequence),
                Ok(Ok(_)) => return Err(DollyPutError::NotApplied { why }),
                // A cancel is never refused; treat it as unsettled all the same.
                Ok(Err(e)) => return Err(DollyPutError::Unknown { why: e.to_string() }),
                Err(e) if tokio::time::Instant::now() >= give_up => {
                    warn!(error = %e, "dolly put left unsettled");
                    return Err(DollyPutError::Unknown { why: e.to_string() });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_are_unique_and_increasing() {
        let a = next_serial();
        let b = next_serial();
        assert!(b > a);
        assert!(a > 1_600_000_000_000_000, "starts from the boot time in µs");
    }
}
