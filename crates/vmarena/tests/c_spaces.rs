//! Spaces of one's own from C (tier 1): `tests/c/space_test.c` builds spaces with and without
//! options, runs the vmalloc family on each, is refused (nothing changed) for bad handles,
//! options, foreign pointers and a destruction while an area is live, and uses the default
//! space's handle.

mod common;

#[test]
fn a_c_program_builds_uses_and_destroys_spaces_of_its_own() {
    let (bin, libdir) = common::build_linked("space_test");
    let out =
        std::process::Command::new(&bin).env("LD_LIBRARY_PATH", &libdir).output().expect("run space_test");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("ok spaces"), "{err}");
}
