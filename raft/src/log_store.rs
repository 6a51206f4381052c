//! The Raft log and vote in RocksDB (column families `logs` and `meta`).
//!
//! Durability: votes and truncations are written with `sync = true` (an fsync of RocksDB's WAL)
//! before the call returns, so a vote that reached only the page cache can never let a node
//! vote twice in one term after a power loss (Raft §5.2; openraft's `RaftLogStorage::save_vote`
//! contract). Appended entries are durable before their flush callback fires: they are written
//! unsynced and [`crate::log_sync`] syncs the WAL, once for every append waiting. The committed log id is written unsynced: one lost in a crash only means that
//! fewer entries are applied at start, until the leader says again what is committed.
//!
//! Entries are stored as [`crate::stored`] encodes them (MessagePack; JSON from earlier
//! versions is still read).

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    Entry, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader, StorageError,
    StorageIOError, Vote,
};
use rocksdb::{
    ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB,
};

use crate::log_sync::Syncer;
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

/// Write-ahead log files kept at most, bytes: past this, RocksDB flushes the column families
/// whose memtables still hold the oldest file so it can be deleted. RocksDB's default (four
/// times every memtable, 1.5 GiB for three column families) let a metadata soak grow the
/// directory to 358 MB per node in 4 minutes (issue #13): the vote and snapshot families are
/// written so rarely that their memtables, and with them every WAL file, were never flushed.
pub(crate) const MAX_WAL_BYTES: u64 = 32 << 20;
/// Memtable size of the log column family, bytes (RocksDB's default is 64 MiB).
const LOG_MEMTABLE_BYTES: usize = 8 << 20;
/// Memtable size of the vote/committed and snapshot column families, bytes.
const SMALL_MEMTABLE_BYTES: usize = 2 << 20;

/// Opens the database with the three column families, with bounded write-ahead logs, memtables
/// and info logs (see [`MAX_WAL_BYTES`]).
pub(crate) fn open_db(dir: &Path) -> StorageResult<Arc<DB>> {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_max_total_wal_size(MAX_WAL_BYTES);
    // RocksDB's own info log ("LOG", "LOG.old.*"): keep a few small files, not 1000.
    opts.set_max_log_file_size(1 << 20);
    opts.set_keep_log_file_num(3);
    let cfs = [CF_LOGS, CF_META, CF_SNAPSHOT].map(|name| {
        let mut cf = Options::default();
        cf.set_write_buffer_size(if name == CF_LOGS {
            LOG_MEMTABLE_BYTES
        } else {
            SMALL_MEMTABLE_BYTES
        });
        cf.set_max_write_buffer_number(2);
        ColumnFamilyDescriptor::new(name, cf)
    });
    DB::open_cf_descriptors(&opts, dir, cfs)
        .map(Arc::new)
        .map_err(|e| StorageIOError::new(ErrorSubject::Store, ErrorVerb::Read, &e).into())
}

pub(crate) fn synced() -> WriteOptions {
    let mut w = WriteOptions::default();
    w.set_sync(true);
    w
}

/// An entry as stored ([`crate::stored`]).
pub(crate) fn encode_entry(entry: &Entry<TypeConfig>) -> StorageResult<Vec<u8>> {
    crate::stored::encode(entry).map_err(|e| StorageIOError::write_logs(&e).into())
}

/// A stored entry ([`crate::stored`]: MessagePack, or JSON from earlier versions).
pub(crate) fn decode_entry(bytes: &[u8]) -> StorageResult<Entry<TypeConfig>> {
    crate::stored::decode(bytes).map_err(|e| StorageIOError::read_logs(&e).into())
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
    /// Set while a compaction of purged entries runs on a blocking thread (one at a time).
    compacting: Arc<AtomicBool>,
    /// Makes appends durable, several at a time.
    syncer: Syncer,
}

impl LogStore {
    /// The log over `db`, with its sync thread.
    ///
    /// Errors: the sync thread could not be started.
    pub(crate) fn new(db: Arc<DB>) -> StorageResult<Self> {
        let syncer = Syncer::start(&db)
            .map_err(|e| StorageIOError::new(ErrorSubject::Store, ErrorVerb::Write, &e))?;
        Ok(LogStore {
            db,
            compacting: Arc::new(AtomicBool::new(false)),
            syncer,
        })
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

    /// Writes `value` under `key` in the meta family; synced (durable on return) if `sync`.
    fn put_meta<T: serde::Serialize>(
        &self,
        key: &[u8],
        value: &T,
        subject: ErrorSubject<NodeId>,
        sync: bool,
    ) -> StorageResult<()> {
        let bytes = serde_json::to_vec(value)
            .map_err(|e| StorageIOError::new(subject.clone(), ErrorVerb::Write, &e))?;
        let options = if sync {
            synced()
        } else {
            WriteOptions::default()
        };
        self.db
            .put_cf_opt(self.cf(CF_META)?, key, bytes, &options)
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
            out.push(decode_entry(&value)?);
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
                Some(decode_entry(&value)?.log_id)
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
        self.put_meta(KEY_VOTE, vote, ErrorSubject::Vote, true)
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        self.get_meta(KEY_VOTE, ErrorSubject::Vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        self.put_meta(KEY_COMMITTED, &committed, ErrorSubject::Store, false)
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
            batch.put_cf(cf, index_key(entry.log_id.index), encode_entry(&entry)?);
        }
        // Readable on return; durable when the sync thread fires the callback.
        match self.db.write_opt(batch, &WriteOptions::default()) {
            Ok(()) => {
                self.syncer
                    .after_sync(Box::new(move |r| callback.log_io_completed(r)));
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
        self.put_meta(KEY_LAST_PURGED, &log_id, ErrorSubject::Store, true)?;
        purge_logs(&self.db, self.cf(CF_LOGS)?, log_id.index)?;
        // The compaction gives the space back; it runs beside the Raft core, not in it (issue
        // #16: inline, it held up appends and heartbeats for as long as it took). One at a
        // time: a purge meanwhile is covered by the next one, whose range includes it.
        if !self.compacting.swap(true, Ordering::AcqRel) {
            let (db, compacting, upto) = (self.db.clone(), self.compacting.clone(), log_id.index);
            tokio::task::spawn_blocking(move || {
                if let Some(cf) = db.cf_handle(CF_LOGS) {
                    compact_logs(&db, cf, upto);
                }
                compacting.store(false, Ordering::Release);
            });
        }
        Ok(())
    }
}

/// Deletes log entries up to and including `upto` (a range deletion: it hides them; see
/// [`compact_logs`] for the space).
pub(crate) fn purge_logs(db: &DB, cf: &rocksdb::ColumnFamily, upto: u64) -> StorageResult<()> {
    let end = index_key(upto.saturating_add(1));
    db.delete_range_cf(cf, index_key(0), end)
        .map_err(|e| StorageIOError::write_logs(&e))?;
    Ok(())
}

/// Compacts the log up to and including `upto`, so purged entries give their space back now
/// rather than whenever RocksDB next compacts on its own. Blocks for as long as it takes.
pub(crate) fn compact_logs(db: &DB, cf: &rocksdb::ColumnFamily, upto: u64) {
    let end = index_key(upto.saturating_add(1));
    db.compact_range_cf(cf, None::<&[u8]>, Some(&end[..]));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_bytes(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }

    fn put(index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(2, 1), index),
            payload: openraft::EntryPayload::Normal(crate::metadata::Command::DollyPut {
                key: b"key".to_vec(),
                value: vec![7; 100],
                request: None,
                deadline_ms: 9,
            }),
        }
    }

    #[tokio::test]
    async fn entries_written_as_json_by_earlier_versions_are_still_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open_db(dir.path()).expect("open");
        let logs = db.cf_handle(CF_LOGS).expect("logs");
        let (old, new) = (put(1), put(2));
        let json = serde_json::to_vec(&old).expect("json");
        let packed = encode_entry(&new).expect("msgpack");
        assert!(
            packed.len() * 3 < json.len() * 2,
            "MessagePack {} bytes, JSON {} bytes",
            packed.len(),
            json.len()
        );
        db.put_cf(logs, index_key(1), &json).expect("put");
        db.put_cf(logs, index_key(2), &packed).expect("put");
        let mut store = LogStore::new(db.clone()).expect("store");
        let read = store.try_get_log_entries(1..3).await.expect("read");
        assert_eq!(read, vec![old, new.clone()]);
        let state = store.get_log_state().await.expect("state");
        assert_eq!(state.last_log_id, Some(new.log_id));
        // Neither form is taken for the other: garbage is an error, not an entry.
        assert!(decode_entry(b"{not json").is_err());
        assert!(decode_entry(&[0xc1]).is_err());
    }

    #[test]
    fn the_raft_directory_stays_bounded_while_the_log_is_purged_behind_snapshots() {
        // A metadata soak as issue #13 saw it: a steady stream of log entries, the log purged
        // behind every snapshot (openraft keeps half a snapshot interval), and the vote family
        // written only now and then. 96 MiB pass through; what stays on disk must be bounded
        // by the WAL limit, not by what was ever written.
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open_db(dir.path()).expect("open");
        let logs = db.cf_handle(CF_LOGS).expect("logs");
        let meta = db.cf_handle(CF_META).expect("meta");
        let entry = vec![b'x'; 4096];
        let (total, snapshot_every) = (24_576u64, 1000u64);
        let mut largest = 0;
        for index in 1..=total {
            db.put_cf(logs, index_key(index), &entry).expect("append");
            if index % snapshot_every == 0 {
                db.put_cf(meta, KEY_COMMITTED, index.to_be_bytes())
                    .expect("meta");
                purge_logs(&db, logs, index - snapshot_every / 2).expect("purge");
                compact_logs(&db, logs, index - snapshot_every / 2);
                largest = largest.max(dir_bytes(dir.path()));
            }
        }
        let written = total * entry.len() as u64;
        eprintln!("{written} bytes of entries written, the directory held at most {largest}");
        assert!(
            largest < MAX_WAL_BYTES + (24 << 20),
            "the Raft directory reached {largest} bytes after {written} bytes of entries"
        );
        // What was not purged is still there.
        assert_eq!(
            db.get_cf(logs, index_key(total)).expect("read").as_deref(),
            Some(&entry[..])
        );
        assert!(db.get_cf(logs, index_key(1)).expect("read").is_none());
    }
}
