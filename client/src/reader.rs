//! A ZPER reader client (spec `zper.md` §5): OFFSET and FETCH over a DEALER with a ZPER
//! identity.

use std::time::Duration;

use zper_wire::{ReaderReply, ReaderRequest, Records, Status, Timestamp};

use crate::{identity, ClientError};

/// A DEALER connected to a reader with a ZPER identity and a receive timeout. Not `Sync`.
pub struct ReaderClient {
    socket: zmq::Socket,
    endpoint: String,
    timeout_ms: u64,
}

/// How many times [`ReaderClient::offset`] asks again after a `[0xFF]` answer.
pub const OFFSET_RETRIES: u32 = 5;

impl ReaderClient {
    /// Connects (lazily, as zmq does) to `endpoint` for fragment 0 of `topic` (what an
    /// unchanged ZPER client reads); replies wait `timeout`.
    ///
    /// Errors: an invalid topic; libzmq refusing the endpoint.
    pub fn connect(
        ctx: &zmq::Context,
        endpoint: &str,
        topic: &str,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        Self::connect_fragment(ctx, endpoint, topic, 0, timeout)
    }

    /// As [`ReaderClient::connect`], for `fragment` of a topic with several: the identity's
    /// mode byte names it (docs/protocol.md; a fragment the topic does not have reads 0).
    ///
    /// Errors: an invalid topic; libzmq refusing the endpoint.
    pub fn connect_fragment(
        ctx: &zmq::Context,
        endpoint: &str,
        topic: &str,
        fragment: u8,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        Self::connect_with(ctx, endpoint, topic, fragment, timeout, None)
    }

    /// As [`ReaderClient::connect_fragment`], with CURVE keys for a reader that requires
    /// CURVE (issue #19; `None`: plain ZMTP).
    ///
    /// Errors: an invalid topic; libzmq refusing the endpoint or the keys.
    pub fn connect_with(
        ctx: &zmq::Context,
        endpoint: &str,
        topic: &str,
        fragment: u8,
        timeout: Duration,
        curve: Option<&crate::ClientCurve>,
    ) -> Result<Self, ClientError> {
        let z = |what| ClientError::zmq(what, endpoint);
        let socket = ctx.socket(zmq::DEALER).map_err(z("socket for reader"))?;
        if let Some(curve) = curve {
            curve.apply(&socket, endpoint)?;
        }
        socket
            .set_identity(&identity(topic, fragment)?)
            .map_err(z("identity for reader"))?;
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        socket.set_rcvtimeo(ms).map_err(z("rcvtimeo"))?;
        socket.set_linger(0).map_err(z("linger"))?;
        socket.set_rcvbuf(4 << 20).map_err(z("rcvbuf"))?;
        socket.connect(endpoint).map_err(z("connect to reader"))?;
        Ok(ReaderClient {
            socket,
            endpoint: endpoint.to_owned(),
            timeout_ms: ms as u64,
        })
    }

    /// Sends one request and decodes its reply.
    ///
    /// Errors: [`ClientError::Timeout`]; [`ClientError::Malformed`] for a reply that does not
    /// decode.
    pub fn request(&self, req: &ReaderRequest) -> Result<ReaderReply, ClientError> {
        let z = |what| ClientError::zmq(what, &self.endpoint);
        self.socket
            .send_multipart(req.encode(), 0)
            .map_err(z("send to reader"))?;
        let frames = match self.socket.recv_multipart(0) {
            Ok(f) => f,
            Err(zmq::Error::EAGAIN) => {
                return Err(ClientError::Timeout {
                    endpoint: format!("reader {}", self.endpoint),
                    timeout_ms: self.timeout_ms,
                })
            }
            Err(e) => return Err(z("receive from reader")(e)),
        };
        ReaderReply::decode(req, &frames).ok_or_else(|| ClientError::Malformed {
            endpoint: self.endpoint.clone(),
            detail: format!("{frames:?}"),
        })
    }

    /// OFFSET `Earliest` (the log's start) or `Latest` (the readable end). A `[0xFF]` answer
    /// (what a node gives when it is overloaded, or when the fragment leader it asked for us
    /// did not answer in time) is retried up to [`OFFSET_RETRIES`] times, 200 ms apart.
    ///
    /// Errors: as [`ReaderClient::request`]; any other status reply, or `[0xFF]` every time,
    /// as `Malformed` naming it.
    pub fn offset(&self, timestamp: Timestamp) -> Result<u64, ClientError> {
        let mut attempt = 0;
        loop {
            match self.request(&ReaderRequest::Offset {
                timestamp,
                max_entries: None,
            })? {
                ReaderReply::Offsets(o) if !o.is_empty() => return Ok(o[o.len() - 1]),
                ReaderReply::Status(zper_wire::Status::InternalError)
                    if attempt < OFFSET_RETRIES =>
                {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(200));
                }
                other => {
                    return Err(ClientError::Malformed {
                        endpoint: self.endpoint.clone(),
                        detail: format!("OFFSET failed: {other:?}"),
                    })
                }
            }
        }
    }

    /// FETCH up to `max_bytes` stored bytes from `offset`; `Ok(None)` for 101 (offset not
    /// readable).
    ///
    /// Errors: as [`ReaderClient::request`]; any other status.
    pub fn fetch(&self, offset: u64, max_bytes: u64) -> Result<Option<Vec<u8>>, ClientError> {
        let req = ReaderRequest::Fetch {
            offset: offset as i64,
            max_bytes: max_bytes as i64,
        };
        match self.request(&req)? {
            ReaderReply::Data(d) => Ok(Some(d)),
            ReaderReply::Status(Status::InvalidOffset) => Ok(None),
            other => Err(ClientError::Malformed {
                endpoint: self.endpoint.clone(),
                detail: format!("FETCH failed: {other:?}"),
            }),
        }
    }
}

/// Reads from `offset` with FETCHes of `fetch_size` bytes until exactly `messages` messages are
/// read or the log ends, calling `progress` with the count after each FETCH; `progress`
/// returning false stops early (an interrupted perf run). Returns (messages, payload bytes).
///
/// Errors: an offset the reader answers 101 for ([`ClientError::Invalid`]); the reader's
/// errors.
pub fn fetch_messages(
    client: &ReaderClient,
    mut offset: u64,
    fetch_size: u64,
    messages: u64,
    mut progress: impl FnMut(u64) -> bool,
) -> Result<(u64, u64), ClientError> {
    let (mut count, mut bytes, mut fetch_size) = (0u64, 0u64, fetch_size.max(16));
    while count < messages {
        let fetched = match client.fetch(offset, fetch_size) {
            // Interrupted (Ctrl-C makes a blocking receive fail): what was read so far counts.
            Err(_) if !progress(count) => break,
            fetched => fetched?,
        };
        let Some(data) = fetched else {
            return Err(ClientError::Invalid(format!(
                "offset {offset} not readable (101)"
            )));
        };
        // Frame-granular progress (spec §5.3): a message may span FETCHes.
        // Exactly `messages` (issue #15): stop at the last frame of the last one wanted, even
        // mid-chunk.
        let mut it = Records::new(&data);
        for rec in it.by_ref() {
            bytes += rec.payload.len() as u64;
            if !rec.more {
                count += 1;
                if count == messages {
                    break;
                }
            }
        }
        if it.valid_bytes() == 0 {
            if data.len() as u64 >= fetch_size {
                fetch_size = fetch_size.saturating_mul(2); // one record larger than the FETCH
                continue;
            }
            break; // end of the log
        }
        offset += it.valid_bytes() as u64;
        if !progress(count) {
            break;
        }
    }
    Ok((count, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fragment_reader_names_its_fragment_in_the_identity_mode_byte() {
        let ctx = zmq::Context::new();
        let router = ctx.socket(zmq::ROUTER).expect("router");
        router.bind("inproc://reader-fragment").expect("bind");
        for (fragment, client) in [
            (
                2u8,
                ReaderClient::connect_fragment(
                    &ctx,
                    "inproc://reader-fragment",
                    "orders",
                    2,
                    Duration::from_millis(50),
                ),
            ),
            (
                0,
                ReaderClient::connect(
                    &ctx,
                    "inproc://reader-fragment",
                    "orders",
                    Duration::from_millis(50),
                ),
            ),
        ] {
            let client = client.expect("connects");
            // Nobody answers: the request times out, but the ROUTER saw the identity.
            assert!(matches!(
                client.offset(Timestamp::Latest),
                Err(ClientError::Timeout { .. })
            ));
            let frames = router.recv_multipart(0).expect("request");
            let id = zper_wire::Identity::parse(&frames[0]).expect("a ZPER identity");
            assert_eq!((id.topic.as_str(), id.mode), ("orders", fragment));
        }
    }

    #[test]
    fn an_offset_answered_0xff_is_asked_again_and_a_lasting_0xff_is_an_error() {
        let ctx = zmq::Context::new();
        let router = ctx.socket(zmq::ROUTER).expect("router");
        router.bind("inproc://reader-retry").expect("bind");
        let client = ReaderClient::connect(
            &ctx,
            "inproc://reader-retry",
            "orders",
            Duration::from_secs(5),
        )
        .expect("connects");
        // The node answers [0xFF] twice, then the offsets.
        let node = std::thread::spawn(move || {
            for n in 0..(3 + OFFSET_RETRIES + 1) {
                let frames = router.recv_multipart(0).expect("request");
                let reply = if n == 2 {
                    ReaderReply::Offsets(vec![0, 42])
                } else {
                    ReaderReply::Status(zper_wire::Status::InternalError)
                };
                let mut out = vec![frames[0].clone()];
                out.extend(reply.into_frames());
                router.send_multipart(out, 0).expect("reply");
            }
        });
        assert_eq!(client.offset(Timestamp::Latest).expect("offsets"), 42);
        // From then on only [0xFF]: given up after OFFSET_RETRIES more asks.
        match client.offset(Timestamp::Latest) {
            Err(ClientError::Malformed { detail, .. }) => {
                assert!(detail.contains("InternalError"), "{detail}")
            }
            other => panic!("expected an error, got {other:?}"),
        }
        node.join().expect("node");
    }
}
