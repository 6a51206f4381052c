//! `zper perf etcd-put` (issue #16's side-by-side benchmark): etcd v3 Puts, the peer of
//! `zper perf dolly-put`, with the same client shape: C clients, each with its own connection
//! and one request in flight, keys `key<i>` over --keys, values of --value-size bytes. It
//! speaks gRPC directly over HTTP/2 (the `h2` crate): a unary call to
//! `/etcdserverpb.KV/Put` whose body is the 5-byte gRPC prefix and a `PutRequest` (field 1
//! key, field 2 value; protobuf encoded by hand, two length-delimited fields), answered when
//! the trailers say `grpc-status: 0`. No TLS, no auth: etcd as `bench/etcd.sh` starts it.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Args;

use super::report::{interrupted, summary, Latencies};
use crate::duration::parse_duration;

/// Options of `zper perf etcd-put`.
#[derive(Debug, Args)]
pub struct EtcdPerfArgs {
    /// etcd client addresses `host:port`, comma-separated; client i uses address i mod count.
    #[arg(
        long,
        visible_alias = "endpoint",
        short = 'e',
        default_value = "127.0.0.1:2379"
    )]
    pub endpoints: String,
    /// Puts in all.
    #[arg(long, short = 'n', default_value_t = 20_000)]
    pub requests: u64,
    /// Clients, each with its own HTTP/2 connection and one Put in flight.
    #[arg(long, short = 'c', default_value_t = 16)]
    pub clients: u64,
    /// Distinct keys (`key<i>`).
    #[arg(long, default_value_t = 1000)]
    pub keys: u64,
    /// Value bytes.
    #[arg(long = "value-size", short = 's', default_value_t = 100)]
    pub value_size: usize,
    /// Give up on a reply after this long: `10s`, `500ms`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// Appends `v` as a protobuf varint.
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A gRPC message frame holding etcd's `PutRequest{key, value}`: compression flag 0, the
/// big-endian message length, then fields 1 and 2 (wire type 2: length-delimited).
fn put_frame(key: &[u8], value: &[u8]) -> Bytes {
    let mut msg = Vec::with_capacity(key.len() + value.len() + 12);
    msg.push(0x0a);
    varint(&mut msg, key.len() as u64);
    msg.extend_from_slice(key);
    msg.push(0x12);
    varint(&mut msg, value.len() as u64);
    msg.extend_from_slice(value);
    let mut frame = Vec::with_capacity(msg.len() + 5);
    frame.push(0);
    frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    frame.extend_from_slice(&msg);
    Bytes::from(frame)
}

/// The gRPC status of an answer's headers or trailers: `Ok(true)` for 0, `Ok(false)` when
/// absent, else the error with its message.
fn grpc_status(h: &http::HeaderMap) -> Result<bool> {
    match h.get("grpc-status").map(|v| v.to_str().unwrap_or("?")) {
        None => Ok(false),
        Some("0") => Ok(true),
        Some(code) => bail!(
            "grpc-status {code}: {}",
            h.get("grpc-message")
                .and_then(|m| m.to_str().ok())
                .unwrap_or("")
        ),
    }
}

/// One Put on `send`, to its end.
async fn put(
    send: &mut h2::client::SendRequest<Bytes>,
    authority: &str,
    frame: Bytes,
) -> Result<()> {
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{authority}/etcdserverpb.KV/Put"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())?;
    let mut ready = send.clone().ready().await?;
    let (answer, mut stream) = ready.send_request(request, false)?;
    stream.send_data(frame, true)?;
    let (head, mut body) = answer.await?.into_parts();
    if head.status != http::StatusCode::OK {
        bail!("HTTP status {}", head.status);
    }
    if grpc_status(&head.headers)? {
        return Ok(());
    }
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    match body.trailers().await? {
        Some(t) if grpc_status(&t)? => Ok(()),
        _ => bail!("the answer has no grpc-status"),
    }
}

struct ClientResult {
    latencies: Latencies,
    errors: u64,
    last_error: Option<String>,
}

/// One client: its own connection, `count` Puts one after the other.
async fn client(
    at: String,
    client_no: u64,
    count: u64,
    keys: u64,
    size: usize,
    timeout: Duration,
) -> Result<ClientResult> {
    let tcp = tokio::net::TcpStream::connect(&at)
        .await
        .with_context(|| format!("no etcd at {at}"))?;
    let _ = tcp.set_nodelay(true);
    let (mut send, connection) = h2::client::handshake(tcp)
        .await
        .with_context(|| format!("HTTP/2 handshake with {at}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let value = vec![b'v'; size];
    let mut out = ClientResult {
        latencies: Latencies::new(),
        errors: 0,
        last_error: None,
    };
    for i in 0..count {
        if interrupted() {
            break;
        }
        let key = format!("key{}", (client_no * count + i) % keys);
        let started = Instant::now();
        match tokio::time::timeout(
            timeout,
            put(&mut send, &at, put_frame(key.as_bytes(), &value)),
        )
        .await
        {
            Ok(Ok(())) => out.latencies.record(started.elapsed()),
            Ok(Err(e)) => {
                out.errors += 1;
                out.last_error = Some(format!("{e:#}"));
            }
            Err(_) => bail!("{at}: no answer within {} ms", timeout.as_millis()),
        }
    }
    Ok(out)
}

/// Runs the benchmark and prints one `perf etcd-put ...` line, the fields of `perf
/// dolly-put`'s: requests/s, p50/p99/max latency in ms, errors.
///
/// Errors: bad arguments; no etcd answers; a Put waited longer than --timeout; nothing
/// succeeded.
pub fn perf(a: EtcdPerfArgs) -> Result<()> {
    if a.clients == 0 || a.requests < a.clients || a.keys == 0 {
        bail!("need 1 <= --clients <= --requests and --keys >= 1");
    }
    let endpoints: Vec<String> = a
        .endpoints
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_start_matches("http://").to_owned())
        .collect();
    if endpoints.is_empty() {
        bail!("--endpoints needs at least one host:port");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let per_client = a.requests / a.clients;
    let start = Instant::now();
    let results = runtime.block_on(async {
        let tasks: Vec<_> = (0..a.clients)
            .map(|c| {
                let at = endpoints[c as usize % endpoints.len()].clone();
                tokio::spawn(client(at, c, per_client, a.keys, a.value_size, a.timeout))
            })
            .collect();
        let mut results = Vec::new();
        for t in tasks {
            results.push(
                t.await
                    .map_err(|e| anyhow::anyhow!("a client task failed: {e}"))?,
            );
        }
        anyhow::Ok(results)
    })?;
    let elapsed = start.elapsed().as_secs_f64();
    let mut latencies = Latencies::new();
    let (mut errors, mut last_error) = (0, None);
    for r in results {
        let r = r?;
        latencies.merge(&r.latencies);
        errors += r.errors;
        if r.last_error.is_some() {
            last_error = r.last_error;
        }
    }
    if latencies.len() == 0 {
        bail!(
            "no Put succeeded: {}",
            last_error.unwrap_or_else(|| "?".into())
        );
    }
    summary(
        "etcd-put",
        &[
            ("requests", latencies.len().to_string()),
            ("errors", errors.to_string()),
            ("clients", a.clients.to_string()),
            ("seconds", format!("{elapsed:.3}")),
            (
                "per_second",
                format!("{:.0}", latencies.len() as f64 / elapsed),
            ),
        ]
        .into_iter()
        .chain(latencies.fields())
        .collect::<Vec<_>>(),
    );
    if let Some(e) = last_error {
        eprintln!("last error: {e}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_put_request_is_two_length_delimited_fields_behind_the_grpc_prefix() {
        let f = put_frame(b"key1", &[b'v'; 200]);
        // 1 + 1 + 4 (key) + 1 + 2 (varint 200) + 200 = 209 bytes of message.
        assert_eq!(&f[..5], &[0, 0, 0, 0, 209]);
        assert_eq!(&f[5..11], &[0x0a, 4, b'k', b'e', b'y', b'1']);
        assert_eq!(&f[11..14], &[0x12, 0xc8, 0x01]);
        assert_eq!(f.len(), 5 + 209);
    }

    #[test]
    fn grpc_status_zero_is_success_and_others_carry_their_message() {
        let mut h = http::HeaderMap::new();
        assert!(!grpc_status(&h).expect("absent"));
        h.insert("grpc-status", http::HeaderValue::from_static("0"));
        assert!(grpc_status(&h).expect("ok"));
        h.insert("grpc-status", http::HeaderValue::from_static("14"));
        h.insert(
            "grpc-message",
            http::HeaderValue::from_static("unavailable"),
        );
        let e = grpc_status(&h).expect_err("an error");
        assert!(e.to_string().contains("14: unavailable"), "{e}");
    }
}
