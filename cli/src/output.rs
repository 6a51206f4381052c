//! What `zper topics` and `zper cluster` share: where the admin API is, and JSON or table
//! output. HTTP errors print their `{code, message}` and exit 1.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use serde_json::Value;
use zper_client::{AdminClient, Endpoints};

/// Where the admin API is.
#[derive(Debug, Args)]
pub struct AdminTarget {
    /// HTTP admin address `host:port` (default: from --config, else 127.0.0.1:9644).
    #[arg(long, global = true)]
    pub admin: Option<String>,
    /// Admin token for mutating commands on a node with `http.admin_token` set (default: from
    /// --config).
    #[arg(long, global = true, env = "ZPER_ADMIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// CA certificates (PEM) of a node whose admin port speaks TLS (`http.tls_cert`): the
    /// CLI then uses https and trusts only these (default: from --config's `http.tls_ca`).
    #[arg(long, global = true, env = "ZPER_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
}

impl AdminTarget {
    /// A client of the admin API this target names (its token, else the config's).
    ///
    /// Errors: the HTTP client could not be built.
    pub fn client(&self, defaults: &Endpoints) -> Result<AdminClient> {
        let admin = self.admin.as_deref().unwrap_or(&defaults.admin);
        let token = self.token.clone().or_else(|| defaults.admin_token.clone());
        let ca = self.tls_ca.as_deref().or(defaults.admin_ca.as_deref());
        Ok(AdminClient::with_ca(
            admin,
            token,
            Duration::from_secs(30),
            ca,
        )?)
    }
}

/// `--json` was given: every command prints JSON instead of text (set once by `main`).
static JSON: AtomicBool = AtomicBool::new(false);

/// Switches the process to JSON output (`--json`).
pub fn set_json(on: bool) {
    JSON.store(on, Ordering::Relaxed);
}

/// True when `--json` was given.
pub fn json_output() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Prints one JSON value as a line on stdout (a closed stdout is ignored, as `print!` would
/// panic).
pub fn json_line(v: &Value) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{v}");
}

/// `n` and the word, in the singular for 1: `1 message`, `3 messages`.
pub fn count(n: u64, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n == 1 { singular } else { plural })
}

/// Bytes for people: `512 B`, `1.5 KiB`, `20.0 MiB`, `3.2 GiB` (powers of 1024).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A typed view as the JSON the API sent (the views serialize to exactly their wire form).
pub fn json<T: serde::Serialize>(view: &T) -> Value {
    serde_json::to_value(view).unwrap_or(Value::Null)
}

/// A JSON value as table text (`serde_json::Value`'s Display ignores width and alignment).
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

/// A JSON array of ids as `1,2,3`.
pub fn ids(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Prints `value` as pretty JSON, or as the text `table` makes of it.
pub fn print(json_out: bool, value: &Value, table: impl FnOnce(&Value) -> String) {
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    } else {
        print!("{}", table(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_counts_read_as_people_write_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(20 << 20), "20.0 MiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
        assert_eq!(count(1, "message", "messages"), "1 message");
        assert_eq!(count(0, "message", "messages"), "0 messages");
        assert_eq!(count(2, "key", "keys"), "2 keys");
    }
}
