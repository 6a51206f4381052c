//! Bounded waiting: poll a condition until it holds or a limit passes.

use std::time::{Duration, Instant};

/// Polls `cond` every 20 ms for up to 10 s; returns its last value.
pub fn eventually(cond: impl FnMut() -> bool) -> bool {
    eventually_within(Duration::from_secs(10), cond)
}

/// Polls `cond` every 20 ms for up to `limit`; returns its last value. For catching up under
/// load (three 3-process clusters share CI's two cores), where 10 s can be too short.
pub fn eventually_within(limit: Duration, cond: impl FnMut() -> bool) -> bool {
    eventually_every(limit, Duration::from_millis(20), cond)
}

/// Polls `cond` every `period` for up to `limit`; returns its last value (a heavier condition,
/// e.g. HTTP against containers, polls less often).
pub fn eventually_every(limit: Duration, period: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(period);
    }
}
