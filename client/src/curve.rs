//! A client's CURVE keys (issue #19): the node's public key and the client's own key pair,
//! set on each libzmq socket that connects to a node whose endpoint requires CURVE
//! (`curve.endpoints`). libzmq runs the handshake (RFC 26) and encrypts every frame.

use std::path::Path;

use zper_wire::zmtp::curve::{
    decode_key, encode_key, parse_key_file, parse_secret_key_file, CurveKeyPair,
};

use crate::ClientError;

/// The CURVE keys a client connects with.
#[derive(Clone)]
pub struct ClientCurve {
    /// The node's public key (what `zper keygen` wrote to the node's `NAME.key`).
    pub server_key: [u8; 32],
    /// The client's key pair; its public key must be among the node's `curve.clients`.
    pub keys: CurveKeyPair,
}

impl std::fmt::Debug for ClientCurve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCurve")
            .field("server_key", &encode_key(&self.server_key))
            .field("public_key", &encode_key(&self.keys.public()))
            .finish_non_exhaustive()
    }
}

impl PartialEq for ClientCurve {
    fn eq(&self, other: &Self) -> bool {
        self.server_key == other.server_key && self.keys.public() == other.keys.public()
    }
}

impl Eq for ClientCurve {}

impl ClientCurve {
    /// Keys from text: `server_key` is the node's public key as 40 Z85 characters or a file
    /// holding it (czmq's `NAME.key`); `secret_key_file` the client's `NAME.key_secret` (or a
    /// file with its bare Z85 secret key).
    ///
    /// Errors: [`ClientError::Invalid`] naming the key or file that could not be read.
    pub fn load(server_key: &str, secret_key_file: &Path) -> Result<Self, ClientError> {
        let server_key = match decode_key(server_key) {
            Ok(k) => k,
            Err(_) if Path::new(server_key).is_file() => {
                let text = std::fs::read_to_string(server_key).map_err(|e| {
                    ClientError::Invalid(format!("CURVE server key file {server_key}: {e}"))
                })?;
                parse_key_file(&text)
                    .ok()
                    .and_then(|f| f.public)
                    .ok_or_else(|| {
                        ClientError::Invalid(format!(
                            "CURVE server key file {server_key}: no public key in it"
                        ))
                    })?
            }
            Err(e) => {
                return Err(ClientError::Invalid(format!(
                    "CURVE server key: {e} (or give the node's NAME.key file)"
                )))
            }
        };
        let shown = secret_key_file.display();
        let text = std::fs::read_to_string(secret_key_file)
            .map_err(|e| ClientError::Invalid(format!("CURVE secret key file {shown}: {e}")))?;
        let keys = parse_secret_key_file(&text)
            .map_err(|e| ClientError::Invalid(format!("CURVE secret key file {shown}: {e}")))?;
        Ok(ClientCurve { server_key, keys })
    }

    /// Makes `socket` a CURVE client with these keys (before it connects), as
    /// [`ClientCurve::apply`] with libzmq's error.
    ///
    /// Errors: libzmq refused the keys (built without CURVE).
    pub fn set_on(&self, socket: &zmq::Socket) -> Result<(), zmq::Error> {
        socket.set_curve_serverkey(&self.server_key)?;
        socket.set_curve_publickey(&self.keys.public())?;
        socket.set_curve_secretkey(&self.keys.secret())
    }

    /// Makes `socket` a CURVE client with these keys (before it connects).
    ///
    /// Errors: libzmq refused the keys, which happens when it was built without CURVE.
    pub fn apply(&self, socket: &zmq::Socket, endpoint: &str) -> Result<(), ClientError> {
        let z = |what| ClientError::zmq(what, endpoint);
        socket
            .set_curve_serverkey(&self.server_key)
            .map_err(z("CURVE server key (libzmq without CURVE?)"))?;
        socket
            .set_curve_publickey(&self.keys.public())
            .map_err(z("CURVE public key"))?;
        socket
            .set_curve_secretkey(&self.keys.secret())
            .map_err(z("CURVE secret key"))?;
        Ok(())
    }
}
