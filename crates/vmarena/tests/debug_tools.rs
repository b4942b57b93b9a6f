//! The debugging tools see vmarena's areas as allocations (tier 1): `tests/c/tools_test.c`,
//! linked with `libvmarena.so`, built with `-fsanitize=thread`, with `-fsanitize=address`, and
//! plainly to run under valgrind's memcheck. A correct program (four threads handing areas to
//! each other through mutex-protected queues) gets no report from any of them; each planted
//! bug (a read after `vmarena_vfree`, a lost area, a write into the guard page, a branch on
//! never-written bytes of a reused area, two threads writing one area unordered) gets the
//! report its tool gives for heap blocks, naming the program's line. Under the preload shim, a
//! large `malloc` block is a vmarena area, and AddressSanitizer reports a read after its `free`
//! as it does for the C ABI's areas.
//!
//! Where a tool is missing (no sanitizer runtime for the C compiler, no valgrind) the test says
//! so and passes; `scripts/setup.sh` installs them.

mod common;

use common::{root, shared_libraries};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `tools_test.c` built with `flags`, or `None` (with the reason printed) when the compiler
/// cannot build even an empty program with them (no sanitizer runtime here). A failure to
/// build `tools_test.c` itself fails the test.
fn build(tag: &str, flags: &[&str]) -> Option<(PathBuf, PathBuf)> {
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let probe_src = out_dir.join(format!("vmarena_tools_probe_{tag}.c"));
    std::fs::write(&probe_src, "int main(void) { return 0; }\n").unwrap();
    let probe = Command::new(&cc)
        .args(flags)
        .arg("-o")
        .arg(out_dir.join(format!("vmarena_tools_probe_{tag}")))
        .arg(&probe_src)
        .output()
        .expect("a C compiler (cc) is needed for this test");
    if !probe.status.success() {
        eprintln!(
            "skipped: {cc} {} cannot build a program here (scripts/setup.sh installs the runtimes):\n{}",
            flags.join(" "),
            String::from_utf8_lossy(&probe.stderr)
        );
        return None;
    }
    let libdir = shared_libraries(&["vmarena-preload"]);
    let bin = out_dir.join(format!("vmarena_tools_test_{tag}"));
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread"])
        .args(flags)
        .arg("-o")
        .arg(&bin)
        .arg(root().join("crates/vmarena/tests/c/tools_test.c"))
        .arg("-I")
        .arg(root().join("include"))
        .arg("-L")
        .arg(&libdir)
        .arg("-lvmarena")
        .output()
        .expect("a C compiler (cc) is needed for this test");
    assert!(out.status.success(), "building tools_test.c failed:\n{}", String::from_utf8_lossy(&out.stderr));
    Some((bin, libdir))
}

/// Run `bin mode` (under `wrapper`, if any) with the library found, and return its exit code
/// and what it printed on both streams.
fn run(wrapper: &[&str], bin: &Path, libdir: &Path, mode: &str) -> (Option<i32>, String) {
    run_with(wrapper, bin, libdir, mode, &[])
}

/// [`run`] with more environment variables.
fn run_with(
    wrapper: &[&str],
    bin: &Path,
    libdir: &Path,
    mode: &str,
    env: &[(&str, String)],
) -> (Option<i32>, String) {
    let (prog, args): (&str, Vec<String>) = match wrapper.split_first() {
        Some((w, rest)) => {
            let mut a: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            a.push(bin.display().to_string());
            (w, a)
        }
        None => (bin.to_str().unwrap(), Vec::new()),
    };
    let out = Command::new(prog)
        .args(args)
        .arg(mode)
        .env("LD_LIBRARY_PATH", libdir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run the tools test");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

#[test]
fn thread_sanitizer_sees_the_hand_offs_and_still_reports_a_race_on_an_area() {
    let Some((bin, libdir)) = build("tsan", &["-fsanitize=thread"]) else { return };
    let (code, text) = run(&[], &bin, &libdir, "correct");
    assert!(!text.contains("WARNING: ThreadSanitizer"), "a correct program got reports:\n{text}");
    assert_eq!(code, Some(0), "{text}");
    let (_, text) = run(&[], &bin, &libdir, "race");
    assert!(
        text.contains("WARNING: ThreadSanitizer: data race") && text.contains("racer"),
        "the planted race on an area's bytes went unreported:\n{text}"
    );
}

#[test]
fn address_sanitizer_reports_a_read_after_free_and_a_write_into_the_guard() {
    let Some((bin, libdir)) = build("asan", &["-fsanitize=address"]) else { return };
    let (code, text) = run(&[], &bin, &libdir, "correct");
    assert!(!text.contains("ERROR: AddressSanitizer"), "a correct program got reports:\n{text}");
    assert_eq!(code, Some(0), "{text}");
    let (_, text) = run(&[], &bin, &libdir, "uaf");
    assert!(
        text.contains("ERROR: AddressSanitizer")
            && text.contains("READ of size 1")
            && text.contains("in uaf"),
        "the read after vmarena_vfree went unreported:\n{text}"
    );
    let (_, text) = run(&[], &bin, &libdir, "overrun");
    assert!(
        text.contains("ERROR: AddressSanitizer")
            && text.contains("WRITE of size 1")
            && text.contains("in overrun"),
        "the write into the guard page went unreported:\n{text}"
    );
    // Under the shim the block is vmarena's: a poisoned area ("use-after-poison"), where
    // AddressSanitizer's own heap says "heap-use-after-free".
    let shim = libdir.join("libvmarena_preload.so").display().to_string();
    let env = [("LD_PRELOAD", shim), ("ASAN_OPTIONS", "verify_asan_link_order=0".to_string())];
    let (_, text) = run_with(&[], &bin, &libdir, "malloc_uaf", &env);
    assert!(
        text.contains("use-after-poison") && text.contains("in malloc_uaf"),
        "the read after free of a block the shim served went unreported:\n{text}"
    );
}

#[test]
fn memcheck_sees_areas_as_heap_blocks() {
    if Command::new("valgrind").arg("--version").output().map(|o| !o.status.success()).unwrap_or(true) {
        eprintln!("skipped: valgrind is not installed (scripts/setup.sh installs it)");
        return;
    }
    let Some((bin, libdir)) = build("plain", &[]) else { return };
    let supp = format!("--suppressions={}", root().join("crates/vmarena/vmarena.supp").display());
    let memcheck = ["valgrind", "--leak-check=full", "--num-callers=40", supp.as_str()];
    let (code, text) = run(&memcheck, &bin, &libdir, "correct");
    assert!(text.contains("ERROR SUMMARY: 0 errors"), "a correct program got reports:\n{text}");
    assert_eq!(code, Some(0), "{text}");
    let cases: [(&str, &[&str]); 4] = [
        ("uaf", &["Invalid read of size 1", "free'd", "uaf (tools_test.c"]),
        ("leak", &["definitely lost", "lose_one (tools_test.c", "vmarena_vmalloc"]),
        ("overrun", &["Invalid write of size 1", "0 bytes after a block", "overrun (tools_test.c"]),
        // The program must have been handed its old area again (a never-used one reads as zero).
        (
            "uninit",
            &[
                "reused the same area",
                "depends on uninitialised value",
                "uninit (tools_test.c",
                "ERROR SUMMARY: 1 errors",
            ],
        ),
    ];
    for (mode, wanted) in cases {
        let (_, text) = run(&memcheck, &bin, &libdir, mode);
        for w in wanted {
            assert!(text.contains(w), "{mode}: memcheck's report lacks '{w}':\n{text}");
        }
    }
}
