//! Group commit of the Raft log (issue #16): appends are written to RocksDB without a sync (so
//! they are readable at once, as openraft's `RaftLogStorage::append` requires) and their flush
//! callbacks queue here; one thread syncs the write-ahead log once for every callback waiting
//! and then fires them, in append order. openraft counts an entry towards a quorum (and a
//! follower answers an AppendEntries) only from its callback, so an entry is still durable
//! before it can commit.
//!
//! What it does not do under openraft 0.9 (measured with `perf trace` in 2026-12): its core
//! awaits each append's callback before it runs the next command (`RaftCore::append_to_log`),
//! so appends never overlap and each sync covers one append; the core still waits for the
//! fsync, now on this thread rather than inside a synced RocksDB write. Entries are fewer
//! because proposals are batched ([`crate::batch`]), the leader merging every member's; the
//! grouping here pays off with a Raft core whose log I/O is asynchronous.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Weak};

use rocksdb::DB;
use tracing::warn;

/// Callbacks waiting for a sync, at most; an append past it waits for room.
pub const QUEUE: usize = 4096;

/// What to call once the entries of one append are durable (or could not be made so).
pub(crate) type Flushed = Box<dyn FnOnce(std::io::Result<()>) + Send>;

/// The sending side of the sync thread of one log (cheap to clone).
#[derive(Clone)]
pub(crate) struct Syncer {
    tx: SyncSender<Flushed>,
}

impl std::fmt::Debug for Syncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Syncer")
    }
}

impl Syncer {
    /// Starts the sync thread of `db`. It holds the database weakly (a closed node's database
    /// is not kept open by it) and ends when every [`Syncer`] is gone.
    ///
    /// Errors: the thread could not be spawned.
    pub(crate) fn start(db: &Arc<DB>) -> std::io::Result<Syncer> {
        let weak: Weak<DB> = Arc::downgrade(db);
        Syncer::start_with(move || match weak.upgrade() {
            Some(db) => db
                .flush_wal(true)
                .map_err(|e| std::io::Error::other(e.to_string())),
            None => Err(std::io::Error::other("the Raft log is closed")),
        })
    }

    /// As [`Syncer::start`] with `sync` as what makes the appends so far durable.
    fn start_with(
        sync: impl FnMut() -> std::io::Result<()> + Send + 'static,
    ) -> std::io::Result<Syncer> {
        let (tx, rx) = sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("zper-raft-sync".into())
            .spawn(move || run(rx, sync))?;
        Ok(Syncer { tx })
    }

    /// Queues `flushed` for the next sync; blocks while [`QUEUE`] callbacks wait. A stopped
    /// sync thread fails the callback at once.
    pub(crate) fn after_sync(&self, flushed: Flushed) {
        if let Err(std::sync::mpsc::SendError(flushed)) = self.tx.send(flushed) {
            flushed(Err(std::io::Error::other(
                "the Raft log sync thread stopped",
            )));
        }
    }
}

/// The sync loop: takes every callback waiting, syncs once, fires them in order.
fn run(rx: Receiver<Flushed>, mut sync: impl FnMut() -> std::io::Result<()>) {
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        group.extend(rx.try_iter());
        let result = sync();
        if let Err(e) = &result {
            warn!(error = %e, "raft log sync failed");
        }
        for flushed in group {
            flushed(match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    #[test]
    fn callbacks_fire_after_a_sync_in_order_and_share_syncs() {
        let syncs = Arc::new(AtomicUsize::new(0));
        let counted = syncs.clone();
        let syncer = Syncer::start_with(move || {
            // A slow disk: appends queue up behind the sync in progress.
            std::thread::sleep(std::time::Duration::from_millis(5));
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .expect("start");
        let fired = Arc::new(Mutex::new(Vec::new()));
        let n = 200;
        for i in 0..n {
            let (fired, syncs) = (fired.clone(), syncs.clone());
            syncer.after_sync(Box::new(move |r| {
                // Never before a sync that came after it was queued.
                fired
                    .lock()
                    .expect("lock")
                    .push((i, r.is_ok(), syncs.load(Ordering::SeqCst)));
            }));
        }
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        syncer.after_sync(Box::new(move |_| {
            let _ = done_tx.send(());
        }));
        done_rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("all fired");
        let fired = fired.lock().expect("lock").clone();
        assert_eq!(fired.len(), n);
        assert!(fired
            .iter()
            .enumerate()
            .all(|(k, (i, ok, _))| k == *i && *ok));
        assert!(fired.iter().all(|(_, _, s)| *s >= 1), "each after a sync");
        let total = syncs.load(Ordering::SeqCst);
        assert!(total < n, "{n} appends took {total} syncs: no group commit");
    }

    #[test]
    fn a_failed_sync_fails_its_callbacks_and_a_stopped_thread_fails_at_once() {
        let syncer = Syncer::start_with(|| Err(std::io::Error::other("disk gone"))).expect("start");
        let (tx, rx) = std::sync::mpsc::channel();
        syncer.after_sync(Box::new(move |r| {
            let _ = tx.send(r.map_err(|e| e.to_string()));
        }));
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("fired");
        assert_eq!(got, Err("disk gone".to_owned()));

        let dir = tempfile::tempdir().expect("tempdir");
        let db = crate::log_store::open_db(dir.path()).expect("open");
        let syncer = Syncer::start(&db).expect("start");
        drop(db);
        let (tx, rx) = std::sync::mpsc::channel();
        syncer.after_sync(Box::new(move |r| {
            let _ = tx.send(r.is_err());
        }));
        assert!(rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("fired"));
    }
}
