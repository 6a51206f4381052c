//! fsync, fsyncdir, the power loss and the clean shutdown: what becomes durable, what is
//! undone.

use super::*;

impl State {
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
    pub(super) fn commit_all(&mut self) {
        for p in std::mem::take(&mut self.log) {
            self.commit(p.op);
        }
    }
    pub(super) fn commit(&mut self, op: NsOp) {
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
    pub(super) fn undo(&mut self, op: NsOp) -> R<()> {
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
