//! ZMTP/3.x commands (RFC 23 §"Commands", RFC 37 §"PING and PONG"): the body of a command frame
//! is `[name-size:1][name][data]`.
//!
//! ```text
//! READY  data = property*            property = [name-size:1][name][value-size:4 BE][value]
//! ERROR  data = [reason-size:1][reason]
//! PING   data = [ttl:2 BE, tenths of a second][context:0..=16]
//! PONG   data = [context:0..=16]
//! ```

use thiserror::Error;

use super::frame::encode_frame;

/// Longest PING context a peer may send (RFC 37), in bytes; PONG echoes it.
pub const MAX_PING_CONTEXT: usize = 16;

/// Why a command body is refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CommandError {
    /// The body ends before its name does (or is empty).
    #[error("command body ends inside its name")]
    Truncated,
    /// A READY property that runs past the end of the body, or has an empty name.
    #[error("malformed READY property at byte {0}")]
    Property(usize),
    /// A PING without its 2-byte TTL, or with a context over 16 bytes.
    #[error("malformed PING")]
    Ping,
    /// An ERROR whose reason runs past the end of the body.
    #[error("malformed ERROR")]
    Error,
}

/// The validated property list of a READY command, borrowed from the frame body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Properties<'a>(&'a [u8]);

impl<'a> Properties<'a> {
    /// Checks that `data` is a whole list of properties.
    pub fn parse(data: &'a [u8]) -> Result<Self, CommandError> {
        let mut at = 0;
        while at < data.len() {
            at = next_property(data, at).ok_or(CommandError::Property(at))?.2;
        }
        Ok(Properties(data))
    }

    /// The value of property `name` (names compare case-insensitively, RFC 23), first one wins.
    pub fn get(&self, name: &str) -> Option<&'a [u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// Every `(name, value)` in order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        let data = self.0;
        let mut at = 0;
        std::iter::from_fn(move || {
            let (name, value, next) = next_property(data, at)?;
            at = next;
            Some((name, value))
        })
    }

    /// The raw bytes of the list.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
}

/// The property at `at`: its name, its value and where the next one starts; `None` when it
/// is malformed or `at` is the end.
fn next_property(data: &[u8], at: usize) -> Option<(&[u8], &[u8], usize)> {
    let name_len = usize::from(*data.get(at)?);
    if name_len == 0 {
        return None;
    }
    let name = data.get(at + 1..at + 1 + name_len)?;
    let size_at = at + 1 + name_len;
    let size: [u8; 4] = data.get(size_at..size_at + 4)?.try_into().ok()?;
    let value_len = usize::try_from(u32::from_be_bytes(size)).ok()?;
    let value_at = size_at + 4;
    let end = value_at.checked_add(value_len)?;
    let value = data.get(value_at..end)?;
    Some((name, value, end))
}

/// One command received from a peer, borrowing its frame body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<'a> {
    /// READY with the peer's metadata (NULL mechanism, RFC 23).
    Ready(Properties<'a>),
    /// ERROR with the peer's reason (RFC 23).
    Error(&'a [u8]),
    /// PING (RFC 37): TTL in tenths of a second and a context to echo.
    Ping {
        /// Tenths of a second the peer may wait for traffic before closing.
        ttl_ds: u16,
        /// Up to 16 bytes to echo in the PONG.
        context: &'a [u8],
    },
    /// PONG (RFC 37) with the context of our PING.
    Pong(&'a [u8]),
    /// Any other command: kept for the mechanism (CURVE's HELLO, ...) or ignored.
    Other {
        /// The command name.
        name: &'a [u8],
        /// What follows the name.
        data: &'a [u8],
    },
}

impl<'a> Command<'a> {
    /// Parses a command frame body.
    pub fn parse(body: &'a [u8]) -> Result<Self, CommandError> {
        let name_len = usize::from(*body.first().ok_or(CommandError::Truncated)?);
        let name = body.get(1..1 + name_len).ok_or(CommandError::Truncated)?;
        let data = &body[1 + name_len..];
        Ok(match name {
            b"READY" => Command::Ready(Properties::parse(data)?),
            b"ERROR" => {
                let len = usize::from(*data.first().ok_or(CommandError::Error)?);
                Command::Error(data.get(1..1 + len).ok_or(CommandError::Error)?)
            }
            b"PING" => {
                let ttl = data.get(..2).ok_or(CommandError::Ping)?;
                let context = &data[2..];
                if context.len() > MAX_PING_CONTEXT {
                    return Err(CommandError::Ping);
                }
                Command::Ping {
                    ttl_ds: u16::from_be_bytes([ttl[0], ttl[1]]),
                    context,
                }
            }
            b"PONG" => Command::Pong(data),
            _ => Command::Other { name, data },
        })
    }
}

/// Appends a READY command frame carrying `properties` (name, value) to `out`.
pub fn encode_ready(properties: &[(&str, &[u8])], out: &mut Vec<u8>) {
    let mut body = vec![5];
    body.extend_from_slice(b"READY");
    encode_properties(properties, &mut body);
    encode_frame(false, true, &body, out);
}

/// Appends a property list (RFC 23 §"The READY command": name length, name, 4-byte big-endian
/// value length, value) to `out`, as READY and CURVE's INITIATE and READY boxes carry it.
pub fn encode_properties(properties: &[(&str, &[u8])], out: &mut Vec<u8>) {
    for (name, value) in properties {
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value);
    }
}

/// Appends an ERROR command frame to `out`; the reason is cut to 255 bytes.
pub fn encode_error(reason: &str, out: &mut Vec<u8>) {
    let reason = &reason.as_bytes()[..reason.len().min(255)];
    let mut body = vec![5];
    body.extend_from_slice(b"ERROR");
    body.push(reason.len() as u8);
    body.extend_from_slice(reason);
    encode_frame(false, true, &body, out);
}

/// Appends a PONG command frame echoing `context` (at most 16 bytes) to `out`.
pub fn encode_pong(context: &[u8], out: &mut Vec<u8>) {
    let context = &context[..context.len().min(MAX_PING_CONTEXT)];
    let mut body = vec![4];
    body.extend_from_slice(b"PONG");
    body.extend_from_slice(context);
    encode_frame(false, true, &body, out);
}

/// Appends a PING command frame (TTL in tenths of a second, `context` at most 16 bytes).
pub fn encode_ping(ttl_ds: u16, context: &[u8], out: &mut Vec<u8>) {
    let context = &context[..context.len().min(MAX_PING_CONTEXT)];
    let mut body = vec![4];
    body.extend_from_slice(b"PING");
    body.extend_from_slice(&ttl_ds.to_be_bytes());
    body.extend_from_slice(context);
    encode_frame(false, true, &body, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zmtp::frame::FrameHeader;
    use proptest::prelude::*;

    fn body(frame: &[u8]) -> &[u8] {
        let h = FrameHeader::decode(frame, true, 1 << 20)
            .expect("decodes")
            .expect("whole header");
        assert!(h.command());
        &frame[h.header_len..]
    }

    #[test]
    fn ready_round_trips_with_case_insensitive_names() {
        let mut frame = Vec::new();
        encode_ready(
            &[("Socket-Type", b"DEALER"), ("Identity", b"\x01abc")],
            &mut frame,
        );
        let Command::Ready(props) = Command::parse(body(&frame)).expect("valid") else {
            panic!("not READY");
        };
        assert_eq!(props.get("socket-type"), Some(&b"DEALER"[..]));
        assert_eq!(props.get("IDENTITY"), Some(&b"\x01abc"[..]));
        assert_eq!(props.get("Resource"), None);
    }

    #[test]
    fn ping_pong_and_error_parse() {
        let mut frame = Vec::new();
        encode_ping(300, b"ctx", &mut frame);
        assert_eq!(
            Command::parse(body(&frame)),
            Ok(Command::Ping {
                ttl_ds: 300,
                context: b"ctx"
            })
        );
        frame.clear();
        encode_pong(b"ctx", &mut frame);
        assert_eq!(Command::parse(body(&frame)), Ok(Command::Pong(b"ctx")));
        frame.clear();
        encode_error("no", &mut frame);
        assert_eq!(Command::parse(body(&frame)), Ok(Command::Error(b"no")));
    }

    #[test]
    fn malformed_bodies_are_typed_errors() {
        assert_eq!(Command::parse(b""), Err(CommandError::Truncated));
        assert_eq!(Command::parse(b"\x05REA"), Err(CommandError::Truncated));
        // A property whose value size runs past the body.
        assert_eq!(
            Command::parse(b"\x05READY\x01a\xff\xff\xff\xffxx"),
            Err(CommandError::Property(0))
        );
        assert_eq!(Command::parse(b"\x04PING\x00"), Err(CommandError::Ping));
        assert_eq!(
            Command::parse(b"\x04PING\x00\x01abcdefghijklmnopq"),
            Err(CommandError::Ping)
        );
        assert_eq!(Command::parse(b"\x05ERROR\x09ab"), Err(CommandError::Error));
    }

    proptest! {
        #[test]
        fn any_body_parses_or_errs_without_panic(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(Command::Ready(props)) = Command::parse(&body) {
                let total: usize = props.iter().map(|(n, v)| 5 + n.len() + v.len()).sum();
                prop_assert_eq!(total, props.as_bytes().len());
            }
        }
    }
}
