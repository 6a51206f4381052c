//! LazyFs under a random workload checked against a model across power losses, and seen from a
//! Docker container through a bind mount. Needs root and `/dev/fuse` (see lazyfs.rs).
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Atomic replaces, appends with occasional fsyncs, overwrites and directory fsyncs in a loop,
/// with power losses in between; a model says what must survive each.
#[test]
fn workload_matches_the_model_across_power_losses() {
    let Some(mut fx) = setup("workload_matches_the_model_across_power_losses") else {
        return;
    };
    let m = fx.mnt.clone();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rng = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    durable_file(&m, "log", b"");
    let (mut durable_state, mut durable_log): (Option<Vec<u8>>, Vec<u8>) = (None, Vec::new());
    for round in 0..6 {
        let mut visible_state = durable_state.clone();
        let mut visible_log = durable_log.clone();
        let mut synced_log = durable_log.clone();
        let log = OpenOptions::new()
            .read(true)
            .write(true)
            .open(m.join("log"))
            .unwrap();
        for i in 0..60 {
            match rng() % 5 {
                0 => {
                    let v = format!("state {round}/{i} {}", rng()).into_bytes();
                    let mut t = File::create(m.join("state.tmp")).unwrap();
                    t.write_all(&v).unwrap();
                    t.sync_all().unwrap();
                    fs::rename(m.join("state.tmp"), m.join("state")).unwrap();
                    visible_state = Some(v);
                }
                1 => {
                    let n = (rng() % 5000) as usize;
                    let data: Vec<u8> = (0..n).map(|_| rng() as u8).collect();
                    log.write_all_at(&data, visible_log.len() as u64).unwrap();
                    visible_log.extend_from_slice(&data);
                }
                2 => {
                    if visible_log.is_empty() {
                        continue;
                    }
                    let off = (rng() % visible_log.len() as u64) as usize;
                    let n = ((rng() % 300) as usize).min(visible_log.len() - off);
                    let data: Vec<u8> = (0..n).map(|_| rng() as u8).collect();
                    log.write_all_at(&data, off as u64).unwrap();
                    visible_log[off..off + n].copy_from_slice(&data);
                }
                3 => {
                    log.sync_data().unwrap();
                    synced_log = visible_log.clone();
                }
                _ => {
                    sync_dir(&m);
                    durable_state = visible_state.clone();
                }
            }
            if i % 10 == 0 {
                assert_eq!(read(&m.join("state")), visible_state);
                assert_eq!(read(&m.join("log")).unwrap(), visible_log);
            }
        }
        drop(log);
        durable_log = synced_log;
        let report = fx.fs.power_loss().unwrap();
        assert_eq!(report.failed_undos, 0, "round {round}: {report}");
        assert_eq!(read(&m.join("state")), durable_state, "round {round}");
        assert_eq!(read(&m.join("log")).unwrap(), durable_log, "round {round}");
        assert!(!m.join("state.tmp").exists(), "round {round}");
    }
}

/// A bind mount into a Docker container. There is no registry here, so the test imports a tiny
/// image made of the host's `/bin/sh` and the libraries it links; it skips (with a message)
/// when Docker is not usable.
#[test]
fn docker_bind_mount_sees_the_filesystem_and_survives_power_loss() {
    let Some(mut fx) = setup("docker_bind_mount_sees_the_filesystem_and_survives_power_loss")
    else {
        return;
    };
    let Some(image) = probe_image() else {
        return;
    };
    let m = fx.mnt.clone();
    durable_file(&m, "host", b"from-host\n");
    let volume = format!("{}:/data", m.display());
    let run = |user: &str, script: &str| {
        let out = Command::new("docker")
            .args([
                "run",
                "--rm",
                "--network",
                "none",
                "--user",
                user,
                "-v",
                &volume,
                &image,
            ])
            .args(["/bin/sh", "-c", script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "docker run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = run(
        "0:0",
        "read x < /data/host; echo \"$x\"; echo from-container > /data/c",
    );
    assert_eq!(out, "from-host\n");
    assert_eq!(read(&m.join("c")).unwrap(), b"from-container\n");
    // The node image runs as uid 10001: it can write too (no permission checks).
    run("10001:10001", "echo u > /data/u");
    assert_eq!(fs::metadata(m.join("u")).unwrap().uid(), 10001);

    // A container still running in the mount does not hold up the power loss.
    let started = Command::new("docker")
        .args([
            "run",
            "-d",
            "-i",
            "--network",
            "none",
            "-v",
            &volume,
            &image,
        ])
        .args(["/bin/sh", "-c", "cd /data && read x"])
        .output()
        .unwrap();
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let id = String::from_utf8_lossy(&started.stdout).trim().to_string();
    let t = Instant::now();
    let report = fx.fs.power_loss();
    let elapsed = t.elapsed();
    let _ = Command::new("docker").args(["rm", "-f", &id]).output();
    let report = report.unwrap();
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert_eq!(report.undone_ops, 2, "c, u: {report}");
    let out = run("0:0", "for f in /data/*; do echo \"$f\"; done");
    assert_eq!(out, "/data/host\n");
}

/// Imports (once) an image holding `/bin/sh` and its libraries; `None` when Docker is missing.
fn probe_image() -> Option<String> {
    const IMAGE: &str = "zper-lazyfs-probe:latest";
    let skip = |why: &str| {
        eprintln!("SKIPPED docker bind-mount test: {why}");
        None
    };
    match Command::new("docker").arg("info").output() {
        Ok(o) if o.status.success() => {}
        _ => return skip("`docker info` failed (no daemon)"),
    }
    if Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Some(IMAGE.to_string());
    }
    let root = tempfile::tempdir().unwrap();
    let sh = fs::canonicalize("/bin/sh").unwrap();
    let mut files = vec![sh.clone()];
    let ldd = Command::new("ldd").arg(&sh).output().unwrap();
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        for word in line.split_whitespace() {
            if word.starts_with('/') {
                files.push(PathBuf::from(word));
            }
        }
    }
    for f in &files {
        let dest = root.path().join(f.strip_prefix("/").unwrap());
        fs::create_dir_all(dest.parent().unwrap()).unwrap();
        fs::copy(f, &dest).unwrap();
    }
    let bin = root.path().join("bin");
    fs::create_dir_all(&bin).unwrap();
    if !bin.join("sh").exists() {
        fs::copy(&sh, bin.join("sh")).unwrap();
    }
    fs::create_dir_all(root.path().join("data")).unwrap();
    let mut tar = Command::new("tar")
        .arg("-C")
        .arg(root.path())
        .args(["-cf", "-", "."])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let import = Command::new("docker")
        .args(["import", "-", IMAGE])
        .stdin(tar.stdout.take().unwrap())
        .output()
        .unwrap();
    let _ = tar.wait();
    if !import.status.success() {
        return skip(&format!(
            "docker import failed: {}",
            String::from_utf8_lossy(&import.stderr)
        ));
    }
    Some(IMAGE.to_string())
}
