//! The filesystem's state: inode table, open handles, data overlays and the namespace undo log,
//! with every operation the FUSE layer forwards, the power loss and the clean shutdown.
//!
//! Everything here works on the backing directory with ordinary `std::fs` calls; the FUSE glue
//! lives in `fs.rs`. Errors are `Errno`s, answered to the kernel as they are.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, FileTimes, Metadata, OpenOptions, Permissions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo, TimeOrNow};

use crate::inodes::{Inodes, ROOT};
use crate::overlay::{read_fully_at, Overlay};
use crate::{NamespaceDurability, PowerLossReport};

mod durability;
mod namespace;
#[cfg(test)]
mod tests;

/// Name of the hidden directory (at the root of the backing directory) that holds unlinked and
/// replaced entries until their directory is fsynced. Invisible through the mount.
pub(crate) const TRASH: &str = ".lazyfs-trash";

/// Operation results, as the kernel gets them.
pub(crate) type R<T> = Result<T, Errno>;

/// An open regular file.
#[derive(Debug)]
struct Handle {
    ino: u64,
    /// The backing file (read for clean ranges; written only by `fsync`).
    file: File,
    /// `file` was opened read-write.
    fd_writable: bool,
    /// Opened with `O_APPEND`: writes go to the end of the overlay.
    append: bool,
}

/// One entry of an open directory (a snapshot taken by `opendir`).
#[derive(Debug, Clone)]
pub(crate) struct DirEntry {
    pub(crate) ino: u64,
    pub(crate) kind: FileType,
    pub(crate) name: OsString,
}

/// A namespace change already applied to the backing directory, and how to take it back.
/// Directories are named by inode number so that later renames of them do not matter.
#[derive(Debug)]
enum NsOp {
    /// `name` was created in `parent` (file, directory, symlink or node).
    Created { parent: u64, name: OsString },
    /// `name` was unlinked / removed from `parent`; the entry now sits at `trash`.
    Removed {
        parent: u64,
        name: OsString,
        trash: PathBuf,
    },
    /// `from` was renamed to `to`; a replaced target sits at `victim`.
    Renamed {
        from: (u64, OsString),
        to: (u64, OsString),
        victim: Option<PathBuf>,
    },
}

/// A namespace change not yet durable: it becomes durable once every directory in `waiting`
/// has been fsynced after it.
#[derive(Debug)]
struct Pending {
    op: NsOp,
    waiting: Vec<u64>,
}

/// Knobs the state needs (a subset of the public options).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StateOptions {
    /// `fsync` / `fsyncdir` also fsync the backing file / directory.
    pub(crate) sync_backing: bool,
    /// When namespace changes become durable.
    pub(crate) namespace: NamespaceDurability,
}

/// The whole state of one mount.
#[derive(Debug)]
pub(crate) struct State {
    backing: PathBuf,
    opts: StateOptions,
    inodes: Inodes,
    overlays: HashMap<u64, Overlay>,
    handles: HashMap<u64, Handle>,
    dirs: HashMap<u64, Vec<DirEntry>>,
    next_fh: u64,
    log: Vec<Pending>,
    trash_seq: u64,
    /// Set at the power loss / shutdown: every later request fails with `EIO`.
    pub(crate) dead: bool,
}

fn errno(e: io::Error) -> Errno {
    Errno::from(e)
}

fn system_time(secs: i64, nsecs: i64) -> SystemTime {
    let nanos = Duration::from_nanos(nsecs.clamp(0, 999_999_999) as u64);
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + nanos
    }
}

fn file_attr(ino: u64, m: &Metadata, ov: Option<&Overlay>) -> FileAttr {
    let mut size = m.len();
    let mut blocks = m.blocks();
    let mut mtime = system_time(m.mtime(), m.mtime_nsec());
    let mut ctime = system_time(m.ctime(), m.ctime_nsec());
    if let Some(ov) = ov {
        size = ov.size();
        blocks = size.div_ceil(512);
        if let Some(t) = ov.mtime {
            mtime = t;
            ctime = t;
        }
    }
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks,
        atime: system_time(m.atime(), m.atime_nsec()),
        mtime,
        ctime,
        crtime: UNIX_EPOCH,
        kind: FileType::from_std(m.file_type()).unwrap_or(FileType::RegularFile),
        perm: (m.mode() & 0o7777) as u16,
        nlink: m.nlink().try_into().unwrap_or(u32::MAX),
        uid: m.uid(),
        gid: m.gid(),
        rdev: m.rdev().try_into().unwrap_or(0),
        blksize: 4096,
        flags: 0,
    }
}

/// Removes a file, symlink or whole directory tree.
fn remove_any(path: &Path) -> io::Result<()> {
    let m = fs::symlink_metadata(path)?;
    if m.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    }
}

fn exists(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

fn resolve_time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl State {
    /// A fresh state over `backing` (an existing directory): empties the trash left by an
    /// earlier run.
    pub(crate) fn new(backing: &Path, opts: StateOptions) -> io::Result<State> {
        let trash = backing.join(TRASH);
        if exists(&trash) {
            remove_any(&trash)?;
        }
        fs::create_dir(&trash)?;
        Ok(State {
            backing: backing.to_path_buf(),
            opts,
            inodes: Inodes::new(),
            overlays: HashMap::new(),
            handles: HashMap::new(),
            dirs: HashMap::new(),
            next_fh: 1,
            log: Vec::new(),
            trash_seq: 0,
            dead: false,
        })
    }
    fn full(&self, rel: &Path) -> PathBuf {
        self.backing.join(rel)
    }
    fn rel(&self, ino: u64) -> R<PathBuf> {
        self.inodes
            .path(ino)
            .map(Path::to_path_buf)
            .ok_or(Errno::ENOENT)
    }
    fn reserved(parent: u64, name: &OsStr) -> bool {
        parent == ROOT && name == OsStr::new(TRASH)
    }
    /// Path of `name` in directory `parent`, refusing the hidden trash with `err`.
    fn child(&self, parent: u64, name: &OsStr, err: Errno) -> R<PathBuf> {
        if Self::reserved(parent, name) {
            return Err(err);
        }
        Ok(self.rel(parent)?.join(name))
    }
    fn attr_of(&mut self, rel: &Path) -> R<FileAttr> {
        let m = fs::symlink_metadata(self.full(rel)).map_err(errno)?;
        let ino = self.inodes.ino_for(rel);
        Ok(file_attr(ino, &m, self.overlays.get(&ino)))
    }
    pub(crate) fn lookup(&mut self, parent: u64, name: &OsStr) -> R<FileAttr> {
        let rel = self.child(parent, name, Errno::ENOENT)?;
        self.attr_of(&rel)
    }
    pub(crate) fn getattr(&mut self, ino: u64, fh: Option<u64>) -> R<FileAttr> {
        let by_path = self
            .inodes
            .path(ino)
            .map(|rel| fs::symlink_metadata(self.full(rel)));
        let meta = match (by_path, fh.and_then(|fh| self.handles.get(&fh))) {
            (Some(Ok(m)), _) => m,
            (_, Some(h)) if h.ino == ino => h.file.metadata().map_err(errno)?,
            (Some(Err(e)), _) => return Err(errno(e)),
            (None, _) => return Err(Errno::ENOENT),
        };
        Ok(file_attr(ino, &meta, self.overlays.get(&ino)))
    }
    /// Backing length of a regular file, by handle or by path.
    fn backing_len(&self, ino: u64, fh: Option<u64>) -> R<u64> {
        if let Some(h) = fh
            .and_then(|fh| self.handles.get(&fh))
            .filter(|h| h.ino == ino)
        {
            return Ok(h.file.metadata().map_err(errno)?.len());
        }
        let m = fs::metadata(self.full(&self.rel(ino)?)).map_err(errno)?;
        if m.is_dir() {
            return Err(Errno::EISDIR);
        }
        Ok(m.len())
    }
    fn overlay_mut(&mut self, ino: u64, fh: Option<u64>) -> R<&mut Overlay> {
        if !self.overlays.contains_key(&ino) {
            let len = self.backing_len(ino, fh)?;
            self.overlays.insert(ino, Overlay::new(len));
        }
        self.overlays.get_mut(&ino).ok_or(Errno::EIO)
    }
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn setattr(
        &mut self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<u64>,
    ) -> R<FileAttr> {
        if let Some(size) = size {
            self.overlay_mut(ino, fh)?.set_size(size);
        }
        let full = self.inodes.path(ino).map(|rel| self.full(rel));
        let handle = fh
            .and_then(|fh| self.handles.get(&fh))
            .filter(|h| h.ino == ino);
        if let Some(mode) = mode {
            let perm = Permissions::from_mode(mode & 0o7777);
            match (&full, handle) {
                (Some(p), _) => {
                    if !fs::symlink_metadata(p).map_err(errno)?.is_symlink() {
                        fs::set_permissions(p, perm).map_err(errno)?;
                    }
                }
                (None, Some(h)) => h.file.set_permissions(perm).map_err(errno)?,
                (None, None) => return Err(Errno::ENOENT),
            }
        }
        if uid.is_some() || gid.is_some() {
            match (&full, handle) {
                (Some(p), _) => std::os::unix::fs::lchown(p, uid, gid).map_err(errno)?,
                (None, Some(h)) => std::os::unix::fs::fchown(&h.file, uid, gid).map_err(errno)?,
                (None, None) => return Err(Errno::ENOENT),
            }
        }
        if atime.is_some() || mtime.is_some() {
            let mut times = FileTimes::new();
            if let Some(t) = atime {
                times = times.set_accessed(resolve_time(t));
            }
            if let Some(t) = mtime {
                times = times.set_modified(resolve_time(t));
            }
            match (handle, &full) {
                (Some(h), _) => h.file.set_times(times).map_err(errno)?,
                (None, Some(p)) => {
                    let m = fs::symlink_metadata(p).map_err(errno)?;
                    // Symlinks and special files keep their times (opening them would follow
                    // the link or block on a FIFO).
                    if m.is_file() || m.is_dir() {
                        File::open(p)
                            .and_then(|f| f.set_times(times))
                            .map_err(errno)?;
                    }
                }
                (None, None) => return Err(Errno::ENOENT),
            }
            if mtime.is_some() {
                if let Some(ov) = self.overlays.get_mut(&ino) {
                    ov.mtime = None;
                }
            }
        }
        self.getattr(ino, fh)
    }
    pub(crate) fn readlink(&mut self, ino: u64) -> R<Vec<u8>> {
        let target = fs::read_link(self.full(&self.rel(ino)?)).map_err(errno)?;
        Ok(target.as_os_str().as_bytes().to_vec())
    }
    pub(crate) fn access(&mut self, ino: u64) -> R<()> {
        // Root-friendly: no permission checks, only existence.
        fs::symlink_metadata(self.full(&self.rel(ino)?)).map_err(errno)?;
        Ok(())
    }
    pub(crate) fn statfs(&mut self) -> R<nix::sys::statvfs::Statvfs> {
        nix::sys::statvfs::statvfs(&self.backing).map_err(|e| Errno::from_i32(e as i32))
    }

    // ---- namespace ----------------------------------------------------------------------------
    fn new_handle(&mut self, ino: u64, full: &Path, flags: i32) -> R<u64> {
        let (file, fd_writable) = match OpenOptions::new().read(true).write(true).open(full) {
            Ok(f) => (f, true),
            Err(_) => (File::open(full).map_err(errno)?, false),
        };
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(
            fh,
            Handle {
                ino,
                file,
                fd_writable,
                append: flags & libc::O_APPEND != 0,
            },
        );
        if flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE != libc::O_RDONLY {
            self.overlay_mut(ino, Some(fh))?.set_size(0);
        }
        Ok(fh)
    }
    pub(crate) fn open(&mut self, ino: u64, flags: i32) -> R<u64> {
        let full = self.full(&self.rel(ino)?);
        self.new_handle(ino, &full, flags)
    }
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create(
        &mut self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        uid: u32,
        gid: u32,
    ) -> R<(FileAttr, u64)> {
        let rel = self.child(parent, name, Errno::EACCES)?;
        let full = self.full(&rel);
        if exists(&full) {
            if flags & libc::O_EXCL != 0 {
                return Err(Errno::EEXIST);
            }
            let ino = self.inodes.ino_for(&rel);
            let fh = self.new_handle(ino, &full, flags)?;
            return Ok((self.attr_of(&rel)?, fh));
        }
        let perm = mode & 0o7777 & !umask;
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(perm)
            .open(&full)
            .map_err(errno)?;
        self.record(
            NsOp::Created {
                parent,
                name: name.to_os_string(),
            },
            vec![parent],
        );
        let attr = self.finish_new(&rel, Some(perm), uid, gid)?;
        let fh = self.new_handle(attr.ino.0, &full, flags & !libc::O_TRUNC)?;
        Ok((attr, fh))
    }
    pub(crate) fn read(&mut self, fh: u64, offset: u64, size: u32) -> R<Vec<u8>> {
        let h = self.handles.get(&fh).ok_or(Errno::EBADF)?;
        if let Some(ov) = self.overlays.get(&h.ino) {
            return ov.read(&h.file, offset, size).map_err(errno);
        }
        let mut buf = vec![0u8; size as usize];
        let n = read_fully_at(&h.file, &mut buf, offset).map_err(errno)?;
        buf.truncate(n);
        Ok(buf)
    }
    pub(crate) fn write(&mut self, fh: u64, offset: u64, data: &[u8]) -> R<u32> {
        let (ino, append) = {
            let h = self.handles.get(&fh).ok_or(Errno::EBADF)?;
            (h.ino, h.append)
        };
        let ov = self.overlay_mut(ino, Some(fh))?;
        let offset = if append { ov.size() } else { offset };
        ov.write(offset, data);
        u32::try_from(data.len()).map_err(|_| Errno::EINVAL)
    }
    pub(crate) fn fallocate(&mut self, fh: u64, offset: u64, length: u64, mode: i32) -> R<()> {
        if mode == libc::FALLOC_FL_KEEP_SIZE {
            // Reserving space changes nothing anyone can observe.
            return Ok(());
        }
        if mode != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let ino = self.handles.get(&fh).ok_or(Errno::EBADF)?.ino;
        let ov = self.overlay_mut(ino, Some(fh))?;
        let end = offset.saturating_add(length);
        if end > ov.size() {
            ov.set_size(end);
        }
        Ok(())
    }
    pub(crate) fn release(&mut self, fh: u64) {
        if let Some(h) = self.handles.remove(&fh) {
            self.collect_overlay(h.ino);
        }
    }
    /// Drops the overlay of a file that has no name any more and no open handle.
    fn collect_overlay(&mut self, ino: u64) {
        if self.inodes.path(ino).is_none() && !self.handles.values().any(|h| h.ino == ino) {
            self.overlays.remove(&ino);
        }
    }

    // ---- directories ----------------------------------------------------------------------
    pub(crate) fn opendir(&mut self, ino: u64) -> R<u64> {
        let rel = self.rel(ino)?;
        let parent_ino = match rel.parent() {
            Some(p) => self.inodes.ino_for(p),
            None => ROOT,
        };
        let mut entries = vec![
            DirEntry {
                ino,
                kind: FileType::Directory,
                name: ".".into(),
            },
            DirEntry {
                ino: parent_ino,
                kind: FileType::Directory,
                name: "..".into(),
            },
        ];
        for e in fs::read_dir(self.full(&rel)).map_err(errno)? {
            let e = e.map_err(errno)?;
            let name = e.file_name();
            if Self::reserved(ino, &name) {
                continue;
            }
            let kind = e
                .file_type()
                .ok()
                .and_then(FileType::from_std)
                .unwrap_or(FileType::RegularFile);
            let child = self.inodes.ino_for(&rel.join(&name));
            entries.push(DirEntry {
                ino: child,
                kind,
                name,
            });
        }
        let fh = self.next_fh;
        self.next_fh += 1;
        self.dirs.insert(fh, entries);
        Ok(fh)
    }
    pub(crate) fn readdir(&mut self, fh: u64, offset: u64) -> R<Vec<DirEntry>> {
        let entries = self.dirs.get(&fh).ok_or(Errno::EBADF)?;
        Ok(entries
            .iter()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
            .cloned()
            .collect())
    }
    pub(crate) fn releasedir(&mut self, fh: u64) {
        self.dirs.remove(&fh);
    }
}
