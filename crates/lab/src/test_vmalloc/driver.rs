//! The driver: workers released together, per-worker shuffled case order, timed repetitions,
//! the figures of one contender's run.
//!
//! With `lockstep`, the workers share one order (shuffled with the base seed unless
//! sequential) and meet at a barrier before each case, so each case runs beside copies of
//! itself only; the kernel's driver lets the workers' orders differ.

use super::cases::{CaseEnv, Rng, CASES};
use super::contender::Contender;
use super::params::Params;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// One worker's figures for one case.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CaseResult {
    pub passed: u64,
    pub failed: u64,
    pub xfailed: u64,
    /// Sum over the repetitions, microseconds.
    pub total_us: u64,
    pub skipped: Option<String>,
}

/// One worker's run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkerResult {
    pub cases: Vec<CaseResult>,
    pub cycles: u64,
    pub wall_ns: u64,
}

/// One lock class's figures over a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LockLine {
    pub lock: String,
    pub acquisitions: u64,
    pub contended: u64,
    pub wait_ns: u64,
    pub hold_ns: u64,
}

/// Process figures of the child that ran one contender.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProcFigures {
    /// Peak resident set (VmHWM), bytes.
    pub peak_rss: u64,
    /// Resident set right after the run, bytes.
    pub rss_end: u64,
    /// Resident set after an idle period (`child::IDLE`), bytes.
    pub rss_idle: u64,
    /// Page-table memory (VmPTE) after the idle period, bytes.
    pub vm_pte: u64,
    /// Minor faults during the run.
    pub minor_faults: u64,
    /// TLB shootdown interrupts during the run, machine-wide (`/proc/interrupts`); `None`
    /// where the kernel does not count them.
    #[serde(default)]
    pub tlb_shootdowns: Option<u64>,
    /// Resident bytes of the memory the contender manages (vmarena: its reservation) after the
    /// idle period; `None` for the peers.
    pub managed_idle: Option<u64>,
    /// Syscalls by name during the child's life (strace pass), when counted.
    pub syscalls: Option<Vec<(String, u64)>>,
}

/// One contender's run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunResult {
    pub name: String,
    pub workers: Vec<WorkerResult>,
    pub locks: Vec<LockLine>,
    /// Lock figures per call site (vmarena's; acquisitions and hold time only with timing on).
    pub sites: Vec<LockLine>,
    pub wall_ns: u64,
    pub proc: ProcFigures,
    /// The contender's statistics at the end of the run (vmarena's arena table; each run has a
    /// space of its own, so the counters are the run's).
    #[serde(default)]
    pub stats: Vec<(String, u64)>,
}

/// The kernel's shuffle: for i from n-1 down to 1, swap with j below i (Sattolo's algorithm:
/// no element keeps its place).
pub fn shuffle(order: &mut [usize], rng: &mut Rng) {
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64) as usize;
        order.swap(i, j);
    }
}

/// The order in which a worker runs the masked cases: mask order when sequential, else a
/// shuffle drawn from the worker's `rng`, or in lockstep one shuffle from `seed` for all.
pub fn case_order(p: &Params, seed: u64, rng: &mut Rng) -> Vec<usize> {
    let mut order = p.cases();
    if !p.sequential_test_order {
        if p.lockstep {
            shuffle(&mut order, &mut Rng(seed));
        } else {
            shuffle(&mut order, rng);
        }
    }
    order
}

/// Run the masked cases on `c` with `p`, workers started together.
pub fn run(c: Arc<dyn Contender>, p: &Params, seed: u64, cpus: usize) -> RunResult {
    let before = c.lock_stats();
    let sites_before = vmarena_engine::arena::site::snapshot();
    let barrier = Arc::new(Barrier::new(p.nr_threads + 1));
    let step = p.lockstep.then(|| Arc::new(Barrier::new(p.nr_threads)));
    let done = Arc::new(AtomicU64::new(0));
    let total_steps = (p.nr_threads * p.cases().len()) as u64 * p.test_repeat_count;
    let handles: Vec<_> = (0..p.nr_threads)
        .map(|w| {
            let (c, p, b, step, done) = (c.clone(), p.clone(), barrier.clone(), step.clone(), done.clone());
            std::thread::Builder::new()
                .name(format!("vmalloc_test/{w}"))
                .spawn(move || worker(&*c, &p, (seed, w), cpus, (&b, step.as_deref()), &done))
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
    let workers: Vec<WorkerResult> =
        handles.into_iter().map(|h| h.join().expect("a worker panicked")).collect();
    if tty && t0.elapsed() >= every {
        eprintln!();
    }
    // The workers leave the barrier together; the run lasts as long as the slowest one. (The
    // parent's progress loop above wakes every 100 ms, so its own clock is no measure.)
    let wall = Duration::from_nanos(workers.iter().map(|w| w.wall_ns).max().unwrap_or(0));
    c.quiesce();
    let line = |n: &str, l: vmarena::LockStats| LockLine {
        lock: n.to_string(),
        acquisitions: l.acquisitions,
        contended: l.contended,
        wait_ns: l.wait_ns,
        hold_ns: l.hold_ns,
    };
    let locks = c
        .lock_stats()
        .into_iter()
        .map(|(n, a)| line(n, a.since(&before.iter().find(|x| x.0 == n).map(|x| x.1).unwrap_or_default())))
        .collect();
    let sites = vmarena_engine::arena::site::snapshot()
        .into_iter()
        .zip(sites_before)
        .map(|((n, a), (_, b))| line(n, a.since(&b)))
        .filter(|l| l.acquisitions + l.contended > 0)
        .collect();
    let stats = c.stats().into_iter().map(|(n, v)| (n.to_string(), v)).collect();
    RunResult {
        name,
        workers,
        locks,
        sites,
        wall_ns: wall.as_nanos() as u64,
        proc: ProcFigures::default(),
        stats,
    }
}

/// Worker `w` of a run seeded with `seed` (its random numbers start from `seed + w + 1`);
/// `b` releases the workers together, `step` (lockstep only) before each case.
fn worker(
    c: &dyn Contender,
    p: &Params,
    (seed, w): (u64, usize),
    cpus: usize,
    (b, step): (&Barrier, Option<&Barrier>),
    done: &AtomicU64,
) -> WorkerResult {
    let mut env = CaseEnv {
        c,
        nr_pcpu_objects: p.nr_pcpu_objects as usize,
        loops: p.test_loop_count,
        nr_pages: p.nr_pages,
        use_huge: p.use_huge,
        cpus,
        rng: Rng(seed + w as u64 + 1),
    };
    let order = case_order(p, seed, &mut env.rng);
    let mut res = WorkerResult { cases: vec![CaseResult::default(); CASES.len()], ..Default::default() };
    b.wait();
    let t0 = Instant::now();
    let start = vmarena_platform::process::cycles();
    for &i in &order {
        if let Some(s) = step {
            s.wait();
        }
        let case = &CASES[i];
        let r = &mut res.cases[i];
        let Some(run) = case.run else {
            r.skipped = case.skip.map(str::to_string);
            done.fetch_add(p.test_repeat_count, Relaxed);
            continue;
        };
        for _ in 0..p.test_repeat_count {
            let t = Instant::now();
            let rv = run(&mut env);
            r.total_us += t.elapsed().as_micros() as u64;
            if rv == super::cases::UNSUPPORTED {
                r.skipped = Some(match case.name {
                    "pcpu_alloc_test" => format!("{} has no per-CPU object allocator", c.name()),
                    _ => format!("{} cannot map existing pages", c.name()),
                });
                done.fetch_add(1, Relaxed);
                continue;
            }
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
}
