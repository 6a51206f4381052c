//! The tree keeps the shape issue #14 gave it: the client library compiles no server crate, the
//! modules of a crate import each other one way only (no circles), and no source file grows
//! past ~600 lines. Run from the workspace (it reads the sources and asks `cargo tree`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

/// Crates whose sources are checked.
const CRATES: &[&str] = &[
    "wire",
    "store",
    "meta",
    "raft",
    "http",
    "node",
    "client",
    "cli",
    "testkit",
    "chaos-tests",
    "chaos-tests/lazyfs",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_client_library_compiles_no_server_crate() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "-p",
            "zper-client",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(workspace())
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(tree.contains("zper-client"), "{tree}");
    for server in [
        "rocksdb",
        "librocksdb-sys",
        "openraft",
        "axum",
        "zper-store",
        "zper-raft",
        "zper-http",
        "zper-node",
    ] {
        assert!(
            !tree
                .lines()
                .any(|l| l.split_whitespace().next() == Some(server)),
            "zper-client depends on {server}:\n{tree}"
        );
    }
}

#[test]
fn no_source_file_is_longer_than_about_600_lines() {
    let mut long = Vec::new();
    for c in CRATES {
        let mut files = Vec::new();
        rust_files(&workspace().join(c), &mut files);
        for f in files {
            let lines = std::fs::read_to_string(&f).map_or(0, |t| t.lines().count());
            if lines > 600 {
                long.push(format!("{} ({lines} lines)", f.display()));
            }
        }
    }
    assert!(long.is_empty(), "split these files: {long:#?}");
}

/// The module path of a source file under `src` (`a/b.rs` and `a/b/mod.rs` are `a::b`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The paths after `prefix` (`crate::`, `super::`) in code outside tests and comments.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let code = code.split("#[cfg(test)]").next().unwrap_or("");
    let mut out = Vec::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        let mut rest = line;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().last();
            let after = &rest[i + prefix.len()..];
            if !before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                let path: Vec<String> = after
                    .split("::")
                    .map(|seg| {
                        seg.chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect::<String>()
                    })
                    .take_while(|s| !s.is_empty())
                    .collect();
                out.push(path);
            }
            rest = after;
        }
    }
    out
}

fn circles(src: &Path) -> Vec<Vec<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<String, PathBuf> = files
        .iter()
        .map(|f| (module_of(src, f).join("::"), f.clone()))
        .collect();
    let resolve = |parts: &[String]| {
        (1..=parts.len())
            .rev()
            .map(|n| parts[..n].join("::"))
            .find(|m| modules.contains_key(m))
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, file) in &modules {
        let code = std::fs::read_to_string(file).unwrap_or_default();
        let here: Vec<String> = if m.is_empty() {
            Vec::new()
        } else {
            m.split("::").map(str::to_owned).collect()
        };
        let is_dir = matches!(
            file.file_stem().and_then(|s| s.to_str()),
            Some("mod" | "lib" | "main")
        );
        let mut targets = BTreeSet::new();
        for p in paths_after(&code, "crate::") {
            if let Some(t) = resolve(&p) {
                targets.insert(t);
            }
        }
        // `super::` from a/b.rs is `a`; from a/b/mod.rs it is also `a`.
        let parent: Vec<String> = here[..here.len().saturating_sub(1)].to_vec();
        for p in paths_after(&code, "super::") {
            let mut full = parent.clone();
            full.extend(p);
            if let Some(t) = resolve(&full) {
                if t != parent.join("::") {
                    targets.insert(t);
                }
            }
        }
        let _ = is_dir;
        // A module using its own ancestors' items is not an arrow between rooms.
        targets.retain(|t| !t.is_empty() && t != m && !m.starts_with(&format!("{t}::")));
        edges.insert(m.clone(), targets);
    }
    // Strongly connected components with more than one module are circles.
    let mut found = Vec::new();
    let names: Vec<&String> = edges.keys().collect();
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for t in edges.get(&n).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    todo.push(t.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        names.iter().map(|n| (*n, reach(n))).collect();
    let mut done = BTreeSet::new();
    for n in &names {
        if done.contains(*n) || !reachable[n].contains(*n) {
            continue;
        }
        let comp: Vec<String> = names
            .iter()
            .filter(|o| reachable[n].contains(**o) && reachable[*o].contains(*n))
            .map(|o| (*o).clone())
            .collect();
        done.extend(comp.iter().cloned());
        found.push(comp);
    }
    found
}

#[test]
fn the_modules_of_each_crate_import_each_other_one_way() {
    let mut all = Vec::new();
    for c in CRATES {
        for comp in circles(&workspace().join(c).join("src")) {
            all.push(format!("{c}: {}", comp.join(" <-> ")));
        }
    }
    assert!(all.is_empty(), "import circles: {all:#?}");
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").expect("write");
    std::fs::write(src.join("a.rs"), "use crate::b::X;\n").expect("write");
    std::fs::write(src.join("b.rs"), "use super::a::Y;\n").expect("write");
    std::fs::write(src.join("c.rs"), "use crate::a::Z;\n").expect("write");
    assert_eq!(circles(src), [vec!["a".to_owned(), "b".to_owned()]]);
}
