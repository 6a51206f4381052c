//! A Dolly client (`dolly.md` §6): a DEALER to a node's requests port, one request and one
//! reply of Dolly's 4-frame messages (§4).

use std::time::Duration;

use zper_wire::dolly::{Message, Method};

use crate::ClientError;

/// A DEALER connected to one node's Dolly requests endpoint. Not `Sync`.
pub struct DollyClient {
    socket: zmq::Socket,
    endpoint: String,
}

/// A Dolly answer to a Get or Put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DollyReply {
    /// The key's value (Get) or the value written (Put), and the map's state (sequence).
    Value {
        /// The value.
        value: Vec<u8>,
        /// Dolly's state sequence after (Put) or at (Get) the request.
        sequence: u64,
    },
    /// An `Error` reply, with its text (e.g. `key not found`).
    Error(String),
}

impl DollyClient {
    /// Connects (lazily) to `endpoint` (`tcp://host:port`).
    ///
    /// Errors: libzmq refusing the endpoint.
    pub fn connect(ctx: &zmq::Context, endpoint: &str) -> Result<Self, ClientError> {
        Self::connect_with(ctx, endpoint, None)
    }

    /// As [`DollyClient::connect`], as a CURVE client with `curve` when it is set (a node
    /// whose `curve.endpoints` names dolly).
    ///
    /// Errors: libzmq refusing the endpoint or the keys.
    pub fn connect_with(
        ctx: &zmq::Context,
        endpoint: &str,
        curve: Option<&crate::ClientCurve>,
    ) -> Result<Self, ClientError> {
        let z = |what| ClientError::zmq(what, endpoint);
        let socket = ctx.socket(zmq::DEALER).map_err(z("socket for Dolly"))?;
        socket.set_linger(0).map_err(z("linger"))?;
        if let Some(curve) = curve {
            curve.apply(&socket, endpoint)?;
        }
        socket.connect(endpoint).map_err(z("connect to"))?;
        Ok(DollyClient {
            socket,
            endpoint: endpoint.to_owned(),
        })
    }

    /// The socket, for pipelined use (send several, then receive).
    pub fn socket(&self) -> &zmq::Socket {
        &self.socket
    }

    /// Sends `request` and waits up to `timeout` for its reply.
    ///
    /// Errors: [`ClientError::Timeout`] (for a Put the text says it may still apply);
    /// [`ClientError::Malformed`].
    pub fn call(&self, request: &Message, timeout: Duration) -> Result<Message, ClientError> {
        let z = |what| ClientError::zmq(what, &self.endpoint);
        self.socket
            .send_multipart(request.to_frames(), 0)
            .map_err(z("send to"))?;
        let ready = self
            .socket
            .poll(zmq::POLLIN, timeout.as_millis() as i64)
            .map_err(z("poll"))?;
        if ready == 0 {
            let may_apply = if request.method == Method::Put {
                " (the put may still apply)"
            } else {
                ""
            };
            return Err(ClientError::Timeout {
                endpoint: format!("{}{may_apply}", self.endpoint),
                timeout_ms: timeout.as_millis() as u64,
            });
        }
        let frames = self.socket.recv_multipart(0).map_err(z("receive from"))?;
        Message::decode(&frames).map_err(|e| ClientError::Malformed {
            endpoint: self.endpoint.clone(),
            detail: e.to_string(),
        })
    }

    /// Get `key`.
    ///
    /// Errors: as [`DollyClient::call`].
    pub fn get(&self, key: &[u8], timeout: Duration) -> Result<DollyReply, ClientError> {
        self.call(&Message::new(Method::Get, 0, key, b""), timeout)
            .map(reply)
    }

    /// Put `key` = `value`; `Value` once applied through the cluster's log.
    ///
    /// Errors: as [`DollyClient::call`].
    pub fn put(
        &self,
        key: &[u8],
        value: &[u8],
        timeout: Duration,
    ) -> Result<DollyReply, ClientError> {
        self.call(&Message::new(Method::Put, 0, key, value), timeout)
            .map(reply)
    }
}

fn reply(m: Message) -> DollyReply {
    match m.method {
        Method::Put => DollyReply::Value {
            value: m.body,
            sequence: m.sequence,
        },
        _ => DollyReply::Error(String::from_utf8_lossy(&m.body).into_owned()),
    }
}
