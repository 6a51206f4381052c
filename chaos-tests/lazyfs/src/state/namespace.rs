//! Namespace changes (create, link, unlink, rename): applied to the backing directory at once
//! and recorded so a power loss can undo what no directory fsync made durable.

use super::*;

impl State {
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
    pub(super) fn move_to_trash(&mut self, rel: &Path) -> R<PathBuf> {
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
    pub(super) fn remove_child(&mut self, parent: u64, name: &OsStr, rel: &Path) -> R<()> {
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
    pub(super) fn is_empty_dir(path: &Path) -> R<bool> {
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
    /// Sets owner and exact permissions of a newly created entry.
    pub(super) fn finish_new(
        &mut self,
        rel: &Path,
        perm: Option<u32>,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        let full = self.full(rel);
        // Best effort: owner as the caller (a container user), as a real filesystem would.
        let _ = std::os::unix::fs::lchown(&full, Some(uid), Some(gid));
        if let Some(perm) = perm {
            fs::set_permissions(&full, Permissions::from_mode(perm)).map_err(errno)?;
        }
        self.attr_of(rel)
    }

    // ---- lookups and attributes -------------------------------------------------------------
    pub(super) fn new_trash(&mut self) -> PathBuf {
        self.trash_seq += 1;
        Path::new(TRASH).join(self.trash_seq.to_string())
    }
    pub(super) fn record(&mut self, op: NsOp, mut waiting: Vec<u64>) {
        waiting.dedup();
        self.log.push(Pending { op, waiting });
    }
}
