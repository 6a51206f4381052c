//! Opening a topic directory and recovering its newest segment (spec `zper.md` §6.1, §6.4):
//! a torn tail is truncated to the end of the last complete message. The original cuts at the
//! last complete frame, which glues the next message onto a dangling one (§6.4); zper cuts at the
//! message boundary instead, so a complete flushed message is never lost and never glued.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tracing::{info, warn};
use zper_wire::Records;

use crate::index::SparseIndex;
use crate::segment::{file_name, parse_file_name, Segment};
use crate::topic::TopicState;
use crate::writing::sync_dir;
use crate::{StoreError, TopicLog};

const SCAN_CHUNK: usize = 4 << 20;

impl TopicLog {
    /// Opens (creating if needed) the topic directory `dir`, opens every segment and recovers the
    /// newest one. A topic with no segment gets an empty `00000000000000000000.dat`.
    pub(crate) fn open(
        name: &str,
        dir: &Path,
        segment_size: u64,
        allow_empty: bool,
    ) -> Result<TopicLog, StoreError> {
        fs::create_dir_all(dir).map_err(|e| StoreError::io("create topic dir", dir, e))?;
        let mut starts = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| StoreError::io("list", dir, e))? {
            let entry = entry.map_err(|e| StoreError::io("list", dir, e))?;
            if let Some(start) = entry.file_name().to_str().and_then(parse_file_name) {
                starts.push(start);
            }
        }
        starts.sort_unstable();
        if starts.is_empty() {
            starts.push(0);
        }
        let last = starts.len() - 1;
        let mut segments = Vec::with_capacity(starts.len());
        let mut written_end = 0;
        for (i, start) in starts.into_iter().enumerate() {
            let path = dir.join(file_name(start));
            if i == last {
                let file = Segment::open_for_append(&path)
                    .map_err(|e| StoreError::io("open segment", &path, e))?;
                let (index, len) = recover_tail(name, &path, &file, start, allow_empty)?;
                written_end = start + len;
                segments.push(Arc::new(Segment::active(start, &path, file, index)));
            } else {
                segments.push(Arc::new(Segment::closed(start, &path)));
            }
        }
        sync_dir(dir)?;
        Ok(TopicLog {
            name: name.to_owned(),
            dir: dir.to_owned(),
            segment_size,
            state: Mutex::new(TopicState {
                segments,
                written_end,
                flushed_end: written_end,
                pending: 0,
                first_unflushed: None,
                broken: None,
                high_water: None,
                epochs: crate::epochs::load(dir),
                truncations: 0,
            }),
        })
    }
}

/// Scans the newest segment, indexes it and truncates anything after its last complete message.
/// Returns the index and the recovered length in bytes.
fn recover_tail(
    topic: &str,
    path: &Path,
    file: &fs::File,
    start: u64,
    allow_empty: bool,
) -> Result<(SparseIndex, u64), StoreError> {
    let io = |op, e| StoreError::io(op, path, e);
    let file_len = file.metadata().map_err(|e| io("stat", e))?.len();
    let mut index = SparseIndex::live(start);
    let mut pos = 0u64; // relative, at a record boundary
    let mut message_end = 0u64;
    let mut chunk = SCAN_CHUNK;
    while pos < file_len {
        let n = (file_len - pos).min(chunk as u64) as usize;
        let mut buf = vec![0u8; n];
        file.read_exact_at(&mut buf, pos)
            .map_err(|e| io("read", e))?;
        let mut it = Records::with_empty(&buf, allow_empty);
        it.by_ref().for_each(drop);
        index.note_records(start + pos, &buf[..it.valid_bytes()]);
        if it.message_bytes() > 0 {
            message_end = pos + it.message_bytes() as u64;
        }
        let advanced = it.valid_bytes() as u64;
        match it.stop() {
            None => pos += advanced,
            Some(e) if e.is_incomplete() && pos + n as u64 != file_len => {
                // The chunk cut a record: read again from the last whole record.
                if advanced == 0 {
                    chunk = chunk.saturating_mul(2);
                }
                pos += advanced;
            }
            Some(_) => break,
        }
    }
    if message_end < file_len {
        warn!(
            topic,
            path = %path.display(),
            from = file_len,
            to = message_end,
            "truncating torn tail of newest segment"
        );
        file.set_len(message_end).map_err(|e| io("truncate", e))?;
        file.sync_all().map_err(|e| io("fsync", e))?;
        index.truncate(start + message_end);
    } else {
        info!(topic, path = %path.display(), bytes = file_len, "recovered segment");
    }
    Ok((index, message_end))
}
