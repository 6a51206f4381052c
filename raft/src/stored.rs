//! How zper-raft encodes what it stores (issue #16): log entries and snapshot states are
//! MessagePack with field names (as the transport sends them; Dolly keys and values as bytes).
//! Earlier versions stored JSON, which is still read: JSON of a struct starts with `{`, which
//! no MessagePack map does.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// `value` as stored.
///
/// Errors: `InvalidData` when it cannot be encoded.
pub(crate) fn encode<T: Serialize>(value: &T) -> std::io::Result<Vec<u8>> {
    rmp_serde::to_vec_named(value).map_err(std::io::Error::other)
}

/// A stored value: MessagePack, or JSON as earlier versions wrote it.
///
/// Errors: `InvalidData` when `bytes` are neither.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> std::io::Result<T> {
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    if bytes.first() == Some(&b'{') {
        serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))
    } else {
        rmp_serde::from_slice(bytes).map_err(|e| invalid(e.to_string()))
    }
}
