//! The client side of the CurveZMQ handshake (RFC 26), for zper's tests and tools that speak
//! raw ZMTP: HELLO out, WELCOME in, INITIATE out, READY in. Applications use libzmq's CURVE.

use crypto_box::{PublicKey, SalsaBox, SecretKey};

use super::keys::CurveKeyPair;
use super::session::CurveSession;
use super::{be64, encode_command, key32, long_nonce, open, random, seal, short_nonce, CurveError};
use crate::zmtp::command::{encode_properties, Command};

/// One connection's client side of CURVE.
pub struct CurveClient {
    keys: CurveKeyPair,
    server: PublicKey,
    transient: SecretKey,
    /// The server's transient key, from WELCOME.
    server_transient: Option<PublicKey>,
    session: Option<CurveSession>,
}

impl std::fmt::Debug for CurveClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurveClient")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl CurveClient {
    /// A client with permanent keys `keys` for the server whose public key is `server`.
    pub fn new(keys: CurveKeyPair, server: [u8; 32]) -> Self {
        CurveClient {
            keys,
            server: PublicKey::from(server),
            transient: SecretKey::from_bytes(random::<32>()),
            server_transient: None,
            session: None,
        }
    }

    /// Appends HELLO (short nonce 1), sent once both greetings are exchanged.
    pub fn hello(&self, out: &mut Vec<u8>) {
        let boxed = seal(
            &SalsaBox::new(&self.server, &self.transient),
            &short_nonce(b"CurveZMQHELLO---", 1),
            &[0u8; 64],
        );
        let mut data = vec![1u8, 0];
        data.extend_from_slice(&[0u8; 72]);
        data.extend_from_slice(self.transient.public_key().as_bytes());
        data.extend_from_slice(&1u64.to_be_bytes());
        data.extend_from_slice(&boxed);
        encode_command(b"HELLO", &[&data], out);
    }

    /// One command body from the server: WELCOME appends INITIATE (carrying `metadata`) to
    /// `out` and returns `None`; READY returns the server's metadata, after which
    /// [`CurveClient::into_session`] gives the session.
    ///
    /// Errors: an ERROR from the server ([`CurveError::ClientKeyRefused`] with its reason),
    /// or a malformed or undecryptable command.
    pub fn receive(
        &mut self,
        body: &[u8],
        metadata: &[(&str, &[u8])],
        out: &mut Vec<u8>,
    ) -> Result<Option<Vec<u8>>, CurveError> {
        if let Some(data) = body.strip_prefix(b"\x07WELCOME") {
            self.welcome(data, metadata, out)?;
            return Ok(None);
        }
        // Not through `Command::parse`: READY's data is a box here, not a property list.
        if let Some(data) = body.strip_prefix(b"\x05READY") {
            return self.ready(data).map(Some);
        }
        match Command::parse(body) {
            Ok(Command::Error(reason)) => Err(CurveError::ClientKeyRefused(
                String::from_utf8_lossy(reason).into_owned(),
            )),
            _ => Err(CurveError::Malformed("command from the server")),
        }
    }

    fn welcome(
        &mut self,
        data: &[u8],
        metadata: &[(&str, &[u8])],
        out: &mut Vec<u8>,
    ) -> Result<(), CurveError> {
        if data.len() != 160 {
            return Err(CurveError::Malformed("WELCOME"));
        }
        let plain = open(
            &SalsaBox::new(&self.server, &self.transient),
            &long_nonce(b"WELCOME-", &data[..16]),
            &data[16..],
            "WELCOME",
        )?;
        let server_transient = PublicKey::from(key32(&plain[..32]));
        let cookie = &plain[32..128];
        let vouch_nonce = random::<16>();
        let mut vouch_plain = self.transient.public_key().as_bytes().to_vec();
        vouch_plain.extend_from_slice(self.server.as_bytes());
        let vouch = seal(
            &SalsaBox::new(&server_transient, &self.keys.secret),
            &long_nonce(b"VOUCH---", &vouch_nonce),
            &vouch_plain,
        );
        let mut initiate_plain = self.keys.public().to_vec();
        initiate_plain.extend_from_slice(&vouch_nonce);
        initiate_plain.extend_from_slice(&vouch);
        encode_properties(metadata, &mut initiate_plain);
        let boxed = seal(
            &SalsaBox::new(&server_transient, &self.transient),
            &short_nonce(b"CurveZMQINITIATE", 2),
            &initiate_plain,
        );
        encode_command(b"INITIATE", &[cookie, &2u64.to_be_bytes(), &boxed], out);
        self.server_transient = Some(server_transient);
        Ok(())
    }

    fn ready(&mut self, data: &[u8]) -> Result<Vec<u8>, CurveError> {
        let Some(server_transient) = &self.server_transient else {
            return Err(CurveError::Malformed("READY before WELCOME"));
        };
        if data.len() < 8 + 16 {
            return Err(CurveError::Malformed("READY"));
        }
        let mut session =
            CurveSession::new(SalsaBox::new(server_transient, &self.transient), false, 0);
        let nonce = be64(&data[..8]);
        session.take_peer_nonce(nonce)?;
        let metadata = open(
            session.cipher(),
            &short_nonce(b"CurveZMQREADY---", nonce),
            &data[8..],
            "READY",
        )?;
        // HELLO and INITIATE used short nonces 1 and 2.
        session.skip_to(3);
        self.session = Some(session);
        Ok(metadata)
    }

    /// The encryption of the connection's frames, once READY arrived.
    pub fn into_session(self) -> Option<CurveSession> {
        self.session
    }
}
