//! A replicated log's high-water mark, kept across restarts (issue #13, defect 1) in
//! `<topic dir>/high-water` (one decimal offset; ZPER ignores files that are not segments,
//! spec `zper.md` §6.1). Kafka keeps the same thing in its `replication-offset-checkpoint`.
//!
//! A node that restarts serves nothing above the mark it last recorded, so a reader never sees
//! bytes a new leader may cut. The file is written at most once per [`CHECKPOINT_EVERY`] while
//! the mark rises, without fsync: losing it, or finding it empty after a power loss, only makes
//! the restarted mark lower (0), never higher. A truncation below it rewrites it durably before
//! anything else is appended.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use tracing::warn;

use crate::writing::sync_dir;
use crate::StoreError;

/// File name of the checkpoint in a topic directory.
pub const HIGH_WATER_FILE: &str = "high-water";

/// Longest time a risen mark goes unrecorded (a restart then serves up to this much less
/// until replication confirms the rest).
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// The mark a log opened from `dir` starts at: the recorded one; 0 for a replicated log
/// (one with a leader-epoch history) whose record is missing or damaged; `None` for a log
/// that was never replicated (ZPER's single-node behaviour: readers see what is flushed).
pub(crate) fn load(dir: &Path, replicated: bool) -> Option<u64> {
    let path = dir.join(HIGH_WATER_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(v) => Some(v),
            Err(_) => {
                warn!(path = %path.display(), "damaged high-water checkpoint: starting from 0");
                Some(0)
            }
        },
        Err(_) if replicated => Some(0),
        Err(_) => None,
    }
}

/// Records `mark` for the log in `dir`; with `durable`, fsynced together with its directory
/// before returning.
///
/// Errors: I/O writing or renaming the file.
pub(crate) fn store(dir: &Path, mark: u64, durable: bool) -> Result<(), StoreError> {
    let path = dir.join(HIGH_WATER_FILE);
    let tmp = dir.join(format!("{HIGH_WATER_FILE}.tmp"));
    let io = |op, e| StoreError::io(op, &tmp, e);
    let mut f = fs::File::create(&tmp).map_err(|e| io("create", e))?;
    writeln!(f, "{mark}").map_err(|e| io("write", e))?;
    if durable {
        f.sync_all().map_err(|e| io("fsync", e))?;
    }
    fs::rename(&tmp, &path).map_err(|e| StoreError::io("rename", &path, e))?;
    if durable {
        sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_record_is_zero_for_a_replicated_log_and_none_for_a_lone_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(load(dir.path(), true), Some(0));
        assert_eq!(load(dir.path(), false), None);
        store(dir.path(), 1234, false).expect("store");
        assert_eq!(load(dir.path(), false), Some(1234));
        store(dir.path(), 99, true).expect("store");
        assert_eq!(load(dir.path(), true), Some(99));
        fs::write(dir.path().join(HIGH_WATER_FILE), "").expect("write");
        assert_eq!(load(dir.path(), false), Some(0), "damaged: never higher");
    }
}
