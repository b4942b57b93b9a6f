//! The shared library's name for the loader: `libvmarena.so.MAJOR` (SONAME), so that programs
//! linked against one major version load only a library of that version. Cargo passes these
//! `rustc-cdylib-link-arg`s to the link of a library that depends on this crate too: the shim
//! (`libvmarena_preload.so`) gets the same SONAME, and carries the same C ABI, so a preloaded
//! shim is the `libvmarena.so.MAJOR` a program linked against the library needs, and the loader
//! maps no second copy (DESIGN.md, section 14; `crates/preload/tests/c/one_space.c`). The exported symbols
//! are the `#[no_mangle]` functions of the C ABI (rustc's own export list); the test
//! `tests/header.rs` holds them equal to the header's declarations.
//!
//! A program linked with `-lvmarena` against the build folder records `libvmarena.so.MAJOR` as
//! the library it needs, so the build folder gets that name too: a relative symbolic link
//! `libvmarena.so.MAJOR -> libvmarena.so` beside the library (`scripts/install.sh` makes the
//! same links in an installation). The folder is found from `OUT_DIR`
//! (`<target>/<profile>/build/<package>-<hash>/out`); where it does not have that shape, no
//! link is made.
//!
//! The library is marked not to be unloaded (`-z nodelete`): `dlclose` leaves it mapped. Its
//! helper threads (the purge worker, the pressure monitor) run its code for the rest of the
//! process, and glibc keeps a closed library mapped only for threads that registered a
//! thread-local destructor in it, which a helper does only once it has run; a `dlclose` before
//! then unmapped the code under them (`tests/c/dlclose_test.c`).
//!
//! The functions a process runs are laid out together at the front of the library's text
//! (`hot-text.txt`, the linker's symbol order, which the shim's link gets too; DESIGN.md,
//! section 15, "Resident code"): the kernel maps a file's cached pages 64 KiB around each one a
//! process first touches, so code spread over the whole text made all of it resident. The
//! order is passed only to a linker that takes it (LLD, Rust's default on x86_64 Linux since
//! 1.90), tried first on an empty library with the same compiler, target, linker and flags;
//! with another linker the library is built as before. `vmarena layout --check` tells whether a release build got the order.

use std::path::Path;

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libvmarena.so.{major}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    hot_text_order();
    let Ok(out) = std::env::var("OUT_DIR") else { return };
    let Some(profile_dir) = Path::new(&out).ancestors().nth(3) else { return };
    if profile_dir.join("build").is_dir() {
        let link = profile_dir.join(format!("libvmarena.so.{major}"));
        if std::fs::symlink_metadata(&link).is_err() {
            let _ = std::os::unix::fs::symlink("libvmarena.so", &link);
        }
    }
}

/// Pass `hot-text.txt` to the linker as its symbol order, if the linker takes one.
fn hot_text_order() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=hot-text.txt");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let order = Path::new(&dir).join("hot-text.txt");
    let args = [
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        "-Wl,--no-warn-symbol-ordering".to_string(),
    ];
    if order.is_file() && links_with(&args) {
        for a in args {
            println!("cargo:rustc-cdylib-link-arg={a}");
        }
    }
}

/// Whether an empty library links with `link_args`, built as this crate is (compiler, target,
/// linker, flags).
fn links_with(link_args: &[String]) -> bool {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let (Ok(out), Ok(target)) = (std::env::var("OUT_DIR"), std::env::var("TARGET")) else { return false };
    let mut cmd = std::process::Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()));
    cmd.args(["--crate-type", "cdylib", "--crate-name", "link_probe", "--target", &target, "-o"])
        .arg(Path::new(&out).join("liblink_probe.so"));
    let linker = var("RUSTC_LINKER");
    if !linker.is_empty() {
        cmd.arg(format!("-Clinker={linker}"));
    }
    cmd.args(var("CARGO_ENCODED_RUSTFLAGS").split('\x1f').filter(|f| !f.is_empty()));
    for a in link_args {
        cmd.arg(format!("-Clink-arg={a}"));
    }
    let empty = Path::new(&out).join("link_probe.rs");
    std::fs::write(&empty, "").is_ok()
        && cmd
            .arg(&empty)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}
