//! What the LazyFs mount tests share: a mounted fixture and file helpers.
#![allow(dead_code, unused_imports, clippy::unwrap_used, missing_docs)]

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use zper_lazyfs::{LazyFs, NamespaceDurability, Options, PowerLossReport};

/// A mounted LazyFs over a temporary backing directory. `fs` is declared first so that it is
/// unmounted before the directories go.
pub struct Fixture {
    pub fs: LazyFs,
    pub mnt: PathBuf,
    pub backing: PathBuf,
    pub _dir: tempfile::TempDir,
}

pub fn fuse_usable(test: &str) -> bool {
    let root = fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false);
    let dev = Path::new("/dev/fuse").exists();
    if root && dev {
        return true;
    }
    let why = if dev {
        "not running as root"
    } else {
        "/dev/fuse is missing"
    };
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {why} (CI is set, so this is a failure)");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}

pub fn setup(test: &str) -> Option<Fixture> {
    setup_with(test, NamespaceDurability::PerDirectory)
}

pub fn setup_with(test: &str, namespace: NamespaceDurability) -> Option<Fixture> {
    if !fuse_usable(test) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("disk");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&backing).unwrap();
    fs::create_dir(&mnt).unwrap();
    let options = Options {
        sync_backing: false,
        namespace,
        ..Options::default()
    };
    let fs = LazyFs::mount_with(&backing, &mnt, options).unwrap();
    Some(Fixture {
        fs,
        mnt,
        backing,
        _dir: dir,
    })
}

pub fn sync_dir(dir: &Path) {
    File::open(dir).unwrap().sync_all().unwrap();
}

/// Writes a file through the mount and makes it and its name durable.
pub fn durable_file(dir: &Path, name: &str, data: &[u8]) {
    let mut f = File::create(dir.join(name)).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
    sync_dir(dir);
}

pub fn read(path: &Path) -> Option<Vec<u8>> {
    match fs::read(path) {
        Ok(d) => Some(d),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => panic!("read {}: {e}", path.display()),
    }
}

pub fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
