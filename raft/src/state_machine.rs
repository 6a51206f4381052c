//! The openraft state machine over [`Metadata`]: applied in memory, snapshotted into a file in
//! the Raft directory ([`crate::snapshot_file`]; earlier versions used the RocksDB column family
//! `snapshot`, still read), restored from the snapshot on start; openraft then re-applies the
//! committed log entries after it.

use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, RaftSnapshotBuilder, StorageError,
    StorageIOError, StoredMembership,
};
use rocksdb::DB;
use serde::{Deserialize, Serialize};

use crate::log_store::CF_SNAPSHOT;
use crate::metadata::{Applied, Command, CommandResult, Metadata, MetadataError};
use crate::snapshot_file::{self, decode_state, encode_state, StoredSnapshot};
use crate::{NodeEndpoints, NodeId, TypeConfig};

type StorageResult<T> = Result<T, StorageError<NodeId>>;

const KEY_SNAPSHOT: &[u8] = b"current";

/// What the state machine holds: the metadata plus what openraft needs to know about it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedState {
    /// Last log entry applied.
    pub last_applied: Option<LogId<NodeId>>,
    /// Last membership applied.
    pub membership: StoredMembership<NodeId, NodeEndpoints>,
    /// The cluster metadata.
    pub metadata: Metadata,
}

/// One applied Dolly Put, as the leader publishes it (`dolly.md` §5.1: the stored record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DollyUpdate {
    /// The sequence the Put got (its Raft index).
    pub sequence: u64,
    /// Key.
    pub key: Vec<u8>,
    /// Value.
    pub value: Vec<u8>,
}

/// Applied Dolly Puts kept for a slow subscriber of [`StateMachineStore::dolly_updates`].
pub const DOLLY_FEED_CAPACITY: usize = 65_536;

/// The metadata state machine of one node (cheap to clone: shares its state and database).
#[derive(Debug, Clone)]
pub struct StateMachineStore {
    db: Arc<DB>,
    state: Arc<RwLock<AppliedState>>,
    snapshots: Arc<AtomicU64>,
    dolly_feed: tokio::sync::broadcast::Sender<DollyUpdate>,
}

fn sm_error(verb: ErrorVerb, e: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageIOError::new(
        ErrorSubject::StateMachine,
        verb,
        openraft::AnyError::error(e.to_string()),
    )
    .into()
}

impl StateMachineStore {
    /// Opens the state machine, restoring it from the stored snapshot if there is one.
    pub(crate) fn new(db: Arc<DB>) -> StorageResult<Self> {
        let sm = StateMachineStore {
            db,
            state: Arc::new(RwLock::new(AppliedState::default())),
            snapshots: Arc::new(AtomicU64::new(0)),
            dolly_feed: tokio::sync::broadcast::channel(DOLLY_FEED_CAPACITY).0,
        };
        if let Some(stored) = sm.read_snapshot()? {
            let state: AppliedState =
                decode_state(&stored.data).map_err(|e| sm_error(ErrorVerb::Read, e))?;
            *sm.write()? = state;
        }
        Ok(sm)
    }

    /// A copy of the current state (metadata, last applied, membership).
    pub fn state(&self) -> AppliedState {
        self.state.read().map(|s| s.clone()).unwrap_or_default()
    }

    /// Index of the last applied entry (0 before any): a cheap change detector for caches of
    /// the metadata.
    pub fn applied_index(&self) -> u64 {
        self.state
            .read()
            .map(|s| s.last_applied.map_or(0, |l| l.index))
            .unwrap_or(0)
    }

    /// Runs `f` over the current metadata and the index of the last entry it reflects, under
    /// one read lock (a consistent pair).
    pub fn with_applied<R>(&self, f: impl FnOnce(&Metadata, u64) -> R) -> Option<R> {
        self.state
            .read()
            .ok()
            .map(|s| f(&s.metadata, s.last_applied.map_or(0, |l| l.index)))
    }

    /// Runs `f` over the current metadata under the read lock (no copy).
    pub fn with_metadata<R>(&self, f: impl FnOnce(&Metadata) -> R) -> Option<R> {
        self.state.read().ok().map(|s| f(&s.metadata))
    }

    /// Every Dolly Put applied from now on, in log order (the leader's updates PUB, `dolly.md`
    /// §5.4). A receiver more than [`DOLLY_FEED_CAPACITY`] updates behind gets `Lagged`.
    pub fn dolly_updates(&self) -> tokio::sync::broadcast::Receiver<DollyUpdate> {
        self.dolly_feed.subscribe()
    }

    /// The Dolly map and its sequence, read together under one lock (a snapshot in the sense
    /// of `dolly.md` §5.4: every update with a higher sequence comes after it).
    pub fn dolly_snapshot(&self) -> (Vec<DollyUpdate>, u64) {
        self.with_metadata(|m| {
            let records = m
                .dolly
                .iter()
                .map(|(k, r)| DollyUpdate {
                    sequence: r.sequence,
                    key: k.clone(),
                    value: r.value.clone(),
                })
                .collect();
            (records, m.dolly_sequence)
        })
        .unwrap_or_default()
    }

    /// A copy of the cluster part of the metadata (nodes, topics, the Dolly leader) without
    /// Dolly's key/value map and request outcomes, which may be large: what placement, the
    /// controller and the admin views need, cheap enough to take every 100 ms.
    pub fn cluster_metadata(&self) -> Metadata {
        self.with_metadata(|m| Metadata {
            nodes: m.nodes.clone(),
            topics: m.topics.clone(),
            dolly_leader: m.dolly_leader,
            dolly_sequence: m.dolly_sequence,
            ..Metadata::default()
        })
        .unwrap_or_default()
    }

    /// A copy of the current metadata (all of it, Dolly's map included).
    pub fn metadata(&self) -> Metadata {
        self.state
            .read()
            .map(|s| s.metadata.clone())
            .unwrap_or_default()
    }

    fn write(&self) -> StorageResult<std::sync::RwLockWriteGuard<'_, AppliedState>> {
        self.state
            .write()
            .map_err(|_| sm_error(ErrorVerb::Write, "state machine lock poisoned"))
    }

    /// The stored snapshot: the file, else one an earlier version left in the `snapshot`
    /// column family (JSON).
    fn read_snapshot(&self) -> StorageResult<Option<StoredSnapshot>> {
        if let Some(s) =
            snapshot_file::load(self.db.path()).map_err(|e| sm_error(ErrorVerb::Read, e))?
        {
            return Ok(Some(s));
        }
        let cf = self
            .db
            .cf_handle(CF_SNAPSHOT)
            .ok_or_else(|| sm_error(ErrorVerb::Read, "missing column family snapshot"))?;
        let raw = self
            .db
            .get_cf(cf, KEY_SNAPSHOT)
            .map_err(|e| sm_error(ErrorVerb::Read, e))?;
        raw.map(|b| serde_json::from_slice(&b))
            .transpose()
            .map_err(|e| sm_error(ErrorVerb::Read, e))
    }

    /// Saves `stored` as the snapshot file (durable on return) and drops an earlier version's
    /// snapshot from the column family, which the file now supersedes.
    fn save_snapshot(&self, stored: &StoredSnapshot) -> StorageResult<()> {
        snapshot_file::save(self.db.path(), stored).map_err(|e| sm_error(ErrorVerb::Write, e))?;
        if let Some(cf) = self.db.cf_handle(CF_SNAPSHOT) {
            if let Err(e) = self.db.delete_cf(cf, KEY_SNAPSHOT) {
                tracing::warn!(error = %e, "old snapshot not removed from the column family");
            }
        }
        Ok(())
    }
}

impl StateMachineStore {
    /// Applies one (non-batch) command carried by the entry at `index`, publishing an applied
    /// Dolly Put on the updates feed.
    fn apply_one(&self, metadata: &mut Metadata, command: &Command, index: u64) -> CommandResult {
        let before = metadata.dolly_sequence;
        let result = metadata.apply_at(command, index);
        if metadata.dolly_sequence != before {
            if let Command::DollyPut { key, value, .. } = command {
                // No receiver (no Dolly updates socket yet) is not an error.
                let _ = self.dolly_feed.send(DollyUpdate {
                    sequence: metadata.dolly_sequence,
                    key: key.clone(),
                    value: value.clone(),
                });
            }
        }
        result
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        // Encoded under the read lock: no copy of the whole state first.
        let (data, last_applied, membership) = {
            let state = self
                .state
                .read()
                .map_err(|_| sm_error(ErrorVerb::Read, "state machine lock poisoned"))?;
            let data =
                encode_state::<AppliedState>(&state).map_err(|e| sm_error(ErrorVerb::Read, e))?;
            (data, state.last_applied, state.membership.clone())
        };
        let n = self.snapshots.fetch_add(1, Ordering::Relaxed) + 1;
        let snapshot_id = match last_applied {
            Some(l) => format!("{}-{}-{n}", l.leader_id, l.index),
            None => format!("--{n}"),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
            snapshot_id,
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        self.save_snapshot(&stored)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(stored.data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(
        Option<LogId<NodeId>>,
        StoredMembership<NodeId, NodeEndpoints>,
    )> {
        let s = self.state();
        Ok((s.last_applied, s.membership))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<CommandResult>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let mut state = self.write()?;
        let mut out = Vec::new();
        for entry in entries {
            state.last_applied = Some(entry.log_id);
            out.push(match entry.payload {
                EntryPayload::Blank => Ok(Applied::Done),
                EntryPayload::Normal(ref command) => match command {
                    Command::Batch(commands) => Ok(Applied::Batch(
                        commands
                            .iter()
                            .map(|c| match c {
                                Command::Batch(_) => Err(MetadataError::NestedBatch),
                                c => self.apply_one(&mut state.metadata, c, entry.log_id.index),
                            })
                            .collect(),
                    )),
                    c => self.apply_one(&mut state.metadata, c, entry.log_id.index),
                },
                EntryPayload::Membership(ref m) => {
                    state.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                    Ok(Applied::Done)
                }
            });
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, NodeEndpoints>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let data = snapshot.into_inner();
        let state: AppliedState = decode_state(&data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        self.save_snapshot(&StoredSnapshot {
            meta: meta.clone(),
            data,
        })?;
        *self.write()? = state;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        Ok(self.read_snapshot()?.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}
