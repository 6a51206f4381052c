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
