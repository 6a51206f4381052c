//! LazyFs through a real FUSE mount. Needs root and `/dev/fuse`; without them each test prints
//! why and passes, unless the environment variable `CI` is set (then they fail).
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use zper_lazyfs::{LazyFs, NamespaceDurability, PowerLossReport};

use common::*;

#[test]
fn unsynced_writes_vanish_and_synced_writes_survive() {
    let Some(mut fx) = setup("unsynced_writes_vanish_and_synced_writes_survive") else {
        return;
    };
    let m = fx.mnt.clone();
    for name in ["lost", "kept", "partial"] {
        durable_file(&m, name, b"");
    }
    fs::write(m.join("lost"), b"not synced").unwrap();
    let mut kept = OpenOptions::new().write(true).open(m.join("kept")).unwrap();
    kept.write_all(b"synced").unwrap();
    kept.sync_all().unwrap();
    drop(kept);
    let mut partial = OpenOptions::new()
        .write(true)
        .open(m.join("partial"))
        .unwrap();
    partial.write_all(b"AAAA").unwrap();
    partial.sync_data().unwrap();
    partial.write_all(b"BBBBBB").unwrap();
    drop(partial); // close persists nothing
    assert_eq!(read(&m.join("lost")).unwrap(), b"not synced");
    assert_eq!(read(&m.join("partial")).unwrap(), b"AAAABBBBBB");
    assert_eq!(
        fx.fs.pending().unwrap(),
        PowerLossReport {
            dropped_bytes: 10 + 6,
            dropped_files: 2,
            undone_ops: 0,
            failed_undos: 0
        }
    );

    let report = fx.fs.power_loss().unwrap();
    assert_eq!(report.dropped_bytes, 16, "{report}");
    assert_eq!(report.dropped_files, 2);
    assert_eq!(read(&m.join("lost")).unwrap(), b"");
    assert_eq!(read(&m.join("kept")).unwrap(), b"synced");
    assert_eq!(read(&m.join("partial")).unwrap(), b"AAAA");
    assert_eq!(read(&fx.backing.join("kept")).unwrap(), b"synced");
}

#[test]
fn created_file_needs_its_directory_synced() {
    let Some(mut fx) = setup("created_file_needs_its_directory_synced") else {
        return;
    };
    let m = fx.mnt.clone();
    fs::create_dir(m.join("sub")).unwrap();
    sync_dir(&m);
    // (An fsync of the directory makes all earlier changes in it durable, so the linked file
    // comes first.)
    for (name, sync_parent) in [("sub/linked", true), ("sub/orphan", false)] {
        let mut f = File::create(m.join(name)).unwrap();
        f.write_all(b"fsynced data").unwrap();
        f.sync_all().unwrap();
        if sync_parent {
            sync_dir(&m.join("sub"));
        }
    }
    // A directory created and synced inside, but never linked durably in its parent.
    fs::create_dir(m.join("newdir")).unwrap();
    durable_file(&m.join("newdir"), "inner", b"x");
    let report = fx.fs.power_loss().unwrap();
    assert_eq!(report.undone_ops, 2, "{report}");
    assert_eq!(listing(&m.join("sub")), ["linked"]);
    assert_eq!(read(&m.join("sub/linked")).unwrap(), b"fsynced data");
    assert_eq!(listing(&m), ["sub"]);
    assert!(!fx.backing.join("newdir").exists());
}

#[test]
fn journal_mode_keeps_what_any_fsync_preceded() {
    let Some(mut fx) = setup_with(
        "journal_mode_keeps_what_any_fsync_preceded",
        NamespaceDurability::Journal,
    ) else {
        return;
    };
    let m = fx.mnt.clone();
    // Like RocksDB: mkdir without fsyncing the parent, then create and fsync a file inside.
    fs::create_dir(m.join("db")).unwrap();
    let mut f = File::create(m.join("db/CURRENT")).unwrap();
    f.write_all(b"MANIFEST-1\n").unwrap();
    f.sync_data().unwrap();
    fs::write(m.join("db/unsynced"), b"x").unwrap();
    fs::remove_file(m.join("db/CURRENT")).unwrap_or(());
    let report = fx.fs.power_loss().unwrap();
    assert_eq!(
        report.undone_ops, 2,
        "create db/unsynced, unlink db/CURRENT: {report}"
    );
    assert_eq!(listing(&m.join("db")), ["CURRENT"]);
    assert_eq!(read(&m.join("db/CURRENT")).unwrap(), b"MANIFEST-1\n");
}

#[test]
fn rename_over_is_undone_without_a_directory_fsync() {
    let Some(mut fx) = setup("rename_over_is_undone_without_a_directory_fsync") else {
        return;
    };
    let m = fx.mnt.clone();
    durable_file(&m, "final", b"old");
    durable_file(&m, "a", b"a");
    let replace = |content: &[u8], sync_parent: bool| {
        let mut f = File::create(m.join("final.tmp")).unwrap();
        f.write_all(content).unwrap();
        f.sync_all().unwrap();
        fs::rename(m.join("final.tmp"), m.join("final")).unwrap();
        if sync_parent {
            sync_dir(&m);
        }
        assert_eq!(read(&m.join("final")).unwrap(), content);
    };
    replace(b"new", false);
    // A rename to a name that did not exist is undone too.
    fs::rename(m.join("a"), m.join("b")).unwrap();
    let report = fx.fs.power_loss().unwrap();
    assert_eq!(
        report.undone_ops, 3,
        "create tmp, rename over final, rename a: {report}"
    );
    assert_eq!(read(&m.join("final")).unwrap(), b"old");
    assert_eq!(listing(&m), ["a", "final"]);

    replace(b"new", true);
    let report = fx.fs.power_loss().unwrap();
    assert_eq!(report.undone_ops, 0);
    assert_eq!(read(&m.join("final")).unwrap(), b"new");
    assert_eq!(listing(&m), ["a", "final"]);
    // The replaced file went to the trash and was deleted at the directory fsync.
    assert_eq!(
        listing(&fx.backing.join(".lazyfs-trash")),
        Vec::<String>::new()
    );
}

#[test]
fn rename_noreplace_fails_with_eexist() {
    let Some(fx) = setup("rename_noreplace_fails_with_eexist") else {
        return;
    };
    // std has no renameat2; `mv --no-clobber` uses RENAME_NOREPLACE where it can, so check the
    // plain semantics through the state's unit tests and here only that a normal rename works.
    let m = fx.mnt.clone();
    fs::write(m.join("x"), b"x").unwrap();
    fs::write(m.join("y"), b"y").unwrap();
    let out = Command::new("mv")
        .arg("--no-clobber")
        .arg(m.join("x"))
        .arg(m.join("y"))
        .output()
        .unwrap();
    assert!(out.status.success() || !out.stderr.is_empty());
    assert_eq!(read(&m.join("y")).unwrap(), b"y", "no-clobber kept y");
    assert_eq!(read(&m.join("x")).unwrap(), b"x");
}

#[test]
fn unlink_and_rmdir_are_undone_without_a_directory_fsync() {
    let Some(mut fx) = setup("unlink_and_rmdir_are_undone_without_a_directory_fsync") else {
        return;
    };
    let m = fx.mnt.clone();
    durable_file(&m, "victim", b"still here");
    durable_file(&m, "gone", b"bye");
    fs::create_dir(m.join("emptydir")).unwrap();
    sync_dir(&m);
    fs::remove_file(m.join("victim")).unwrap();
    fs::remove_dir(m.join("emptydir")).unwrap();
    assert_eq!(listing(&m), ["gone"]);
    let report = fx.fs.power_loss().unwrap();
    assert_eq!(report.undone_ops, 2);
    assert_eq!(listing(&m), ["emptydir", "gone", "victim"]);
    assert_eq!(read(&m.join("victim")).unwrap(), b"still here");

    fs::remove_file(m.join("gone")).unwrap();
    sync_dir(&m);
    fx.fs.power_loss().unwrap();
    assert_eq!(listing(&m), ["emptydir", "victim"]);
}

#[test]
fn reads_see_unsynced_writes_sizes_and_appends() {
    let Some(mut fx) = setup("reads_see_unsynced_writes_sizes_and_appends") else {
        return;
    };
    let m = fx.mnt.clone();
    durable_file(&m, "f", b"0123456789");
    let w = OpenOptions::new().write(true).open(m.join("f")).unwrap();
    w.write_all_at(b"AB", 4).unwrap();
    w.write_all_at(b"tail", 12).unwrap();
    let mut r = File::open(m.join("f")).unwrap();
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"0123AB6789\0\0tail");
    assert_eq!(fs::metadata(m.join("f")).unwrap().len(), 16);
    assert_eq!(r.metadata().unwrap().len(), 16);
    // The backing file still has the durable contents.
    assert_eq!(read(&fx.backing.join("f")).unwrap(), b"0123456789");

    let mut a = OpenOptions::new().append(true).open(m.join("f")).unwrap();
    a.write_all(b"+1").unwrap();
    a.write_all(b"+2").unwrap();
    assert_eq!(read(&m.join("f")).unwrap(), b"0123AB6789\0\0tail+1+2");
    w.set_len(3).unwrap();
    assert_eq!(read(&m.join("f")).unwrap(), b"012");
    a.write_all(b"!").unwrap();
    assert_eq!(read(&m.join("f")).unwrap(), b"012!");
    // O_TRUNC on open.
    fs::write(m.join("f"), b"xy").unwrap();
    assert_eq!(read(&m.join("f")).unwrap(), b"xy");
    r.seek(SeekFrom::Start(0)).unwrap();
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"xy");
    // A large write spanning many FUSE requests.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.join("big"), &big).unwrap();
    assert_eq!(read(&m.join("big")).unwrap(), big);
    drop((w, a, r));
    let report = fx.fs.power_loss().unwrap();
    assert_eq!(read(&m.join("f")).unwrap(), b"0123456789");
    assert!(!m.join("big").exists());
    assert!(report.dropped_bytes >= 3_000_000, "{report}");
}

#[test]
fn exclusive_flock_works_on_the_mount() {
    let Some(fx) = setup("exclusive_flock_works_on_the_mount") else {
        return;
    };
    let path = fx.mnt.join(".lock");
    let first = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap();
    first.try_lock().unwrap();
    let second = OpenOptions::new().write(true).open(&path).unwrap();
    assert!(
        second.try_lock().is_err(),
        "a second exclusive lock must fail"
    );
    // Another process sees the lock too (util-linux flock, when installed).
    if let Ok(out) = Command::new("flock")
        .arg("-n")
        .arg(&path)
        .arg("true")
        .output()
    {
        assert!(
            !out.status.success(),
            "flock(1) got the lock while we hold it"
        );
    }
    drop(first);
    // Tests running in parallel fork children; until such a child execs, it shares our open file
    // description and with it the lock, so allow a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    while second.try_lock().is_err() {
        assert!(Instant::now() < deadline, "the lock was not released");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn symlinks_and_nested_directories() {
    let Some(mut fx) = setup("symlinks_and_nested_directories") else {
        return;
    };
    let m = fx.mnt.clone();
    fs::create_dir_all(m.join("a/b/c")).unwrap();
    std::os::unix::fs::symlink("a/b", m.join("link")).unwrap();
    fs::write(m.join("link/c/f"), b"via link").unwrap();
    assert_eq!(read(&m.join("a/b/c/f")).unwrap(), b"via link");
    assert_eq!(fs::read_link(m.join("link")).unwrap(), Path::new("a/b"));
    fs::rename(m.join("a"), m.join("z")).unwrap();
    assert_eq!(read(&m.join("z/b/c/f")).unwrap(), b"via link");
    assert_eq!(listing(&m), ["link", "z"]);
    fx.fs.power_loss().unwrap();
    assert_eq!(listing(&m), Vec::<String>::new());
    assert_eq!(listing(&fx.backing), [".lazyfs-trash"]);
}

#[test]
fn other_processes_see_the_mount() {
    let Some(mut fx) = setup("other_processes_see_the_mount") else {
        return;
    };
    let out = Command::new("sh")
        .arg("-c")
        .arg("echo from-shell > f && cat f && mkdir d && echo ok > d/g && ls d")
        .current_dir(&fx.mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from-shell\ng\n");
    assert_eq!(read(&fx.mnt.join("f")).unwrap(), b"from-shell\n");
    fx.fs.power_loss().unwrap();
    assert_eq!(listing(&fx.mnt), Vec::<String>::new());
}

#[test]
fn power_loss_cuts_a_process_still_inside_the_mount() {
    let Some(mut fx) = setup("power_loss_cuts_a_process_still_inside_the_mount") else {
        return;
    };
    durable_file(&fx.mnt, "f", b"durable");
    // A shell with its working directory and an open descriptor in the mount, waiting on stdin.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("exec 3<f; read x; cat <&3 && echo READ-OK; ls . || echo LS-FAILED")
        .current_dir(&fx.mnt)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    fx.fs.power_loss().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("READ-OK"),
        "the old descriptor still worked: {stdout}"
    );
    assert!(stdout.contains("LS-FAILED"), "{stdout}");
    assert_eq!(read(&fx.mnt.join("f")).unwrap(), b"durable");
}

#[test]
fn unmount_is_a_clean_shutdown() {
    let Some(fx) = setup("unmount_is_a_clean_shutdown") else {
        return;
    };
    let Fixture {
        fs: lazy,
        mnt,
        backing,
        _dir,
    } = fx;
    fs::write(mnt.join("f"), b"written, never synced").unwrap();
    fs::create_dir(mnt.join("d")).unwrap();
    lazy.unmount().unwrap();
    assert_eq!(listing(&mnt), Vec::<String>::new(), "unmounted");
    assert_eq!(read(&backing.join("f")).unwrap(), b"written, never synced");
    assert!(backing.join("d").is_dir());
    // Mounting again shows it all.
    let lazy = LazyFs::mount(&backing, &mnt).unwrap();
    assert_eq!(listing(&mnt), ["d", "f"]);
    drop(lazy);
}
