//! The fuzz program (`tests/c/fuzz.c`) for a fixed time: random C ABI calls, valid and invalid,
//! against its shadow model, with one and two threads, linked against `libvmarena.so` and
//! again under the shim with the `malloc` family mixed in. `vmarena fuzz` runs it for longer.
//! The seed comes from the clock (`VMARENA_FUZZ_SEED` fixes it) and is in every failure. A third
//! run has a lazy threshold of 16 pages, so that frees release their own areas all along.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

mod common;
use common::{compile, shim, vmarena_link_flags, PROGRAM_FLAGS};

const SECONDS: &str = "3";

fn seed() -> u64 {
    std::env::var("VMARENA_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(1)
    })
}

/// One run: no mismatch, enough calls, every class of bad input tried.
fn run(threads: u32, under_shim: bool, seed: u64) {
    run_with(threads, under_shim, seed, &[]);
}

/// A statistic of the space from the shim's report at exit (`VMARENA_PRELOAD_STATS=1`).
fn space_figure(stderr: &str, name: &str) -> Option<u64> {
    stderr.lines().find_map(|l| {
        let mut w = l.strip_prefix("vmarena preload: space ")?.split_whitespace();
        (w.next()? == name).then(|| w.next()?.parse().ok())?
    })
}

/// [`run`] with these variables in the program's environment; the program's standard error.
fn run_with(threads: u32, under_shim: bool, seed: u64, envs: &[(&str, &str)]) -> String {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let flags = vmarena_link_flags();
        let mut all: Vec<&str> = PROGRAM_FLAGS.to_vec();
        all.extend(flags.iter().map(String::as_str));
        all.push("-lpthread");
        compile("fuzz.c", "fuzz", &all)
    });
    let mut cmd = Command::new(bin);
    cmd.args([SECONDS, &threads.to_string(), &seed.to_string()]);
    if under_shim {
        cmd.arg("shim").env("LD_PRELOAD", shim());
    }
    cmd.envs(envs.iter().copied());
    let out = cmd.output().expect("the fuzz program starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let what = format!("{threads} thread(s), shim {under_shim}, seed {seed}, environment {envs:?}");
    assert!(out.status.success(), "{what}: {}\n{stdout}\n{stderr}", out.status);
    let summary = stdout.lines().find(|l| l.starts_with("fuzz ")).expect("a summary line");
    let field = |k: &str| -> u64 {
        summary
            .split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("{k} in {summary}"))
    };
    assert_eq!(field("mismatches"), 0, "{what}: {stderr}");
    assert!(field("calls") > 5_000, "{what}: too few calls: {summary}");
    // Every class of bad input was tried.
    let mut classes = vec!["bad_size", "bad_free", "bad_put", "bad_frames"];
    if under_shim {
        classes.push("bad_malloc");
    }
    for class in classes {
        let bad: u64 = stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("op {class} calls ")))
            .and_then(|rest| rest.split_whitespace().nth(2)?.parse().ok())
            .unwrap_or(0);
        assert!(bad > 0, "{what}: no {class} tried\n{stdout}");
    }
    eprintln!("{what}: {summary}");
    stderr.into_owned()
}

#[test]
fn c_abi_calls_against_the_model() {
    let s = seed();
    run(1, false, s);
    run(2, false, s + 1);
}

#[test]
fn c_abi_and_malloc_under_the_shim_against_the_model() {
    let s = seed();
    run(1, true, s + 2);
    run(2, true, s + 3);
}

/// With a lazy threshold of 16 pages the purges are always behind, and frees release their own
/// areas into the free tree (`released_on_free`) among every other call.
#[test]
fn c_abi_and_malloc_with_the_purges_behind() {
    let err =
        run_with(2, true, seed() + 4, &[("VMARENA_LAZY_MAX_PAGES", "16"), ("VMARENA_PRELOAD_STATS", "1")]);
    let released = space_figure(&err, "released_on_free").expect("the shim's report names released_on_free");
    assert!(released > 0, "no free released its own area:\n{err}");
}
