//! What every perf tool shares: the message header, the progress bar, percentiles and the one
//! summary line.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
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

/// Set by SIGINT (Ctrl-C) during a perf run: the tools stop, print what they measured so far
/// with `interrupted=true`, and the process exits 130. A second Ctrl-C exits at once.
static INTERRUPTED: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));

/// Turns Ctrl-C into a partial report instead of killing the process.
///
/// Errors: the signal handler could not be installed.
pub(crate) fn catch_interrupt() -> std::io::Result<()> {
    use signal_hook::consts::SIGINT;
    // Registered first, so it sees the flag as the previous Ctrl-C left it.
    signal_hook::flag::register_conditional_shutdown(SIGINT, 130, INTERRUPTED.clone())?;
    signal_hook::flag::register(SIGINT, INTERRUPTED.clone())?;
    Ok(())
}

/// True once Ctrl-C was pressed.
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
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

/// Latencies of one tool run: an HDR histogram of microseconds (3 significant digits, so
/// memory stays constant however many requests are measured).
pub(crate) struct Latencies(hdrhistogram::Histogram<u64>);

impl Latencies {
    /// An empty record.
    pub(crate) fn new() -> Self {
        // An auto-resizing histogram with 3 significant digits: only a precision above 5 fails.
        Latencies(hdrhistogram::Histogram::new(3).expect("3 significant digits are valid"))
    }

    /// Records one latency.
    pub(crate) fn record(&mut self, d: Duration) {
        let _ = self
            .0
            .record(d.as_micros().clamp(1, u128::from(u64::MAX / 4)) as u64);
    }

    /// Adds another run's latencies.
    pub(crate) fn merge(&mut self, other: &Latencies) {
        let _ = self.0.add(&other.0);
    }

    /// How many were recorded.
    pub(crate) fn len(&self) -> u64 {
        self.0.len()
    }

    /// The summary fields `p50_ms`, `p99_ms` and `max_ms` (ms, 3 decimals).
    pub(crate) fn fields(&self) -> [(&'static str, String); 3] {
        [
            ("p50_ms", format!("{:.3}", self.ms(0.50))),
            ("p99_ms", format!("{:.3}", self.ms(0.99))),
            ("max_ms", format!("{:.3}", self.ms(1.0))),
        ]
    }

    /// The `p` quantile (0..=1), in ms (0 when empty).
    pub(crate) fn ms(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.value_at_quantile(p) as f64 / 1000.0
    }
}

/// Prints `perf <tool> key=value ...`, or with `--json` one object `{"tool": tool, key: value,
/// ...}` whose numeric values are JSON numbers.
pub(crate) fn summary(tool: &str, fields: &[(&str, String)]) {
    let mut fields = fields.to_vec();
    if interrupted() {
        fields.push(("interrupted", "true".to_owned()));
    }
    let fields = &fields[..];
    if crate::output::json_output() {
        crate::output::json_line(&summary_json(tool, fields));
        return;
    }
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("perf {tool} {}", body.join(" "));
}

/// The summary as a JSON object (numbers as numbers, anything else as text).
fn summary_json(tool: &str, fields: &[(&str, String)]) -> serde_json::Value {
    let mut object = serde_json::Map::new();
    object.insert("tool".into(), tool.into());
    for (k, v) in fields {
        let value = match (v.parse::<u64>(), v.parse::<f64>()) {
            _ if v == "true" || v == "false" => (v == "true").into(),
            (Ok(n), _) => n.into(),
            (_, Ok(x)) if x.is_finite() => x.into(),
            _ => v.as_str().into(),
        };
        object.insert((*k).to_owned(), value);
    }
    object.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_recorded_latencies_in_ms() {
        let mut a = Latencies::new();
        assert_eq!(a.ms(0.5), 0.0);
        for ms in 1..=100u64 {
            a.record(Duration::from_millis(ms));
        }
        let mut b = Latencies::new();
        b.record(Duration::from_millis(1000));
        a.merge(&b);
        assert_eq!(a.len(), 101);
        assert!((a.ms(0.5) - 51.0).abs() < 0.1, "{}", a.ms(0.5));
        assert!((a.ms(1.0) - 1000.0).abs() < 1.0, "{}", a.ms(1.0));
    }

    #[test]
    fn json_summaries_keep_numbers_as_numbers() {
        let v = summary_json(
            "consume",
            &[
                ("messages", "20000".into()),
                ("seconds", "1.250".into()),
                ("mode", "a".into()),
            ],
        );
        assert_eq!(
            v,
            serde_json::json!({"tool": "consume", "messages": 20000, "seconds": 1.25, "mode": "a"})
        );
    }
}
