//! zper's copy of zmq-sys 0.12.0's build script (issue #19). Upstream builds the bundled
//! libzmq 4.3.4 without CURVE (`with_libsodium(None)`); zper links it against the system's
//! static libsodium (Debian's `libsodium-dev`) so the node's libzmq sockets and the CLI can
//! speak CurveZMQ. `ZPER_LIBSODIUM_LIB_DIR` / `ZPER_LIBSODIUM_INCLUDE_DIR` override where
//! libsodium is looked for. Everything else is zmq-sys 0.12.0 unchanged (MIT/Apache-2.0).

use std::path::PathBuf;

/// The directory holding `libsodium.a`, and the one holding `sodium.h`.
fn libsodium() -> (PathBuf, PathBuf) {
    println!("cargo:rerun-if-env-changed=ZPER_LIBSODIUM_LIB_DIR");
    println!("cargo:rerun-if-env-changed=ZPER_LIBSODIUM_INCLUDE_DIR");
    let lib = std::env::var_os("ZPER_LIBSODIUM_LIB_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
            [
                format!("/usr/lib/{arch}-linux-gnu"),
                "/usr/lib".to_owned(),
                "/usr/local/lib".to_owned(),
                "/usr/lib64".to_owned(),
            ]
            .iter()
            .map(PathBuf::from)
            .find(|d| d.join("libsodium.a").exists())
        });
    let include = std::env::var_os("ZPER_LIBSODIUM_INCLUDE_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            ["/usr/include", "/usr/local/include"]
                .iter()
                .map(PathBuf::from)
                .find(|d| d.join("sodium.h").exists())
        });
    match (lib, include) {
        (Some(lib), Some(include)) => (lib, include),
        _ => panic!(
            "libsodium (static library and headers) not found: install Debian's libsodium-dev \
             (scripts/system-packages.sh does), or set ZPER_LIBSODIUM_LIB_DIR and \
             ZPER_LIBSODIUM_INCLUDE_DIR. zper's libzmq needs it for CURVE (issue #19)."
        ),
    }
}

pub fn configure() {
    println!("cargo:rerun-if-changed=build/main.rs");
    println!("cargo:rerun-if-env-changed=PROFILE");
    let (lib, include) = libsodium();
    // zeromq-src prints the search path with `{:?}` (quoted), which rustc does not find.
    println!("cargo:rustc-link-search=native={}", lib.display());
    zeromq_src::Build::new()
        .with_libsodium(Some(zeromq_src::LibLocation::new(lib, include)))
        .build();
}

fn main() {
    configure()
}
