//! How `zper produce` reads and `zper consume` prints message payloads: UTF-8 text (the
//! default), hex or base64, so binary payloads survive the terminal both ways.

use anyhow::{Context, Result};
use base64::Engine as _;
use clap::ValueEnum;

/// A payload encoding on the command line (`--payload text|hex|base64`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Encoding {
    /// UTF-8 text; consume shows invalid bytes as U+FFFD (lossy).
    #[default]
    Text,
    /// Lower-case hex, two digits a byte (upper case is read too).
    Hex,
    /// Standard base64 with padding (RFC 4648 §4).
    Base64,
}

impl Encoding {
    /// A payload as this encoding's text.
    pub fn encode(self, payload: &[u8]) -> String {
        match self {
            Encoding::Text => String::from_utf8_lossy(payload).into_owned(),
            Encoding::Hex => hex::encode(payload),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(payload),
        }
    }

    /// The payload bytes a command-line argument or stdin line stands for.
    ///
    /// Errors: the text is not hex (an odd length, a character outside `[0-9a-fA-F]`) or not
    /// standard padded base64; the message says what is expected.
    pub fn decode(self, text: &str) -> Result<Vec<u8>> {
        Ok(match self {
            Encoding::Text => text.as_bytes().to_vec(),
            Encoding::Hex => hex::decode(text.trim())
                .context("not hex: give two hex digits a byte, e.g. 00ff10")?,
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .context("not base64: give standard base64 with padding, e.g. AP8Q")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_value_round_trips_through_hex_and_base64() {
        let bytes: Vec<u8> = (0..=255).collect();
        for e in [Encoding::Hex, Encoding::Base64] {
            assert_eq!(
                e.decode(&e.encode(&bytes)).expect("test value"),
                bytes,
                "{e:?}"
            );
        }
        assert_eq!(Encoding::Hex.encode(&[0, 0xff, 0x10]), "00ff10");
        assert_eq!(Encoding::Base64.encode(&[0, 0xff, 0x10]), "AP8Q");
        assert_eq!(
            Encoding::Hex.decode("00FF10").expect("test value"),
            [0, 0xff, 0x10]
        );
    }

    #[test]
    fn text_shows_invalid_utf8_as_replacement_characters() {
        assert_eq!(Encoding::Text.encode(b"a\xffb"), "a\u{fffd}b");
        assert_eq!(
            Encoding::Text.decode("héllo").expect("test value"),
            "héllo".as_bytes()
        );
    }

    #[test]
    fn bad_input_says_what_is_expected() {
        let e = format!("{:#}", Encoding::Hex.decode("abc").expect_err("an error"));
        assert!(e.contains("two hex digits a byte"), "{e}");
        let e = format!(
            "{:#}",
            Encoding::Base64.decode("***").expect_err("an error")
        );
        assert!(e.contains("base64"), "{e}");
    }
}
