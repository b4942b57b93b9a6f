//! `vmarena fixed`: the shape of FreeBSD's exec-args experiment ("Opportunistically cache KVA
//! for execve arguments").
//!
//! N workers (N = CPUs x each factor of `--workers`) repeatedly take a buffer of one fixed size,
//! write part of it, sometimes sleep while holding it (a sleep point, as execve has), and give
//! it back. The same cycles run against each contender in one process: vmarena's FixedPool with
//! each release policy, a single locked free list over the same preallocated slots (FreeBSD's
//! exec map before the change, which also slept when empty), `vmalloc`/`vfree` of a VmSpace,
//! glibc `malloc`/`free`, and `mmap`/`munmap`. Reported per run: wall time per cycle, kernel
//! and user CPU time per cycle (getrusage of the process), minor faults, context switches, and
//! for the pools the per-CPU hit rate, steals, sleeps and releases.

use crate::machine::Machine;
use std::ptr::NonNull;
use std::sync::{Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};
use vmarena::{ArenaOptions, FixedOptions, FixedPool, PutRelease, SpaceOptions, VmSpace};
use vmarena_platform::process::Usage;

/// Parameters of `vmarena fixed`.
#[derive(clap::Args, Clone, serde::Serialize)]
pub struct FixedConfig {
    /// Worker counts, as multiples of the online CPUs.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32")]
    pub workers: Vec<usize>,
    /// Contenders, in the order they run:
    /// fixed, fixed-free, fixed-dontneed, locked-list, vmalloc, glibc, mmap.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fixed,fixed-free,fixed-dontneed,locked-list,vmalloc,glibc,mmap"
    )]
    pub contenders: Vec<String>,
    /// Cycles per run, shared among the workers.
    #[arg(long, default_value_t = 200_000)]
    pub cycles: u64,
    /// Buffer size in bytes.
    #[arg(long = "slot-bytes", default_value_t = 256 << 10)]
    pub slot_bytes: usize,
    /// Bytes written per cycle, from the start of the buffer.
    #[arg(long = "touch-bytes", default_value_t = 16 << 10)]
    pub touch_bytes: usize,
    /// Slots of the pools (0: 8 per CPU, FreeBSD's sizing).
    #[arg(long, default_value_t = 0)]
    pub slots: u64,
    /// One cycle in this many sleeps while holding its buffer (0: never).
    #[arg(long = "sleep-every", default_value_t = 16)]
    pub sleep_every: u64,
    /// Length of that sleep, in microseconds.
    #[arg(long = "sleep-us", default_value_t = 50)]
    pub sleep_us: u64,
    /// Raise a low-memory event (vmarena_pressure) this often during each run (0: never).
    #[arg(long = "pressure-ms", default_value_t = 0)]
    pub pressure_ms: u64,
    /// Write every parameter and figure as JSON to this file.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<std::path::PathBuf>,
}

impl FixedConfig {
    /// Slots of the pools: `--slots`, or FixedPool's default when 0.
    fn pool_slots(&self) -> u64 {
        FixedOptions { slots: self.slots, ..Default::default() }.slot_count()
    }
}

const CONTENDERS: [&str; 7] =
    ["fixed", "fixed-free", "fixed-dontneed", "locked-list", "vmalloc", "glibc", "mmap"];

/// One run: one contender, one worker count.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FixedRun {
    pub contender: String,
    pub workers: usize,
    pub cycles: u64,
    pub wall_ns: u64,
    pub usage_user_ns: u64,
    pub usage_sys_ns: u64,
    pub minor_faults: u64,
    pub voluntary_switches: u64,
    /// Pools only: gets served by this CPU's entry, the list, a steal; sleeps; releases.
    pub cache_hits: u64,
    pub list_pops: u64,
    pub steals: u64,
    pub sleeps: u64,
    pub releases: u64,
    pub release_calls: u64,
    pub pressure_events: u64,
}

impl FixedRun {
    fn per_cycle(&self, x: u64) -> f64 {
        x as f64 / self.cycles.max(1) as f64
    }

    fn hit_pct(&self) -> Option<f64> {
        let gets = self.cache_hits + self.list_pops + self.steals;
        (gets > 0).then(|| 100.0 * self.cache_hits as f64 / gets as f64)
    }
}

/// What a contender must do: hand out a buffer and take it back.
trait Source: Sync {
    fn get(&self) -> NonNull<u8>;
    fn put(&self, p: NonNull<u8>);
    fn fill(&self, _run: &mut FixedRun) {}
}

struct Pool<'s>(FixedPool<'s>);

impl Source for Pool<'_> {
    fn get(&self) -> NonNull<u8> {
        self.0.get()
    }
    fn put(&self, p: NonNull<u8>) {
        self.0.put(p.as_ptr()).expect("a slot of this pool");
    }
    fn fill(&self, r: &mut FixedRun) {
        let c = self.0.cache_stats();
        (r.cache_hits, r.list_pops, r.steals, r.sleeps, r.releases) =
            (c.cache_hits, c.list_pops, c.steals, c.sleeps, c.releases);
        r.release_calls = self.0.stats(false).release_calls;
    }
}

/// One mutex over a free list of preallocated slots; getters sleep on a condition variable
/// when it is empty.
struct LockedList<'s> {
    space: &'s VmSpace,
    all: Vec<usize>,
    free: Mutex<(Vec<usize>, u64, u64)>,
    cv: Condvar,
}

impl<'s> LockedList<'s> {
    fn new(space: &'s VmSpace, slots: usize, bytes: usize) -> LockedList<'s> {
        let all: Vec<usize> =
            (0..slots).map(|_| space.vmalloc(bytes).expect("room for the slots").as_ptr() as usize).collect();
        LockedList { space, free: Mutex::new((all.clone(), 0, 0)), all, cv: Condvar::new() }
    }
}

impl Source for LockedList<'_> {
    fn get(&self) -> NonNull<u8> {
        let mut g = self.free.lock().unwrap();
        loop {
            if let Some(p) = g.0.pop() {
                g.1 += 1;
                return NonNull::new(p as *mut u8).unwrap();
            }
            g.2 += 1;
            g = self.cv.wait(g).unwrap();
        }
    }
    fn put(&self, p: NonNull<u8>) {
        self.free.lock().unwrap().0.push(p.as_ptr() as usize);
        self.cv.notify_one();
    }
    fn fill(&self, r: &mut FixedRun) {
        let g = self.free.lock().unwrap();
        (r.list_pops, r.sleeps) = (g.1, g.2);
    }
}

impl Drop for LockedList<'_> {
    fn drop(&mut self) {
        for &p in &self.all {
            let _ = self.space.vfree(p as *mut u8);
        }
    }
}

struct Vmalloc<'s>(&'s VmSpace, usize);

impl Source for Vmalloc<'_> {
    fn get(&self) -> NonNull<u8> {
        self.0.vmalloc(self.1).expect("vmalloc")
    }
    fn put(&self, p: NonNull<u8>) {
        self.0.vfree(p.as_ptr()).expect("a live area");
    }
}

struct Glibc(usize);

impl Source for Glibc {
    fn get(&self) -> NonNull<u8> {
        // SAFETY: malloc has no preconditions.
        NonNull::new(unsafe { libc::malloc(self.0) }.cast()).expect("malloc")
    }
    fn put(&self, p: NonNull<u8>) {
        // SAFETY: `p` came from malloc above and is freed once.
        unsafe { libc::free(p.as_ptr().cast()) }
    }
}

struct Mmap(usize);

impl Source for Mmap {
    fn get(&self) -> NonNull<u8> {
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                self.0,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap failed");
        NonNull::new(p.cast()).unwrap()
    }
    fn put(&self, p: NonNull<u8>) {
        // SAFETY: `p` is a mapping of `self.0` bytes made above, unmapped once.
        unsafe { libc::munmap(p.as_ptr().cast(), self.0) };
    }
}

fn drive(src: &dyn Source, cfg: &FixedConfig, workers: usize) -> (u64, Usage, u64, u64) {
    let per = cfg.cycles.div_ceil(workers as u64);
    let barrier = Barrier::new(workers + 1);
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut events = 0;
    let (wall, usage) = std::thread::scope(|sc| {
        let pressure = (cfg.pressure_ms > 0).then(|| {
            sc.spawn(|| {
                let mut n = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(cfg.pressure_ms));
                    vmarena::pressure();
                    n += 1;
                }
                n
            })
        });
        let hs: Vec<_> = (0..workers)
            .map(|w| {
                let barrier = &barrier;
                sc.spawn(move || {
                    barrier.wait();
                    for i in 0..per {
                        let p = src.get();
                        let tag = (w as u64 * 31 + i) as u8;
                        // SAFETY: every contender hands out at least slot_bytes >= touch_bytes.
                        unsafe { std::ptr::write_bytes(p.as_ptr(), tag, cfg.touch_bytes) };
                        if cfg.sleep_every > 0 && (i + w as u64) % cfg.sleep_every == 0 {
                            std::thread::sleep(Duration::from_micros(cfg.sleep_us));
                        }
                        // SAFETY: written above, still held.
                        let back = unsafe { *p.as_ptr().add(cfg.touch_bytes - 1) };
                        assert_eq!(back, tag, "a buffer changed while held");
                        src.put(p);
                    }
                })
            })
            .collect();
        let u0 = Usage::now();
        let t0 = Instant::now();
        barrier.wait();
        for h in hs {
            h.join().unwrap();
        }
        let wall = t0.elapsed().as_nanos() as u64;
        let usage = Usage::now().since(&u0);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(p) = pressure {
            events = p.join().unwrap();
        }
        (wall, usage)
    });
    (wall, usage, per * workers as u64, events)
}

fn run_one(name: &str, cfg: &FixedConfig, workers: usize, space: &VmSpace, slots: u64) -> FixedRun {
    let pool = |put_release| {
        let o = FixedOptions { slot_bytes: cfg.slot_bytes as u64, slots, put_release };
        Pool(FixedPool::new(space, name, &o).expect("room for the pool"))
    };
    let src: Box<dyn Source + '_> = match name {
        "fixed" => Box::new(pool(PutRelease::Pressure)),
        "fixed-free" => Box::new(pool(PutRelease::Free)),
        "fixed-dontneed" => Box::new(pool(PutRelease::DontNeed)),
        "locked-list" => Box::new(LockedList::new(space, slots as usize, cfg.slot_bytes)),
        "vmalloc" => Box::new(Vmalloc(space, cfg.slot_bytes)),
        "glibc" => Box::new(Glibc(cfg.slot_bytes)),
        "mmap" => Box::new(Mmap(cfg.slot_bytes)),
        _ => unreachable!("checked in validate"),
    };
    let (wall_ns, u, cycles, pressure_events) = drive(&*src, cfg, workers);
    let mut r = FixedRun {
        contender: name.to_string(),
        workers,
        cycles,
        wall_ns,
        usage_user_ns: u.user_ns,
        usage_sys_ns: u.sys_ns,
        minor_faults: u.minor_faults,
        voluntary_switches: u.voluntary_switches,
        pressure_events,
        ..Default::default()
    };
    src.fill(&mut r);
    r
}

/// Check the parameters; the error says which is wrong.
pub fn validate(cfg: &FixedConfig) -> Result<(), String> {
    if let Some(c) = cfg.contenders.iter().find(|c| !CONTENDERS.contains(&c.as_str())) {
        return Err(format!("unknown contender '{c}' (one of {})", CONTENDERS.join(", ")));
    }
    if cfg.workers.is_empty() || cfg.workers.contains(&0) || cfg.contenders.is_empty() {
        return Err("--workers and --contenders need at least one positive entry".into());
    }
    if cfg.cycles == 0 || cfg.slot_bytes == 0 || cfg.touch_bytes == 0 || cfg.touch_bytes > cfg.slot_bytes {
        return Err("--cycles and --slot-bytes must be positive, --touch-bytes in 1..=slot-bytes".into());
    }
    Ok(())
}

/// Every run, worker count by worker count.
pub fn run(cfg: &FixedConfig) -> Result<Vec<FixedRun>, String> {
    validate(cfg)?;
    let cpus = vmarena_platform::cpu::count();
    let slots = cfg.pool_slots();
    let so = SpaceOptions { space_bytes: 16 << 30, ..Default::default() };
    let space = VmSpace::new("fixed-lab", so, ArenaOptions::default())?;
    let total = cfg.workers.len() * cfg.contenders.len();
    let mut out = Vec::new();
    for &f in &cfg.workers {
        let workers = f * cpus;
        for name in &cfg.contenders {
            eprintln!("[{}/{total}] {workers} workers, {name}", out.len() + 1);
            out.push(run_one(name, cfg, workers, &space, slots));
            space.shrink();
        }
    }
    Ok(out)
}

fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1000.0)
}

/// The tables.
pub fn print(cfg: &FixedConfig, runs: &[FixedRun], m: &Machine) {
    let cpus = vmarena_platform::cpu::count();
    let slots = cfg.pool_slots();
    let sleeps = match cfg.sleep_every {
        0 => "no sleep points".to_string(),
        n => format!("1 in {n} cycles sleeps {} us holding it", cfg.sleep_us),
    };
    println!(
        "# vmarena fixed: {} cycles per run, {} KiB buffers, {} KiB written per cycle, {sleeps}, {slots} slots",
        cfg.cycles,
        cfg.slot_bytes >> 10,
        cfg.touch_bytes >> 10,
    );
    println!("# {}", m.line());
    println!("# per cycle: wall time (all workers together), kernel and user CPU time, minor faults; us");
    for &f in &cfg.workers {
        let workers = f * cpus;
        let rows: Vec<_> = runs.iter().filter(|r| r.workers == workers).collect();
        let base = rows.iter().find(|r| r.contender == "fixed").map(|r| r.per_cycle(r.wall_ns));
        println!("\n## {workers} workers ({f} x CPUs)\n");
        println!("| contender | wall us/cycle | vs fixed | sys us/cycle | user us/cycle | faults/cycle | hit % | steals | sleeps | releases |");
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for r in rows {
            let wall = r.per_cycle(r.wall_ns);
            let ratio = base.map(|b| format!("{:.2}x", wall / b)).unwrap_or_else(|| "-".into());
            let pool = r.contender.starts_with("fixed");
            let hit = r.hit_pct().filter(|_| pool).map(|h| format!("{h:.1}")).unwrap_or_else(|| "-".into());
            let dash = |x: u64, show: bool| if show { x.to_string() } else { "-".into() };
            println!(
                "| {} | {} | {ratio} | {} | {} | {:.2} | {hit} | {} | {} | {} |",
                r.contender,
                us(wall),
                us(r.per_cycle(r.usage_sys_ns)),
                us(r.per_cycle(r.usage_user_ns)),
                r.per_cycle(r.minor_faults),
                dash(r.steals, pool),
                dash(r.sleeps, pool || r.contender == "locked-list"),
                dash(r.releases, pool),
            );
        }
    }
    let fixed: Vec<_> = runs.iter().filter(|r| r.contender == "fixed").collect();
    if !fixed.is_empty() {
        println!("\n## FixedPool per-CPU hit rate by workers\n");
        println!("| workers | per-CPU hits % | list pops % | steals % | sleeps per 1000 gets |");
        println!("|---|---|---|---|---|");
        for r in fixed {
            let gets = (r.cache_hits + r.list_pops + r.steals).max(1) as f64;
            println!(
                "| {} | {:.1} | {:.1} | {:.1} | {:.1} |",
                r.workers,
                100.0 * r.cache_hits as f64 / gets,
                100.0 * r.list_pops as f64 / gets,
                100.0 * r.steals as f64 / gets,
                1000.0 * r.sleeps as f64 / gets
            );
        }
    }
}

/// Every parameter and figure as JSON.
pub fn json(cfg: &FixedConfig, runs: &[FixedRun], m: &Machine) -> String {
    serde_json::to_string_pretty(
        &serde_json::json!({ "command": "fixed", "config": cfg, "machine": m, "runs": runs }),
    )
    .expect("plain data serialises")
}
