//! `vmarena pair`: nanoseconds per vmalloc+vfree pair, per strategy and thread count, in one run.
//!
//! Every contender is built in the same process; rounds are interleaved (round 1 of every
//! strategy and thread count, then round 2, ...) so that a noisy moment on a shared machine hits
//! all of them alike, and the median round is reported. Per run the lab also records the lock
//! figures (acquisitions and contended acquisitions per pair, the share of thread time spent
//! waiting for locks) and the purges.

use crate::machine::Machine;
use std::sync::{Arc, Barrier};
use std::time::Instant;
use vmarena::{ArenaOptions, LockStats, SpaceOptions, Strategy, VmSpace};
use vmarena_engine::{AllocRequest, Arena, NoBacking};

/// What the pairs run against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backing {
    /// A `VmSpace`: real memory, guard pages, `vmalloc`/`vfree`.
    Memory,
    /// An integer `Arena` with no memory behind it: the engine alone, no syscalls.
    None,
}

/// One contender: a space, or a bare arena.
enum Target {
    Space(Box<VmSpace>),
    Arena(Arena),
}

impl Target {
    fn arena(&self) -> &Arena {
        match self {
            Target::Space(s) => s.arena(),
            Target::Arena(a) => a,
        }
    }

    #[inline]
    fn pair(&self, bytes: usize, pages: u64, touch: bool) {
        match self {
            Target::Space(s) => {
                let p = s.vmalloc(bytes).expect("vmalloc failed during the benchmark");
                if touch {
                    // SAFETY: at least one usable byte.
                    unsafe { p.as_ptr().write_volatile(1) };
                }
                s.vfree(p.as_ptr()).expect("vfree failed during the benchmark");
            }
            Target::Arena(a) => {
                let x = a.alloc(&AllocRequest::pages(pages)).expect("alloc failed during the benchmark");
                a.free(x.start).expect("free failed during the benchmark");
            }
        }
    }
}

#[derive(clap::Args, Clone)]
pub struct PairConfig {
    /// Strategies to compare, comma separated.
    #[arg(long = "strategy", value_delimiter = ',', default_value = "global,split,nodes")]
    pub strategies: Vec<Strategy>,
    /// Thread counts, comma separated; the first is the scaling baseline.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// Bytes per allocation.
    #[arg(long = "size", default_value_t = 4096)]
    pub bytes: usize,
    /// Pairs per thread per round.
    #[arg(long, default_value_t = 1_000_000)]
    pub pairs: u64,
    /// Rounds (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Write one byte to each area (page faults then dominate).
    #[arg(long)]
    pub touch: bool,
    /// Guard pages after each area.
    #[arg(long, default_value_t = 1)]
    pub guard_pages: u64,
    /// Measure lock hold times too (costs two clock reads per lock).
    #[arg(long)]
    pub lock_timing: bool,
    /// What the pairs run against: memory (a VmSpace) or none (the bare integer engine).
    #[arg(long, value_enum, default_value = "memory")]
    pub backing: Backing,
    /// Write all parameters, the machine and every figure as JSON.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

#[derive(Clone, Default)]
struct Sample {
    /// Sum over threads of each thread's run time.
    thread_ns: f64,
    ns_per_pair: f64,
    mpairs_per_s: f64,
    locks: Vec<(&'static str, LockStats)>,
    purges: u64,
    pool_hit_rate: f64,
    /// Allocations served by the thread's cache, per allocation.
    cache_hit_rate: f64,
}

pub struct PairResult {
    pub strategy: Strategy,
    pub threads: usize,
    samples: Vec<Sample>,
}

impl PairResult {
    fn median(&self) -> Sample {
        let mut s = self.samples.clone();
        s.sort_by(|a, b| a.ns_per_pair.total_cmp(&b.ns_per_pair));
        s[s.len() / 2].clone()
    }
}

fn run_once(target: &Arc<Target>, threads: usize, cfg: &PairConfig) -> Sample {
    let arena = target.arena();
    let before_locks = arena.lock_stats();
    let before = arena.stats();
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (t, b) = (target.clone(), barrier.clone());
            let (pairs, bytes, touch) = (cfg.pairs, cfg.bytes, cfg.touch);
            // The bare arena gets the same page count a space would use (data plus guards).
            let pages = bytes.div_ceil(vmarena_platform::page_size()) as u64 + cfg.guard_pages;
            std::thread::spawn(move || {
                b.wait();
                let t0 = Instant::now();
                for _ in 0..pairs {
                    t.pair(bytes, pages, touch);
                }
                t0.elapsed()
            })
        })
        .collect();
    barrier.wait();
    let wall = Instant::now();
    let per_thread: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let wall_ns = wall.elapsed().as_nanos() as f64;
    let thread_ns: f64 = per_thread.iter().map(|d| d.as_nanos() as f64).sum();
    let total_pairs = cfg.pairs as f64 * threads as f64;
    let after = arena.stats();
    let locks: Vec<(&'static str, LockStats)> =
        arena.lock_stats().into_iter().zip(before_locks).map(|((n, a), (_, b))| (n, a.since(&b))).collect();
    let hits = (after.pool_hits - before.pool_hits) as f64;
    let misses = (after.pool_misses - before.pool_misses) as f64;
    Sample {
        thread_ns,
        ns_per_pair: thread_ns / total_pairs,
        mpairs_per_s: total_pairs / wall_ns * 1e3,
        purges: after.purges - before.purges,
        pool_hit_rate: if hits + misses > 0.0 { hits / (hits + misses) } else { 0.0 },
        cache_hit_rate: (after.cache_hits - before.cache_hits) as f64 / total_pairs,
        locks,
    }
}

impl Sample {
    /// Share of thread time spent waiting for locks (the seeds' spinlock slowpath figure).
    fn wait_share(&self) -> f64 {
        self.locks.iter().map(|l| l.1.wait_ns as f64).sum::<f64>() / self.thread_ns.max(1.0)
    }
}

pub fn run(cfg: &PairConfig) -> Vec<PairResult> {
    vmarena::set_lock_timing(cfg.lock_timing);
    let spaces: Vec<(Strategy, Arc<Target>)> = cfg
        .strategies
        .iter()
        .map(|&s| {
            // Environment options apply, except the strategy, which is the contender's own.
            let ao = ArenaOptions { strategy: s, ..ArenaOptions::default().with_env().unwrap_or_default() };
            let name = format!("pair-{s}");
            let t = match cfg.backing {
                Backing::Memory => {
                    let so = SpaceOptions {
                        space_bytes: 8 << 30,
                        guard_pages: cfg.guard_pages,
                        ..Default::default()
                    };
                    Target::Space(Box::new(VmSpace::new(&name, so, ao).expect("cannot build the space")))
                }
                // The page count of an 8 GiB space, without memory.
                Backing::None => Target::Arena(
                    Arena::new(name, 1 << 20, (1 << 20) + (2 << 20), ao, Box::new(NoBacking))
                        .expect("cannot build the arena"),
                ),
            };
            (s, Arc::new(t))
        })
        .collect();
    let mut results: Vec<PairResult> = Vec::new();
    for &(s, _) in &spaces {
        for &t in &cfg.threads {
            results.push(PairResult { strategy: s, threads: t, samples: Vec::new() });
        }
    }
    // Warm-up: fault in the structures and let pools fill.
    for (_, sp) in &spaces {
        for &t in &cfg.threads {
            let warm = PairConfig { pairs: (cfg.pairs / 10).max(1000), ..cfg.clone() };
            run_once(sp, t, &warm);
        }
    }
    let total = cfg.rounds * results.len();
    let mut done = 0;
    let started = Instant::now();
    for _ in 0..cfg.rounds {
        for (s, sp) in &spaces {
            for &t in &cfg.threads {
                let r = run_once(sp, t, cfg);
                results.iter_mut().find(|x| x.strategy == *s && x.threads == t).unwrap().samples.push(r);
                done += 1;
                eprint!("\r[pair] {done}/{total} runs, {:.1} s", started.elapsed().as_secs_f64());
            }
        }
    }
    eprintln!();
    vmarena::set_lock_timing(false);
    results
}

pub fn print(cfg: &PairConfig, results: &[PairResult], m: &Machine) {
    println!(
        "# vmarena pair: vmalloc({}) + vfree, {} pairs per thread, median of {} rounds",
        cfg.bytes, cfg.pairs, cfg.rounds
    );
    println!("# {}", m.line());
    println!(
        "# backing: {:?}, touch: {}, guard pages: {}, lock timing: {}",
        cfg.backing, cfg.touch, cfg.guard_pages, cfg.lock_timing
    );
    println!();
    println!(
        "{:<8} {:>7} {:>10} {:>10} {:>9} {:>10} {:>9} {:>8}  locks (acq/pair, contended %, wait share)",
        "strategy", "threads", "ns/pair", "Mpairs/s", "scaling", "cache hit", "pool hit", "purges"
    );
    for r in results {
        let m = r.median();
        let base = results
            .iter()
            .find(|x| x.strategy == r.strategy && x.threads == cfg.threads[0])
            .map(|x| x.median().mpairs_per_s)
            .unwrap_or(m.mpairs_per_s);
        let pairs = cfg.pairs as f64 * r.threads as f64;
        let locks: Vec<String> = m
            .locks
            .iter()
            .map(|(n, l)| {
                format!(
                    "{n} {:.2}/{:.1}%",
                    l.acquisitions as f64 / pairs,
                    if l.acquisitions > 0 { 100.0 * l.contended as f64 / l.acquisitions as f64 } else { 0.0 }
                )
            })
            .collect();
        println!(
            "{:<8} {:>7} {:>10.1} {:>10.2} {:>8.2}x {:>9.1}% {:>8.1}% {:>8}  {}, wait {:.1}%",
            r.strategy.name(),
            r.threads,
            m.ns_per_pair,
            m.mpairs_per_s,
            m.mpairs_per_s / base,
            100.0 * m.cache_hit_rate,
            100.0 * m.pool_hit_rate,
            m.purges,
            locks.join(", "),
            100.0 * m.wait_share()
        );
    }
    // Ratios against nodes, per thread count.
    println!();
    for &t in &cfg.threads {
        let Some(nodes) = results.iter().find(|x| x.strategy == Strategy::Nodes && x.threads == t) else {
            continue;
        };
        let n = nodes.median().mpairs_per_s;
        let others: Vec<String> = results
            .iter()
            .filter(|x| x.threads == t && x.strategy != Strategy::Nodes)
            .map(|x| format!("nodes/{} = {:.2}x", x.strategy.name(), n / x.median().mpairs_per_s))
            .collect();
        if !others.is_empty() {
            println!("throughput at {t} thread(s): {}", others.join(", "));
        }
    }
}

pub fn json(cfg: &PairConfig, results: &[PairResult], m: &Machine) -> String {
    let rows: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            let s = r.median();
            let locks: Vec<serde_json::Value> = s
                .locks
                .iter()
                .map(|(n, l)| {
                    serde_json::json!({
                        "lock": n, "acquisitions": l.acquisitions, "contended": l.contended,
                        "wait_ns": l.wait_ns, "hold_ns": l.hold_ns,
                    })
                })
                .collect();
            serde_json::json!({
                "strategy": r.strategy.name(),
                "threads": r.threads,
                "ns_per_pair": s.ns_per_pair,
                "mpairs_per_s": s.mpairs_per_s,
                "pool_hit_rate": s.pool_hit_rate,
                "cache_hit_rate": s.cache_hit_rate,
                "purges": s.purges,
                "lock_wait_share": s.wait_share(),
                "locks": locks,
                "rounds_ns_per_pair": r.samples.iter().map(|x| x.ns_per_pair).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({
        "benchmark": "pair",
        "params": {
            "backing": format!("{:?}", cfg.backing), "bytes": cfg.bytes, "pairs": cfg.pairs,
            "rounds": cfg.rounds, "touch": cfg.touch, "guard_pages": cfg.guard_pages,
            "lock_timing": cfg.lock_timing,
        },
        "machine": m,
        "results": rows,
    })
    .to_string()
        + "\n"
}
