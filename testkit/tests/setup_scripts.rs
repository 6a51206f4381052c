//! The README's two set-up commands, `scripts/run` and `scripts/test`, on a "fresh machine"
//! (issue #15 "Set-up"): a PATH of fake `ldconfig`, `id`, `sudo`, `apt-get` and `cargo` stands
//! in for a machine without libclang, and the tests check that the scripts install the missing
//! packages (as root), or name them and the command to install them (without root), and then
//! run the cargo command the README documents.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A fake machine: a bin directory shadowing the tools the scripts consult, a log of what
/// `apt-get` and `cargo` were asked, and an empty system root (no libclang under it).
struct Machine {
    dir: tempfile::TempDir,
}

impl Machine {
    /// `uid` is what `id -u` prints; `libclang` whether `ldconfig -p` lists it.
    fn new(uid: u32, libclang: bool) -> Machine {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("bin")).expect("bin");
        let machine = Machine { dir };
        let log = machine.log_path();
        let listed = if libclang {
            "\tlibclang-14.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libclang-14.so.1"
        } else {
            "\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6"
        };
        machine.tool("ldconfig", &format!("echo '{listed}'"));
        machine.tool("id", &format!("echo {uid}"));
        machine.tool("sudo", "exit 1");
        machine.tool(
            "apt-get",
            &format!("echo \"apt-get $*\" >> {}", log.display()),
        );
        machine.tool("cargo", &format!("echo \"cargo $*\" >> {}", log.display()));
        machine.tool("javac", "exit 0");
        // The chart check's Python packages count as present.
        machine.tool("python3", "exit 0");
        // So does libsodium's static library (see `without_libsodium_...`).
        let lib = machine.dir.path().join("usr/lib/x86_64-linux-gnu");
        std::fs::create_dir_all(&lib).expect("lib dir");
        std::fs::write(lib.join("libsodium.a"), b"").expect("libsodium.a");
        machine
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("calls.log")
    }

    /// What `apt-get` and `cargo` were called with, one line each.
    fn calls(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn tool(&self, name: &str, body: &str) {
        let path = self.dir.path().join("bin").join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write tool");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    /// Runs `scripts/<script> args` on this machine.
    fn run(&self, script: &str, args: &[&str]) -> Output {
        let path = format!("{}:/usr/bin:/bin", self.dir.path().join("bin").display());
        Command::new(root().join("scripts").join(script))
            .args(args)
            .env("PATH", path)
            .env("ZPER_SYSROOT", self.dir.path())
            .env_remove("LIBCLANG_PATH")
            .env_remove("CI")
            .output()
            .expect("run script")
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn without_root_the_run_script_names_the_missing_package_and_the_command() {
    let machine = Machine::new(1000, false);
    let out = machine.run("run", &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("libclang-dev: bindgen loads libclang"),
        "{err}"
    );
    assert!(
        err.contains("sudo apt-get install -y libclang-dev"),
        "{err}"
    );
    assert_eq!(machine.calls(), "", "nothing installed, nothing built");
}

#[test]
fn as_root_the_run_script_installs_libclang_then_runs_the_node() {
    let machine = Machine::new(0, false);
    let out = machine.run("run", &["--config", "x.properties"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let calls = machine.calls();
    let lines: Vec<&str> = calls.lines().collect();
    assert_eq!(lines.len(), 3, "{calls}");
    assert_eq!(lines[0], "apt-get update -qq");
    assert_eq!(lines[1], "apt-get install -y -qq libclang-dev");
    assert_eq!(
        lines[2],
        "cargo run --release -p zper -- --config x.properties"
    );
}

#[test]
fn libclang_cpp_alone_does_not_count_as_libclang() {
    // A fresh Debian machine can carry libclang-cpp (from another LLVM package) without
    // libclang; bindgen cannot load it, so the build failed in clang-sys's build script.
    let machine = Machine::new(0, false);
    machine.tool(
        "ldconfig",
        "echo '\tlibclang-cpp.so.14 (libc6,x86-64) => /lib/x86_64-linux-gnu/libclang-cpp.so.14'",
    );
    let llvm = machine.dir.path().join("usr/lib/llvm-14/lib");
    std::fs::create_dir_all(&llvm).expect("llvm dir");
    std::fs::write(llvm.join("libclang-cpp.so.14"), b"").expect("libclang-cpp");
    let out = machine.run("run", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        machine
            .calls()
            .contains("apt-get install -y -qq libclang-dev"),
        "{}",
        machine.calls()
    );
}

#[test]
fn without_libsodium_the_scripts_install_it() {
    // libzmq is linked against static libsodium for CURVE (issue #19).
    let machine = Machine::new(0, true);
    std::fs::remove_file(
        machine
            .dir
            .path()
            .join("usr/lib/x86_64-linux-gnu/libsodium.a"),
    )
    .expect("rm");
    let out = machine.run("run", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("libsodium-dev: libzmq is linked against static libsodium"),
        "{}",
        stderr(&out)
    );
    assert!(
        machine
            .calls()
            .contains("apt-get install -y -qq libsodium-dev"),
        "{}",
        machine.calls()
    );
}

#[test]
fn with_libclang_present_the_scripts_go_straight_to_cargo() {
    let machine = Machine::new(1000, true);
    let out = machine.run("test", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    // jeromq.jar may be missing here: an optional package, so a note, not a failure.
    assert_eq!(
        machine.calls().lines().last(),
        Some("cargo test --workspace")
    );
}

#[test]
fn the_readme_documents_the_two_scripts() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let setup = &readme[readme.find("## Set-up").expect("Set-up section")..];
    let block = &setup[setup.find("```sh").expect("code block")..];
    let block = &block[..block[5..].find("```").expect("block end") + 5];
    let commands: Vec<&str> = block
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(commands, ["scripts/run", "scripts/test"], "{block}");
    // Compose: both spellings are given (Debian packages v1 `docker-compose`).
    assert!(readme.contains("docker-compose up -d") && readme.contains("docker compose up -d"));
    let ci = std::fs::read_to_string(root().join(".ci/run")).expect(".ci/run");
    assert!(
        ci.contains("exec scripts/test"),
        "CI runs the README's test command"
    );
}
