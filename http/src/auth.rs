//! The admin token: with `http.admin_token` set, every mutating request (any method but GET,
//! HEAD and OPTIONS) must carry `Authorization: Bearer <token>`; others get 401 with a JSON
//! `{code: "unauthorized"}` body. Reads stay open (Prometheus, health checks).
//!
//! Token or not, a mutating request a browser sends on behalf of another site gets 403
//! `{code: "cross_origin"}`: with no token (the default) a page served from anywhere could
//! otherwise create topics or add Raft voters through a browser that reaches the admin port
//! with a no-CORS `fetch` (attack finding on the web console, issue #20). The CLI, curl and
//! the nodes send neither `Origin` nor `Sec-Fetch-Site`, and the console is same-origin.

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

/// True for a request a browser sent from a page of another origin: `Sec-Fetch-Site` other
/// than `same-origin` or `none`, or an `Origin` whose host and port are not the `Host` the
/// request went to (`Origin: null` included).
fn cross_site(req: &Request) -> bool {
    let h = req.headers();
    let text = |name| {
        h.get(name)
            .and_then(|v: &header::HeaderValue| v.to_str().ok())
    };
    if text("sec-fetch-site").is_some_and(|v| v != "same-origin" && v != "none") {
        return true;
    }
    let Some(origin) = text(header::ORIGIN.as_str()) else {
        return false;
    };
    let from = origin.split_once("://").map_or("", |(_, host)| host);
    Some(from) != text(header::HOST.as_str())
}

pub(crate) async fn require(State(token): State<Token>, req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    if cross_site(&req) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            "a browser page of another origin may not change the cluster; use the console at /ui/ on this node, the CLI or the API directly",
        )
        .into_response();
    }
    let Some(expected) = token.0 else {
        return next.run(req).await;
    };
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
