//! Path-based inode table: every path (relative to the backing directory) the kernel has seen
//! gets a number that stays the same for the life of the mount and follows renames.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The root's inode number (FUSE fixes it at 1).
pub(crate) const ROOT: u64 = 1;

#[derive(Debug)]
pub(crate) struct Inodes {
    paths: HashMap<u64, PathBuf>,
    inos: HashMap<PathBuf, u64>,
    next: u64,
}

impl Inodes {
    pub(crate) fn new() -> Inodes {
        let mut t = Inodes {
            paths: HashMap::new(),
            inos: HashMap::new(),
            next: ROOT + 1,
        };
        t.paths.insert(ROOT, PathBuf::new());
        t.inos.insert(PathBuf::new(), ROOT);
        t
    }

    /// The number of `rel`, assigning a fresh one if the path has none yet.
    pub(crate) fn ino_for(&mut self, rel: &Path) -> u64 {
        if let Some(ino) = self.inos.get(rel) {
            return *ino;
        }
        let ino = self.next;
        self.next += 1;
        self.paths.insert(ino, rel.to_path_buf());
        self.inos.insert(rel.to_path_buf(), ino);
        ino
    }

    /// The current path of `ino`, or `None` when it has none (deleted for good, or unknown).
    pub(crate) fn path(&self, ino: u64) -> Option<&Path> {
        self.paths.get(&ino).map(PathBuf::as_path)
    }

    /// `from` (and everything below it) now lives at `to`. Any mapping `to` had must have been
    /// moved or dropped before.
    pub(crate) fn moved(&mut self, from: &Path, to: &Path) {
        let affected: Vec<(PathBuf, u64)> = self
            .inos
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (old, _) in &affected {
            self.inos.remove(old);
        }
        for (old, ino) in affected {
            let new = match old.strip_prefix(from) {
                Ok(rest) if rest.as_os_str().is_empty() => to.to_path_buf(),
                Ok(rest) => to.join(rest),
                Err(_) => continue,
            };
            self.paths.insert(ino, new.clone());
            self.inos.insert(new, ino);
        }
    }

    /// `rel` (and everything below it) is gone: their numbers keep no path.
    pub(crate) fn dropped(&mut self, rel: &Path) {
        let affected: Vec<PathBuf> = self
            .inos
            .keys()
            .filter(|p| p.starts_with(rel))
            .cloned()
            .collect();
        for p in affected {
            if let Some(ino) = self.inos.remove(&p) {
                self.paths.remove(&ino);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_carry_descendants_and_numbers_stay() {
        let mut t = Inodes::new();
        let a = t.ino_for(Path::new("a"));
        let ab = t.ino_for(Path::new("a/b"));
        let abc = t.ino_for(Path::new("a/b/c"));
        let ax = t.ino_for(Path::new("ax"));
        assert_eq!(t.ino_for(Path::new("a/b")), ab);
        t.moved(Path::new("a"), Path::new("z/y"));
        assert_eq!(t.path(a), Some(Path::new("z/y")));
        assert_eq!(t.path(ab), Some(Path::new("z/y/b")));
        assert_eq!(t.path(abc), Some(Path::new("z/y/b/c")));
        assert_eq!(
            t.path(ax),
            Some(Path::new("ax")),
            "a sibling with a common prefix"
        );
        let fresh = t.ino_for(Path::new("a"));
        assert_ne!(fresh, a);
        t.dropped(Path::new("z"));
        assert_eq!(t.path(abc), None);
        assert_eq!(t.path(ROOT), Some(Path::new("")));
    }
}
