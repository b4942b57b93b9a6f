//! vmarena inside processes it does not control (tier 1 for the C ABI and the shim):
//! `tests/c/hostile.c`, linked against `libvmarena.so`, runs each case once on its own and once
//! with the shim preloaded. Forks at any moment (during allocation, during the first call),
//! frees with the wrong call, sizes promised by `vmarena_size` and `malloc_usable_size`,
//! signals meant for the program, closed standard descriptors, a program that closes every
//! descriptor and reuses the numbers, sizes whose bookkeeping cannot be allocated; and small
//! shim thresholds under real programs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

mod common;
use common::{compile, shim, vmarena_link_flags, PROGRAM_FLAGS};

fn hostile_bin() -> &'static Path {
    static B: OnceLock<PathBuf> = OnceLock::new();
    B.get_or_init(|| {
        let link = vmarena_link_flags();
        let flags: Vec<&str> = PROGRAM_FLAGS
            .iter()
            .copied()
            .chain(link.iter().map(String::as_str))
            .chain(["-lpthread"])
            .collect();
        compile("hostile.c", "hostile", &flags)
    })
}

/// Run `cmd` with a watchdog of `limit`: a hang is a failure, not a stuck test run.
fn run_limited(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the program starts");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if rx.recv_timeout(limit).is_err() {
            // SAFETY: kill(2) with a pid of our own child that has not been waited for yet.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            return true;
        }
        false
    });
    let out = child.wait_with_output().expect("wait");
    let _ = tx.send(());
    let killed = watchdog.join().unwrap();
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!killed, "{cmd:?} still ran after {limit:?}: killed");
    out
}

/// `hostile CASE ARGS`, on its own (`preload` false) or under the shim.
fn case(name: &str, args: &[&str], preload: bool) -> Output {
    let mut c = Command::new(hostile_bin());
    c.arg(name).args(args).env("VMARENA_SPACE_BYTES", "16G");
    if preload {
        c.env("LD_PRELOAD", shim());
    }
    run_limited(&mut c, Duration::from_secs(240))
}

fn assert_ok(out: &Output, name: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains(&format!("ok {name}")), "{name}: {out:?}");
}

fn both(name: &str, args: &[&str]) {
    assert_ok(&case(name, args, false), name);
    assert_ok(&case(name, args, true), name);
}

#[test]
fn a_fixed_slot_or_mapped_frames_refuse_the_wrong_release_call() {
    both("ownership", &[]);
}

#[test]
fn every_byte_the_size_functions_report_survives_a_resize() {
    both("resize", &[]);
}
