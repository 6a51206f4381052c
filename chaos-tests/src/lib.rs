//! zper's deployment checks and chaos tests (issue #6). The tests are in `tests/`:
//!
//! - `helm_chart.rs`: the chart in `helm/zper` without a `helm` binary, and docker-compose.yml.
//! - `chaos.rs`: a 3-node cluster from the image `scripts/docker-image.sh` builds (from the
//!   binary under test), on its own Docker network, with a workload, one fault per test, and
//!   the [`check`] of what was acknowledged.
//!
//! This library is the harness: [`Cluster`] (containers started with testcontainers, faults
//! through the `docker` CLI: kill, pause, network disconnect), [`Workload`] (producers in ack
//! modes 1 and 2 and Dolly Puts, recording every acknowledgement) and [`check`].

pub mod check;
pub mod cluster;
pub mod disk;
pub mod logs;
pub mod scenario;
pub mod security;
pub mod workload;

pub use check::{check, CheckReport};
pub use cluster::{Cluster, Node};
pub use security::Security;
pub use workload::{Acked, Workload};

/// Runs `docker` with `args`; its stdout, trimmed.
///
/// Errors: the command could not run or exited non-zero (its stderr).
pub fn docker(args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("docker {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Panics with a clear message unless a Docker daemon answers: the chaos suite must not pass
/// silently on a machine without one.
pub fn require_docker() {
    if let Err(e) = docker(&["info", "--format", "{{.ServerVersion}}"]) {
        panic!("the chaos tests need a running Docker daemon (they start zper in containers): {e}");
    }
}
