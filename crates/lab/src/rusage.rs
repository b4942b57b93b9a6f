//! What a child program used, measured from a small C program between the lab and it
//! (`c/rusage_run.c`).
//!
//! A child's peak RSS as `wait4` reports it is at least the resident set of the process it
//! was started from, as that process stood at the child's `exec`: the lab's own (5 MiB for
//! `user-path`, hundreds of MiB for `programs`, which holds the text its programs read). Started
//! from `rusage_run`, a program's figure starts at a few hundred KiB.
//!
//! The wrapper is compiled once per source text into a folder of the temporary directory named
//! after its digest, and reused by later runs of the lab (written under a temporary name and
//! renamed, so two labs compiling it at once both end with a whole program). Each run writes
//! its report to a file of its own (process id and a counter).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

const SOURCE: &str = include_str!("c/rusage_run.c");

/// The compiled wrapper, once this process has it.
static WRAPPER: Mutex<Option<PathBuf>> = Mutex::new(None);
static REPORTS: AtomicU64 = AtomicU64::new(0);

fn digest(text: &str) -> u64 {
    use std::hash::Hasher;
    let mut h = std::hash::DefaultHasher::new();
    h.write(text.as_bytes());
    h.finish()
}

/// The wrapper's path, compiling it when no earlier run left it.
fn wrapper() -> Result<PathBuf, String> {
    let mut w = WRAPPER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = w.as_ref() {
        return Ok(p.clone());
    }
    let dir = std::env::temp_dir().join(format!("vmarena-rusage-run-{:016x}", digest(SOURCE)));
    let bin = dir.join("rusage_run");
    if !bin.exists() {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let tmp = crate::cc::scratch("rusage-run")?;
        let built = crate::cc::compile(&tmp, "rusage_run", SOURCE, "rusage_run", &[], None)?;
        let staged = dir.join(format!("rusage_run.{}", std::process::id()));
        std::fs::copy(&built, &staged).map_err(|e| format!("{}: {e}", staged.display()))?;
        std::fs::rename(&staged, &bin).map_err(|e| format!("{}: {e}", bin.display()))?;
        let _ = std::fs::remove_dir_all(&tmp);
    }
    *w = Some(bin.clone());
    Ok(bin)
}

/// `cmd` run by the wrapper (same arguments and environment), and the file its report goes to.
pub(crate) fn wrapped(cmd: &Command) -> Result<(Command, PathBuf), String> {
    let report = std::env::temp_dir().join(format!(
        "vmarena-rusage-{}-{}.txt",
        std::process::id(),
        REPORTS.fetch_add(1, Ordering::Relaxed)
    ));
    let mut w = Command::new(wrapper()?);
    w.arg(&report).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => w.env(k, v),
            None => w.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        w.current_dir(d);
    }
    Ok((w, report))
}

/// The value after the word `key` in a line of words ("maxrss_kib 1234 minflt 56").
pub(crate) fn field(text: &str, key: &str) -> Option<f64> {
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == key {
            return words.next()?.parse().ok();
        }
    }
    None
}

/// What the wrapper reported (and the report removed): peak RSS in KiB, minor faults, CPU
/// seconds (user and system).
pub(crate) fn read_report(report: &Path) -> Result<(u64, u64, f64), String> {
    let text = std::fs::read_to_string(report).map_err(|e| format!("{}: {e}", report.display()))?;
    let _ = std::fs::remove_file(report);
    let f = |k: &str| field(&text, k).ok_or_else(|| format!("{}: no {k} in '{text}'", report.display()));
    Ok((f("maxrss_kib")? as u64, f("minflt")? as u64, f("utime_s")? + f("stime_s")?))
}
