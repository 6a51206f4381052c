//! CurveZMQ (ZeroMQ RFC 26) for zper's own ZMTP engine (issue #19): the server side of the
//! handshake as a [`Mechanism`](super::Mechanism), the encryption of every frame after it
//! ([`CurveSession`]), keys in Z85 text (RFC 32), and the client side for tests and tools.
//!
//! Byte layouts (RFC 26 §"Command Specifications", as libzmq 4.3 sends them):
//! - HELLO (200-byte body): `05 "HELLO"`, version `01 00`, 72 zero bytes, the client's
//!   transient public key C' (32), a short nonce (8), Box\[64 zeros\](C' -> S) (80).
//! - WELCOME (168): `07 "WELCOME"`, a long nonce (16), Box\[S' + cookie\](S -> C') (144);
//!   the cookie is a long nonce (16) and SecretBox\[C' + s'\](K) (80), K a key only the
//!   server holds, for this connection.
//! - INITIATE (>= 257): `08 "INITIATE"`, the cookie (96), a short nonce (8),
//!   Box\[C + vouch + metadata\](C' -> S'), the vouch a long nonce (16) and Box\[C' + S\](C -> S')
//!   (80).
//! - READY: `05 "READY"`, a short nonce (8), Box\[metadata\](S' -> C').
//! - MESSAGE: `07 "MESSAGE"`, a short nonce (8), Box\[flags + body\](C' <-> S'), flags bit 0
//!   MORE and bit 1 COMMAND. libzmq sends it as a ZMTP data frame; either kind is accepted.
//!
//! Nonces are 24 bytes: a 16-byte prefix (`CurveZMQHELLO---`, `WELCOME-` + 16 random bytes,
//! ...) and the 8-byte short nonce, big-endian, which each side increases by one for every
//! command or message it sends, starting at 1; a short nonce not above the last one received is
//! refused (replay). A box is NaCl's `crypto_box` (X25519, XSalsa20, Poly1305) in the combined
//! form: the 16-byte tag, then the ciphertext. The primitives are RustCrypto's `crypto_box` and
//! `crypto_secretbox`; nothing here is hand-rolled cryptography.

mod client;
mod keys;
mod server;
mod session;

pub use client::CurveClient;
pub use keys::{
    decode_key, encode_key, parse_key_file, parse_secret_key_file, CurveKeyPair, KeyError, KeyFile,
};
pub use server::{Authorizer, CurveServer};
pub use session::{CurveSession, MESSAGE_OVERHEAD};

/// Why a CURVE handshake or message failed. The connection is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CurveError {
    /// A command of the wrong size or shape (RFC 26 gives the sizes).
    #[error("malformed CURVE {0} command")]
    Malformed(&'static str),
    /// A box that does not open: wrong keys, or bytes changed on the way.
    #[error("CURVE {0} box does not decrypt (wrong key or damaged)")]
    Crypto(&'static str),
    /// A short nonce not above the last one received (a replayed or reordered command).
    #[error("CURVE short nonce {got} not above {last}")]
    Replay {
        /// The nonce received.
        got: u64,
        /// The last nonce received before.
        last: u64,
    },
    /// The vouch names another transient key or another server key.
    #[error("CURVE vouch does not match this connection")]
    Vouch,
    /// The client's permanent public key is not among the authorised keys.
    #[error("CURVE client key {0} is not authorised")]
    ClientKeyRefused(String),
}

use crypto_box::aead::consts::{U16, U24};

/// The 24-byte nonce of a box: `prefix` (16 bytes) and the short nonce, big-endian.
fn short_nonce(prefix: &[u8; 16], nonce: u64) -> crypto_box::Nonce {
    let mut n = [0u8; 24];
    n[..16].copy_from_slice(prefix);
    n[16..].copy_from_slice(&nonce.to_be_bytes());
    n.into()
}

/// The 24-byte nonce of a box: `prefix` (8 bytes) and a 16-byte long nonce.
fn long_nonce(prefix: &[u8; 8], nonce: &[u8]) -> crypto_box::Nonce {
    let mut n = [0u8; 24];
    n[..8].copy_from_slice(prefix);
    n[8..].copy_from_slice(&nonce[..16]);
    n.into()
}

/// A big-endian u64 from 8 bytes.
fn be64(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(b)
}

/// 32 bytes as an array.
fn key32(bytes: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 32];
    k.copy_from_slice(&bytes[..32]);
    k
}

/// Random bytes from the operating system.
fn random<const N: usize>() -> [u8; N] {
    use crypto_box::aead::rand_core::RngCore;
    let mut b = [0u8; N];
    crypto_box::aead::OsRng.fill_bytes(&mut b);
    b
}

/// Appends a command frame `name` + `parts` to `out` (RFC 23 command frame).
fn encode_command(name: &[u8], parts: &[&[u8]], out: &mut Vec<u8>) {
    let mut body =
        Vec::with_capacity(1 + name.len() + parts.iter().map(|p| p.len()).sum::<usize>());
    body.push(name.len() as u8);
    body.extend_from_slice(name);
    for part in parts {
        body.extend_from_slice(part);
    }
    super::frame::encode_frame(false, true, &body, out);
}

/// `plaintext` sealed with `cipher` under `nonce`: tag (16) then ciphertext.
fn seal<A: crypto_box::aead::AeadInPlace<NonceSize = U24, TagSize = U16>>(
    cipher: &A,
    nonce: &crypto_box::Nonce,
    plaintext: &[u8],
) -> Vec<u8> {
    let mut out = vec![0u8; 16];
    out.extend_from_slice(plaintext);
    let tag = cipher
        .encrypt_in_place_detached(nonce, b"", &mut out[16..])
        .expect("XSalsa20-Poly1305 seals any length below 2^38 bytes");
    out[..16].copy_from_slice(&tag);
    out
}

/// The plaintext of `boxed` (tag then ciphertext) opened with `cipher` under `nonce`.
fn open<A: crypto_box::aead::AeadInPlace<NonceSize = U24, TagSize = U16>>(
    cipher: &A,
    nonce: &crypto_box::Nonce,
    boxed: &[u8],
    what: &'static str,
) -> Result<Vec<u8>, CurveError> {
    if boxed.len() < 16 {
        return Err(CurveError::Malformed(what));
    }
    let mut plain = boxed[16..].to_vec();
    let tag = crypto_box::Tag::clone_from_slice(&boxed[..16]);
    cipher
        .decrypt_in_place_detached(nonce, b"", &mut plain, &tag)
        .map_err(|_| CurveError::Crypto(what))?;
    Ok(plain)
}

#[cfg(test)]
mod tests;
