//! The disks under the nodes' data directories (issue #13): each node's `/data` is a directory
//! on the host, bind-mounted into its container, so the test can reach the files (to flip a
//! byte, fill the disk, drop what was never fsynced) while the node runs in its container.
//!
//! - [`DiskKind::Dir`]: a plain directory.
//! - [`DiskKind::Lazy`]: a [`zper_lazyfs::LazyFs`] mount, which keeps writes in memory until they
//!   are fsynced and drops everything unsynced on [`NodeDisk::power_loss`].
//! - [`DiskKind::Small`]: a tmpfs of a few MiB that [`NodeDisk::fill`] fills up.

use std::io::Write;
use std::path::{Path, PathBuf};

/// What a node's data directory lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskKind {
    /// A plain host directory.
    Dir,
    /// A LazyFs mount (power loss drops unsynced writes).
    Lazy,
    /// A tmpfs of this many MiB.
    Small(u32),
}

enum Backing {
    Dir,
    Lazy(zper_lazyfs::LazyFs),
    Small,
}

/// One node's data directory on the host.
pub struct NodeDisk {
    /// The directory bind-mounted as the container's `/data`.
    pub path: PathBuf,
    backing: Backing,
    // Declared last: removed after the mount is gone.
    _dir: tempfile::TempDir,
}

impl NodeDisk {
    /// Creates the directory (and mounts what `kind` needs). Panics with a message when the
    /// machine cannot mount (the chaos suite runs as root, as CI does).
    pub fn new(kind: DiskKind) -> NodeDisk {
        let dir = tempfile::Builder::new()
            .prefix("zper-chaos-disk")
            .tempdir()
            .expect("tempdir");
        let path = dir.path().join("data");
        std::fs::create_dir_all(&path).expect("mkdir data");
        let backing = match kind {
            DiskKind::Dir => Backing::Dir,
            DiskKind::Lazy => {
                let durable = dir.path().join("durable");
                std::fs::create_dir_all(&durable).expect("mkdir durable");
                // Strict per-directory namespace durability (a creation or rename counts only
                // once its directory is fsynced); the host itself never crashes, so the backing
                // files need no fsync of their own.
                let options = zper_lazyfs::Options {
                    sync_backing: false,
                    ..Default::default()
                };
                let fs = zper_lazyfs::LazyFs::mount_with(&durable, &path, options)
                    .unwrap_or_else(|e| panic!("mount LazyFs (needs root and /dev/fuse): {e}"));
                Backing::Lazy(fs)
            }
            DiskKind::Small(mib) => {
                let ok = std::process::Command::new("mount")
                    .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
                    .arg(&path)
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(
                    ok,
                    "mount a {mib} MiB tmpfs at {} (needs root)",
                    path.display()
                );
                Backing::Small
            }
        };
        NodeDisk {
            path,
            backing,
            _dir: dir,
        }
    }

    /// Drops everything not fsynced (the node must be stopped first). Returns what was dropped,
    /// for the log. Panics on a disk that is not [`DiskKind::Lazy`].
    pub fn power_loss(&mut self) -> String {
        match &mut self.backing {
            Backing::Lazy(fs) => match fs.power_loss() {
                Ok(report) => report.to_string(),
                Err(e) => panic!("power loss on {}: {e}", self.path.display()),
            },
            _ => panic!("power loss needs a LazyFs disk"),
        }
    }

    /// Fills all but about `leave` bytes of the disk with a filler file; returns its path
    /// (remove it to give the space back).
    pub fn fill(&self, leave: u64) -> PathBuf {
        let filler = self.path.join("filler");
        let free = free_bytes(&self.path);
        let mut left = free.saturating_sub(leave);
        let block = vec![0xAAu8; 64 * 1024];
        if let Ok(f) = std::fs::File::create(&filler) {
            let mut w = std::io::BufWriter::new(f);
            while left > 0 {
                let n = left.min(block.len() as u64) as usize;
                if w.write_all(&block[..n]).is_err() {
                    break;
                }
                left -= n as u64;
            }
            let _ = w.flush();
        }
        filler
    }

    /// The node's segment files of `topic` (fragment 0), oldest first.
    pub fn segments(&self, topic: &str) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(self.path.join(topic))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "dat"))
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }
}

impl Drop for NodeDisk {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.backing, Backing::Dir) {
            Backing::Lazy(fs) => drop(fs),
            Backing::Small => {
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(&self.path)
                    .status();
            }
            Backing::Dir => {}
        }
    }
}

/// Free bytes of the filesystem holding `path` (from `df`).
pub fn free_bytes(path: &Path) -> u64 {
    std::process::Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(path)
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .nth(1)
                .and_then(|l| l.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Flips one byte of `file` at `at` (XOR 0xFF); the node must be stopped.
pub fn flip_byte(file: &Path, at: u64) {
    let mut bytes = std::fs::read(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    let i = usize::try_from(at)
        .expect("offset")
        .min(bytes.len().saturating_sub(1));
    bytes[i] ^= 0xFF;
    std::fs::write(file, bytes).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
}
