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

    fn new_trash(&mut self) -> PathBuf {
        self.trash_seq += 1;
        Path::new(TRASH).join(self.trash_seq.to_string())
    }

    fn attr_of(&mut self, rel: &Path) -> R<FileAttr> {
        let m = fs::symlink_metadata(self.full(rel)).map_err(errno)?;
        let ino = self.inodes.ino_for(rel);
        Ok(file_attr(ino, &m, self.overlays.get(&ino)))
    }

    fn record(&mut self, op: NsOp, mut waiting: Vec<u64>) {
        waiting.dedup();
        self.log.push(Pending { op, waiting });
    }

    /// Sets owner and exact permissions of a newly created entry.
    fn finish_new(&mut self, rel: &Path, perm: Option<u32>, uid: u32, gid: u32) -> R<FileAttr> {
        let full = self.full(rel);
        // Best effort: owner as the caller (a container user), as a real filesystem would.
        let _ = std::os::unix::fs::lchown(&full, Some(uid), Some(gid));
        if let Some(perm) = perm {
            fs::set_permissions(&full, Permissions::from_mode(perm)).map_err(errno)?;
        }
        self.attr_of(rel)
    }

    // ---- lookups and attributes -------------------------------------------------------------

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

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn mknod(
        &mut self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        let rel = self.child(parent, name, Errno::EACCES)?;
        let full = self.full(&rel);
        let perm = mode & 0o7777 & !umask;
        let kind = mode & libc::S_IFMT;
        if kind == libc::S_IFREG || kind == 0 {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(perm)
                .open(&full)
                .map_err(errno)?;
        } else {
            let sflag = nix::sys::stat::SFlag::from_bits_truncate(kind);
            let m = nix::sys::stat::Mode::from_bits_truncate(perm);
            nix::sys::stat::mknod(&full, sflag, m, u64::from(rdev))
                .map_err(|e| Errno::from_i32(e as i32))?;
        }
        self.record(
            NsOp::Created {
                parent,
                name: name.to_os_string(),
            },
            vec![parent],
        );
        self.finish_new(&rel, Some(perm), uid, gid)
    }

    pub(crate) fn mkdir(
        &mut self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        let rel = self.child(parent, name, Errno::EACCES)?;
        let perm = mode & 0o7777 & !umask;
        fs::DirBuilder::new()
            .mode(perm)
            .create(self.full(&rel))
            .map_err(errno)?;
        self.record(
            NsOp::Created {
                parent,
                name: name.to_os_string(),
            },
            vec![parent],
        );
        self.finish_new(&rel, Some(perm), uid, gid)
    }

    pub(crate) fn symlink(
        &mut self,
        parent: u64,
        name: &OsStr,
        target: &Path,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        let rel = self.child(parent, name, Errno::EACCES)?;
        std::os::unix::fs::symlink(target, self.full(&rel)).map_err(errno)?;
        self.record(
            NsOp::Created {
                parent,
                name: name.to_os_string(),
            },
            vec![parent],
        );
        self.finish_new(&rel, None, uid, gid)
    }

    /// Moves `rel` into the trash; returns where it went.
    fn move_to_trash(&mut self, rel: &Path) -> R<PathBuf> {
        let trash = self.new_trash();
        fs::rename(self.full(rel), self.full(&trash)).map_err(errno)?;
        self.inodes.moved(rel, &trash);
        Ok(trash)
    }

    pub(crate) fn unlink(&mut self, parent: u64, name: &OsStr) -> R<()> {
        let rel = self.child(parent, name, Errno::ENOENT)?;
        if fs::symlink_metadata(self.full(&rel))
            .map_err(errno)?
            .is_dir()
        {
            return Err(Errno::EISDIR);
        }
        self.remove_child(parent, name, &rel)
    }

    /// Moves `parent`/`name` (at `rel`) to the trash and records the removal, so a power
    /// loss before the parent is fsynced can bring it back.
    fn remove_child(&mut self, parent: u64, name: &OsStr, rel: &Path) -> R<()> {
        let trash = self.move_to_trash(rel)?;
        self.record(
            NsOp::Removed {
                parent,
                name: name.to_os_string(),
                trash,
            },
            vec![parent],
        );
        Ok(())
    }

    fn is_empty_dir(path: &Path) -> R<bool> {
        Ok(fs::read_dir(path).map_err(errno)?.next().is_none())
    }

    pub(crate) fn rmdir(&mut self, parent: u64, name: &OsStr) -> R<()> {
        let rel = self.child(parent, name, Errno::ENOENT)?;
        let full = self.full(&rel);
        if !fs::symlink_metadata(&full).map_err(errno)?.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        if !Self::is_empty_dir(&full)? {
            return Err(Errno::ENOTEMPTY);
        }
        self.remove_child(parent, name, &rel)
    }

    pub(crate) fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        noreplace: bool,
    ) -> R<()> {
        let src = self.child(parent, name, Errno::ENOENT)?;
        let dst = self.child(newparent, newname, Errno::EACCES)?;
        let src_meta = fs::symlink_metadata(self.full(&src)).map_err(errno)?;
        if src == dst {
            return Ok(());
        }
        let dst_meta = match fs::symlink_metadata(self.full(&dst)) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(errno(e)),
        };
        let mut victim = None;
        if let Some(dm) = dst_meta {
            if noreplace {
                return Err(Errno::EEXIST);
            }
            if src_meta.is_dir() {
                if !dm.is_dir() {
                    return Err(Errno::ENOTDIR);
                }
                if !Self::is_empty_dir(&self.full(&dst))? {
                    return Err(Errno::ENOTEMPTY);
                }
            } else if dm.is_dir() {
                return Err(Errno::EISDIR);
            }
            victim = Some(self.move_to_trash(&dst)?);
        }
        if let Err(e) = fs::rename(self.full(&src), self.full(&dst)) {
            if let Some(t) = &victim {
                if fs::rename(self.full(t), self.full(&dst)).is_ok() {
                    self.inodes.moved(t, &dst);
                }
            }
            return Err(errno(e));
        }
        self.inodes.moved(&src, &dst);
        self.record(
            NsOp::Renamed {
                from: (parent, name.to_os_string()),
                to: (newparent, newname.to_os_string()),
                victim,
            },
            vec![parent, newparent],
        );
        Ok(())
    }

    // ---- files --------------------------------------------------------------------------------

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

    /// Writes the overlay of `ino` into its backing file and fsyncs it.
    pub(crate) fn fsync(&mut self, ino: u64, fh: u64, datasync: bool) -> R<()> {
        let reopened;
        let file = match self.handles.get(&fh).filter(|h| h.ino == ino) {
            Some(h) if h.fd_writable => &h.file,
            _ => {
                let full = self.full(&self.rel(ino)?);
                reopened = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(full)
                    .map_err(errno)?;
                &reopened
            }
        };
        if let Some(ov) = self.overlays.get(&ino) {
            if ov.is_dirty() {
                ov.apply(file).map_err(errno)?;
            }
        }
        self.overlays.remove(&ino);
        if self.opts.sync_backing {
            if datasync {
                file.sync_data().map_err(errno)?;
            } else {
                file.sync_all().map_err(errno)?;
            }
        }
        if self.opts.namespace == NamespaceDurability::Journal {
            self.commit_all();
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

    /// Makes the namespace changes of directory `ino` durable: pending changes that now have
    /// all their directories synced are committed (trashed entries deleted for good).
    pub(crate) fn fsyncdir(&mut self, ino: u64) -> R<()> {
        for p in &mut self.log {
            if self.opts.namespace == NamespaceDurability::Journal {
                p.waiting.clear();
            } else {
                p.waiting.retain(|d| *d != ino);
            }
        }
        let (done, rest): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.log)
            .into_iter()
            .partition(|p| p.waiting.is_empty());
        self.log = rest;
        for p in done {
            self.commit(p.op);
        }
        if self.opts.sync_backing {
            if let Some(rel) = self.inodes.path(ino) {
                File::open(self.full(rel))
                    .and_then(|d| d.sync_all())
                    .map_err(errno)?;
            }
        }
        Ok(())
    }

    /// Commits every pending namespace change (a journal commit).
    fn commit_all(&mut self) {
        for p in std::mem::take(&mut self.log) {
            self.commit(p.op);
        }
    }

    fn commit(&mut self, op: NsOp) {
        let trash = match op {
            NsOp::Removed { trash, .. } => Some(trash),
            NsOp::Renamed { victim, .. } => victim,
            NsOp::Created { .. } => None,
        };
        if let Some(t) = trash {
            // Best effort: what stays behind is removed with the whole trash later.
            let _ = remove_any(&self.full(&t));
            let gone: Vec<u64> = self
                .overlays
                .keys()
                .copied()
                .filter(|ino| self.inodes.path(*ino).is_some_and(|p| p.starts_with(&t)))
                .collect();
            self.inodes.dropped(&t);
            for ino in gone {
                self.collect_overlay(ino);
            }
        }
    }

    // ---- power loss and shutdown ------------------------------------------------------------

    /// What a power loss would drop right now.
    pub(crate) fn pending(&self) -> PowerLossReport {
        let dirty: Vec<&Overlay> = self.overlays.values().filter(|o| o.is_dirty()).collect();
        PowerLossReport {
            dropped_bytes: dirty.iter().map(|o| o.dirty_bytes()).sum(),
            dropped_files: dirty.len(),
            undone_ops: self.log.len(),
            failed_undos: 0,
        }
    }

    /// The power loss: forgets every overlay and takes back every pending namespace change,
    /// newest first. The state is dead afterwards.
    pub(crate) fn crash(&mut self) -> PowerLossReport {
        self.dead = true;
        let mut report = self.pending();
        report.undone_ops = 0;
        self.overlays.clear();
        self.handles.clear();
        self.dirs.clear();
        let log = std::mem::take(&mut self.log);
        for p in log.into_iter().rev() {
            if self.undo(p.op).is_ok() {
                report.undone_ops += 1;
            } else {
                report.failed_undos += 1;
            }
        }
        let trash = self.backing.join(TRASH);
        let _ = remove_any(&trash);
        let _ = fs::create_dir(&trash);
        report
    }

    fn undo(&mut self, op: NsOp) -> R<()> {
        match op {
            NsOp::Created { parent, name } => {
                let rel = self.rel(parent)?.join(&name);
                remove_any(&self.full(&rel)).map_err(errno)?;
                self.inodes.dropped(&rel);
            }
            NsOp::Removed {
                parent,
                name,
                trash,
            } => {
                let rel = self.rel(parent)?.join(&name);
                if exists(&self.full(&rel)) {
                    return Err(Errno::EEXIST);
                }
                fs::rename(self.full(&trash), self.full(&rel)).map_err(errno)?;
                self.inodes.moved(&trash, &rel);
            }
            NsOp::Renamed { from, to, victim } => {
                let cur = self.rel(to.0)?.join(&to.1);
                let orig = self.rel(from.0)?.join(&from.1);
                if exists(&self.full(&orig)) {
                    return Err(Errno::EEXIST);
                }
                fs::rename(self.full(&cur), self.full(&orig)).map_err(errno)?;
                self.inodes.moved(&cur, &orig);
                if let Some(t) = victim {
                    fs::rename(self.full(&t), self.full(&cur)).map_err(errno)?;
                    self.inodes.moved(&t, &cur);
                }
            }
        }
        Ok(())
    }

    /// A clean shutdown (or `sync(2)`): every overlay is written and fsynced, every pending
    /// namespace change committed.
    pub(crate) fn sync_everything(&mut self) -> io::Result<()> {
        let mut first_err = None;
        let inos: Vec<u64> = self.overlays.keys().copied().collect();
        for ino in inos {
            let Some(rel) = self.inodes.path(ino).map(Path::to_path_buf) else {
                self.collect_overlay(ino);
                continue;
            };
            let res = (|| {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(self.full(&rel))?;
                if let Some(ov) = self.overlays.get(&ino) {
                    ov.apply(&file)?;
                }
                if self.opts.sync_backing {
                    file.sync_all()?;
                }
                Ok::<(), io::Error>(())
            })();
            match res {
                Ok(()) => {
                    self.overlays.remove(&ino);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        self.commit_all();
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The semantics without FUSE: operations on a `State` over a temporary directory.
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn state() -> (tempfile::TempDir, State) {
        let dir = tempfile::tempdir().unwrap();
        let s = State::new(
            dir.path(),
            StateOptions {
                sync_backing: false,
                namespace: NamespaceDurability::PerDirectory,
            },
        )
        .unwrap();
        (dir, s)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != TRASH)
            .collect();
        v.sort();
        v
    }

    fn create(s: &mut State, parent: u64, name: &str) -> (u64, u64) {
        let (attr, fh) = s
            .create(parent, OsStr::new(name), 0o644, 0, libc::O_RDWR, 0, 0)
            .unwrap();
        (attr.ino.0, fh)
    }

    #[test]
    fn unsynced_creates_writes_and_unlinks_are_undone() {
        let (dir, mut s) = state();
        fs::write(dir.path().join("old"), b"old").unwrap();
        let (ino, fh) = create(&mut s, ROOT, "new");
        s.write(fh, 0, b"hello").unwrap();
        s.fsync(ino, fh, false).unwrap();
        assert_eq!(fs::read(dir.path().join("new")).unwrap(), b"hello");
        s.unlink(ROOT, OsStr::new("old")).unwrap();
        assert_eq!(names(dir.path()), ["new"]);
        let report = s.crash();
        assert_eq!(report.undone_ops, 2);
        assert_eq!(report.failed_undos, 0);
        assert_eq!(names(dir.path()), ["old"]);
        assert_eq!(fs::read(dir.path().join("old")).unwrap(), b"old");
        assert_eq!(names(&dir.path().join(TRASH)), Vec::<String>::new());
    }

    #[test]
    fn fsyncdir_commits_and_empties_the_trash() {
        let (dir, mut s) = state();
        fs::write(dir.path().join("final"), b"v1").unwrap();
        let (ino, fh) = create(&mut s, ROOT, "tmp");
        s.write(fh, 0, b"v2").unwrap();
        s.fsync(ino, fh, true).unwrap();
        s.rename(ROOT, OsStr::new("tmp"), ROOT, OsStr::new("final"), false)
            .unwrap();
        assert_eq!(names(&dir.path().join(TRASH)).len(), 1, "the old final");
        s.fsyncdir(ROOT).unwrap();
        assert_eq!(names(&dir.path().join(TRASH)).len(), 0);
        let report = s.crash();
        assert_eq!(report.undone_ops, 0);
        assert_eq!(fs::read(dir.path().join("final")).unwrap(), b"v2");
    }

    #[test]
    fn cross_directory_rename_needs_both_directories() {
        let (dir, mut s) = state();
        fs::create_dir(dir.path().join("a")).unwrap();
        fs::create_dir(dir.path().join("b")).unwrap();
        fs::write(dir.path().join("a/f"), b"x").unwrap();
        let a = s.lookup(ROOT, OsStr::new("a")).unwrap().ino.0;
        let b = s.lookup(ROOT, OsStr::new("b")).unwrap().ino.0;
        s.rename(a, OsStr::new("f"), b, OsStr::new("g"), false)
            .unwrap();
        s.fsyncdir(b).unwrap();
        assert_eq!(s.pending().undone_ops, 1);
        let report = s.crash();
        assert_eq!(report.undone_ops, 1);
        assert!(dir.path().join("a/f").exists());
        assert!(!dir.path().join("b/g").exists());
    }

    #[test]
    fn directory_renames_and_nested_creates_unwind_in_order() {
        let (dir, mut s) = state();
        let d = s
            .mkdir(ROOT, OsStr::new("d"), 0o755, 0, 0, 0)
            .unwrap()
            .ino
            .0;
        let (ino, fh) = create(&mut s, d, "f");
        s.write(fh, 0, b"data").unwrap();
        s.fsync(ino, fh, false).unwrap();
        s.fsyncdir(d).unwrap(); // f is durable in d, but d itself is not
        s.rename(ROOT, OsStr::new("d"), ROOT, OsStr::new("e"), false)
            .unwrap();
        assert_eq!(fs::read(dir.path().join("e/f")).unwrap(), b"data");
        // Reads through the renamed directory still find the file by number.
        assert_eq!(s.read(fh, 0, 10).unwrap(), b"data");
        let report = s.crash();
        assert_eq!(report.undone_ops, 2);
        assert_eq!(names(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn rename_noreplace_and_type_checks() {
        let (dir, mut s) = state();
        fs::write(dir.path().join("x"), b"").unwrap();
        fs::write(dir.path().join("y"), b"").unwrap();
        fs::create_dir(dir.path().join("d")).unwrap();
        let e = s.rename(ROOT, OsStr::new("x"), ROOT, OsStr::new("y"), true);
        assert_eq!(e, Err(Errno::EEXIST));
        let e = s.rename(ROOT, OsStr::new("x"), ROOT, OsStr::new("d"), false);
        assert_eq!(e, Err(Errno::EISDIR));
        let e = s.rename(ROOT, OsStr::new("d"), ROOT, OsStr::new("x"), false);
        assert_eq!(e, Err(Errno::ENOTDIR));
        assert_eq!(s.lookup(ROOT, OsStr::new(TRASH)), Err(Errno::ENOENT));
        assert_eq!(s.pending().undone_ops, 0);
    }

    #[test]
    fn truncate_is_lost_without_fsync() {
        let (dir, mut s) = state();
        fs::write(dir.path().join("f"), b"abcdef").unwrap();
        let ino = s.lookup(ROOT, OsStr::new("f")).unwrap().ino.0;
        let attr = s
            .setattr(ino, None, None, None, Some(2), None, None, None)
            .unwrap();
        assert_eq!(attr.size, 2);
        let fh = s.open(ino, libc::O_RDONLY).unwrap();
        assert_eq!(s.read(fh, 0, 100).unwrap(), b"ab");
        let report = s.crash();
        assert_eq!(report.dropped_files, 1);
        assert_eq!(report.dropped_bytes, 4);
        assert_eq!(fs::read(dir.path().join("f")).unwrap(), b"abcdef");
    }

    #[test]
    fn journal_mode_commits_every_namespace_change_at_any_fsync() {
        let (dir, mut s) = state();
        s.opts.namespace = NamespaceDurability::Journal;
        let d = s
            .mkdir(ROOT, OsStr::new("d"), 0o755, 0, 0, 0)
            .unwrap()
            .ino
            .0;
        let (ino, fh) = create(&mut s, d, "f");
        s.write(fh, 0, b"data").unwrap();
        s.fsync(ino, fh, true).unwrap(); // commits mkdir d and create d/f
        create(&mut s, ROOT, "later"); // not followed by any fsync
        let report = s.crash();
        assert_eq!(report.undone_ops, 1);
        assert_eq!(names(dir.path()), ["d"]);
        assert_eq!(fs::read(dir.path().join("d/f")).unwrap(), b"data");
    }

    #[test]
    fn sync_everything_persists_all() {
        let (dir, mut s) = state();
        let (_ino, fh) = create(&mut s, ROOT, "f");
        s.write(fh, 0, b"kept").unwrap();
        s.sync_everything().unwrap();
        let report = s.crash();
        assert_eq!(report, PowerLossReport::default());
        assert_eq!(fs::read(dir.path().join("f")).unwrap(), b"kept");
    }
}
