//! The server side of the CurveZMQ handshake (RFC 26 §"The CurveZMQ Handshake"): HELLO in,
//! WELCOME out, INITIATE in (the client's permanent key checked against the [`Authorizer`],
//! as a ZAP handler would), READY out.

use std::sync::Arc;

use crypto_box::{PublicKey, SalsaBox, SecretKey};
use crypto_secretbox::{KeyInit, XSalsa20Poly1305};

use super::keys::{encode_key, CurveKeyPair};
use super::session::CurveSession;
use super::{be64, encode_command, key32, long_nonce, open, random, seal, short_nonce, CurveError};
use crate::zmtp::command::{encode_properties, Command};
use crate::zmtp::error::HandshakeError;
use crate::zmtp::mechanism::{Mechanism, MechanismStep};

/// Decides which clients may finish a CURVE handshake (ZAP's job in libzmq, RFC 27).
pub trait Authorizer: Send + Sync {
    /// Whether the client with this permanent public key may connect.
    fn allows(&self, client: &[u8; 32]) -> bool;
}

/// Where the server is in the handshake.
enum State {
    Hello,
    Initiate {
        client_transient: PublicKey,
        transient: SecretKey,
        cookie: XSalsa20Poly1305,
    },
    Done,
}

/// One connection's server side of CURVE. After the handshake, [`CurveServer::into_session`]
/// gives the [`CurveSession`] that encrypts and decrypts its frames, and
/// [`CurveServer::client_key`] the client's permanent public key.
pub struct CurveServer {
    keys: Arc<CurveKeyPair>,
    authorizer: Arc<dyn Authorizer>,
    state: State,
    /// Our metadata (`Socket-Type`), sent in READY's box.
    metadata: Vec<u8>,
    peer_nonce: u64,
    client_key: Option<[u8; 32]>,
    session: Option<CurveSession>,
}

impl std::fmt::Debug for CurveServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurveServer")
            .field("public", &encode_key(&self.keys.public()))
            .field("client_key", &self.client_key.as_ref().map(encode_key))
            .finish_non_exhaustive()
    }
}

impl CurveServer {
    /// A server side with the permanent key pair `keys`, admitting the clients `authorizer`
    /// allows.
    pub fn new(keys: Arc<CurveKeyPair>, authorizer: Arc<dyn Authorizer>) -> Self {
        CurveServer {
            keys,
            authorizer,
            state: State::Hello,
            metadata: Vec::new(),
            peer_nonce: 0,
            client_key: None,
            session: None,
        }
    }

    /// The client's permanent public key, once INITIATE was accepted.
    pub fn client_key(&self) -> Option<[u8; 32]> {
        self.client_key
    }

    /// The encryption of the connection's frames, once the handshake is done.
    pub fn into_session(self) -> Option<CurveSession> {
        self.session
    }

    /// HELLO: checks the client can box to our permanent key; answers WELCOME.
    fn hello(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), CurveError> {
        // version (2), padding (72), C' (32), short nonce (8), box (80).
        if data.len() != 194 {
            return Err(CurveError::Malformed("HELLO"));
        }
        if data[..2] != [1, 0] {
            return Err(CurveError::Malformed("HELLO (version)"));
        }
        let client_transient = PublicKey::from(key32(&data[74..106]));
        let nonce = be64(&data[106..114]);
        let hello_box = SalsaBox::new(&client_transient, &self.keys.secret);
        let signature = open(
            &hello_box,
            &short_nonce(b"CurveZMQHELLO---", nonce),
            &data[114..194],
            "HELLO",
        )?;
        if signature.len() != 64 {
            return Err(CurveError::Malformed("HELLO"));
        }
        self.peer_nonce = nonce;
        let transient = SecretKey::from_bytes(random::<32>());
        let cookie = XSalsa20Poly1305::new(&random::<32>().into());
        let cookie_nonce = random::<16>();
        let mut cookie_plain = Vec::with_capacity(64);
        cookie_plain.extend_from_slice(client_transient.as_bytes());
        cookie_plain.extend_from_slice(&transient.to_bytes());
        let cookie_box = seal(
            &cookie,
            &long_nonce(b"COOKIE--", &cookie_nonce),
            &cookie_plain,
        );
        let mut welcome_plain = Vec::with_capacity(128);
        welcome_plain.extend_from_slice(transient.public_key().as_bytes());
        welcome_plain.extend_from_slice(&cookie_nonce);
        welcome_plain.extend_from_slice(&cookie_box);
        let welcome_nonce = random::<16>();
        let welcome_box = seal(
            &hello_box,
            &long_nonce(b"WELCOME-", &welcome_nonce),
            &welcome_plain,
        );
        encode_command(b"WELCOME", &[&welcome_nonce, &welcome_box], out);
        self.state = State::Initiate {
            client_transient,
            transient,
            cookie,
        };
        Ok(())
    }

    /// INITIATE: checks the cookie, the vouch and the client's key; answers READY. Returns the
    /// client's metadata.
    fn initiate(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<Vec<u8>, CurveError> {
        let State::Initiate {
            client_transient,
            transient,
            cookie,
        } = &self.state
        else {
            return Err(CurveError::Malformed("INITIATE"));
        };
        // cookie (16 + 80), short nonce (8), box (C (32) + vouch (96) + metadata, + 16).
        if data.len() < 96 + 8 + 16 + 128 {
            return Err(CurveError::Malformed("INITIATE"));
        }
        let cookie_plain = open(
            cookie,
            &long_nonce(b"COOKIE--", &data[..16]),
            &data[16..96],
            "INITIATE cookie",
        )?;
        if cookie_plain[..32] != client_transient.as_bytes()[..]
            || cookie_plain[32..64] != transient.to_bytes()[..]
        {
            return Err(CurveError::Crypto("INITIATE cookie"));
        }
        let nonce = be64(&data[96..104]);
        if nonce <= self.peer_nonce {
            return Err(CurveError::Replay {
                got: nonce,
                last: self.peer_nonce,
            });
        }
        let session_box = SalsaBox::new(client_transient, transient);
        let plain = open(
            &session_box,
            &short_nonce(b"CurveZMQINITIATE", nonce),
            &data[104..],
            "INITIATE",
        )?;
        let client = PublicKey::from(key32(&plain[..32]));
        let vouch = open(
            &SalsaBox::new(&client, transient),
            &long_nonce(b"VOUCH---", &plain[32..48]),
            &plain[48..128],
            "INITIATE vouch",
        )?;
        if vouch[..32] != client_transient.as_bytes()[..] || vouch[32..64] != self.keys.public() {
            return Err(CurveError::Vouch);
        }
        let client = client.to_bytes();
        if !self.authorizer.allows(&client) {
            return Err(CurveError::ClientKeyRefused(encode_key(&client)));
        }
        let metadata = plain[128..].to_vec();
        let mut session = CurveSession::new(session_box, true, nonce);
        session.ready(&self.metadata, out);
        self.client_key = Some(client);
        self.session = Some(session);
        self.state = State::Done;
        Ok(metadata)
    }
}

impl Mechanism for CurveServer {
    fn name(&self) -> &'static [u8] {
        b"CURVE"
    }

    fn as_server(&self) -> bool {
        true
    }

    fn start(&mut self, metadata: &[(&str, &[u8])], _out: &mut Vec<u8>) {
        // The client speaks first (HELLO); our metadata waits for READY.
        self.metadata.clear();
        encode_properties(metadata, &mut self.metadata);
    }

    fn receive(
        &mut self,
        command: &Command<'_>,
        out: &mut Vec<u8>,
    ) -> Result<MechanismStep, HandshakeError> {
        let (name, data) = match command {
            Command::Other { name, data } => (*name, *data),
            Command::Error(reason) => {
                return Err(HandshakeError::PeerError(
                    String::from_utf8_lossy(reason).into_owned(),
                ))
            }
            Command::Ready(_) => return Err(HandshakeError::UnexpectedCommand("READY".into())),
            Command::Ping { .. } => return Err(HandshakeError::UnexpectedCommand("PING".into())),
            Command::Pong(_) => return Err(HandshakeError::UnexpectedCommand("PONG".into())),
        };
        match (&self.state, name) {
            (State::Hello, b"HELLO") => {
                self.hello(data, out)?;
                Ok(MechanismStep::Continue)
            }
            (State::Initiate { .. }, b"INITIATE") => {
                Ok(MechanismStep::Ready(self.initiate(data, out)?))
            }
            _ => Err(HandshakeError::UnexpectedCommand(
                String::from_utf8_lossy(name).into_owned(),
            )),
        }
    }
}
