//! A log's leader-epoch history (Kafka KIP-101): which leader epoch began at which offset, kept
//! in `<topic dir>/leader-epochs` (one `epoch start_offset` line per entry; ZPER ignores files
//! that are not segments, spec §6.1). The leader records its epoch before it appends in it; a
//! replica copies the leader's entries as it fetches. A replica returning after a leader change
//! cuts its log to the leader's end offset for its own newest epoch, so copies never diverge.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use tracing::warn;

use crate::writing::sync_dir;
use crate::{StoreError, TopicLog};

/// File name of the history in a topic directory.
pub const EPOCHS_FILE: &str = "leader-epochs";

/// Reads the history of `dir`; a missing file is an empty history, and a malformed one is
/// treated as empty with a warning (the replica then re-fetches from the leader's first epoch).
pub(crate) fn load(dir: &Path) -> Vec<(u64, u64)> {
    let path = dir.join(EPOCHS_FILE);
    let Ok(text) = fs::read_to_string(&path) else {
        return Vec::new();
    };
    let mut out: Vec<(u64, u64)> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.split_whitespace();
        let parsed = match (parts.next(), parts.next(), parts.next()) {
            (Some(e), Some(s), None) => e.parse().ok().zip(s.parse().ok()),
            _ => None,
        };
        match parsed {
            Some((e, s)) if out.last().is_none_or(|&(le, ls)| e > le && s >= ls) => {
                out.push((e, s));
            }
            _ => {
                warn!(path = %path.display(), line, "malformed leader-epoch history ignored");
                return Vec::new();
            }
        }
    }
    out
}

fn store(dir: &Path, entries: &[(u64, u64)]) -> Result<(), StoreError> {
    let path: PathBuf = dir.join(EPOCHS_FILE);
    let tmp = dir.join(format!("{EPOCHS_FILE}.tmp"));
    let io = |op, e| StoreError::io(op, &tmp, e);
    let mut f = fs::File::create(&tmp).map_err(|e| io("create", e))?;
    for (e, s) in entries {
        writeln!(f, "{e} {s}").map_err(|e| io("write", e))?;
    }
    f.sync_all().map_err(|e| io("fsync", e))?;
    fs::rename(&tmp, &path).map_err(|e| StoreError::io("rename", &path, e))?;
    sync_dir(dir)
}

impl TopicLog {
    /// The leader-epoch history, `(epoch, start offset)` ascending.
    pub fn epochs(&self) -> Result<Vec<(u64, u64)>, StoreError> {
        Ok(self.lock()?.epochs.clone())
    }

    /// Newest epoch in the history.
    pub fn last_epoch(&self) -> Result<Option<u64>, StoreError> {
        Ok(self.lock()?.epochs.last().map(|(e, _)| *e))
    }

    /// Records that `epoch` begins at `start` (durably) if it is newer than the newest entry;
    /// an older or equal epoch changes nothing. `start` is capped at the written end.
    ///
    /// Errors: I/O writing the history file.
    pub fn assign_epoch(&self, epoch: u64, start: u64) -> Result<(), StoreError> {
        let mut st = self.lock()?;
        if st.epochs.last().is_some_and(|(e, _)| *e >= epoch) {
            return Ok(());
        }
        let start = start
            .min(st.written_end)
            .max(st.epochs.last().map_or(0, |(_, s)| *s));
        let mut next = st.epochs.clone();
        next.push((epoch, start));
        store(&self.dir, &next)?;
        st.epochs = next;
        Ok(())
    }

    /// The leader's answer to "where does my epoch `epoch` end?": the start of the first newer
    /// epoch in this history, or the written end when none is newer. `None` (a replica with no
    /// history) gets the start of the oldest epoch, 0 without history.
    pub fn end_offset_for(&self, epoch: Option<u64>) -> Result<u64, StoreError> {
        let st = self.lock()?;
        Ok(match epoch {
            None => st.epochs.first().map_or(0, |(_, s)| *s),
            Some(e) => st
                .epochs
                .iter()
                .find(|(x, _)| *x > e)
                .map_or(st.written_end, |(_, s)| *s),
        })
    }

    /// Drops history entries starting at or after `offset` (after a truncation to it).
    pub(crate) fn trim_epochs(&self, offset: u64) -> Result<(), StoreError> {
        let mut st = self.lock()?;
        if st.epochs.iter().all(|(_, s)| *s < offset) {
            return Ok(());
        }
        let next: Vec<(u64, u64)> = st
            .epochs
            .iter()
            .copied()
            .filter(|(_, s)| *s < offset)
            .collect();
        store(&self.dir, &next)?;
        st.epochs = next;
        Ok(())
    }
}
