//! Error responses: 4xx/5xx with a JSON body `{"code": "...", "message": "..."}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use zper_raft::metadata::MetadataError;
use zper_raft::ClusterError;

/// An HTTP error with a stable machine-readable code.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable code, e.g. `topic_exists`.
    pub code: &'static str,
    /// Human message.
    pub message: String,
}

#[derive(Serialize)]
struct Body<'a> {
    code: &'a str,
    message: &'a str,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body {
            code: self.code,
            message: &self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

impl ApiError {
    /// An error with `status`, a stable `code` and a message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
}

impl From<MetadataError> for ApiError {
    fn from(e: MetadataError) -> Self {
        let (status, code) = match &e {
            MetadataError::TopicExists(_) => (StatusCode::CONFLICT, "topic_exists"),
            MetadataError::UnknownTopic(_) => (StatusCode::NOT_FOUND, "unknown_topic"),
            MetadataError::UnknownNode(_) => (StatusCode::NOT_FOUND, "unknown_node"),
            MetadataError::InvalidName { .. } => (StatusCode::BAD_REQUEST, "invalid_name"),
            MetadataError::InvalidArgument(_) => (StatusCode::BAD_REQUEST, "invalid_argument"),
            MetadataError::NotEnoughNodes { .. } => (StatusCode::CONFLICT, "not_enough_nodes"),
            MetadataError::NotMember(_) => (StatusCode::CONFLICT, "not_member"),
            MetadataError::StaleEpoch { .. } => (StatusCode::CONFLICT, "stale_epoch"),
            MetadataError::DuplicateNodeId { .. } => (StatusCode::CONFLICT, "duplicate_node_id"),
            MetadataError::NotAssigned { .. } => (StatusCode::CONFLICT, "not_assigned"),
            MetadataError::NestedBatch => (StatusCode::BAD_REQUEST, "nested_batch"),
            MetadataError::DollyPutExpired | MetadataError::DollyPutCancelled => {
                (StatusCode::SERVICE_UNAVAILABLE, "put_not_applied")
            }
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> Self {
        let (status, code) = match &e {
            ClusterError::NotLeader { .. } => (StatusCode::SERVICE_UNAVAILABLE, "not_leader"),
            ClusterError::Write(_) => (StatusCode::SERVICE_UNAVAILABLE, "write_failed"),
            ClusterError::Unreachable { .. } => (StatusCode::BAD_REQUEST, "node_unreachable"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        ApiError::new(status, code, e.to_string())
    }
}

/// Turns any 4xx/5xx response that is not JSON (axum's extractor rejections: a bad query
/// string or path parameter, a body over the limit, a wrong content type) into the API's
/// `{code, message}` JSON with the same status and the rejection's text as message.
pub(crate) async fn json_errors(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return response;
    }
    let code = match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_body",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        s if s.is_client_error() => "bad_request",
        _ => "internal",
    };
    let text = match axum::body::to_bytes(response.into_body(), 64 * 1024).await {
        Ok(b) => String::from_utf8_lossy(&b).trim().to_owned(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    ApiError::new(status, code, message).into_response()
}
