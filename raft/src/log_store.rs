//! The Raft log and vote in RocksDB (column families `logs` and `meta`).
//!
//! Durability: votes, appended entries and truncations are written with `sync = true` (an
//! fsync of RocksDB's WAL) before the call returns or the flush callback fires, so a vote that
//! reached only the page cache can never let a node vote twice in one term after a power loss
//! (Raft §5.2; openraft's `RaftLogStorage::save_vote` contract).

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    Entry, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader, StorageError,
    StorageIOError, Vote,
};
use rocksdb::{
    ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB,
};

use crate::{NodeId, TypeConfig};

/// Column family of log entries, keyed by big-endian index.
pub(crate) const CF_LOGS: &str = "logs";
/// Column family of the vote, the last purged log id and the committed log id.
pub(crate) const CF_META: &str = "meta";
/// Column family of the state machine snapshot.
pub(crate) const CF_SNAPSHOT: &str = "snapshot";

const KEY_VOTE: &[u8] = b"vote";
const KEY_LAST_PURGED: &[u8] = b"last_purged";
const KEY_COMMITTED: &[u8] = b"committed";

type StorageResult<T> = Result<T, StorageError<NodeId>>;

/// Opens the database with the three column families.
pub(crate) fn open_db(dir: &Path) -> StorageResult<Arc<DB>> {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    let cfs = [CF_LOGS, CF_META, CF_SNAPSHOT]
        .map(|name| ColumnFamilyDescriptor::new(name, Options::default()));
    DB::open_cf_descriptors(&opts, dir, cfs)
        .map(Arc::new)
        .map_err(|e| StorageIOError::new(ErrorSubject::Store, ErrorVerb::Read, &e).into())
}

pub(crate) fn synced() -> WriteOptions {
    let mut w = WriteOptions::default();
    w.set_sync(true);
    w
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn key_index(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.try_into().ok()?))
}

/// The Raft log and vote of one node (cheap to clone: shares the database).
#[derive(Debug, Clone)]
pub struct LogStore {
    db: Arc<DB>,
}

impl LogStore {
    pub(crate) fn new(db: Arc<DB>) -> Self {
        LogStore { db }
    }

    fn cf(&self, name: &str) -> StorageResult<&rocksdb::ColumnFamily> {
        self.db.cf_handle(name).ok_or_else(|| {
            StorageIOError::new(
                ErrorSubject::Store,
                ErrorVerb::Read,
                openraft::AnyError::error(format!("missing column family {name}")),
            )
            .into()
        })
    }

    fn get_meta<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
        subject: ErrorSubject<NodeId>,
    ) -> StorageResult<Option<T>> {
        let raw = self
            .db
            .get_cf(self.cf(CF_META)?, key)
            .map_err(|e| StorageIOError::new(subject.clone(), ErrorVerb::Read, &e))?;
        raw.map(|b| serde_json::from_slice(&b))
            .transpose()
            .map_err(|e| StorageIOError::new(subject, ErrorVerb::Read, &e).into())
    }

    fn put_meta<T: serde::Serialize>(
        &self,
        key: &[u8],
        value: &T,
        subject: ErrorSubject<NodeId>,
    ) -> StorageResult<()> {
        let bytes = serde_json::to_vec(value)
            .map_err(|e| StorageIOError::new(subject.clone(), ErrorVerb::Write, &e))?;
        self.db
            .put_cf_opt(self.cf(CF_META)?, key, bytes, &synced())
            .map_err(|e| StorageIOError::new(subject, ErrorVerb::Write, &e).into())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let start = match range.start_bound() {
            std::ops::Bound::Included(x) => *x,
            std::ops::Bound::Excluded(x) => x.saturating_add(1),
            std::ops::Bound::Unbounded => 0,
        };
        let from = index_key(start);
        let mut out = Vec::new();
        for item in self.db.iterator_cf(
            self.cf(CF_LOGS)?,
            IteratorMode::From(&from, Direction::Forward),
        ) {
            let (key, value) = item.map_err(|e| StorageIOError::read_logs(&e))?;
            let Some(index) = key_index(&key) else {
                continue;
            };
            if !range.contains(&index) {
                break;
            }
            let entry: Entry<TypeConfig> =
                serde_json::from_slice(&value).map_err(|e| StorageIOError::read_logs(&e))?;
            out.push(entry);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged_log_id: Option<LogId<NodeId>> =
            self.get_meta(KEY_LAST_PURGED, ErrorSubject::Store)?;
        let last = match self
            .db
            .iterator_cf(self.cf(CF_LOGS)?, IteratorMode::End)
            .next()
        {
            None => None,
            Some(item) => {
                let (_, value) = item.map_err(|e| StorageIOError::read_logs(&e))?;
                let entry: Entry<TypeConfig> =
                    serde_json::from_slice(&value).map_err(|e| StorageIOError::read_logs(&e))?;
                Some(entry.log_id)
            }
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id: last.or(last_purged_log_id),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        self.put_meta(KEY_VOTE, vote, ErrorSubject::Vote)
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        self.get_meta(KEY_VOTE, ErrorSubject::Vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        self.put_meta(KEY_COMMITTED, &committed, ErrorSubject::Store)
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        Ok(self
            .get_meta::<Option<LogId<NodeId>>>(KEY_COMMITTED, ErrorSubject::Store)?
            .flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let cf = self.cf(CF_LOGS)?;
        let mut batch = WriteBatch::default();
        for entry in entries {
            let value = serde_json::to_vec(&entry).map_err(|e| StorageIOError::write_logs(&e))?;
            batch.put_cf(cf, index_key(entry.log_id.index), value);
        }
        // One synced batch: durable before openraft is told.
        let result = self.db.write_opt(batch, &synced());
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(StorageIOError::write_logs(&e).into())
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let cf = self.cf(CF_LOGS)?;
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(cf, index_key(log_id.index), index_key(u64::MAX));
        batch.delete_cf(cf, index_key(u64::MAX));
        self.db
            .write_opt(batch, &synced())
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        // Record the purge point first: entries at or before it are ignored from then on.
        self.put_meta(KEY_LAST_PURGED, &log_id, ErrorSubject::Store)?;
        let cf = self.cf(CF_LOGS)?;
        self.db
            .delete_range_cf(cf, index_key(0), index_key(log_id.index.saturating_add(1)))
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }
}
