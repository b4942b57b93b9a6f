//! The C ABI wherever a process may run (tier 1): under an address-space limit (`ulimit -v`)
//! of 1 GB and 4 GB, under valgrind, and with three live 40 GiB areas, the default space
//! keeps the ABI's semantics (`tests/c/limits_test.c`: page granularity, guards where the
//! kernel enforces them, -EINVAL on double and foreign frees), and grows by further
//! reservations past its first. Strict overcommit, which changes
//! a system setting, has a test binary of its own (`strict_overcommit.rs`).
//!
//! With the fixed 64 GiB reservation of before, every request under either limit and under
//! valgrind failed with ENOMEM, and the second 40 GiB area did too.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

mod common;

/// The program, and the folder of the `libvmarena.so` it is linked with: built once, before
/// any test runs it (a build while another test executes the file fails that one's start).
fn program() -> (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| common::build_linked("limits_test")).clone()
}

/// `limits_test ARGS` with the soft and hard RLIMIT_AS at `limit_bytes` (none: as inherited).
fn run(args: &[&str], limit_bytes: Option<u64>) -> Output {
    let (bin, libdir) = program();
    let mut cmd = Command::new(bin);
    cmd.args(args).env_remove("VMARENA_SPACE_BYTES").env("LD_LIBRARY_PATH", libdir);
    if let Some(limit) = limit_bytes {
        // SAFETY: setrlimit is async-signal-safe and touches only the child's limits.
        unsafe {
            cmd.pre_exec(move || {
                let r = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                if libc::setrlimit(libc::RLIMIT_AS, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let out = cmd.output().expect("the program runs");
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

fn assert_passed(out: &Output, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains(" passed, 0 failed"), "{what}: {out:?}");
}

#[test]
fn the_abi_keeps_its_semantics_under_an_address_space_limit_of_1_and_4_gb() {
    for limit in [1_000_000u64 << 10, 4_000_000 << 10] {
        let out = run(&["semantics"], Some(limit));
        assert_passed(&out, &format!("RLIMIT_AS {} MB", limit >> 20));
        assert!(out.stderr.is_empty(), "nothing to report: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Past what the limit leaves, a request fails with ENOMEM and one line on stderr names the
/// limit and the setting that helps.
#[test]
fn a_request_past_the_address_space_limit_fails_with_enomem_and_says_why_once() {
    let out = run(&["big", "3", "1"], Some(1_000_000 << 10));
    assert_passed(&out, "three 1 GiB areas under a 1 GB limit");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("big ENOMEM at 0"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("vmarena: ").count(), 1, "{stderr}");
    assert!(stderr.contains("RLIMIT_AS") && stderr.contains("VMARENA_SPACE_BYTES"), "{stderr}");
}

#[test]
fn three_live_areas_of_40_gib_fit_in_the_default_space() {
    let out = run(&["big", "3", "40"], None);
    assert_passed(&out, "three 40 GiB areas");
    assert!(String::from_utf8_lossy(&out.stdout).contains("big ok"));
}

/// Past its first reservation (1 TiB, or a quarter of what `RLIMIT_AS` leaves) the default
/// space grows by further ones: twelve live areas of 100 GiB without a limit, six of 256 MiB
/// under a 4 GB limit, each written at both ends, sized, refused an interior and a double free.
#[test]
fn the_default_space_grows_past_its_first_reservation() {
    for (args, limit, least) in
        [(["big", "12", "100"], None, 1), (["big", "6", "256m"], Some(4_000_000u64 << 10), 1)]
    {
        let out = run(&args, limit);
        let what = format!("{args:?} under {limit:?}");
        assert_passed(&out, &what);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("big ok"), "{what}: {stdout}");
        let ext: i64 = stdout
            .lines()
            .find_map(|l| l.strip_prefix("extensions "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(-1);
        assert!(ext >= least, "{what}: {ext} further reservations: {stdout}");
        assert!(out.stderr.is_empty(), "{what}: nothing to report: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// valgrind's address-space manager refuses a reservation of the default size; the default
/// space halves until one is accepted. Skipped where valgrind is not installed
/// (`scripts/setup.sh` installs it).
#[test]
fn the_abi_keeps_its_semantics_under_valgrind() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!("skipped: no valgrind");
        return;
    }
    let (bin, libdir) = program();
    let out = Command::new("valgrind")
        .args(["-q", "--error-exitcode=9"])
        .arg(bin)
        .arg("semantics")
        .env_remove("VMARENA_SPACE_BYTES")
        .env("LD_LIBRARY_PATH", libdir)
        .output()
        .expect("valgrind runs");
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_passed(&out, "under valgrind");
}
