//! A LazyFS-style FUSE filesystem for the chaos tests (after Jepsen's
//! [LazyFS](https://github.com/dsrhaslab/lazyfs)): a passthrough of a *backing* directory that
//! keeps every write in memory until it is fsynced, and every namespace change revocable until
//! its directory is fsynced, so that [`LazyFs::power_loss`] can drop everything a real machine
//! would lose when its power is cut.
//!
//! ```no_run
//! # fn main() -> Result<(), zper_lazyfs::Error> {
//! use std::path::Path;
//! let mut fs = zper_lazyfs::LazyFs::mount(Path::new("/tmp/n1-disk"), Path::new("/tmp/n1-data"))?;
//! // ... bind-mount /tmp/n1-data into a container, run, kill the container ...
//! let report = fs.power_loss()?; // unmount, drop the unsynced state, remount
//! println!("power loss on n1: {report}");
//! // ... start the container again on the same mountpoint ...
//! fs.unmount()?;
//! # Ok(()) }
//! ```
//!
//! # Model
//!
//! The backing directory is the disk: what it holds is durable. Through the mount:
//!
//! * **File data.** `write` (and a size change by `truncate`/`ftruncate`/`O_TRUNC`, or by
//!   `fallocate` mode 0) goes into an in-memory overlay of the file; `read` and `getattr`
//!   see the overlay over the backing contents (read-your-writes, sizes included; `O_APPEND`
//!   writes go to the overlay's end). `fsync` and `fdatasync` on any descriptor of the file write
//!   the overlay into the backing file (and fsync it, see [`Options::sync_backing`]). `close`
//!   (`flush` / `release`) persists nothing; an unsynced file stays readable after close until
//!   the power loss. `fallocate` with `FALLOC_FL_KEEP_SIZE` succeeds and does nothing (nothing
//!   observable changes); other `fallocate` modes (punch hole, zero/collapse/insert range) fail
//!   with `EOPNOTSUPP`.
//! * **Namespace.** `create`/`mknod`, `mkdir`, `symlink`, `unlink`, `rmdir` and `rename` are
//!   applied to the backing directory at once, and logged with an undo step: an unlinked entry
//!   or a rename's replaced target is moved into a hidden trash (`.lazyfs-trash` at the root of
//!   the backing directory, invisible and unusable through the mount) instead of being deleted.
//!   `fsync` on a directory (`fsyncdir`) makes its logged changes durable: a change whose
//!   directories have all been fsynced since it was made is committed (its trashed entry
//!   deleted for good). A rename between two directories needs **both** to be fsynced; a rename
//!   inside one directory, that one. With [`NamespaceDurability::Journal`] instead, any `fsync`,
//!   `fdatasync` or `fsyncdir` through the mount commits every namespace change made before it
//!   (like a journal commit on ext4).
//! * **Power loss.** [`LazyFs::power_loss`] cuts the mount (later requests get `EIO`, the FUSE
//!   connection is aborted so that open descriptors in containers or other processes fail with
//!   `ENOTCONN`), unmounts, drops every overlay, takes back every uncommitted namespace change
//!   newest first (removes created entries — a created directory with everything below it —,
//!   moves unlinked entries back, reverses renames and restores what they replaced), empties
//!   the trash and mounts again at the same mountpoint, with fresh kernel caches.
//!
//! So a file that was created and fsynced but whose directory was never fsynced is gone after
//! the power loss; a `write(tmp); fsync(tmp); rename(tmp, final)` without an fsync of the
//! directory leaves the old `final`; an `unlink` without a directory fsync is undone.
//!
//! # Simplifications
//!
//! * Per-directory durability (the default) is the POSIX worst case, stricter than ext4, whose
//!   journal makes an `fsync` of a new file also persist its directory entry and commits all
//!   earlier metadata changes together. Programs written for ext4 may lose whole directories
//!   under it: RocksDB creates its database directory without fsyncing the parent, so unless
//!   something else fsyncs that parent, the first power loss takes the whole database (synced
//!   files included). [`NamespaceDurability::Journal`] approximates ext4 for such programs.
//! * Metadata changes (`chmod`, `chown`, `utimens`) are applied to the backing directory at once
//!   and never undone. An unsynced file's mtime is the time of its last write (reported from
//!   memory); once synced, the backing file's.
//! * Undo steps name directories by inode, so later renames of those directories are followed.
//!   An undo that cannot apply (its entry or directory is gone for good, or its original name is
//!   taken by a change that was committed meanwhile — possible only with cross-directory renames
//!   whose two directories were fsynced at different times) is skipped and counted in
//!   [`PowerLossReport::failed_undos`].
//! * A file's synced data is written to whatever backing file its name points at: fsyncing a
//!   renamed file and losing the rename leaves the new data under the old name (as on a real
//!   disk, where the data lives with the inode).
//! * Hard links (`link`) fail with `EOPNOTSUPP` (the inode table is path-based); `RENAME_EXCHANGE`
//!   and `RENAME_WHITEOUT` with `EINVAL`; `RENAME_NOREPLACE` is honoured. Extended attributes
//!   are not supported (`ENOSYS`).
//! * No permission checks: the mount uses `allow_other` without `default_permissions`, and the
//!   daemon runs every operation with its own (root) rights, so any container user can read and
//!   write everything. New entries are `lchown`ed to the caller's uid/gid.
//! * File locks (`flock`, `fcntl`) are not forwarded: the kernel handles them locally on the
//!   mount, which is exact as long as all users share one kernel (host and containers do).
//! * Unsynced data lives in memory, in whole: a workload that writes gigabytes without fsync
//!   needs that much memory.
//! * [`LazyFs::unmount`] (and drop) is a clean shutdown: everything pending is written and
//!   committed first, as `umount` of a real filesystem does.
//!
//! # Requirements
//!
//! Linux with `/dev/fuse`. As root the filesystem is mounted with `mount(2)` directly, which
//! needs no `fusermount` and no `/etc/fuse.conf`; as another user `fuser` falls back to
//! `fusermount3` (package `fuse3`), and `allow_other` then needs `user_allow_other` in
//! `/etc/fuse.conf`. The power loss aborts the connection through the FUSE control filesystem,
//! which [`LazyFs::mount`] mounts at `/sys/fs/fuse/connections` when it is missing (it needs
//! root); without it, a power loss still works when nothing outside the mount's own namespace
//! holds the filesystem (a container that is not yet gone, an open descriptor), and otherwise
//! waits up to [`Options::stop_timeout`] and goes on (the old session only ever answers `EIO`).

mod fs;
mod inodes;
mod overlay;
mod state;

use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, Config, MountOption, SessionACL};

use crate::fs::LazyFsImpl;
use crate::state::{State, StateOptions};

/// Where the FUSE control filesystem lives.
const FUSECTL: &str = "/sys/fs/fuse/connections";

/// Errors of mounting, unmounting and the power loss.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file-system call on the backing directory or the mountpoint failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path it was done on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The backing directory and the mountpoint are the same directory, or one is inside the
    /// other.
    #[error("backing directory {} and mountpoint {} overlap", backing.display(), mountpoint.display())]
    Overlap {
        /// The backing directory.
        backing: PathBuf,
        /// The mountpoint.
        mountpoint: PathBuf,
    },
    /// Mounting the FUSE filesystem failed.
    #[error("mount lazyfs at {}: {source}", mountpoint.display())]
    Mount {
        /// The mountpoint.
        mountpoint: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The filesystem is not mounted (an earlier remount failed).
    #[error("lazyfs at {} is not mounted", mountpoint.display())]
    NotMounted {
        /// The mountpoint.
        mountpoint: PathBuf,
    },
}

impl Error {
    fn io(what: &'static str, path: &Path, source: io::Error) -> Error {
        Error::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// What a power loss dropped (or, from [`LazyFs::pending`], would drop).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PowerLossReport {
    /// Unsynced bytes: data written since the last fsync of its file, plus bytes a pending
    /// shrink had cut off (which come back).
    pub dropped_bytes: u64,
    /// Files with unsynced data or size changes.
    pub dropped_files: usize,
    /// Namespace changes (create, mkdir, symlink, unlink, rmdir, rename) taken back.
    pub undone_ops: usize,
    /// Namespace changes that could not be taken back (see the crate docs); 0 in any ordinary
    /// workload.
    pub failed_undos: usize,
}

impl fmt::Display for PowerLossReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dropped {} unsynced bytes in {} files, undid {} namespace operations",
            self.dropped_bytes, self.dropped_files, self.undone_ops
        )?;
        if self.failed_undos > 0 {
            write!(f, " ({} could not be undone)", self.failed_undos)?;
        }
        Ok(())
    }
}

/// When a namespace change (create, mkdir, symlink, unlink, rmdir, rename) becomes durable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NamespaceDurability {
    /// Once its directory has been fsynced (both directories for a rename between two): the
    /// POSIX worst case. A file created and fsynced in a directory that is never fsynced is
    /// lost, and so is a directory created by a program that does not fsync its parent
    /// (RocksDB does not fsync the parent of its database directory, for one).
    #[default]
    PerDirectory,
    /// At the next `fsync`, `fdatasync` or `fsyncdir` of anything in the mount, which commits
    /// every change made before it, in the spirit of ext4's journal (`data=ordered`): one
    /// commit makes all earlier metadata changes durable. (ext4 also commits every few
    /// seconds; this mode never commits by time.) File data still needs an fsync of its file.
    Journal,
}

/// Mount options.
#[derive(Debug, Clone)]
pub struct Options {
    /// `fsync`/`fsyncdir` through the mount also fsync the backing file/directory (default
    /// true). The host does not crash in the tests, so turning this off loses nothing there and
    /// makes syncs cheap.
    pub sync_backing: bool,
    /// Mount with `allow_other`, so that other users (and containers) can use the mount
    /// (default true).
    pub allow_other: bool,
    /// How long unmounting waits for the FUSE session to end (default 10 s).
    pub stop_timeout: Duration,
    /// When namespace changes become durable (default [`NamespaceDurability::PerDirectory`]).
    pub namespace: NamespaceDurability,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            sync_backing: true,
            allow_other: true,
            stop_timeout: Duration::from_secs(10),
            namespace: NamespaceDurability::PerDirectory,
        }
    }
}

/// One running FUSE session.
struct Mounted {
    session: BackgroundSession,
    state: Arc<Mutex<State>>,
    /// The FUSE connection's number under `/sys/fs/fuse/connections`.
    conn: Option<u64>,
}

/// A mounted LazyFs: a FUSE view of a backing directory that loses unsynced changes on
/// [`LazyFs::power_loss`]. Dropping it unmounts cleanly (see [`LazyFs::unmount`]).
pub struct LazyFs {
    backing: PathBuf,
    mountpoint: PathBuf,
    options: Options,
    mounted: Option<Mounted>,
}

impl fmt::Debug for LazyFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyFs")
            .field("backing", &self.backing)
            .field("mountpoint", &self.mountpoint)
            .field("mounted", &self.mounted.is_some())
            .finish()
    }
}

/// The kernel's internal `dev_t` (as the FUSE control filesystem names connections) from the
/// user-space encoding `stat` returns.
fn kernel_dev(dev: u64) -> u64 {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    (major << 20) | minor
}

/// Mounts the FUSE control filesystem if it is not there (best effort).
fn ensure_fusectl() {
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|m| m.lines().any(|l| l.contains(" - fusectl ")))
        .unwrap_or(false);
    if !mounted && Path::new(FUSECTL).is_dir() {
        let _ = nix::mount::mount(
            Some("fusectl"),
            FUSECTL,
            Some("fusectl"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        );
    }
}

/// Aborts FUSE connection `conn`: pending and later requests fail with `ENOTCONN` and the
/// session's reads end.
fn abort_connection(conn: u64) {
    let _ = std::fs::write(Path::new(FUSECTL).join(conn.to_string()).join("abort"), "1");
}

impl LazyFs {
    /// Mounts a LazyFs of `backing` (an existing directory, the "disk") at `mountpoint` (an
    /// existing, empty directory), with default [`Options`].
    pub fn mount(backing: &Path, mountpoint: &Path) -> Result<LazyFs, Error> {
        LazyFs::mount_with(backing, mountpoint, Options::default())
    }

    /// Mounts with the given options; see [`LazyFs::mount`].
    pub fn mount_with(
        backing: &Path,
        mountpoint: &Path,
        options: Options,
    ) -> Result<LazyFs, Error> {
        let backing = backing
            .canonicalize()
            .map_err(|e| Error::io("resolve backing directory", backing, e))?;
        // A mountpoint left by a dead session answers ENOTCONN: detach it first.
        if let Err(e) = std::fs::metadata(mountpoint) {
            if e.raw_os_error() == Some(libc::ENOTCONN) {
                let _ = nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH);
            }
        }
        let mountpoint = mountpoint
            .canonicalize()
            .map_err(|e| Error::io("resolve mountpoint", mountpoint, e))?;
        if backing.starts_with(&mountpoint) || mountpoint.starts_with(&backing) {
            return Err(Error::Overlap {
                backing,
                mountpoint,
            });
        }
        ensure_fusectl();
        let mut fs = LazyFs {
            backing,
            mountpoint,
            options,
            mounted: None,
        };
        fs.start()?;
        Ok(fs)
    }

    /// The mountpoint (canonical).
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The backing directory (canonical).
    pub fn backing(&self) -> &Path {
        &self.backing
    }

    fn start(&mut self) -> Result<(), Error> {
        let state = State::new(
            &self.backing,
            StateOptions {
                sync_backing: self.options.sync_backing,
                namespace: self.options.namespace,
            },
        )
        .map_err(|e| Error::io("prepare backing directory", &self.backing, e))?;
        let state = Arc::new(Mutex::new(state));
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName(format!("lazyfs:{}", self.backing.display())),
            MountOption::Subtype("lazyfs".into()),
        ];
        if self.options.allow_other {
            config.acl = SessionACL::All;
        }
        let fs = LazyFsImpl {
            state: state.clone(),
        };
        let session =
            fuser::spawn_mount(fs, &self.mountpoint, &config).map_err(|source| Error::Mount {
                mountpoint: self.mountpoint.clone(),
                source,
            })?;
        let conn = std::fs::metadata(&self.mountpoint)
            .ok()
            .map(|m| kernel_dev(m.dev()));
        self.mounted = Some(Mounted {
            session,
            state,
            conn,
        });
        Ok(())
    }

    /// Ends the session: `crash` freezes the state first and aborts the connection at once;
    /// otherwise a plain unmount is tried first. Returns the (now unused) state.
    fn stop(&mut self, crash: bool) -> Result<Arc<Mutex<State>>, Error> {
        let Some(m) = self.mounted.take() else {
            return Err(Error::NotMounted {
                mountpoint: self.mountpoint.clone(),
            });
        };
        if crash {
            m.state.lock().unwrap_or_else(PoisonError::into_inner).dead = true;
            if let Some(conn) = m.conn {
                abort_connection(conn);
            }
            let _ = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH);
        } else if nix::mount::umount(&self.mountpoint).is_err() {
            // Busy (or already gone): detach, and cut whoever still holds it.
            let _ = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH);
            if let Some(conn) = m.conn {
                abort_connection(conn);
            }
        }
        let deadline = Instant::now() + self.options.stop_timeout;
        while !m.session.guard.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if m.session.guard.is_finished() {
            // The session's own result (an error reading /dev/fuse) is of no use here.
            let _ = m.session.join();
        } else {
            eprintln!(
                "lazyfs: the FUSE session of {} did not end within {:?}; leaving it behind \
                 (it answers EIO from now on)",
                self.mountpoint.display(),
                self.options.stop_timeout
            );
            m.state.lock().unwrap_or_else(PoisonError::into_inner).dead = true;
            drop(m.session);
        }
        Ok(m.state)
    }

    /// Simulates a power loss: cuts and unmounts the filesystem (dropping the kernel's page and
    /// dentry caches), discards every unsynced change (see the crate docs) and mounts it again
    /// at the same mountpoint. Whoever still uses the old mount gets `EIO` / `ENOTCONN`.
    pub fn power_loss(&mut self) -> Result<PowerLossReport, Error> {
        let state = self.stop(true)?;
        let report = state.lock().unwrap_or_else(PoisonError::into_inner).crash();
        self.start()?;
        Ok(report)
    }

    /// What a power loss would drop right now.
    pub fn pending(&self) -> Result<PowerLossReport, Error> {
        let m = self.mounted.as_ref().ok_or_else(|| Error::NotMounted {
            mountpoint: self.mountpoint.clone(),
        })?;
        Ok(m.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pending())
    }

    /// Makes everything durable, like `sync(2)`: writes and fsyncs every overlay and commits
    /// every pending namespace change.
    pub fn sync(&self) -> Result<(), Error> {
        let m = self.mounted.as_ref().ok_or_else(|| Error::NotMounted {
            mountpoint: self.mountpoint.clone(),
        })?;
        m.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sync_everything()
            .map_err(|e| Error::io("sync", &self.backing, e))
    }

    /// Unmounts cleanly: everything pending is made durable (like `umount` of a real
    /// filesystem), then the filesystem is unmounted.
    pub fn unmount(mut self) -> Result<(), Error> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), Error> {
        if self.mounted.is_none() {
            return Ok(());
        }
        let state = self.stop(false)?;
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        state.dead = false;
        let res = state
            .sync_everything()
            .map_err(|e| Error::io("sync", &self.backing, e));
        state.dead = true;
        res
    }
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("lazyfs: unmounting {}: {e}", self.mountpoint.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lazyfs_can_move_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<LazyFs>();
        send_sync::<Error>();
    }

    #[test]
    fn kernel_dev_encoding() {
        // makedev(0, 57) and makedev(8, 1) in glibc's encoding.
        assert_eq!(kernel_dev(57), 57);
        assert_eq!(kernel_dev((8 << 8) | 1), (8 << 20) | 1);
        // minor 300 spills into the high minor bits.
        let dev = (300 & 0xff) | ((300 & !0xff) << 12);
        assert_eq!(kernel_dev(dev), 300);
    }
}
