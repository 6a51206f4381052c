//! What `zper topics` and `zper cluster` share: where the admin API is, and JSON or table
//! output. HTTP errors print their `{code, message}` and exit 1.

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
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// Admin token for mutating commands on a node with `http.admin_token` set (default: from
    /// --config).
    #[arg(long, global = true, env = "ZPER_ADMIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

impl AdminTarget {
    /// A client of the admin API this target names (its token, else the config's).
    ///
    /// Errors: the HTTP client could not be built.
    pub fn client(&self, defaults: &Endpoints) -> Result<AdminClient> {
        let admin = self.admin.as_deref().unwrap_or(&defaults.admin);
        let token = self.token.clone().or_else(|| defaults.admin_token.clone());
        Ok(AdminClient::new(admin, token, Duration::from_secs(30))?)
    }
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
