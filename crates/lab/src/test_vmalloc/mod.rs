//! `vmarena test-vmalloc`: the kernel's `lib/test_vmalloc.c` driver and `test_vmalloc.sh`
//! modes, run against vmarena's strategies in one process.
//!
//! Parameters have the kernel's names and meanings (`run_test_mask`, `nr_threads`, ...), as
//! flags or as `key=value` words the way `modprobe test_vmalloc key=value` takes them. Workers
//! start together behind a barrier, shuffle their test order unless `sequential_test_order`,
//! time each of `test_repeat_count` repetitions of each masked case, and report the kernel's
//! lines per worker and case:
//!
//! ```text
//! Summary: fix_size_alloc_test passed: 1 failed: 0 xfailed: 0 repeat: 1 loops: 1000000 avg: 81234 usec
//! All test took worker0=2345678901 cycles
//! ```

pub mod cases;
pub mod child;
pub mod contender;
pub mod driver;
pub mod params;
pub mod peers;
pub mod report;
pub mod svg;

use crate::machine::Machine;
use cases::CASES;
use contender::{Contender, VmarenaContender};
pub use params::{Args, Params};
use peers::{Peer, PeerContender};
use std::sync::Arc;

/// Build the contender called `name` (`vmarena-<strategy>` or a peer's name).
pub fn contender(name: &str, space_bytes: u64) -> Result<Arc<dyn Contender>, String> {
    if let Some(s) = name.strip_prefix("vmarena-") {
        return Ok(Arc::new(VmarenaContender::new(s.parse()?, space_bytes)?));
    }
    let peer =
        <Peer as clap::ValueEnum>::from_str(name, true).map_err(|_| format!("unknown contender '{name}'"))?;
    Ok(Arc::new(PeerContender::new(peer)))
}

/// The subcommand: resolve, run every contender (each in a child process unless
/// `--in-process`), print the reports and the comparison tables.
pub fn main(a: Args, m: &Machine) -> Result<(), String> {
    let p = Params::resolve(&a, m.cores)?;
    vmarena::set_lock_timing(a.lock_timing);
    if let Some(name) = &a.child {
        let c = contender(name, a.space_bytes)?;
        let faults = vmarena_platform::process::minor_faults();
        let tlb = vmarena_platform::process::tlb_shootdowns();
        let mut r = driver::run(c.clone(), &p, a.seed, m.cores);
        r.proc = child::proc_figures(faults, tlb);
        r.proc.managed_idle = c.managed_resident_bytes();
        print!("{}", report::summary_lines(&r, &p));
        print!("{}", report::lock_lines(&r));
        println!("{}{}", child::RESULT_TAG, serde_json::to_string(&r).map_err(|e| e.to_string())?);
        return Ok(());
    }
    let mut words = p.words();
    words.push(format!("seed={}", a.seed));
    if p.lockstep {
        words.push("--lockstep".into());
    }
    println!("# test_vmalloc: {}", words.join(" "));
    println!("# {}", m.line());
    println!("# lock timing: {}; one child process per contender: {}", a.lock_timing, !a.in_process);
    let names: Vec<String> = a
        .strategy
        .iter()
        .map(|s| format!("vmarena-{s}"))
        .chain(a.peer.iter().map(|x| x.name().to_string()))
        .collect();
    if names.is_empty() {
        return Err("no contender: give --strategy or --peer".into());
    }
    let sweep: Vec<usize> = if a.sweep.is_empty() { vec![p.nr_threads] } else { a.sweep.clone() };
    if sweep.contains(&0) {
        return Err("--sweep: thread counts must be positive".into());
    }
    let mut runs: Vec<(usize, Vec<driver::RunResult>)> = Vec::new();
    for &t in &sweep {
        let pt = Params { nr_threads: t, ..p.clone() };
        if sweep.len() > 1 {
            println!("\n# nr_threads={t}");
        }
        runs.push((t, run_all(&a, &pt, &names, m)?));
    }
    let series: Vec<svg::Series> = names
        .iter()
        .enumerate()
        .map(|(k, n)| svg::Series {
            name: n.clone(),
            mloops_per_s: runs
                .iter()
                .map(|(t, rs)| throughput(&rs[k], &Params { nr_threads: *t, ..p.clone() }))
                .collect(),
        })
        .collect();
    if sweep.len() > 1 || a.svg.is_some() {
        println!("\nmillion loops per second");
        print!("{:<16}", "contender");
        for t in &sweep {
            print!(" {:>10}", format!("{t} thr"));
        }
        println!();
        for s in &series {
            print!("{:<16}", s.name);
            for v in &s.mloops_per_s {
                print!(" {v:>10.3}");
            }
            println!();
        }
    }
    if let Some(path) = &a.svg {
        let title = format!("test_vmalloc {} ({})", words.join(" "), m.line());
        crate::machine::write_output(path, &svg::render(&title, &sweep, &series))?;
    }
    if let Some(path) = &a.json {
        let body = if sweep.len() == 1 {
            report::json(&runs[0].1, &p, a.seed, m)
        } else {
            let per: Vec<serde_json::Value> = runs
                .iter()
                .map(|(t, rs)| {
                    let pt = Params { nr_threads: *t, ..p.clone() };
                    serde_json::from_str(&report::json(rs, &pt, a.seed, m)).expect("valid JSON")
                })
                .collect();
            serde_json::json!({ "benchmark": "test-vmalloc", "sweep": sweep, "runs": per }).to_string() + "\n"
        };
        crate::machine::write_output(path, &body)?;
    }
    Ok(())
}

/// Every contender at one set of parameters, each reported as it finishes, then the tables.
fn run_all(a: &Args, p: &Params, names: &[String], m: &Machine) -> Result<Vec<driver::RunResult>, String> {
    let mut results = Vec::new();
    for name in names {
        println!("\n## {name}");
        let mut r = if a.in_process {
            let r = driver::run(contender(name, a.space_bytes)?, p, a.seed, m.cores);
            print!("{}", report::summary_lines(&r, p));
            print!("{}", report::lock_lines(&r));
            r
        } else {
            child::run_child(name, p, a.space_bytes, a.seed, a.lock_timing)?
        };
        if a.stats {
            print!("{}", report::stats_lines(&r));
        }
        if a.syscalls && !a.in_process {
            eprintln!("[test-vmalloc] {name}: counting syscalls under strace");
            r.proc.syscalls = Some(child::count_syscalls(name, p, a.space_bytes, a.seed)?);
        }
        println!("({name}: {:.3} s)", r.wall_ns as f64 / 1e9);
        results.push(r);
    }
    println!();
    print!("{}", report::comparison(&results, p));
    if !a.in_process {
        println!();
        print!("{}", report::process_table(&results));
    }
    Ok(results)
}

/// Million loop iterations per second of wall time, over the cases that loop (not
/// align_shift_alloc_test, which ignores the loop count, nor the skipped ones).
pub fn throughput(r: &driver::RunResult, p: &Params) -> f64 {
    let looping = p
        .cases()
        .into_iter()
        .filter(|&i| CASES[i].run.is_some() && CASES[i].name != "align_shift_alloc_test");
    let loops =
        looping.count() as f64 * (p.nr_threads as u64 * p.test_loop_count * p.test_repeat_count) as f64;
    loops / (r.wall_ns.max(1) as f64 / 1e9) / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: Args,
    }

    fn args(words: &[&str]) -> Args {
        T::parse_from(std::iter::once("t").chain(words.iter().copied())).a
    }

    #[test]
    fn defaults_are_the_kernels() {
        let p = Params::resolve(&args(&[]), 2).unwrap();
        assert_eq!(p, Params::default());
        assert_eq!(p.cases(), vec![0, 1, 2]);
    }

    #[test]
    fn flags_and_modprobe_words_and_modes() {
        let p = Params::resolve(&args(&["--run-test-mask", "23", "nr_threads=4", "test_loop_count=10"]), 2)
            .unwrap();
        assert_eq!(p.cases(), vec![0, 1, 2, 4]);
        assert_eq!((p.nr_threads, p.test_loop_count), (4, 10));
        let s = Params::resolve(&args(&["--mode", "stress"]), 6).unwrap();
        assert_eq!((s.nr_threads, s.test_repeat_count), (6, 20));
        let perf = Params::resolve(&args(&["--mode", "performance", "test_repeat_count=5"]), 2).unwrap();
        assert!(perf.sequential_test_order);
        assert_eq!(perf.test_repeat_count, 5, "explicit values override the mode");
        let smoke = Params::resolve(&args(&["--mode", "smoke"]), 2).unwrap();
        assert_eq!((smoke.test_loop_count, smoke.test_repeat_count), (10_000, 10));
    }

    #[test]
    fn kernel_clamping_and_bad_input() {
        let p = Params::resolve(&args(&["nr_threads=0", "nr_pages=0", "test_repeat_count=0"]), 2).unwrap();
        assert_eq!((p.nr_threads, p.nr_pages, p.test_repeat_count), (1, 1, 1));
        assert!(Params::resolve(&args(&["bogus=1"]), 2).unwrap_err().contains("unknown parameter 'bogus'"));
        assert!(Params::resolve(&args(&["nr_threads"]), 2).unwrap_err().contains("not key=value"));
        assert!(Params::resolve(&args(&["nr_threads=x"]), 2).unwrap_err().contains("not a number"));
        assert!(Params::resolve(&args(&["run_test_mask=0"]), 2).is_err());
        assert!(Params::resolve(&args(&["run_test_mask=8192"]), 2).is_err(), "bit 13 is no case");
        assert!(Params::resolve(&args(&["use_huge=1"]), 2).unwrap().use_huge);
    }

    #[test]
    fn shuffle_moves_every_element() {
        for seed in 1..200 {
            let mut order: Vec<usize> = (0..7).collect();
            driver::shuffle(&mut order, &mut cases::Rng(seed));
            assert!(order.iter().enumerate().all(|(i, &v)| i != v), "Sattolo: no fixed point ({order:?})");
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, (0..7).collect::<Vec<_>>());
        }
    }

    #[test]
    fn every_case_runs_on_every_contender_and_reports_in_the_kernel_format() {
        for name in ["vmarena-nodes", "vmarena-global", "glibc", "jemalloc", "mimalloc", "mmap"] {
            let c = contender(name, 8 << 30).unwrap();
            let p = Params {
                run_test_mask: 0x1fff,
                nr_threads: 2,
                test_loop_count: 3,
                nr_pcpu_objects: 500,
                ..Params::default()
            };
            let r = driver::run(c, &p, 1, 2);
            check_report(&r, &p, name);
        }
    }

    #[test]
    fn lockstep_gives_every_worker_one_order_and_runs_every_case() {
        let p = Params::resolve(&args(&["--lockstep", "run_test_mask=8191"]), 2).unwrap();
        assert!(p.lockstep);
        let orders = |p: &Params| -> Vec<Vec<usize>> {
            (0..8).map(|w| driver::case_order(p, 1, &mut cases::Rng(1 + w + 1))).collect()
        };
        let shared = orders(&p);
        assert!(shared.iter().all(|o| *o == shared[0]), "one order for all: {shared:?}");
        assert_ne!(shared[0], p.cases(), "shuffled unless sequential");
        let own = orders(&Params { lockstep: false, ..p.clone() });
        assert!(own.iter().any(|o| *o != own[0]), "without lockstep each worker shuffles its own");
        let seq = Params { sequential_test_order: true, ..p.clone() };
        assert_eq!(orders(&seq)[3], seq.cases());
        let p = Params { nr_threads: 2, test_loop_count: 3, nr_pcpu_objects: 500, ..p };
        let r = driver::run(contender("vmarena-nodes", 8 << 30).unwrap(), &p, 1, 2);
        check_report(&r, &p, "vmarena-nodes");
    }

    #[test]
    fn words_round_trip() {
        let p =
            Params { run_test_mask: 0x55, nr_threads: 3, sequential_test_order: true, ..Params::default() };
        let words: Vec<String> = p.words();
        let a = args(&words.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(Params::resolve(&a, 2).unwrap(), p);
    }

    fn check_report(r: &driver::RunResult, p: &Params, who: &str) {
        let text = report::summary_lines(r, p);
        let summary: Vec<&str> = text.lines().filter(|l| l.starts_with("Summary: ")).collect();
        assert_eq!(summary.len(), 2 * 13, "{who}");
        for (i, case) in CASES.iter().enumerate() {
            let line = summary[i];
            assert!(line.starts_with(&format!("Summary: {} ", case.name)), "{line}");
            let malloc_peer = ["glibc", "jemalloc", "mimalloc"].contains(&who);
            if case.skip.is_some() {
                assert!(line.contains(" skipped: "), "{line}");
            } else if case.name == "vm_map_ram_test" && malloc_peer {
                assert!(line.contains(" skipped: ") && line.contains("cannot map existing pages"), "{line}");
            } else if case.name == "pcpu_alloc_test" && !who.starts_with("vmarena") {
                assert!(
                    line.contains(" skipped: ") && line.contains("no per-CPU object allocator"),
                    "{line}"
                );
            } else if case.name == "align_shift_alloc_test" {
                // Huge alignments cannot be met: expected to fail (a peer may fail it too).
                assert!(
                    line.contains("passed: 0 failed: 0 xfailed: 1 ")
                        || line.contains("passed: 1 failed: 0 xfailed: 0 "),
                    "{who}: {line}"
                );
            } else {
                assert!(
                    line.contains("passed: 1 failed: 0 xfailed: 0 repeat: 1 loops: 3 avg: "),
                    "{who}: {line}"
                );
                assert!(line.ends_with(" usec"), "{line}");
            }
        }
        assert!(text.contains("All test took worker0=") && text.contains("All test took worker1="));
        if who.starts_with("vmarena") {
            assert!(report::lock_lines(r).contains("lock wait share: "));
            // The many-core model needs hold times: absent without lock timing, present with.
            assert!(!report::lock_lines(r).contains("many-core model"));
            let mut timed = r.clone();
            for l in &mut timed.locks {
                l.hold_ns = l.acquisitions.max(1) * 50;
            }
            let lines = report::lock_lines(&timed);
            assert!(lines.contains("many-core model") && lines.contains("64: "), "{lines}");
            // The arena's table after the run; the printed lines hold the nonzero figures only.
            let stat =
                |n: &str| r.stats.iter().find(|s| s.0 == n).map(|s| s.1).unwrap_or_else(|| panic!("{n}"));
            assert!(stat("frees") > 0 && stat("tree_allocs") > 0, "{:?}", r.stats);
            let lines = report::stats_lines(r);
            assert!(lines.lines().all(|l| l.starts_with("stats ")), "{lines}");
            assert!(lines.contains(&format!("{:<16} {:>12}", "frees", stat("frees"))), "{lines}");
            assert!(!lines.contains("bad_frees"), "zero figures are left out: {lines}");
        } else {
            assert!(r.stats.is_empty() && report::stats_lines(r).is_empty());
        }
    }
}
