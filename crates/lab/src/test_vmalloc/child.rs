//! One contender per child process, so that peak RSS, page tables, faults and syscalls belong
//! to it alone. The parent runs this same binary as
//! `vmarena test-vmalloc --child NAME <the resolved parameters>`; the child runs the cases,
//! prints its report lines, then one line `@@result <json>` with its figures, which the parent
//! collects. With `--syscalls`, the parent runs a second child under `strace -f -c` and takes
//! the counts from it (the times come from the untraced run).

use super::driver::{ProcFigures, RunResult};
use super::params::Params;
use std::process::{Command, Stdio};

/// Marks the result line of a child.
pub const RESULT_TAG: &str = "@@result ";

/// Idle time before the child measures its resident set again: longer than vmarena's default
/// decay interval (1 s) plus a purge, so that a background purge has had its chance.
pub const IDLE: std::time::Duration = std::time::Duration::from_secs(2);

/// The child's own figures after its run: peak RSS, RSS now and after [`IDLE`], page tables,
/// and `faults_before` and `tlb_before` subtracted from minor faults and TLB shootdowns.
pub fn proc_figures(faults_before: u64, tlb_before: Option<u64>) -> ProcFigures {
    use vmarena_platform::process as pr;
    let rss_end = pr::rss_bytes();
    let minor_faults = pr::minor_faults() - faults_before;
    let tlb_shootdowns = tlb_before.zip(pr::tlb_shootdowns()).map(|(a, b)| b.saturating_sub(a));
    std::thread::sleep(IDLE);
    ProcFigures {
        peak_rss: pr::peak_rss_bytes(),
        rss_end,
        rss_idle: pr::rss_bytes(),
        vm_pte: pr::page_table_bytes(),
        minor_faults,
        tlb_shootdowns,
        managed_idle: None,
        syscalls: None,
    }
}

fn child_args(name: &str, p: &Params, space_bytes: u64, seed: u64, lock_timing: bool) -> Vec<String> {
    let mut v = vec![
        "test-vmalloc".to_string(),
        "--child".into(),
        name.into(),
        "--space-bytes".into(),
        space_bytes.to_string(),
        "--seed".into(),
        seed.to_string(),
    ];
    if lock_timing {
        v.push("--lock-timing".into());
    }
    if p.lockstep {
        v.push("--lockstep".into());
    }
    v.extend(p.words());
    v
}

/// Run contender `name` in a child; relay its report lines; return its figures.
pub fn run_child(
    name: &str,
    p: &Params,
    space_bytes: u64,
    seed: u64,
    lock_timing: bool,
) -> Result<RunResult, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(&exe)
        .args(child_args(name, p, space_bytes, seed, lock_timing))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run the child for {name}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut result = None;
    for line in text.lines() {
        match line.strip_prefix(RESULT_TAG) {
            Some(j) => {
                result = Some(serde_json::from_str::<RunResult>(j).map_err(|e| format!("{name}: {e}"))?)
            }
            None => println!("{line}"),
        }
    }
    if !out.status.success() {
        return Err(format!("the child for {name} failed: {}", out.status));
    }
    result.ok_or_else(|| format!("the child for {name} printed no result"))
}

/// Syscall counts of contender `name` (a second child under `strace -f -c`), or why not.
pub fn count_syscalls(
    name: &str,
    p: &Params,
    space_bytes: u64,
    seed: u64,
) -> Result<Vec<(String, u64)>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let file = std::env::temp_dir().join(format!("vmarena-strace-{}-{name}.txt", std::process::id()));
    let status = Command::new("strace")
        .args(["-f", "-c", "-q", "-o"])
        .arg(&file)
        .arg(&exe)
        .args(child_args(name, p, space_bytes, seed, false))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("strace is needed for --syscalls ({e}); scripts/setup.sh installs it"))?;
    if !status.success() {
        return Err(format!("strace run of {name} failed: {status}"));
    }
    let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&file);
    Ok(parse_strace_summary(&text))
}

/// The `(syscall, calls)` rows of a `strace -c` summary.
pub fn parse_strace_summary(text: &str) -> Vec<(String, u64)> {
    let mut rows = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // % time, seconds, usecs/call, calls, [errors,] syscall
        if f.len() < 5 || f[0].parse::<f64>().is_err() || f.last() == Some(&"total") {
            continue;
        }
        if let Ok(calls) = f[3].parse::<u64>() {
            rows.push((f.last().unwrap().to_string(), calls));
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_summary_rows() {
        let text = "% time     seconds  usecs/call     calls    errors syscall\n\
------ ----------- ----------- --------- --------- ----------------\n\
 60.00    0.000600          10        60           madvise\n\
 30.00    0.000300           5        60         2 munmap\n\
 10.00    0.000100           1       100           mmap\n\
------ ----------- ----------- --------- --------- ----------------\n\
100.00    0.001000                   220         2 total\n";
        let rows = parse_strace_summary(text);
        assert_eq!(rows, vec![("madvise".into(), 60), ("munmap".into(), 60), ("mmap".into(), 100)]);
    }
}
