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
//! Keys in the path are percent-decoded and must be UTF-8 (Dolly keys may be any bytes: use the
//! Dolly protocol or `zper dolly` for those).

use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Serialize;
use zper_raft::dolly::DollyPutError;
use zper_raft::ClusterNode;

use crate::admin::{read_check, ReadMode};
use crate::error::ApiError;

/// How long a PUT may take to commit before it is cancelled (an axum extension).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PutTimeout(pub(crate) Duration);

pub(crate) fn routes() -> Router<ClusterNode> {
    Router::new().route("/v1/kv/{key}", get(get_key).put(put_key))
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
    let (value, value_hex) = match String::from_utf8(record.value) {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(hex(e.as_bytes()))),
    };
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
