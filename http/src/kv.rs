//! Dolly's key/value map over HTTP (issue #5), the same state the Dolly requests port serves:
//!
//! - `GET /v1/kv/{key}` → 200 `{"key", "sequence", "value"}` from this node's applied state
//!   (`?consistent=true`: the leader first confirms it still leads). A value that is not UTF-8
//!   comes as `"value_hex"` instead of `"value"`. A missing key is 404 `key_not_found`.
//! - `PUT /v1/kv/{key}` with the raw value as body → 200 `{"key", "sequence"}` once committed
//!   through Raft (the sequence is the Raft index, as for a Dolly Put). A Put that cannot
//!   commit in time is cancelled through the log and answered 503 `put_not_applied` (it never
//!   applies); 504 `put_outcome_unknown` when not even the cancel could commit (no quorum);
//!   413 `too_large` for a key over 4 KiB or a value over 1 MiB.
//!
//! - `GET /v1/kv?prefix=P&limit=N&after=K&keys_only=true` → 200 `{"entries": [{"key",
//!   "sequence", "value"}...], "more", "sequence"}`: keys in byte order that start with `P`
//!   (default: every key) and come after `K` (the last key of the previous page), at most `N`
//!   (default 1000, at most 10000) and at most 4 MiB of keys and values (at least one entry),
//!   so one request cannot build an unbounded reply. `more` says
//!   whether keys are left (pass the last key as `after`); `sequence` is the state the page was
//!   read at. Keys or values that are not UTF-8 come as `key_hex` / `value_hex`. A limit of 0
//!   or over 10000 is 400 `bad_limit`.
//!
//! Keys in the path are percent-decoded and must be UTF-8 (Dolly keys may be any bytes: use the
//! Dolly protocol or `zper dolly` for those).

use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};
use zper_raft::dolly::DollyPutError;
use zper_raft::ClusterNode;

use crate::admin::{read_check, ReadMode};
use crate::error::ApiError;

/// How long a PUT may take to commit before it is cancelled (an axum extension).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PutTimeout(pub(crate) Duration);

pub(crate) fn routes() -> Router<ClusterNode> {
    Router::new()
        .route("/v1/kv", get(list))
        .route("/v1/kv/{key}", get(get_key).put(put_key))
}

/// A stored value.
#[derive(Debug, Serialize)]
struct Value {
    key: String,
    sequence: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value_hex: Option<String>,
}

/// A committed Put.
#[derive(Debug, Serialize)]
struct Put {
    key: String,
    sequence: u64,
}

/// Most entries one `GET /v1/kv` page holds.
pub const MAX_LIST: usize = 10_000;
/// Most key and value bytes one page holds (at least one entry is always returned): values
/// may be 1 MiB each, so `limit` alone would not bound a reply.
pub const MAX_LIST_BYTES: usize = 4 << 20;

/// Query of `GET /v1/kv`.
#[derive(Debug, Deserialize)]
struct ListQuery {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    after: Option<String>,
    #[serde(default = "default_limit")]
    limit: usize,
    #[serde(default)]
    keys_only: bool,
    #[serde(default)]
    consistent: bool,
}

fn default_limit() -> usize {
    1000
}

/// One listed entry.
#[derive(Debug, Serialize)]
struct Entry {
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_hex: Option<String>,
    sequence: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value_hex: Option<String>,
}

/// A page of keys.
#[derive(Debug, Serialize)]
struct List {
    entries: Vec<Entry>,
    more: bool,
    sequence: u64,
}

/// Text, or hex when the bytes are not UTF-8: `(text, hex)`.
fn text_or_hex(bytes: Vec<u8>) -> (Option<String>, Option<String>) {
    match String::from_utf8(bytes) {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(hex(e.as_bytes()))),
    }
}

async fn list(
    State(node): State<ClusterNode>,
    Query(q): Query<ListQuery>,
) -> Result<Json<List>, ApiError> {
    if q.limit == 0 || q.limit > MAX_LIST {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_limit",
            format!("limit must be 1 to {MAX_LIST}, not {}", q.limit),
        ));
    }
    read_check(
        &node,
        &ReadMode {
            consistent: q.consistent,
        },
    )
    .await?;
    let page = node.state.with_metadata(|m| {
        use std::ops::Bound;
        let prefix = q.prefix.as_bytes();
        let start = match &q.after {
            Some(after) if after.as_bytes() >= prefix => Bound::Excluded(after.as_bytes().to_vec()),
            _ => Bound::Included(prefix.to_vec()),
        };
        let mut entries = Vec::new();
        let mut more = false;
        let mut bytes = 0usize;
        for (key, record) in m.dolly.range((start, Bound::Unbounded)) {
            if !key.starts_with(prefix) {
                break;
            }
            let size = key.len() + if q.keys_only { 0 } else { record.value.len() };
            if entries.len() == q.limit || (!entries.is_empty() && bytes + size > MAX_LIST_BYTES) {
                more = true;
                break;
            }
            bytes += size;
            let (key, key_hex) = text_or_hex(key.clone());
            let (value, value_hex) = if q.keys_only {
                (None, None)
            } else {
                text_or_hex(record.value.clone())
            };
            entries.push(Entry {
                key,
                key_hex,
                sequence: record.sequence,
                value,
                value_hex,
            });
        }
        (entries, more, m.dolly_sequence)
    });
    let Some((entries, more, sequence)) = page else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_state",
            "this node has no applied state yet".to_owned(),
        ));
    };
    Ok(Json(List {
        entries,
        more,
        sequence,
    }))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn get_key(
    State(node): State<ClusterNode>,
    Path(key): Path<String>,
    Query(mode): Query<ReadMode>,
) -> Result<Json<Value>, ApiError> {
    read_check(&node, &mode).await?;
    let found = node
        .state
        .with_metadata(|m| m.dolly.get(key.as_bytes()).cloned())
        .flatten();
    let Some(record) = found else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "key_not_found",
            format!("key not found: {key}"),
        ));
    };
    let (value, value_hex) = text_or_hex(record.value);
    Ok(Json(Value {
        key,
        sequence: record.sequence,
        value,
        value_hex,
    }))
}

async fn put_key(
    State(node): State<ClusterNode>,
    Extension(PutTimeout(timeout)): Extension<PutTimeout>,
    Path(key): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Put>, ApiError> {
    match node
        .dolly_put(key.clone().into_bytes(), body.to_vec(), timeout)
        .await
    {
        Ok(sequence) => Ok(Json(Put { key, sequence })),
        Err(e @ DollyPutError::TooLarge { .. }) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            e.to_string(),
        )),
        Err(e @ DollyPutError::NotApplied { .. }) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "put_not_applied",
            e.to_string(),
        )),
        Err(e @ DollyPutError::Unknown { .. }) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "put_outcome_unknown",
            e.to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::hex;

    #[test]
    fn hex_is_lowercase_two_digits_per_byte() {
        assert_eq!(hex(&[0x00, 0xab, 0x0f]), "00ab0f");
    }
}
