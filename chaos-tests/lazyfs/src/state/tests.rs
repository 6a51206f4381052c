//! The state machine without FUSE: what a power loss keeps and undoes.

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
