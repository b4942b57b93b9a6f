//! The C ABI from C (tier 1): `tests/c/abi_test.c` is compiled against `include/vmarena.h`,
//! linked with the `libvmarena.so` cargo built for this test run, and run.

use std::path::PathBuf;
use std::process::Command;

mod common;

use common::build_linked;

/// Run a program of [`build_linked`] in a 4 GiB default space, with the environment `env` on
/// top; it must pass every check.
fn run_linked(name: &str, env: &[(&str, &str)]) {
    let (bin, libdir) = build_linked(name);
    let out = Command::new(&bin)
        .env("LD_LIBRARY_PATH", &libdir)
        .env("VMARENA_SPACE_BYTES", "4G")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "C test failed: {out:?}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

#[test]
fn c_program_exercises_every_abi_function() {
    run_linked("abi_test", &[]);
}

/// Four threads through the C ABI's hit paths (per-CPU stacks, magazines, nodes), frees from
/// other threads and bursts past a CPU's stack, with every page's stamps checked before its
/// free and second frees refused (`tests/c/hit_stress.c`).
#[test]
fn threads_through_the_hit_paths_keep_every_area_to_one_owner() {
    run_linked("hit_stress", &[]);
}

/// A process where glibc registers no rseq area (its tunable off, as a program may start
/// with): the per-CPU stacks are off and the same two programs run on the magazines.
#[test]
fn without_glibc_rseq_the_c_abi_runs_on_the_magazines() {
    let off = [("GLIBC_TUNABLES", "glibc.pthread.rseq=0")];
    run_linked("abi_test", &off);
    run_linked("hit_stress", &off);
}

/// The header's `struct vmarena_frame_stats` lists the frame statistics table, in order.
#[test]
fn frame_stats_struct_matches_the_statistics_table() {
    let h = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../include/vmarena.h")).unwrap();
    let body = &h[h.find("struct vmarena_frame_stats {").expect("struct in header")..];
    let body = &body[..body.find("};").unwrap()];
    let names: Vec<&str> = body
        .lines()
        .filter_map(|l| l.trim().strip_prefix("uint64_t "))
        .map(|l| l.split(';').next().unwrap().trim())
        .collect();
    let table: Vec<&str> = vmarena::FrameStats::TABLE.iter().map(|d| d.name).collect();
    assert_eq!(names, table);
}

/// Compile `tests/c/NAME.c`, a program that loads the library itself (`dlopen`, not linked).
fn build_loader(name: &str) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("vmarena_{name}"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-pthread", "-o"])
        .arg(&bin)
        .arg(common::root().join(format!("crates/vmarena/tests/c/{name}.c")))
        .arg("-ldl")
        .status()
        .expect("a C compiler (cc) is needed for this test");
    assert!(status.success(), "compiling {name}.c failed");
    bin
}

/// `libvmarena.so` loaded with `dlopen` after the program started threads (its fast paths keep
/// their per-thread state in static TLS, which a library loaded at run time must still get):
/// three threads allocate, fill, check and free, and a double free is still refused.
#[test]
fn a_program_that_loads_the_library_with_dlopen_uses_it_from_every_thread() {
    let libdir = common::shared_libraries(&[]);
    let bin = build_loader("dlopen_test");
    let out = Command::new(&bin)
        .arg(libdir.join("libvmarena.so"))
        .env("VMARENA_SPACE_BYTES", "4G")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "C test failed: {out:?}");
    assert!(stdout.contains(" 0 mismatches"), "{stdout}");
}

/// `libvmarena.so` and the shim, each loaded with `dlopen`, used from two threads that exit,
/// and closed with `dlclose` before vmarena's helper threads have run (`tests/c/dlclose_test.c`
/// holds them back with real-time priorities where the process may use them): the program goes
/// on. Both libraries are marked not to be unloaded; without the mark the closed library was
/// unmapped under its helpers, and the program died of SIGSEGV every time.
#[test]
fn a_library_closed_before_its_helper_threads_ran_stays_mapped() {
    let libdir = common::shared_libraries(&["vmarena-preload"]);
    let bin = build_loader("dlclose_test");
    for lib in ["libvmarena.so", "libvmarena_preload.so"] {
        let out = Command::new(&bin).arg(libdir.join(lib)).env("VMARENA_SPACE_BYTES", "4G").output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        eprintln!("{lib}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && stdout.contains("dlclose ok"), "{lib}: {out:?}");
    }
}
