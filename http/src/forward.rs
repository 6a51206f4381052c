//! Leader-only admin requests on a follower go to the leader (issue #15): a request under
//! `/v1/` that this node answers 503 `not_leader` (adding or removing a node, a
//! `?consistent=true` read) is sent once more to the Raft leader's HTTP address (from the
//! membership, as peers reach it), with its method, path, query, body and `Authorization`
//! header, and the leader's answer is returned. So a client that reaches only one node (a host
//! client of a compose cluster, a port-forward) can do everything. A forwarded request carries
//! [`FORWARDED`] and is never forwarded again; a leader that does not answer within
//! [`FORWARD_TIMEOUT`] leaves this node's own 503.

use std::time::Duration;

use axum::body::{to_bytes, Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use zper_raft::ClusterNode;

/// Marks a request a follower forwarded to the leader.
pub const FORWARDED: &str = "x-zper-forwarded-by";
/// Longest wait for the leader's answer. A leader that does not answer in time (paused, or
/// deposed meanwhile) is asked once more if the known leader changed by then.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request body the middleware buffers (Dolly values are at most 1 MiB).
const MAX_BODY: usize = 2 << 20;

/// True for a 503 whose JSON body's code is `not_leader`.
fn is_not_leader(status: StatusCode, body: &[u8]) -> bool {
    status == StatusCode::SERVICE_UNAVAILABLE
        && serde_json::from_slice::<serde_json::Value>(body)
            .is_ok_and(|v| v["code"] == "not_leader")
}

/// The leader's HTTP address, when a leader other than this node is known.
fn leader_http(node: &ClusterNode) -> Option<String> {
    let m = node.raft.metrics().borrow().clone();
    let leader = m.current_leader?;
    if leader == m.id {
        return None;
    }
    m.membership_config
        .membership()
        .get_node(&leader)
        .map(|n| n.http.clone())
        .filter(|h| !h.is_empty())
}

pub(crate) async fn to_leader(
    State(node): State<ClusterNode>,
    req: Request,
    next: Next,
) -> Response {
    if !req.uri().path().starts_with("/v1/") || req.headers().contains_key(FORWARDED) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = to_bytes(body, MAX_BODY).await else {
        return crate::ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request body over {MAX_BODY} bytes"),
        )
        .into_response();
    };
    let method = parts.method.clone();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let auth = parts.headers.get(header::AUTHORIZATION).cloned();
    let response = next
        .run(Request::from_parts(parts, Body::from(body.clone())))
        .await;
    if response.status() != StatusCode::SERVICE_UNAVAILABLE {
        return response;
    }
    let (rparts, rbody) = response.into_parts();
    let Ok(rbody) = to_bytes(rbody, MAX_BODY).await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let own = || Response::from_parts(rparts.clone(), Body::from(rbody.clone()));
    if !is_not_leader(rparts.status, &rbody) {
        return own();
    }
    let Some(mut leader) = leader_http(&node) else {
        return own();
    };
    let mut tried = Vec::new();
    loop {
        match send(
            node.peer_tls(),
            &leader,
            method.clone(),
            &path,
            body.clone(),
            auth.clone(),
            node.id,
        )
        .await
        {
            Ok(forwarded) => return forwarded,
            Err(e) => {
                tracing::warn!(leader = %leader, path = %path, error = %e, "could not forward to the leader");
                tried.push(format!("{leader}: {e}"));
            }
        }
        match leader_http(&node) {
            Some(next) if next != leader && tried.len() < 2 => leader = next,
            _ => break,
        }
    }
    crate::ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "not_leader",
        format!(
            "this node is not the leader and the leader did not answer the forwarded request ({})",
            tried.join("; ")
        ),
    )
    .into_response()
}

async fn send(
    tls: &zper_raft::tls::PeerTls,
    leader: &str,
    method: axum::http::Method,
    path: &str,
    body: Bytes,
    auth: Option<HeaderValue>,
    me: u64,
) -> Result<Response, reqwest::Error> {
    let client = tls.reqwest().timeout(FORWARD_TIMEOUT).build()?;
    let mut req = client
        .request(method, format!("{}{path}", tls.base_url(leader)))
        .header(FORWARDED, me.to_string())
        .header(header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(a) = auth {
        req = req.header(header::AUTHORIZATION, a);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let content_type = resp.headers().get(header::CONTENT_TYPE).cloned();
    let bytes = resp.bytes().await?;
    let mut out = Response::new(Body::from(bytes));
    *out.status_mut() = status;
    if let Some(ct) = content_type {
        out.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_not_leader_503_is_forwarded() {
        let not_leader = br#"{"code":"not_leader","message":"x"}"#;
        assert!(is_not_leader(StatusCode::SERVICE_UNAVAILABLE, not_leader));
        assert!(!is_not_leader(StatusCode::CONFLICT, not_leader));
        assert!(!is_not_leader(
            StatusCode::SERVICE_UNAVAILABLE,
            br#"{"code":"put_not_applied"}"#
        ));
        assert!(!is_not_leader(StatusCode::SERVICE_UNAVAILABLE, b"not json"));
    }
}
