//! What `test-vmalloc` prints: the kernel's lines per contender, lock figures, and the tables
//! that compare the contenders of one run.

use super::cases::CASES;
use super::driver::RunResult;
use super::params::Params;
use crate::machine::Machine;
use std::fmt::Write as _;

/// The kernel's report lines for one contender.
pub fn summary_lines(r: &RunResult, p: &Params) -> String {
    let mut out = String::new();
    for w in &r.workers {
        for i in p.cases() {
            let c = &w.cases[i];
            let name = CASES[i].name;
            if let Some(why) = &c.skipped {
                let _ = writeln!(out, "Summary: {name} skipped: {why}");
                continue;
            }
            let _ = writeln!(
                out,
                "Summary: {name} passed: {} failed: {} xfailed: {} repeat: {} loops: {} avg: {} usec",
                c.passed,
                c.failed,
                c.xfailed,
                p.test_repeat_count,
                p.test_loop_count,
                c.total_us / p.test_repeat_count
            );
        }
    }
    for (i, w) in r.workers.iter().enumerate() {
        let _ = writeln!(out, "All test took worker{i}={} cycles", w.cycles);
    }
    out
}

/// The contender's statistics after its run, four to a line, the nonzero ones only.
pub fn stats_lines(r: &RunResult) -> String {
    let cells: Vec<String> =
        r.stats.iter().filter(|(_, v)| *v != 0).map(|(n, v)| format!("{n:<16} {v:>12}")).collect();
    let mut out = String::new();
    for row in cells.chunks(4) {
        let _ = writeln!(out, "stats {}", row.join("   "));
    }
    out
}

/// Lock figures of one contender's run and the share of worker time spent waiting for locks.
pub fn lock_lines(r: &RunResult) -> String {
    if r.locks.is_empty() {
        return String::new();
    }
    let thread_ns: u64 = r.workers.iter().map(|w| w.wall_ns).sum();
    let mut out = String::new();
    let mut wait = 0u64;
    for l in &r.locks {
        wait += l.wait_ns;
        let _ = writeln!(
            out,
            "lock {:<6} acquisitions {:>12} contended {:>10} ({:>5.2}%) wait {:>10.3} ms hold {:>10.3} ms",
            l.lock,
            l.acquisitions,
            l.contended,
            if l.acquisitions > 0 { 100.0 * l.contended as f64 / l.acquisitions as f64 } else { 0.0 },
            l.wait_ns as f64 / 1e6,
            l.hold_ns as f64 / 1e6
        );
    }
    let _ = writeln!(
        out,
        "lock wait share: {:.2}% of worker time ({:.3} ms of {:.3} ms)",
        100.0 * wait as f64 / thread_ns.max(1) as f64,
        wait as f64 / 1e6,
        thread_ns as f64 / 1e6
    );
    for l in &r.sites {
        let _ = writeln!(
            out,
            "  site {:<18} acquisitions {:>12} contended {:>10} wait {:>10.3} ms hold {:>10.3} ms",
            l.lock,
            l.acquisitions,
            l.contended,
            l.wait_ns as f64 / 1e6,
            l.hold_ns as f64 / 1e6
        );
    }
    if let Some(m) = model(r) {
        let cells: Vec<String> = MODEL_THREADS
            .iter()
            .map(|&t| {
                let p = m.predict(t);
                format!("{t}: {:.2}x wait {:.1}%", p.speedup, 100.0 * p.wait_share)
            })
            .collect();
        let _ = writeln!(
            out,
            "many-core model (mean-value analysis of these hold times, one core per thread, waiting \
             a lower bound): {}; bound {:.1}x",
            cells.join(", "),
            m.bound()
        );
    }
    out
}

/// Thread counts the many-core model is evaluated at.
pub const MODEL_THREADS: [usize; 4] = [2, 8, 32, 64];

/// The many-core model of a run ([`crate::lock_model`]); `None` without hold times (run with
/// `--lock-timing`) or without locks (peers).
pub fn model(r: &RunResult) -> Option<crate::lock_model::Demands> {
    if r.locks.iter().all(|l| l.hold_ns == 0) {
        return None;
    }
    let worker_ns = r.workers.iter().map(|w| w.wall_ns).sum::<u64>() as f64;
    let locks: Vec<(String, f64, f64)> =
        r.locks.iter().map(|l| (l.lock.clone(), l.hold_ns as f64, l.wait_ns as f64)).collect();
    Some(crate::lock_model::Demands::from_run(r.workers.len(), worker_ns, &locks))
}

/// Nanoseconds per loop of case `i`, averaged over workers and repetitions. A loop of
/// `pcpu_alloc_test`, which ignores `test_loop_count`, is one object allocated and freed.
pub fn ns_per_loop(r: &RunResult, p: &Params, i: usize) -> Option<f64> {
    let ws = &r.workers;
    if ws.is_empty() || ws[0].cases[i].skipped.is_some() {
        return None;
    }
    let us: u64 = ws.iter().map(|w| w.cases[i].total_us).sum();
    let loops = if CASES[i].name == "pcpu_alloc_test" { p.nr_pcpu_objects } else { p.test_loop_count };
    Some(us as f64 * 1000.0 / (ws.len() as f64 * p.test_repeat_count as f64 * loops.max(1) as f64))
}

fn reference(results: &[RunResult]) -> usize {
    results.iter().position(|r| r.name == "vmarena-nodes").unwrap_or(0)
}

/// Per case, time per loop for each contender and its ratio to vmarena-nodes (or the first).
pub fn comparison(results: &[RunResult], p: &Params) -> String {
    let reference = reference(results);
    let mut out = String::new();
    let _ = write!(out, "{:<30}", "ns per loop (ratio to ref)");
    for r in results {
        let _ = write!(out, " {:>22}", r.name);
    }
    out.push('\n');
    for i in p.cases() {
        let _ = write!(out, "{:<30}", CASES[i].name);
        let base = ns_per_loop(&results[reference], p, i);
        for r in results {
            match (ns_per_loop(r, p, i), base) {
                (Some(v), Some(b)) if b > 0.0 => {
                    let _ = write!(out, " {:>13.1} ({:>5.2}x)", v, v / b);
                }
                (Some(v), _) => {
                    let _ = write!(out, " {v:>22.1}");
                }
                (None, _) => {
                    let _ = write!(out, " {:>22}", "skipped");
                }
            }
        }
        out.push('\n');
    }
    let _ = writeln!(out, "(ref: {}; ratios above 1 are slower than the ref)", results[reference].name);
    out
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn calls(r: &RunResult, names: &[&str]) -> Option<u64> {
    let s = r.proc.syscalls.as_ref()?;
    Some(s.iter().filter(|(n, _)| names.contains(&n.as_str())).map(|x| x.1).sum())
}

/// Process figures per contender (each ran in a child process of its own).
pub fn process_table(results: &[RunResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:>9} {:>10} {:>10} {:>11} {:>12} {:>9} {:>13} {:>9} {:>10} {:>10} {:>9}",
        "contender",
        "wall s",
        "peak MiB",
        "end MiB",
        "idle 2s MiB",
        "areas 2s MiB",
        "PTE KiB",
        "minor faults",
        "TLB IPIs",
        "syscalls",
        "mmap+unmap",
        "madvise"
    );
    for r in results {
        let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{:<16} {:>9.3} {:>10.1} {:>10.1} {:>11.1} {:>12} {:>9} {:>13} {:>9} {:>10} {:>10} {:>9}",
            r.name,
            r.wall_ns as f64 / 1e9,
            mib(r.proc.peak_rss),
            mib(r.proc.rss_end),
            mib(r.proc.rss_idle),
            r.proc.managed_idle.map(|b| format!("{:.1}", mib(b))).unwrap_or_else(|| "-".into()),
            r.proc.vm_pte / 1024,
            r.proc.minor_faults,
            opt(r.proc.tlb_shootdowns),
            opt(r.proc.syscalls.as_ref().map(|s| s.iter().map(|x| x.1).sum())),
            opt(calls(r, &["mmap", "munmap", "mremap", "brk"])),
            opt(calls(r, &["madvise", "process_madvise"])),
        );
    }
    out
}

/// Every parameter, the machine and every figure.
pub fn json(results: &[RunResult], p: &Params, seed: u64, m: &Machine) -> String {
    serde_json::json!({
        "benchmark": "test-vmalloc",
        "params": p,
        "seed": seed,
        "machine": m,
        "cases": CASES.iter().map(|c| c.name).collect::<Vec<_>>(),
        "results": results,
        "many_core_model": results.iter().map(|r| {
            let m = model(r)?;
            Some(serde_json::json!({
                "contender": r.name,
                "outside_ns": m.outside_ns,
                "shared_hold_ns": m.shared_ns,
                "bound_speedup": m.bound(),
                "predictions": MODEL_THREADS.iter().map(|&t| {
                    let p = m.predict(t);
                    serde_json::json!({ "threads": t, "speedup": p.speedup, "wait_share": p.wait_share })
                }).collect::<Vec<_>>(),
            }))
        }).collect::<Vec<_>>(),
    })
    .to_string()
        + "\n"
}
