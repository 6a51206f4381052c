//! `zper-lazyfs [--journal] BACKING MOUNTPOINT`: mounts a LazyFs and takes commands on standard
//! input, one a line: `power-loss`, `pending`, `sync`, `quit` (or end of input: clean unmount).
//! `--journal` selects `NamespaceDurability::Journal` (any fsync commits all namespace changes).

use std::io::BufRead;
use std::path::PathBuf;

fn main() -> std::process::ExitCode {
    let mut args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let mut options = zper_lazyfs::Options::default();
    if args.first().is_some_and(|a| a.as_os_str() == "--journal") {
        args.remove(0);
        options.namespace = zper_lazyfs::NamespaceDurability::Journal;
    }
    let [backing, mountpoint] = args.as_slice() else {
        eprintln!("usage: zper-lazyfs [--journal] BACKING MOUNTPOINT   (then power-loss | pending | sync | quit on stdin)");
        return std::process::ExitCode::from(2);
    };
    let mut fs = match zper_lazyfs::LazyFs::mount_with(backing, mountpoint, options) {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("zper-lazyfs: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!(
        "mounted {} on {}",
        fs.backing().display(),
        fs.mountpoint().display()
    );
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let result = match line.trim() {
            "power-loss" => fs.power_loss().map(|r| format!("power loss: {r}")),
            "pending" => fs.pending().map(|r| format!("pending: {r}")),
            "sync" => fs.sync().map(|()| "synced".to_string()),
            "quit" => break,
            "" => continue,
            other => Ok(format!("unknown command {other:?}")),
        };
        match result {
            Ok(msg) => println!("{msg}"),
            Err(e) => eprintln!("zper-lazyfs: {e}"),
        }
    }
    match fs.unmount() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zper-lazyfs: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
