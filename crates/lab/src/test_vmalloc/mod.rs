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
pub mod contender;

use crate::machine::{json_str, Machine};
use cases::{CaseEnv, Rng, CASES};
use contender::{Contender, VmarenaContender};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use vmarena::{LockStats, Strategy};

/// The script's modes (`test_vmalloc.sh performance|stress|smoke`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// `sequential_test_order=1 test_repeat_count=3`, one worker.
    Performance,
    /// `nr_threads=<CPUs> test_repeat_count=20`.
    Stress,
    /// `test_loop_count=10000 test_repeat_count=10`.
    Smoke,
}

/// Command-line arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Bit i selects case i (0 fix_size .. 12 vrealloc); the kernel's default is 7.
    #[arg(long)]
    pub run_test_mask: Option<u64>,
    /// Workers (0 means 1).
    #[arg(long)]
    pub nr_threads: Option<u64>,
    /// Timed repetitions of each case per worker.
    #[arg(long)]
    pub test_repeat_count: Option<u64>,
    /// Loop iterations inside one repetition.
    #[arg(long)]
    pub test_loop_count: Option<u64>,
    /// Pages for fix_size, vm_map_ram and no_block (0 means 1).
    #[arg(long)]
    pub nr_pages: Option<u64>,
    /// Run the cases in mask order instead of a per-worker shuffle (1 or 0).
    #[arg(long)]
    pub sequential_test_order: Option<u64>,
    /// Use vmalloc_huge in fix_size (1 or 0). Not built yet: refused.
    #[arg(long)]
    pub use_huge: Option<u64>,
    /// Objects of pcpu_alloc_test.
    #[arg(long)]
    pub nr_pcpu_objects: Option<u64>,
    /// A preset of test_vmalloc.sh; explicit parameters override it.
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// vmarena strategies to run, comma separated; each gets a space of its own.
    #[arg(long, value_delimiter = ',', default_value = "nodes")]
    pub strategy: Vec<Strategy>,
    /// Size of each strategy's space.
    #[arg(long, default_value_t = 64 << 30)]
    pub space_bytes: u64,
    /// Measure lock hold times too (two clock reads per lock acquisition).
    #[arg(long)]
    pub lock_timing: bool,
    /// Seed of the workers' random numbers (worker i uses seed + i).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write every parameter, the machine and every figure as JSON.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Parameters as `modprobe` takes them: `run_test_mask=7 nr_threads=2 ...`.
    #[arg(value_name = "KEY=VALUE")]
    pub params: Vec<String>,
}

/// The driver's parameters after defaults, mode and overrides, with the kernel's clamping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    pub run_test_mask: u64,
    pub nr_threads: usize,
    pub test_repeat_count: u64,
    pub test_loop_count: u64,
    pub nr_pages: usize,
    pub sequential_test_order: bool,
    pub use_huge: bool,
    pub nr_pcpu_objects: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            run_test_mask: 7,
            nr_threads: 1,
            test_repeat_count: 1,
            test_loop_count: 1_000_000,
            nr_pages: 1,
            sequential_test_order: false,
            use_huge: false,
            nr_pcpu_objects: 35_000,
        }
    }
}

const KEYS: [&str; 8] = [
    "run_test_mask",
    "nr_threads",
    "test_repeat_count",
    "test_loop_count",
    "nr_pages",
    "sequential_test_order",
    "use_huge",
    "nr_pcpu_objects",
];

impl Params {
    /// Resolve defaults, then the mode's preset, then explicit values (flags, then `key=value`).
    pub fn resolve(a: &Args, cpus: usize) -> Result<Params, String> {
        let mut p = Params::default();
        match a.mode {
            Some(Mode::Performance) => {
                p.sequential_test_order = true;
                p.test_repeat_count = 3;
            }
            Some(Mode::Stress) => {
                p.nr_threads = cpus;
                p.test_repeat_count = 20;
            }
            Some(Mode::Smoke) => {
                p.test_loop_count = 10_000;
                p.test_repeat_count = 10;
            }
            None => {}
        }
        let flags = [
            ("run_test_mask", a.run_test_mask),
            ("nr_threads", a.nr_threads),
            ("test_repeat_count", a.test_repeat_count),
            ("test_loop_count", a.test_loop_count),
            ("nr_pages", a.nr_pages),
            ("sequential_test_order", a.sequential_test_order),
            ("use_huge", a.use_huge),
            ("nr_pcpu_objects", a.nr_pcpu_objects),
        ];
        for (k, v) in flags {
            if let Some(v) = v {
                p.set(k, v)?;
            }
        }
        for word in &a.params {
            let (k, v) = word.split_once('=').ok_or_else(|| format!("'{word}' is not key=value"))?;
            if !KEYS.contains(&k) {
                return Err(format!("unknown parameter '{k}' (known: {})", KEYS.join(", ")));
            }
            let v: u64 = v.trim().parse().map_err(|_| format!("{k}: '{v}' is not a number"))?;
            p.set(k, v)?;
        }
        if p.run_test_mask == 0 || p.run_test_mask >> CASES.len() != 0 {
            return Err(format!(
                "run_test_mask {:#x} selects no case or a case beyond bit 12",
                p.run_test_mask
            ));
        }
        if p.use_huge {
            return Err("use_huge: vmalloc_huge is not built yet".into());
        }
        Ok(p)
    }

    fn set(&mut self, key: &str, v: u64) -> Result<(), String> {
        match key {
            "run_test_mask" => self.run_test_mask = v,
            // The kernel clamps nr_threads to [1, USHRT_MAX] and the counts to at least 1.
            "nr_threads" => self.nr_threads = v.clamp(1, u16::MAX as u64) as usize,
            "test_repeat_count" => self.test_repeat_count = v.max(1),
            "test_loop_count" => self.test_loop_count = v.max(1),
            "nr_pages" => self.nr_pages = v.max(1) as usize,
            "sequential_test_order" => self.sequential_test_order = v != 0,
            "use_huge" => self.use_huge = v != 0,
            "nr_pcpu_objects" => self.nr_pcpu_objects = v,
            _ => return Err(format!("unknown parameter '{key}'")),
        }
        Ok(())
    }

    /// Indexes of the masked cases, in order.
    pub fn cases(&self) -> Vec<usize> {
        (0..CASES.len()).filter(|i| self.run_test_mask & (1 << i) != 0).collect()
    }
}

/// One worker's figures for one case.
#[derive(Clone, Debug, Default)]
pub struct CaseResult {
    pub passed: u64,
    pub failed: u64,
    pub xfailed: u64,
    /// Sum over the repetitions, microseconds.
    pub total_us: u64,
    pub skipped: Option<&'static str>,
}

/// One worker's run.
#[derive(Clone, Debug, Default)]
pub struct WorkerResult {
    pub cases: Vec<CaseResult>,
    pub cycles: u64,
    pub wall_ns: u64,
}

/// One contender's run.
pub struct RunResult {
    pub name: String,
    pub workers: Vec<WorkerResult>,
    pub locks: Vec<(&'static str, LockStats)>,
    pub wall: Duration,
}

/// The kernel's shuffle: for i from n-1 down to 1, swap with j below i (Sattolo's algorithm:
/// no element keeps its place).
pub fn shuffle(order: &mut [usize], rng: &mut Rng) {
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64) as usize;
        order.swap(i, j);
    }
}

/// Run the masked cases on `c` with `p`, workers started together.
pub fn run(c: Arc<dyn Contender>, p: &Params, seed: u64, cpus: usize) -> RunResult {
    let before = c.lock_stats();
    let barrier = Arc::new(Barrier::new(p.nr_threads + 1));
    let done = Arc::new(AtomicU64::new(0));
    let total_steps = (p.nr_threads * p.cases().len()) as u64 * p.test_repeat_count;
    let handles: Vec<_> = (0..p.nr_threads)
        .map(|w| {
            let (c, p, b, done) = (c.clone(), p.clone(), barrier.clone(), done.clone());
            std::thread::Builder::new()
                .name(format!("vmalloc_test/{w}"))
                .spawn(move || {
                    let mut env = CaseEnv {
                        c: &*c,
                        loops: p.test_loop_count,
                        nr_pages: p.nr_pages,
                        cpus,
                        rng: Rng(seed + w as u64 + 1),
                    };
                    let mut order = p.cases();
                    if !p.sequential_test_order {
                        shuffle(&mut order, &mut env.rng);
                    }
                    let mut res = WorkerResult {
                        cases: vec![CaseResult::default(); CASES.len()],
                        ..Default::default()
                    };
                    b.wait();
                    let t0 = Instant::now();
                    let start = vmarena_platform::process::cycles();
                    for &i in &order {
                        let case = &CASES[i];
                        let r = &mut res.cases[i];
                        let Some(run) = case.run else {
                            r.skipped = case.skip;
                            done.fetch_add(p.test_repeat_count, Relaxed);
                            continue;
                        };
                        for _ in 0..p.test_repeat_count {
                            let t = Instant::now();
                            let rv = run(&mut env);
                            r.total_us += t.elapsed().as_micros() as u64;
                            match (rv, case.xfail) {
                                (0, _) => r.passed += 1,
                                (_, true) => r.xfailed += 1,
                                (_, false) => r.failed += 1,
                            }
                            done.fetch_add(1, Relaxed);
                        }
                    }
                    res.cycles = vmarena_platform::process::cycles() - start;
                    res.wall_ns = t0.elapsed().as_nanos() as u64;
                    res
                })
                .expect("cannot start a worker")
        })
        .collect();
    let t0 = Instant::now();
    barrier.wait();
    // Like the kernel's main thread, wait in steps, reporting progress.
    let name = c.name();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let every = if tty { Duration::from_secs(2) } else { Duration::from_secs(10) };
    let mut next = every;
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(100));
        if t0.elapsed() >= next {
            next += every;
            let line = format!(
                "[test-vmalloc] {name}: {}/{total_steps} repetitions, {:.0} s",
                done.load(Relaxed),
                t0.elapsed().as_secs_f64()
            );
            if tty {
                eprint!("\r{line}   ");
            } else {
                eprintln!("{line}");
            }
        }
    }
    let workers: Vec<_> = handles.into_iter().map(|h| h.join().expect("a worker panicked")).collect();
    let wall = t0.elapsed();
    if tty && wall >= every {
        eprintln!();
    }
    c.quiesce();
    let locks = c
        .lock_stats()
        .into_iter()
        .zip(before.into_iter().chain(std::iter::repeat(("", LockStats::default()))))
        .map(|((n, a), (_, b))| {
            (
                n,
                LockStats {
                    acquisitions: a.acquisitions - b.acquisitions,
                    contended: a.contended - b.contended,
                    wait_ns: a.wait_ns - b.wait_ns,
                    hold_ns: a.hold_ns - b.hold_ns,
                },
            )
        })
        .collect();
    RunResult { name, workers, locks, wall }
}

/// The kernel's report lines for one contender.
pub fn summary_lines(r: &RunResult, p: &Params) -> String {
    let mut out = String::new();
    for w in &r.workers {
        for i in p.cases() {
            let c = &w.cases[i];
            let name = CASES[i].name;
            if let Some(why) = c.skipped {
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

/// Lock figures of one contender's run and the share of worker time spent waiting for locks.
pub fn lock_lines(r: &RunResult) -> String {
    let thread_ns: u64 = r.workers.iter().map(|w| w.wall_ns).sum();
    let mut out = String::new();
    let mut wait = 0u64;
    for (n, l) in &r.locks {
        wait += l.wait_ns;
        let _ = writeln!(
            out,
            "lock {n:<6} acquisitions {:>12} contended {:>10} ({:>5.2}%) wait {:>10.3} ms hold {:>10.3} ms",
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
    out
}

/// Nanoseconds per loop of case `i`, averaged over workers and repetitions.
fn ns_per_loop(r: &RunResult, p: &Params, i: usize) -> Option<f64> {
    let ws = &r.workers;
    if ws.is_empty() || ws[0].cases[i].skipped.is_some() {
        return None;
    }
    let us: u64 = ws.iter().map(|w| w.cases[i].total_us).sum();
    Some(us as f64 * 1000.0 / (ws.len() as f64 * p.test_repeat_count as f64 * p.test_loop_count as f64))
}

/// The comparison table: per case, time per loop for each contender and its ratio to the
/// reference contender (vmarena-nodes when it ran, else the first).
pub fn comparison(results: &[RunResult], p: &Params) -> String {
    let reference = results.iter().position(|r| r.name == "vmarena-nodes").unwrap_or(0);
    let mut out = String::new();
    let _ = write!(out, "{:<32}", "ns per loop (ratio to ref)");
    for r in results {
        let _ = write!(out, " {:>24}", r.name);
    }
    out.push('\n');
    for i in p.cases() {
        let _ = write!(out, "{:<32}", CASES[i].name);
        let base = ns_per_loop(&results[reference], p, i);
        for r in results {
            match (ns_per_loop(r, p, i), base) {
                (Some(v), Some(b)) if b > 0.0 => {
                    let _ = write!(out, " {:>15.1} ({:>5.2}x)", v, v / b);
                }
                (Some(v), _) => {
                    let _ = write!(out, " {v:>24.1}");
                }
                (None, _) => {
                    let _ = write!(out, " {:>24}", "skipped");
                }
            }
        }
        out.push('\n');
    }
    let _ = writeln!(out, "(ref: {})", results[reference].name);
    out
}

pub fn json(results: &[RunResult], p: &Params, seed: u64, m: &Machine) -> String {
    let mut rs = Vec::new();
    for r in results {
        let workers: Vec<String> = r
            .workers
            .iter()
            .map(|w| {
                let cases: Vec<String> = p
                    .cases()
                    .into_iter()
                    .map(|i| {
                        let c = &w.cases[i];
                        format!(
                            "{{\"case\":{},\"bit\":{i},\"passed\":{},\"failed\":{},\"xfailed\":{},\"avg_usec\":{},\"skipped\":{}}}",
                            json_str(CASES[i].name),
                            c.passed,
                            c.failed,
                            c.xfailed,
                            c.total_us / p.test_repeat_count,
                            c.skipped.map(json_str).unwrap_or_else(|| "null".into())
                        )
                    })
                    .collect();
                format!("{{\"cycles\":{},\"wall_ns\":{},\"cases\":[{}]}}", w.cycles, w.wall_ns, cases.join(","))
            })
            .collect();
        let locks: Vec<String> = r
            .locks
            .iter()
            .map(|(n, l)| {
                format!(
                    "{{\"lock\":{},\"acquisitions\":{},\"contended\":{},\"wait_ns\":{},\"hold_ns\":{}}}",
                    json_str(n),
                    l.acquisitions,
                    l.contended,
                    l.wait_ns,
                    l.hold_ns
                )
            })
            .collect();
        rs.push(format!(
            "{{\"contender\":{},\"wall_ms\":{:.3},\"workers\":[{}],\"locks\":[{}]}}",
            json_str(&r.name),
            r.wall.as_secs_f64() * 1e3,
            workers.join(","),
            locks.join(",")
        ));
    }
    format!(
        "{{\"benchmark\":\"test-vmalloc\",\"params\":{{\"run_test_mask\":{},\"nr_threads\":{},\"test_repeat_count\":{},\"test_loop_count\":{},\"nr_pages\":{},\"sequential_test_order\":{},\"use_huge\":{},\"nr_pcpu_objects\":{},\"seed\":{seed}}},\"machine\":{},\"results\":[{}]}}\n",
        p.run_test_mask,
        p.nr_threads,
        p.test_repeat_count,
        p.test_loop_count,
        p.nr_pages,
        p.sequential_test_order as u8,
        p.use_huge as u8,
        p.nr_pcpu_objects,
        m.json(),
        rs.join(",")
    )
}

/// The subcommand: resolve, run every contender, print.
pub fn main(a: Args, m: &Machine) -> Result<(), String> {
    let p = Params::resolve(&a, m.cores)?;
    println!(
        "# test_vmalloc: run_test_mask={} nr_threads={} test_repeat_count={} test_loop_count={} nr_pages={} sequential_test_order={} use_huge={} nr_pcpu_objects={} seed={}",
        p.run_test_mask,
        p.nr_threads,
        p.test_repeat_count,
        p.test_loop_count,
        p.nr_pages,
        p.sequential_test_order as u8,
        p.use_huge as u8,
        p.nr_pcpu_objects,
        a.seed
    );
    println!("# {}", m.line());
    println!("# lock timing: {}", a.lock_timing);
    vmarena::set_lock_timing(a.lock_timing);
    let mut results = Vec::new();
    for &s in &a.strategy {
        let c: Arc<dyn Contender> = Arc::new(VmarenaContender::new(s, a.space_bytes)?);
        let r = run(c, &p, a.seed, m.cores);
        println!("\n## {} ({:.3} s)", r.name, r.wall.as_secs_f64());
        print!("{}", summary_lines(&r, &p));
        print!("{}", lock_lines(&r));
        results.push(r);
    }
    println!();
    print!("{}", comparison(&results, &p));
    if let Some(path) = &a.json {
        std::fs::write(path, json(&results, &p, a.seed, m))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
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
        assert!(Params::resolve(&args(&["use_huge=1"]), 2).unwrap_err().contains("vmalloc_huge"));
    }

    #[test]
    fn shuffle_moves_every_element() {
        for seed in 1..200 {
            let mut order: Vec<usize> = (0..7).collect();
            shuffle(&mut order, &mut Rng(seed));
            assert!(order.iter().enumerate().all(|(i, &v)| i != v), "Sattolo: no fixed point ({order:?})");
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, (0..7).collect::<Vec<_>>());
        }
    }

    #[test]
    fn every_case_runs_and_reports_in_the_kernel_format() {
        let c: Arc<dyn Contender> = Arc::new(VmarenaContender::new(Strategy::Nodes, 8 << 30).unwrap());
        let p = Params { run_test_mask: 0x1fff, nr_threads: 2, test_loop_count: 3, ..Params::default() };
        let r = run(c, &p, 1, 2);
        let text = summary_lines(&r, &p);
        let summary: Vec<&str> = text.lines().filter(|l| l.starts_with("Summary: ")).collect();
        assert_eq!(summary.len(), 2 * 13);
        for (i, case) in CASES.iter().enumerate() {
            let line = summary[i];
            assert!(line.starts_with(&format!("Summary: {} ", case.name)), "{line}");
            if case.skip.is_some() {
                assert!(line.contains(" skipped: "), "{line}");
            } else if case.name == "align_shift_alloc_test" {
                assert!(line.contains("passed: 0 failed: 0 xfailed: 1 repeat: 1 loops: 3 avg: "), "{line}");
            } else {
                assert!(line.contains("passed: 1 failed: 0 xfailed: 0 repeat: 1 loops: 3 avg: "), "{line}");
                assert!(line.ends_with(" usec"), "{line}");
            }
        }
        assert!(text.contains("All test took worker0=") && text.contains("All test took worker1="));
        assert!(lock_lines(&r).contains("lock wait share: "));
    }
}
