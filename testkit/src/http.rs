//! A minimal HTTP/1.1 client that never fails a test by itself (None when the node does not
//! answer).

use std::time::Duration;

/// A minimal HTTP/1.1 request to `addr` (`host:port`): (status, body), or None when the node
/// does not answer (connection refused, reset).
pub fn http(method: &str, addr: &str, path: &str, body: Option<&str>) -> Option<(u16, String)> {
    http_with_token(method, addr, path, None, body)
}

/// As [`http`], with `Authorization: Bearer <token>` when `token` is set (a node with
/// `http.admin_token`).
pub fn http_with_token(
    method: &str,
    addr: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let body = body.unwrap_or("");
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let status = resp.split_whitespace().nth(1)?.parse().ok()?;
    let body = resp
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Some((status, body))
}

/// GET `path` as JSON (Null when the node does not answer or the body is not JSON).
pub fn get_json(addr: &str, path: &str) -> serde_json::Value {
    http("GET", addr, path, None)
        .and_then(|(_, b)| serde_json::from_str(&b).ok())
        .unwrap_or(serde_json::Value::Null)
}
