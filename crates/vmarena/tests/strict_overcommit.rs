//! The C ABI under strict overcommit (tier 1), `vm.overcommit_memory=2`, the setting database
//! hosts use: `MAP_NORESERVE` is ignored and every writable private mapping is charged in full
//! against the commit limit. The default space reserves its range inaccessible and commits it
//! as it grows, so it starts and keeps the ABI's semantics; a request past the commit limit
//! fails with ENOMEM and one line on stderr names the setting. With the writable 64 GiB
//! reservation of before, the space could not be created at all (64 GiB exceeds the limit of
//! a machine with less than 128 GiB of memory and swap).
//!
//! The setting is system-wide: this binary holds one test, which sets it, runs its programs and
//! puts the old value back (also when it fails). It needs root; elsewhere it says it skipped.

use std::path::PathBuf;
use std::process::{Command, Output};

mod common;

const SETTING: &str = "/proc/sys/vm/overcommit_memory";

/// Puts the old value back on drop.
struct Restore(String);
impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(SETTING, &self.0);
    }
}

fn run(bin: &PathBuf, libdir: &PathBuf, args: &[&str]) -> Output {
    let out = Command::new(bin)
        .args(args)
        .env_remove("VMARENA_SPACE_BYTES")
        .env("LD_LIBRARY_PATH", libdir)
        .output()
        .expect("the program runs");
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn the_abi_works_under_strict_overcommit_and_says_when_the_commit_limit_is_reached() {
    let (bin, libdir) = common::build_linked("limits_test");
    let Ok(old) = std::fs::read_to_string(SETTING) else {
        eprintln!("skipped: {SETTING} cannot be read");
        return;
    };
    if std::fs::write(SETTING, "2").is_err() {
        eprintln!("skipped: {SETTING} cannot be written here (needs root)");
        return;
    }
    let _restore = Restore(old);
    let limit_kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("CommitLimit:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let semantics = run(&bin, &libdir, &["semantics"]);
    assert!(
        semantics.status.success()
            && String::from_utf8_lossy(&semantics.stdout).contains(" passed, 0 failed"),
        "{semantics:?}"
    );
    // Areas of more than a third of the commit limit: the first ones are committed, and by the
    // third at the latest the kernel refuses.
    let third_gib = ((limit_kib >> 20) / 3 + 1).to_string();
    let big = run(&bin, &libdir, &["big", "5", &third_gib]);
    let stdout = String::from_utf8_lossy(&big.stdout);
    assert!(big.status.success() && stdout.contains("big ENOMEM at"), "{big:?}");
    let stderr = String::from_utf8_lossy(&big.stderr);
    assert_eq!(stderr.matches("vmarena: ").count(), 1, "{stderr}");
    assert!(stderr.contains("commit limit") && stderr.contains("vm.overcommit_memory: 2"), "{stderr}");
    // Freed and given back by the low-memory event: the charge of the areas committed ends.
    let field =
        |k: &str| stdout.lines().find_map(|l| l.strip_prefix(k)).and_then(|v| v.trim().parse::<i64>().ok());
    let held = field("big ENOMEM at ").unwrap();
    let drop_kib = field("commit_drop_kib ").unwrap();
    let area_kib: i64 = third_gib.parse::<i64>().unwrap() << 20;
    assert!(
        drop_kib >= held * area_kib / 2,
        "commit fell by {drop_kib} KiB after {held} areas of {area_kib} KiB"
    );
}
