//! Serde for raw byte fields (Dolly keys and values): written as bytes, so binary formats (the
//! Raft transport's MessagePack, issue #16) carry them compactly, while JSON (the Raft log and
//! snapshots) still writes an array of numbers, as it always did; read from either form.

use serde::de::{SeqAccess, Visitor};
use serde::{Deserializer, Serializer};

/// Writes `v` as bytes.
pub(crate) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(v)
}

/// Reads bytes, a byte buffer or a sequence of numbers.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    struct Bytes;
    impl<'de> Visitor<'de> for Bytes {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("bytes or an array of numbers 0-255")
        }
        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(b) = seq.next_element::<u8>()? {
                out.push(b);
            }
            Ok(out)
        }
    }
    d.deserialize_bytes(Bytes)
}

#[cfg(test)]
mod tests {
    use crate::Command;

    #[test]
    fn dolly_bytes_keep_their_json_form() {
        let put = Command::DollyPut {
            key: b"k".to_vec(),
            value: vec![0, 255],
            request: None,
            deadline_ms: 0,
        };
        let json = serde_json::to_string(&put).expect("json");
        assert!(json.contains(r#""key":[107],"value":[0,255]"#), "{json}");
        assert_eq!(serde_json::from_str::<Command>(&json).expect("back"), put);
    }
}
