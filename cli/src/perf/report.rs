//! What every perf tool shares: the message header, the progress bar, percentiles and the one
//! summary line.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// The 5-byte header frame of message `seq`: `00` and the sequence number, big-endian (where
/// ProducerPerformance puts a CRC, `zper.md` §10.2), so acks can be counted.
pub(crate) fn header(seq: u64) -> [u8; 5] {
    let s = (seq as u32).to_be_bytes();
    [0, s[0], s[1], s[2], s[3]]
}

/// The sequence number of a header frame.
pub(crate) fn seq_of(id: &[u8]) -> Option<u64> {
    let b: [u8; 4] = id.get(1..5)?.try_into().ok()?;
    Some(u64::from(u32::from_be_bytes(b)))
}

/// A progress bar to `total`.
pub(crate) fn progress(total: u64) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

/// The `p` quantile (0..=1) of ascending `sorted` durations, in ms (0 when empty).
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

/// Prints `perf <tool> key=value ...`.
pub(crate) fn summary(tool: &str, fields: &[(&str, String)]) {
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("perf {tool} {}", body.join(" "));
}
