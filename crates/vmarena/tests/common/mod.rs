//! Owner patterns shared by the concurrency tests: every word of an area holds its owner's tag
//! mixed with the word's index, so memory shared by two owners, or released under its owner,
//! shows as a wrong word. Also the shared libraries of the current sources, which the C tests
//! link.
#![allow(dead_code)] // each test file uses its own part

/// Fill `len` bytes at `p` with the pattern of `tag`.
pub fn fill(p: *mut u8, len: usize, tag: u64) {
    let words = len / 8;
    // SAFETY: `len` usable bytes at `p`, page aligned.
    let w = unsafe { std::slice::from_raw_parts_mut(p.cast::<u64>(), words) };
    for (i, x) in w.iter_mut().enumerate() {
        *x = tag ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    for i in words * 8..len {
        // SAFETY: inside the area.
        unsafe { *p.add(i) = tag as u8 };
    }
}

/// Check that `len` bytes at `p` still hold the pattern of `tag`.
pub fn verify(p: *const u8, len: usize, tag: u64) {
    let words = len / 8;
    // SAFETY: `len` usable bytes at `p`.
    let w = unsafe { std::slice::from_raw_parts(p.cast::<u64>(), words) };
    for (i, x) in w.iter().enumerate() {
        assert_eq!(*x, tag ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15), "word {i} of {p:?} overwritten");
    }
    for i in words * 8..len {
        // SAFETY: inside the area.
        assert_eq!(unsafe { *p.add(i) }, tag as u8);
    }
}

/// The workspace root.
pub fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `libvmarena.so` of the current sources (with the shared libraries of `more` packages), built
/// into a target folder the C tests share (`cargo test` builds the crate as an rlib only, and
/// the run holds the main target folder); the folder the libraries are in.
pub fn shared_libraries(more: &[&str]) -> std::path::PathBuf {
    let target = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c-abi-target");
    let mut cmd = std::process::Command::new(env!("CARGO"));
    cmd.args(["build", "--quiet", "-p", "vmarena"]);
    for p in more {
        cmd.args(["-p", p]);
    }
    let status = cmd
        .args(["--lib", "--target-dir"])
        .arg(&target)
        .current_dir(root())
        .status()
        .expect("cargo is needed to build libvmarena.so");
    assert!(status.success(), "building libvmarena.so failed");
    let dir = target.join("debug");
    assert!(dir.join("libvmarena.so").exists(), "libvmarena.so not built in {}", dir.display());
    dir
}

/// Compile `tests/c/NAME.c` with `-Wall -Wextra -Werror -O1 -pthread` against `include/`, linked
/// with the `libvmarena.so` of [`shared_libraries`]; the program's path and that folder.
pub fn build_linked(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let out_dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let libdir = shared_libraries(&[]);
    let bin = out_dir.join(format!("vmarena_{name}"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = std::process::Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-pthread", "-o"])
        .arg(&bin)
        .arg(root().join(format!("crates/vmarena/tests/c/{name}.c")))
        .arg("-I")
        .arg(root().join("include"))
        .arg("-L")
        .arg(&libdir)
        .arg("-lvmarena")
        .status()
        .expect("a C compiler (cc) is needed for this test");
    assert!(status.success(), "compiling {name}.c failed");
    (bin, libdir)
}
