//! Bounded waiting: poll a condition until it holds or a limit passes; run a child process
//! for at most a limit.

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

/// What a bounded child process did: its exit status (`None` when it ran past the limit and
/// was killed), its stdout and its stderr.
pub struct Finished {
    /// The exit status, or `None` when it was killed at the limit.
    pub status: Option<std::process::ExitStatus>,
    /// Everything it printed on stdout.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
}

impl Finished {
    /// Both outputs, labelled, for assertion messages.
    pub fn report(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr)
    }
}

/// Runs `command` (its stdout and stderr piped and read on threads, so a chatty child never
/// blocks on a full pipe) for at most `limit`, killing it then.
///
/// Panics when it cannot be started (a test helper).
pub fn run_bounded(command: &mut std::process::Command, limit: Duration) -> Finished {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
    let pipe = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let stdout = child.stdout.take().map(|s| pipe(Box::new(s)));
    let stderr = child.stderr.take().map(|s| pipe(Box::new(s)));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = |h: Option<std::thread::JoinHandle<String>>| {
        h.and_then(|h| h.join().ok()).unwrap_or_default()
    };
    Finished {
        status,
        stdout: text(stdout),
        stderr: text(stderr),
    }
}
