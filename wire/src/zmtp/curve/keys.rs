//! CURVE keys: 32-byte X25519 keys, written as 40 characters of Z85 (ZeroMQ RFC 32) as
//! libzmq's `zmq_curve_keypair`, pyzmq and czmq write them, in files zper reads.
//!
//! A key file is either the bare 40-character key on a line, or czmq's certificate layout
//! (`zcert_save`), so keys made by czmq tools work as they are:
//!
//! ```text
//! curve
//!     public-key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
//!     secret-key = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"
//! ```

use crypto_box::{PublicKey, SecretKey};

/// A key that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not 40 characters of Z85.
    #[error("a CURVE key is 40 characters of Z85 (ZeroMQ RFC 32); got {0} characters")]
    Length(usize),
    /// A character outside Z85's alphabet.
    #[error("a CURVE key holds a character outside Z85's alphabet")]
    Alphabet,
    /// A key file with neither a bare key nor a `public-key`/`secret-key` line.
    #[error(
        "no CURVE key in the file (want a 40-character Z85 key, or czmq's `secret-key = \"...\"`)"
    )]
    Missing,
    /// A secret key file holding only a public key.
    #[error("no secret key in it, only a public key (give NAME.key_secret, not NAME.key)")]
    NoSecret,
    /// A secret key file whose `public-key` is not its secret key's.
    #[error("its public-key is not the secret key's public key")]
    Mismatch,
}

/// A 32-byte key from its 40 characters of Z85 (surrounding blanks ignored).
///
/// Errors: [`KeyError::Length`], [`KeyError::Alphabet`].
pub fn decode_key(text: &str) -> Result<[u8; 32], KeyError> {
    let text = text.trim();
    if text.len() != 40 {
        return Err(KeyError::Length(text.chars().count()));
    }
    let bytes = z85::decode(text).map_err(|_| KeyError::Alphabet)?;
    if bytes.len() != 32 {
        return Err(KeyError::Length(text.len()));
    }
    let mut key = [0u8; 32];
    key.copy_from_slice(&bytes);
    Ok(key)
}

/// A 32-byte key as 40 characters of Z85.
pub fn encode_key(key: &[u8; 32]) -> String {
    z85::encode(key)
}

/// What a key file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFile {
    /// The `public-key` line, or the bare key of a file with one key.
    pub public: Option<[u8; 32]>,
    /// The `secret-key` line.
    pub secret: Option<[u8; 32]>,
}

/// Reads a key file's text: czmq's certificate lines (`public-key = "..."`,
/// `secret-key = "..."`, anything else ignored, `#` comments) or one bare key, which is
/// returned as `public` (the caller decides what a bare key is).
///
/// Errors: a malformed key, or no key at all ([`KeyError::Missing`]).
pub fn parse_key_file(text: &str) -> Result<KeyFile, KeyError> {
    let mut file = KeyFile {
        public: None,
        secret: None,
    };
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // A bare key first: Z85's alphabet has `=` in it.
        if line.len() == 40 && !line.contains(' ') {
            if let (Ok(key), None, None) = (decode_key(line), file.public, file.secret) {
                file.public = Some(key);
                continue;
            }
        }
        if let Some((name, value)) = line.split_once('=') {
            let value = value.trim().trim_matches('"');
            match name.trim() {
                "public-key" => file.public = Some(decode_key(value)?),
                "secret-key" => file.secret = Some(decode_key(value)?),
                _ => {}
            }
        }
    }
    if file.public.is_none() && file.secret.is_none() {
        return Err(KeyError::Missing);
    }
    Ok(file)
}

/// The key pair of a secret key file's text: czmq's certificate (`secret-key = "..."`, with a
/// `public-key` that must match it) or a bare 40-character Z85 secret key.
///
/// Errors: what [`parse_key_file`] refuses, [`KeyError::NoSecret`] for a public key file,
/// [`KeyError::Mismatch`].
pub fn parse_secret_key_file(text: &str) -> Result<CurveKeyPair, KeyError> {
    let file = parse_key_file(text)?;
    // A bare key in a secret key file is the secret key.
    let secret = match (file.secret, file.public) {
        (Some(s), _) => s,
        (None, Some(bare)) if !text.contains("public-key") => bare,
        _ => return Err(KeyError::NoSecret),
    };
    let keys = CurveKeyPair::from_secret(secret);
    if file.secret.is_some() && file.public.is_some_and(|p| p != keys.public()) {
        return Err(KeyError::Mismatch);
    }
    Ok(keys)
}

/// A permanent key pair (a server's or a client's); the secret half is wiped when dropped.
#[derive(Clone)]
pub struct CurveKeyPair {
    pub(super) secret: SecretKey,
    pub(super) public: PublicKey,
}

impl CurveKeyPair {
    /// A new random key pair (from the operating system's random source).
    pub fn generate() -> Self {
        Self::from_secret(super::random::<32>())
    }

    /// The key pair of a secret key (the public key is computed from it).
    pub fn from_secret(secret: [u8; 32]) -> Self {
        let secret = SecretKey::from_bytes(secret);
        let public = secret.public_key();
        CurveKeyPair { secret, public }
    }

    /// The public key.
    pub fn public(&self) -> [u8; 32] {
        self.public.to_bytes()
    }

    /// The secret key (to write it to a file).
    pub fn secret(&self) -> [u8; 32] {
        self.secret.to_bytes()
    }
}

impl std::fmt::Debug for CurveKeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurveKeyPair")
            .field("public", &encode_key(&self.public()))
            .finish_non_exhaustive()
    }
}
