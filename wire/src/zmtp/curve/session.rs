//! A CURVE connection after its handshake (RFC 26 §"The MESSAGE Command"): every ZMTP frame,
//! data or command, travels as one MESSAGE whose box holds a flags byte (bit 0 MORE, bit 1
//! COMMAND) and the frame's body.

use crypto_box::aead::AeadInPlace;
use crypto_box::SalsaBox;

use super::{be64, short_nonce, CurveError};
use crate::zmtp::frame::{encode_header, FrameHeader};

/// Bytes a MESSAGE adds to a frame's body: `07 "MESSAGE"` (8), the short nonce (8), the tag
/// (16) and the flags byte (1). The outer frame header (2 or 9 bytes) comes on top.
pub const MESSAGE_OVERHEAD: usize = 8 + 8 + 16 + 1;

const MESSAGE: &[u8; 8] = b"\x07MESSAGE";

/// The encryption of one connection's frames with the transient keys of its handshake.
pub struct CurveSession {
    cipher: SalsaBox,
    /// Which prefix our MESSAGE nonces carry (`CurveZMQMESSAGES` for the server).
    server: bool,
    /// The short nonce of the next command or message we send.
    send_nonce: u64,
    /// The last short nonce received.
    peer_nonce: u64,
}

impl std::fmt::Debug for CurveSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurveSession")
            .field("server", &self.server)
            .field("send_nonce", &self.send_nonce)
            .field("peer_nonce", &self.peer_nonce)
            .finish_non_exhaustive()
    }
}

impl CurveSession {
    /// A session boxing with `cipher` (C' and S' agreed), for the server side when `server`,
    /// the peer's last short nonce being `peer_nonce`.
    pub(super) fn new(cipher: SalsaBox, server: bool, peer_nonce: u64) -> Self {
        CurveSession {
            cipher,
            server,
            send_nonce: 1,
            peer_nonce,
        }
    }

    fn next_nonce(&mut self) -> u64 {
        let n = self.send_nonce;
        self.send_nonce += 1;
        n
    }

    /// Appends the server's READY command carrying `metadata` (an encoded property list).
    pub(super) fn ready(&mut self, metadata: &[u8], out: &mut Vec<u8>) {
        let nonce = self.next_nonce();
        let boxed = super::seal(
            &self.cipher,
            &short_nonce(b"CurveZMQREADY---", nonce),
            metadata,
        );
        super::encode_command(b"READY", &[&nonce.to_be_bytes(), &boxed], out);
    }

    /// Checks a short nonce from the peer is above the last one and records it.
    pub(super) fn take_peer_nonce(&mut self, nonce: u64) -> Result<(), CurveError> {
        if nonce <= self.peer_nonce {
            return Err(CurveError::Replay {
                got: nonce,
                last: self.peer_nonce,
            });
        }
        self.peer_nonce = nonce;
        Ok(())
    }

    /// Makes `nonce` the next short nonce sent (the client used 1 and 2 in its handshake).
    pub(super) fn skip_to(&mut self, nonce: u64) {
        self.send_nonce = self.send_nonce.max(nonce);
    }

    /// The cipher of the session (the client's READY check).
    pub(super) fn cipher(&self) -> &SalsaBox {
        &self.cipher
    }

    /// Appends one frame (`more`, `command`, `body`) as a MESSAGE in a ZMTP data frame, as
    /// libzmq sends it: header, [`MESSAGE_OVERHEAD`] bytes, the body encrypted in place.
    pub fn seal_frame(&mut self, more: bool, command: bool, body: &[u8], out: &mut Vec<u8>) {
        let nonce = self.next_nonce();
        let prefix = if self.server {
            b"CurveZMQMESSAGES"
        } else {
            b"CurveZMQMESSAGEC"
        };
        let mut header = [0u8; 9];
        let n = encode_header(
            false,
            false,
            (MESSAGE_OVERHEAD + body.len()) as u64,
            &mut header,
        );
        out.reserve(n + MESSAGE_OVERHEAD + body.len());
        out.extend_from_slice(&header[..n]);
        out.extend_from_slice(MESSAGE);
        out.extend_from_slice(&nonce.to_be_bytes());
        let tag_at = out.len();
        out.extend_from_slice(&[0u8; 16]);
        out.push(u8::from(more) | (u8::from(command) << 1));
        out.extend_from_slice(body);
        let tag = self
            .cipher
            .encrypt_in_place_detached(&short_nonce(prefix, nonce), b"", &mut out[tag_at + 16..])
            .expect("XSalsa20-Poly1305 seals any frame under 256 GiB");
        out[tag_at..tag_at + 16].copy_from_slice(&tag);
    }

    /// Decrypts the MESSAGE at the start of `input` (in place: the bytes are the caller's to
    /// drop) and appends the frame it carries, header and body, to `plain`. Returns the bytes
    /// of `input` used, or `None` while the MESSAGE is not whole. An outer frame over
    /// `max_body` bytes is refused before it is buffered.
    ///
    /// Errors: a malformed frame or MESSAGE, a replayed nonce, a box that does not open.
    pub fn open_frame(
        &mut self,
        input: &mut [u8],
        max_body: u64,
        plain: &mut Vec<u8>,
    ) -> Result<Option<usize>, CurveError> {
        let header = match FrameHeader::decode(input, true, max_body) {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(None),
            Err(_) => return Err(CurveError::Malformed("MESSAGE frame")),
        };
        let end = header.header_len + header.body_len as usize;
        let Some(body) = input.get_mut(header.header_len..end) else {
            return Ok(None);
        };
        if body.len() < MESSAGE_OVERHEAD || &body[..8] != MESSAGE {
            return Err(CurveError::Malformed("MESSAGE"));
        }
        let nonce = be64(&body[8..16]);
        self.take_peer_nonce(nonce)?;
        let prefix = if self.server {
            b"CurveZMQMESSAGEC"
        } else {
            b"CurveZMQMESSAGES"
        };
        let tag = crypto_box::Tag::clone_from_slice(&body[16..32]);
        self.cipher
            .decrypt_in_place_detached(&short_nonce(prefix, nonce), b"", &mut body[32..], &tag)
            .map_err(|_| CurveError::Crypto("MESSAGE"))?;
        let flags = body[32];
        let data = &body[33..];
        let mut head = [0u8; 9];
        let n = encode_header(flags & 1 != 0, flags & 2 != 0, data.len() as u64, &mut head);
        plain.extend_from_slice(&head[..n]);
        plain.extend_from_slice(data);
        Ok(Some(end))
    }
}
