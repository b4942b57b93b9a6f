//! Shared parts of the benchmark programs: they call the C `malloc`/`free` of whatever allocator
//! the process runs with (glibc's, or one preloaded with `LD_PRELOAD`), and report their own
//! figures as one JSON line on stdout:
//!
//! - `work_s`: seconds of the timed work;
//! - `work_cpu_s`: CPU seconds (user and system, every thread of the process, the allocator's
//!   own threads among them) spent during the timed work: against `work_s` it shows how much of
//!   the time the threads ran rather than slept;
//! - `peak_rss_kib`: `VmHWM` at the end of the work;
//! - `idle_rss_kib`: `VmRSS` after everything was freed and the process slept `--idle-ms`
//!   (default 1000): what the allocator gives back without further calls;
//! - `idle_anon_kib`: `RssAnon` at the same moment: the anonymous part, without the pages of
//!   code and data files (an allocator loaded with `LD_PRELOAD` adds its own code pages);
//! - `maps`: lines of `/proc/self/maps` at the end of the work (the mapping count that runs into
//!   `vm.max_map_count`);
//! - `minor_faults`: minor faults of the whole process;
//! - `peak_live_kib`: the most bytes the program itself held at once (counted by [`malloc`] and
//!   [`free`]), so that each allocator's peak RSS can be read against what was asked of it;
//! - `checksum`: a value computed from the memory, so the work cannot be optimised away.
//!
//! The programs use no Rust collections on their measured paths; Rust's own allocations (a few
//! small ones) also go to `malloc`, as in any program.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Bytes the program holds now, and the most it held at once.
static LIVE_BYTES: AtomicU64 = AtomicU64::new(0);
static PEAK_LIVE_BYTES: AtomicU64 = AtomicU64::new(0);

/// A small, fast, seeded generator (xorshift64*), the same sequence for every allocator.
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[lo, hi]`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// `--name value` from the command line, or `default`.
pub fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}: '{v}' is not a number")))
        .unwrap_or(default)
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn maps() -> u64 {
    std::fs::read_to_string("/proc/self/maps").map(|s| s.lines().count() as u64).unwrap_or(0)
}

fn usage() -> libc::rusage {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru
}

fn cpu_s(ru: &libc::rusage) -> f64 {
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    s(ru.ru_utime) + s(ru.ru_stime)
}

/// The moment the timed work starts: wall clock and the process's CPU time.
pub struct Start {
    t0: Instant,
    cpu0_s: f64,
}

/// Start the timed work.
pub fn start() -> Start {
    Start { cpu0_s: cpu_s(&usage()), t0: Instant::now() }
}

/// Figures taken at the end of the work, before the idle period.
pub struct AfterWork {
    work_s: f64,
    work_cpu_s: f64,
    peak_rss_kib: u64,
    maps: u64,
    minor_faults: u64,
    peak_live_kib: u64,
}

/// Take the end-of-work figures for a run that started at `start`.
pub fn after_work(start: Start) -> AfterWork {
    let work_s = start.t0.elapsed().as_secs_f64();
    let ru = usage();
    AfterWork {
        work_s,
        work_cpu_s: cpu_s(&ru) - start.cpu0_s,
        peak_rss_kib: status_kib("VmHWM:"),
        maps: maps(),
        minor_faults: ru.ru_minflt as u64,
        peak_live_kib: PEAK_LIVE_BYTES.load(Ordering::Relaxed) >> 10,
    }
}

/// Sleep the idle period (everything must be freed by now) and print the JSON line.
pub fn report(name: &str, w: AfterWork, checksum: u64) {
    std::thread::sleep(std::time::Duration::from_millis(arg("--idle-ms", 1000)));
    println!(
        "{{\"bench\":\"{name}\",\"work_s\":{:.4},\"work_cpu_s\":{:.4},\"peak_rss_kib\":{},\"idle_rss_kib\":{},\"idle_anon_kib\":{},\"maps\":{},\"minor_faults\":{},\"peak_live_kib\":{},\"checksum\":{checksum}}}",
        w.work_s,
        w.work_cpu_s,
        w.peak_rss_kib,
        status_kib("VmRSS:"),
        status_kib("RssAnon:"),
        w.maps,
        w.minor_faults,
        w.peak_live_kib
    );
}

/// `malloc(n)` that stops the program on failure, counting `n` live bytes.
pub fn malloc(n: usize) -> *mut u8 {
    // SAFETY: plain C malloc.
    let p = unsafe { libc::malloc(n) } as *mut u8;
    assert!(!p.is_null(), "malloc({n}) failed");
    let live = LIVE_BYTES.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
    PEAK_LIVE_BYTES.fetch_max(live, Ordering::Relaxed);
    p
}

/// `free(p)` of a block that [`malloc`] returned for `n` bytes (or a null `p` with `n` 0).
pub fn free(p: *mut u8, n: usize) {
    LIVE_BYTES.fetch_sub(n as u64, Ordering::Relaxed);
    // SAFETY: `p` came from `malloc` and is freed once, or is null (which `free` ignores).
    unsafe { libc::free(p.cast()) }
}
