//! The admin token: with `http.admin_token` set, every mutating request (any method but GET,
//! HEAD and OPTIONS) must carry `Authorization: Bearer <token>`; others get 401 with a JSON
//! `{code: "unauthorized"}` body. Reads stay open (Prometheus, health checks).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::ApiError;

/// The configured token, if any.
#[derive(Clone, Default)]
pub(crate) struct Token(pub(crate) Option<Arc<str>>);

/// Compares without an early exit on the first differing byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) async fn require(State(token): State<Token>, req: Request, next: Next) -> Response {
    let Some(expected) = token.0 else {
        return next.run(req).await;
    };
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(t) if same(t.trim().as_bytes(), expected.as_bytes()) => next.run(req).await,
        Some(_) => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "wrong admin token",
        )
        .into_response(),
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this node needs an admin token: Authorization: Bearer <token>",
        )
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn compares_whole_strings() {
        assert!(same(b"s3cret", b"s3cret"));
        assert!(!same(b"s3cret", b"s3cre"));
        assert!(!same(b"s3cret", b"s3creT"));
        assert!(!same(b"", b"x"));
    }
}
