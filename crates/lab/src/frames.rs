//! `vmarena frames`: the page layer's experiments (Linux's per-CPU page lists, FreeBSD's batch
//! queues) on a frame pool.
//!
//! Workloads, per thread, on one shared pool:
//! - `fault`: will-it-scale page_fault1's shape: take 256 blocks one at a time (as page faults
//!   do), then give them all back; `fault-mthp` and `fault-thp` do the same with order-3 (32 KiB)
//!   and order-9 (2 MiB) blocks, as large-folio faults do;
//! - `bulk`: the bulk array allocator, 64 frames per call, then 64 single frees;
//! - `build`: kbuild-like churn: up to 256 live blocks of mixed orders (60% order 0, 10% each of
//!   1 and 2, 19% order 3, 1% order 9) with random lifetimes;
//! - `xcpu`: threads in pairs, one allocating order-2 blocks and the other freeing them (the
//!   producer/consumer shape that free_high is about).
//!
//! Configurations are words joined by `+`: `zone` or `pcp` (per-CPU lists off or on), then
//! `queue` or `queue-N` (batch queues of N slots for frees that reach the zone, 63 by default),
//! `block` (FreeBSD's old rule: block when full, instead of trylock at half full) and
//! `retention` (compound blocks stay whole on the per-CPU lists).
//!
//! Reported per run: blocks per second, zone-lock acquisitions per 1000 blocks, the zone-lock
//! wait share of thread time, refills, drains, free_high drains, trylock failures, queue
//! flushes and failed half-full trylocks, and (with `--timing`) the share of thread time spent
//! preparing and dismantling compound blocks.

use crate::machine::Machine;
use crate::test_vmalloc::cases::Rng;
use std::sync::{mpsc, Arc, Barrier};
use std::time::Instant;
use vmarena::{FrameOptions, FramePool, FrameStats, LockStats};

/// Parameters of `vmarena frames`.
#[derive(clap::Args, Clone, serde::Serialize)]
pub struct FramesConfig {
    /// Thread counts (threads beyond the CPUs share the CPUs' lists, as in user space).
    #[arg(long, value_delimiter = ',', default_value = "1,2,64")]
    pub threads: Vec<usize>,
    /// Workloads: fault, fault-mthp, fault-thp, bulk, build, xcpu.
    #[arg(long, value_delimiter = ',', default_value = "fault,fault-thp,bulk,build,xcpu")]
    pub workloads: Vec<String>,
    /// Configurations (see the module text); ratios are to the first one.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "pcp+queue,pcp,pcp+queue+retention,zone,zone+queue,zone+queue+block,zone+queue-15,zone+queue-255"
    )]
    pub configs: Vec<String>,
    /// Blocks each thread allocates per run.
    #[arg(long, default_value_t = 200_000)]
    pub ops: u64,
    /// Size of the pool in MiB (a sparse memory file; frames are not touched).
    #[arg(long = "pool-mib", default_value_t = 2048)]
    pub pool_mib: u64,
    /// Measure lock hold times and compound preparation time (costs clock reads).
    #[arg(long)]
    pub timing: bool,
    /// Write every parameter and figure as JSON to this file.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<std::path::PathBuf>,
}

/// One run: one workload, one configuration, one thread count.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FramesRun {
    pub workload: String,
    pub config: String,
    pub threads: usize,
    pub blocks: u64,
    pub wall_ns: u64,
    pub failures: u64,
    pub zone_lock: LockStatsJson,
    pub pcp_lock: LockStatsJson,
    pub stats: Vec<(String, u64)>,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LockStatsJson {
    pub acquisitions: u64,
    pub contended: u64,
    pub wait_ns: u64,
    pub hold_ns: u64,
}

impl From<LockStats> for LockStatsJson {
    fn from(s: LockStats) -> Self {
        LockStatsJson {
            acquisitions: s.acquisitions,
            contended: s.contended,
            wait_ns: s.wait_ns,
            hold_ns: s.hold_ns,
        }
    }
}

impl FramesRun {
    fn stat(&self, name: &str) -> u64 {
        self.stats.iter().find(|(n, _)| n == name).map(|x| x.1).unwrap_or(0)
    }
    fn blocks_per_s(&self) -> f64 {
        self.blocks as f64 / (self.wall_ns.max(1) as f64 / 1e9)
    }
    fn thread_ns(&self) -> f64 {
        (self.wall_ns * self.threads as u64).max(1) as f64
    }
}

const WORKLOADS: [&str; 6] = ["fault", "fault-mthp", "fault-thp", "bulk", "build", "xcpu"];

/// The options a configuration name stands for.
pub fn parse_config(name: &str) -> Result<FrameOptions, String> {
    let mut words = name.split('+');
    let mut o = FrameOptions { batch_queue: 0, ..FrameOptions::default() };
    match words.next() {
        Some("zone") => o.pcp = false,
        Some("pcp") => o.pcp = true,
        _ => return Err(format!("configuration '{name}' must start with zone or pcp")),
    }
    for w in words {
        match w {
            "queue" => o.batch_queue = 63,
            "block" => o.batch_half_full = false,
            "retention" => o.compound_retention = true,
            _ => match w.strip_prefix("queue-").and_then(|n| n.parse::<usize>().ok()) {
                Some(n) if n > 0 => o.batch_queue = n,
                _ => return Err(format!("configuration '{name}': unknown word '{w}'")),
            },
        }
    }
    Ok(o)
}

fn check(cfg: &FramesConfig) -> Result<(), String> {
    if cfg.threads.is_empty() || cfg.threads.contains(&0) || cfg.ops == 0 || cfg.pool_mib == 0 {
        return Err("--threads, --ops and --pool-mib must be positive".into());
    }
    for w in &cfg.workloads {
        if !WORKLOADS.contains(&w.as_str()) {
            return Err(format!("unknown workload '{w}' (one of {})", WORKLOADS.join(", ")));
        }
    }
    for c in &cfg.configs {
        parse_config(c)?;
    }
    Ok(())
}

/// Alloc `order` or count a failure.
fn take(pool: &FramePool, order: u32, failures: &mut u64) -> Option<u32> {
    match pool.alloc(order) {
        Ok(p) => Some(p),
        Err(_) => {
            *failures += 1;
            None
        }
    }
}

fn give(pool: &FramePool, p: u32, order: u32) {
    pool.free(p, order).expect("the benchmark frees what it allocated");
}

/// One thread's share of a workload; returns (blocks, failures).
fn work(pool: &FramePool, workload: &str, t: usize, ops: u64, peer: Option<Peer>) -> (u64, u64) {
    let mut failures = 0;
    let mut done = 0u64;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((t as u64 + 1) * 0x2545_F491));
    match workload {
        "fault" | "fault-mthp" | "fault-thp" => {
            let order = match workload {
                "fault" => 0,
                "fault-mthp" => 3,
                _ => 9,
            };
            let batch = if order == 9 { 16 } else { 256 };
            let mut held = Vec::with_capacity(batch);
            while done < ops {
                for _ in 0..batch {
                    if let Some(p) = take(pool, order, &mut failures) {
                        held.push(p);
                    }
                }
                done += held.len() as u64;
                for p in held.drain(..) {
                    give(pool, p, order);
                }
            }
        }
        "bulk" => {
            let mut v = Vec::with_capacity(64);
            while done < ops {
                let got = pool.alloc_bulk(64, &mut v);
                if got < 64 {
                    failures += 1;
                }
                done += got as u64;
                for p in v.drain(..) {
                    give(pool, p, 0);
                }
            }
        }
        "build" => {
            let mut live: Vec<(u32, u32)> = Vec::with_capacity(256);
            while done < ops {
                let r = rng.next();
                if live.len() == 256 || (!live.is_empty() && r % 2 == 0) {
                    let (p, o) = live.swap_remove((r >> 8) as usize % live.len());
                    give(pool, p, o);
                } else {
                    let order = match (r >> 16) % 100 {
                        0..=59 => 0,
                        60..=69 => 1,
                        70..=79 => 2,
                        80..=98 => 3,
                        _ => 9,
                    };
                    if let Some(p) = take(pool, order, &mut failures) {
                        live.push((p, order));
                        done += 1;
                    }
                }
            }
            for (p, o) in live {
                give(pool, p, o);
            }
        }
        "xcpu" => match peer {
            Some(Peer::Producer(tx)) => {
                let mut batch = Vec::with_capacity(32);
                while done < ops {
                    if let Some(p) = take(pool, 2, &mut failures) {
                        batch.push(p);
                        done += 1;
                    }
                    if batch.len() == 32 {
                        tx.send(std::mem::take(&mut batch)).expect("consumer alive");
                    }
                }
                tx.send(batch).expect("consumer alive");
            }
            Some(Peer::Consumer(rx)) => {
                for batch in rx {
                    for p in batch {
                        give(pool, p, 2);
                    }
                }
            }
            None => {
                // An odd thread out frees its own blocks.
                while done < ops {
                    if let Some(p) = take(pool, 2, &mut failures) {
                        give(pool, p, 2);
                        done += 1;
                    }
                }
            }
        },
        _ => unreachable!("workloads are checked"),
    }
    (done, failures)
}

enum Peer {
    Producer(mpsc::SyncSender<Vec<u32>>),
    Consumer(mpsc::Receiver<Vec<u32>>),
}

fn one_run(cfg: &FramesConfig, workload: &str, config: &str, threads: usize) -> Result<FramesRun, String> {
    let opts = parse_config(config)?;
    let pool = FramePool::new(&format!("frames-{config}"), cfg.pool_mib << 20, opts)?;
    let before = pool.stats();
    let mut peers: Vec<Option<Peer>> = (0..threads).map(|_| None).collect();
    if workload == "xcpu" {
        for pair in 0..threads / 2 {
            let (tx, rx) = mpsc::sync_channel(64);
            peers[2 * pair] = Some(Peer::Producer(tx));
            peers[2 * pair + 1] = Some(Peer::Consumer(rx));
        }
    }
    let start = Arc::new(Barrier::new(threads + 1));
    let (results, wall_ns): (Vec<(u64, u64)>, u64) = std::thread::scope(|s| {
        let hs: Vec<_> = peers
            .into_iter()
            .enumerate()
            .map(|(t, peer)| {
                let (pool, start) = (&pool, start.clone());
                s.spawn(move || {
                    start.wait();
                    work(pool, workload, t, cfg.ops, peer)
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let r = hs.into_iter().map(|h| h.join().expect("worker panicked")).collect();
        (r, t0.elapsed().as_nanos() as u64)
    });
    let after = pool.stats();
    let (zone_lock, pcp_lock) = (pool.allocator().zone_lock_stats(), pool.allocator().pcp_lock_stats());
    pool.allocator().drain_all();
    pool.allocator().check()?;
    let stats = delta(&before, &after);
    Ok(FramesRun {
        workload: workload.to_string(),
        config: config.to_string(),
        threads,
        blocks: results.iter().map(|r| r.0).sum(),
        failures: results.iter().map(|r| r.1).sum(),
        wall_ns,
        zone_lock: zone_lock.into(),
        pcp_lock: pcp_lock.into(),
        stats,
    })
}

fn delta(before: &FrameStats, after: &FrameStats) -> Vec<(String, u64)> {
    before
        .values()
        .into_iter()
        .zip(after.values())
        .map(|((n, b), (_, a))| (n.to_string(), if n.ends_with("frames") { a } else { a.saturating_sub(b) }))
        .collect()
}

/// Every run of the configuration, with progress on stderr.
pub fn run(cfg: &FramesConfig) -> Result<Vec<FramesRun>, String> {
    check(cfg)?;
    vmarena::set_lock_timing(cfg.timing);
    let total = cfg.workloads.len() * cfg.configs.len() * cfg.threads.len();
    let mut runs = Vec::with_capacity(total);
    let t0 = Instant::now();
    for w in &cfg.workloads {
        for &t in &cfg.threads {
            for c in &cfg.configs {
                let r = one_run(cfg, w, c, t)?;
                eprintln!(
                    "[{}/{total}] {w} {c} {t} threads: {:.2} M blocks/s ({:.0} s elapsed)",
                    runs.len() + 1,
                    r.blocks_per_s() / 1e6,
                    t0.elapsed().as_secs_f64()
                );
                runs.push(r);
            }
        }
    }
    Ok(runs)
}

/// The tables: one per workload, one row per configuration and thread count.
pub fn print(cfg: &FramesConfig, runs: &[FramesRun], m: &Machine) {
    println!(
        "# vmarena frames: {} blocks per thread per run, pool {} MiB, per-CPU lists for {} CPUs, timing {}",
        cfg.ops,
        cfg.pool_mib,
        vmarena_platform::cpu::count(),
        cfg.timing
    );
    println!("# {}", m.line());
    for w in &cfg.workloads {
        println!("\n## {w}");
        print!(
            "{:<26} {:>4} {:>9} {:>7} {:>8} {:>7} {:>8} {:>8} {:>8} {:>9} {:>8}",
            "config",
            "thr",
            "Mblk/s",
            "ratio",
            "zone/1k",
            "wait%",
            "refills",
            "drains",
            "trylockF",
            "q flush",
            "q tryF"
        );
        if cfg.timing {
            print!(" {:>9}", "compound%");
        }
        println!();
        for &t in &cfg.threads {
            let rows: Vec<&FramesRun> = runs.iter().filter(|r| r.workload == *w && r.threads == t).collect();
            let Some(base) = rows.first() else { continue };
            for r in &rows {
                print!(
                    "{:<26} {:>4} {:>9.2} {:>6.2}x {:>8.1} {:>6.2}% {:>8} {:>8} {:>8} {:>9} {:>8}",
                    r.config,
                    t,
                    r.blocks_per_s() / 1e6,
                    r.blocks_per_s() / base.blocks_per_s().max(1e-9),
                    r.zone_lock.acquisitions as f64 * 1000.0 / r.blocks.max(1) as f64,
                    100.0 * r.zone_lock.wait_ns as f64 / r.thread_ns(),
                    r.stat("pcp_refills"),
                    r.stat("pcp_drains"),
                    r.stat("trylock_failures"),
                    r.stat("queue_flushes"),
                    r.stat("queue_try_failures"),
                );
                if cfg.timing {
                    print!(" {:>8.2}%", 100.0 * r.stat("compound_ns") as f64 / r.thread_ns());
                }
                if r.failures > 0 {
                    print!("  ({} allocations found no frames)", r.failures);
                }
                println!();
            }
        }
    }
    println!(
        "\nMblk/s: blocks allocated (and freed) per second, all threads; ratio: to the first configuration at the same thread count;\n\
         zone/1k: zone-lock acquisitions per 1000 blocks; wait%: zone-lock wait time as a share of thread time;\n\
         trylockF: per-CPU list trylocks that failed; q flush / q tryF: batch-queue flushes and failed half-full trylocks."
    );
}

pub fn json(cfg: &FramesConfig, runs: &[FramesRun], m: &Machine) -> String {
    serde_json::to_string_pretty(
        &serde_json::json!({ "command": "frames", "config": cfg, "machine": m, "runs": runs }),
    )
    .expect("plain data serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_names_parse_to_options() {
        let o = parse_config("zone+queue-15+block").unwrap();
        assert!(!o.pcp && o.batch_queue == 15 && !o.batch_half_full && !o.compound_retention);
        let o = parse_config("pcp+queue+retention").unwrap();
        assert!(o.pcp && o.batch_queue == 63 && o.batch_half_full && o.compound_retention);
        assert_eq!(parse_config("pcp").unwrap().batch_queue, 0);
        assert!(parse_config("queue").is_err());
        assert!(parse_config("pcp+queue-0").is_err());
        assert!(parse_config("pcp+fast").is_err());
    }

    #[test]
    fn every_workload_runs_and_returns_every_frame() {
        let cfg = FramesConfig {
            threads: vec![3],
            workloads: WORKLOADS.iter().map(|s| s.to_string()).collect(),
            configs: vec!["pcp+queue".into(), "zone+queue-7+block".into()],
            ops: 2000,
            pool_mib: 256,
            timing: false,
            json: None,
        };
        let runs = run(&cfg).unwrap();
        assert_eq!(runs.len(), WORKLOADS.len() * 2);
        for r in &runs {
            assert!(r.blocks >= 2000, "{} {}: {} blocks", r.workload, r.config, r.blocks);
            assert_eq!(r.stat("user_frames"), 0, "{} {}: frames still held", r.workload, r.config);
        }
    }
}
