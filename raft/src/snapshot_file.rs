//! The state machine's snapshot as a file in the Raft directory (issue #16).
//!
//! Before, each snapshot was the whole state as JSON (every Dolly byte a decimal number),
//! wrapped again in JSON (the state's bytes as an array of numbers) and written as one value
//! into RocksDB with a sync: a 10,000-key Dolly map made a ~15 MB value written to the WAL, then
//! flushed and compacted, every 1000 entries (profiled: 6-8% of a node's CPU under Dolly load,
//! plus the flushes). Now the state is MessagePack (bytes as bytes) and the snapshot one file,
//! written once: to a temporary file, synced, renamed over [`FILE`], and the directory synced.
//!
//! Layout of [`FILE`]: the 8-byte magic [`MAGIC`], a big-endian `u32` length and the snapshot's
//! meta (MessagePack), the state's bytes, and a big-endian `u32` CRC-32C of everything before
//! it. A file that fails the check is an error, never a state.
//!
//! Snapshots from earlier versions (the `snapshot` column family, JSON) are still read, and a
//! state sent as JSON by an earlier leader is still installed: JSON starts with `{`, which no
//! MessagePack map does.

use std::io::Write;
use std::path::Path;

use openraft::storage::SnapshotMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{NodeEndpoints, NodeId};

/// Name of the snapshot file in the Raft directory.
pub const FILE: &str = "snapshot.zps";
/// First bytes of [`FILE`].
pub const MAGIC: &[u8; 8] = b"ZPERSNP1";

/// A snapshot as kept on disk: openraft's meta and the encoded state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredSnapshot {
    pub(crate) meta: SnapshotMeta<NodeId, NodeEndpoints>,
    pub(crate) data: Vec<u8>,
}

/// Why a snapshot could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotFileError {
    /// Reading or writing the file failed.
    #[error("snapshot file: {0}")]
    Io(#[from] std::io::Error),
    /// The file is not a snapshot, is cut short, or fails its checksum.
    #[error("snapshot file {0}: refusing to use it")]
    Corrupt(String),
    /// The meta or the state could not be encoded or decoded.
    #[error("snapshot encoding: {0}")]
    Encoding(String),
}

/// The state (`crate::state_machine::AppliedState`) as a snapshot carries it
/// ([`crate::stored`]: MessagePack).
pub(crate) fn encode_state<T: Serialize>(state: &T) -> Result<Vec<u8>, SnapshotFileError> {
    crate::stored::encode(state).map_err(|e| SnapshotFileError::Encoding(e.to_string()))
}

/// A state from a snapshot: MessagePack, or JSON as earlier versions wrote and sent it.
pub(crate) fn decode_state<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, SnapshotFileError> {
    crate::stored::decode(bytes).map_err(|e| SnapshotFileError::Encoding(e.to_string()))
}

/// `snapshot` in the layout of [`FILE`].
pub(crate) fn encode(snapshot: &StoredSnapshot) -> Result<Vec<u8>, SnapshotFileError> {
    let meta = rmp_serde::to_vec_named(&snapshot.meta)
        .map_err(|e| SnapshotFileError::Encoding(e.to_string()))?;
    let meta_len = u32::try_from(meta.len())
        .map_err(|_| SnapshotFileError::Encoding("meta over 4 GiB".into()))?;
    let mut out = Vec::with_capacity(MAGIC.len() + 8 + meta.len() + snapshot.data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&meta_len.to_be_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(&snapshot.data);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// The snapshot in `bytes` (the layout of [`FILE`]).
///
/// Errors: `Corrupt` for a wrong magic, a cut-short file or a checksum mismatch; `Encoding` for
/// undecodable meta.
pub(crate) fn decode(bytes: &[u8]) -> Result<StoredSnapshot, SnapshotFileError> {
    let corrupt = |why: &str| SnapshotFileError::Corrupt(why.to_owned());
    let (body, crc) = bytes
        .split_last_chunk::<4>()
        .ok_or_else(|| corrupt("is shorter than its checksum"))?;
    if crc32c::crc32c(body) != u32::from_be_bytes(*crc) {
        return Err(corrupt("fails its checksum"));
    }
    let rest = body
        .strip_prefix(&MAGIC[..])
        .ok_or_else(|| corrupt("does not start with the snapshot magic"))?;
    let (len, rest) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| corrupt("is cut short in its header"))?;
    let len = u32::from_be_bytes(*len) as usize;
    if rest.len() < len {
        return Err(corrupt("is cut short in its meta"));
    }
    let (meta, data) = rest.split_at(len);
    let meta =
        rmp_serde::from_slice(meta).map_err(|e| SnapshotFileError::Encoding(e.to_string()))?;
    Ok(StoredSnapshot {
        meta,
        data: data.to_vec(),
    })
}

/// Writes `snapshot` as `dir`/[`FILE`], durably: a temporary file, synced, renamed over the
/// old one, then the directory synced. A crash leaves the old snapshot or the new one.
///
/// Errors: `Encoding`, `Io`.
pub(crate) fn save(dir: &Path, snapshot: &StoredSnapshot) -> Result<(), SnapshotFileError> {
    let bytes = encode(snapshot)?;
    let tmp = dir.join(format!("{FILE}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(FILE))?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// The snapshot in `dir`/[`FILE`], if there is one.
///
/// Errors: `Io` (other than a missing file), `Corrupt`, `Encoding`.
pub(crate) fn load(dir: &Path) -> Result<Option<StoredSnapshot>, SnapshotFileError> {
    match std::fs::read(dir.join(FILE)) {
        Ok(bytes) => decode(&bytes).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{Command, FragmentPolicy, Metadata};
    use openraft::{CommittedLeaderId, LogId, StoredMembership};

    /// What the state machine's state holds besides openraft's own fields.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct State {
        last_applied: Option<LogId<NodeId>>,
        metadata: Metadata,
    }

    fn state() -> State {
        let mut metadata = Metadata::default();
        let commands = [
            Command::RegisterNode {
                id: 1,
                endpoints: NodeEndpoints {
                    name: "one".into(),
                    http: "127.0.0.1:1".into(),
                    ..Default::default()
                },
                now_ms: 5,
                lease_ms: 1000,
                incarnation: 7,
            },
            Command::CreateTopic {
                name: "t".into(),
                fragments: Some(2),
                replication_factor: Some(1),
                retain_hours: None,
                policy: FragmentPolicy::Default,
                now_ms: 6,
            },
            Command::DollyPut {
                key: vec![0, 255, b'k'],
                value: (0..=255).collect(),
                request: None,
                deadline_ms: 0,
            },
        ];
        for (i, c) in commands.iter().enumerate() {
            let _ = metadata.apply_at(c, i as u64 + 1);
        }
        State {
            last_applied: Some(LogId::new(CommittedLeaderId::new(3, 1), 3)),
            metadata,
        }
    }

    #[test]
    fn a_state_survives_messagepack_and_json_from_earlier_versions_still_reads() {
        let s = state();
        assert_eq!(s.metadata.dolly.len(), 1);
        assert_eq!(s.metadata.topics.len(), 1);
        let packed = encode_state(&s).expect("encode");
        assert_eq!(decode_state::<State>(&packed).expect("decode"), s);
        let json = serde_json::to_vec(&s).expect("json");
        assert!(packed.len() < json.len());
        assert_eq!(decode_state::<State>(&json).expect("decode json"), s);
    }

    #[test]
    fn the_file_round_trips_and_any_damage_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(load(dir.path()).expect("none yet").is_none());
        let s = state();
        let snapshot = StoredSnapshot {
            meta: SnapshotMeta {
                last_log_id: s.last_applied,
                last_membership: StoredMembership::default(),
                snapshot_id: "3-1-3-1".into(),
            },
            data: encode_state(&s).expect("encode"),
        };
        save(dir.path(), &snapshot).expect("save");
        assert_eq!(load(dir.path()).expect("load"), Some(snapshot.clone()));
        let good = std::fs::read(dir.path().join(FILE)).expect("read");
        // Every single-byte flip and every truncation is refused, never decoded into a state.
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            assert!(decode(&bad).is_err(), "a flip at byte {at} went unnoticed");
        }
        for len in [0, 3, 4, 8, 12, good.len() - 1] {
            assert!(decode(&good[..len]).is_err(), "cut at {len} went unnoticed");
        }
        // A newer save replaces it whole.
        let newer = StoredSnapshot {
            data: Vec::new(),
            ..snapshot
        };
        save(dir.path(), &newer).expect("save again");
        assert_eq!(load(dir.path()).expect("load"), Some(newer));
        assert!(!dir.path().join(format!("{FILE}.tmp")).exists());
    }
}
