//! The shared library's name for the loader: `libvmarena.so.MAJOR` (SONAME), so that programs
//! linked against one major version load only a library of that version. The exported symbols
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

use std::path::Path;

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libvmarena.so.{major}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    let Ok(out) = std::env::var("OUT_DIR") else { return };
    let Some(profile_dir) = Path::new(&out).ancestors().nth(3) else { return };
    if profile_dir.join("build").is_dir() {
        let link = profile_dir.join(format!("libvmarena.so.{major}"));
        if std::fs::symlink_metadata(&link).is_err() {
            let _ = std::os::unix::fs::symlink("libvmarena.so", &link);
        }
    }
}
