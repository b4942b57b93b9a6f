//! `vmarena preload`: unmodified programs under each allocator, in one run.
//!
//! Every workload runs as a child process, once per allocator: glibc alone (no `LD_PRELOAD`),
//! jemalloc and mimalloc (Debian's shared libraries, preloaded; `scripts/setup.sh` installs them)
//! and vmarena's shim (`libvmarena_preload.so` over glibc). Workloads:
//!
//! - `malloc-large`, `xthread`: the benchmark programs of `crates/bench` (mimalloc-bench's
//!   malloc-large shape; an rptest/larson shape with 4 KiB-4 MiB blocks and cross-thread
//!   frees). They report their own work time, peak RSS, RSS after one idle second, mapping
//!   count and minor faults.
//! - `python`, `sort`, `xz`: real programs on generated input; the parent measures wall time,
//!   peak RSS and minor faults (`wait4`), and checks that the output equals glibc's.
//!
//! With `--syscalls` each pair runs once more under `strace -f -c` for the counts of the memory
//! system calls (that run is not timed).

use crate::machine::{write_output, Machine};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Options of `vmarena preload`.
#[derive(clap::Args, Clone, Debug)]
pub struct PreloadConfig {
    /// Workloads: malloc-large, xthread, python, sort, xz.
    #[arg(long, value_delimiter = ',', default_value = "malloc-large,xthread,python,sort,xz")]
    pub workloads: Vec<String>,
    /// Allocators: glibc, jemalloc, mimalloc, vmarena.
    #[arg(long, value_delimiter = ',', default_value = "glibc,jemalloc,mimalloc,vmarena")]
    pub allocators: Vec<String>,
    /// Runs of each pair, interleaved; the run with the median time is reported.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Iterations of malloc-large (mimalloc-bench: 2000).
    #[arg(long = "large-iterations", default_value_t = 2000)]
    pub large_iterations: u64,
    /// Threads of xthread.
    #[arg(long = "xthread-threads", default_value_t = 2)]
    pub xthread_threads: u64,
    /// Operations per thread of xthread.
    #[arg(long = "xthread-ops", default_value_t = 20_000)]
    pub xthread_ops: u64,
    /// Also count memory system calls (one more run of each pair under strace -f -c).
    #[arg(long)]
    pub syscalls: bool,
    /// The shim (default: libvmarena_preload.so beside this program).
    #[arg(long)]
    pub shim: Option<PathBuf>,
    /// Write every parameter, the machine and every figure to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

const SYSCALLS: &[&str] = &["mmap", "munmap", "madvise", "process_madvise", "brk", "mremap", "mprotect"];

/// One workload under one allocator.
#[derive(Serialize, Clone, Debug, Default)]
pub struct Outcome {
    pub workload: String,
    pub allocator: String,
    pub seconds: f64,
    /// CPU time (user and system, all threads) over the same span as `seconds`: the timed work
    /// for the benchmark programs, the whole process for the others.
    pub cpu_seconds: f64,
    pub peak_rss_kib: u64,
    /// The most bytes the program held at once, as it counts them (benchmark programs only).
    pub peak_live_kib: Option<u64>,
    /// RSS after one idle second (benchmark programs only).
    pub idle_rss_kib: Option<u64>,
    /// Its anonymous part: without code and file pages (benchmark programs only).
    pub idle_anon_kib: Option<u64>,
    /// Mappings at the end of the work (benchmark programs only).
    pub maps: Option<u64>,
    pub minor_faults: u64,
    /// TLB shootdown interrupts during the run, machine-wide (`/proc/interrupts`); `None`
    /// where the kernel does not count them.
    pub tlb_shootdowns: Option<u64>,
    pub output_matches_glibc: bool,
    pub syscalls: Vec<(String, u64)>,
}

struct Env {
    exe_dir: PathBuf,
    shim: PathBuf,
    data: PathBuf,
}

/// What `LD_PRELOAD` names for `alloc`: nothing for glibc, a peer's library, or `shim`.
pub(crate) fn preload_of(alloc: &str, shim: &Path) -> Result<Option<PathBuf>, String> {
    if alloc == "vmarena" {
        return crate::libs::shim(&Some(shim.to_path_buf())).map(Some);
    }
    crate::libs::peer(alloc).ok_or_else(|| {
        format!("unknown allocator '{alloc}' (glibc, jemalloc, mimalloc, tcmalloc, vmarena)")
    })?
}

/// The command of a workload, with what its output is compared on.
fn command(w: &str, cfg: &PreloadConfig, env: &Env) -> Result<Command, String> {
    let bench = |name: &str| {
        let p = env.exe_dir.join(name);
        if p.exists() {
            Ok(Command::new(p))
        } else {
            Err(format!("{} not found: build with cargo build --release", p.display()))
        }
    };
    Ok(match w {
        "malloc-large" => {
            let mut c = bench("vmarena-malloc-large")?;
            c.args(["--iterations", &cfg.large_iterations.to_string()]);
            c
        }
        "xthread" => {
            let mut c = bench("vmarena-xthread")?;
            c.args(["--threads", &cfg.xthread_threads.to_string(), "--ops", &cfg.xthread_ops.to_string()]);
            c
        }
        "python" => {
            let mut c = Command::new("python3");
            c.args(["-c", PYTHON, "400"]);
            c
        }
        "sort" => {
            let mut c = Command::new("sort");
            c.args(["-S", "256M", "--parallel=2"]).arg(env.data.join("lines.txt")).env("LC_ALL", "C");
            c
        }
        "xz" => {
            let mut c = Command::new("xz");
            c.args(["-T2", "-6", "-c"]).arg(env.data.join("lines.txt"));
            c
        }
        o => return Err(format!("unknown workload '{o}' (malloc-large, xthread, python, sort, xz)")),
    })
}

/// Four threads build, grow and hash large bytearrays (100 KB to 8 MB).
const PYTHON: &str = include_str!("../../bench/scripts/bytearrays.py");

fn make_data(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("lines.txt");
    let mut s = String::with_capacity(3_000_000 * 40);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for i in 0..3_000_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{:016x} {} line {i}\n", x, x % 1000));
    }
    std::fs::write(&path, s).map_err(|e| format!("{}: {e}", path.display()))
}

pub(crate) struct Raw {
    pub seconds: f64,
    pub cpu_seconds: f64,
    pub maxrss_kib: u64,
    pub minflt: u64,
    pub stdout: Vec<u8>,
}

/// Run `cmd` to completion: wall time, and the program's own peak RSS, minor faults and CPU
/// time, reported by the small program the lab starts it from (`rusage.rs`).
pub(crate) fn run_child(cmd: &mut Command) -> Result<Raw, String> {
    let (mut wrapped, report) = crate::rusage::wrapped(cmd)?;
    let t0 = Instant::now();
    let child =
        wrapped.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("{cmd:?}: {e}"))?;
    let pid = child.id() as libc::pid_t;
    let out = std::thread::scope(|s| {
        let mut child = child;
        let mut so = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        let o = s.spawn(move || {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut so, &mut v).map(|_| v)
        });
        let e = s.spawn(move || {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut se, &mut v).map(|_| v)
        });
        let mut status = 0;
        // SAFETY: waitpid on our own child, into our own status word.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        let seconds = t0.elapsed().as_secs_f64();
        let stdout = o.join().unwrap().unwrap_or_default();
        let stderr = e.join().unwrap().unwrap_or_default();
        std::mem::forget(child); // reaped by waitpid above
        (r, status, seconds, stdout, stderr)
    });
    let (r, status, seconds, stdout, stderr) = out;
    if r != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        let _ = std::fs::remove_file(&report);
        return Err(format!("{cmd:?} failed (status {status:#x}): {}", String::from_utf8_lossy(&stderr)));
    }
    let (maxrss_kib, minflt, cpu_seconds) = crate::rusage::read_report(&report)?;
    Ok(Raw { seconds, cpu_seconds, maxrss_kib, minflt, stdout })
}

fn json_u64(line: &str, key: &str) -> Option<u64> {
    serde_json::from_str::<serde_json::Value>(line).ok()?.get(key)?.as_u64()
}

fn json_f64(line: &str, key: &str) -> Option<f64> {
    serde_json::from_str::<serde_json::Value>(line).ok()?.get(key)?.as_f64()
}

fn strace_counts(cmd: &Command, preload: &Option<PathBuf>, tmp: &Path) -> Result<Vec<(String, u64)>, String> {
    let out = tmp.join("strace.txt");
    let mut c = Command::new("strace");
    c.args(["-f", "-c", "-o"]).arg(&out).arg("-e").arg(format!("trace={}", SYSCALLS.join(",")));
    c.arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    if let Some(p) = preload {
        c.env("LD_PRELOAD", p);
    }
    run_child(&mut c)?;
    let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut counts: Vec<(String, u64)> = SYSCALLS.iter().map(|s| (s.to_string(), 0)).collect();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 5 {
            if let Some(slot) = counts.iter_mut().find(|c| c.0 == *f.last().unwrap()) {
                slot.1 = f[3].parse().unwrap_or(0);
            }
        }
    }
    Ok(counts)
}

/// Run every workload under every allocator.
pub fn run(cfg: &PreloadConfig) -> Result<Vec<Outcome>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let exe_dir = exe.parent().unwrap().to_path_buf();
    let shim = cfg.shim.clone().unwrap_or_else(|| exe_dir.join("libvmarena_preload.so"));
    let data = std::env::temp_dir().join(format!("vmarena-preload-{}", std::process::id()));
    let env = Env { exe_dir, shim, data };
    for a in &cfg.allocators {
        preload_of(a, &env.shim)?;
    }
    if cfg.workloads.iter().any(|w| w == "sort" || w == "xz") {
        eprintln!("preload: writing {} (3M lines)", env.data.join("lines.txt").display());
        make_data(&env.data)?;
    }
    let total = cfg.workloads.len() * cfg.allocators.len() * cfg.runs.max(1);
    let mut done = 0;
    let mut results = Vec::new();
    for w in &cfg.workloads {
        let mut glibc_out: Option<Vec<u8>> = None;
        let mut per_alloc: Vec<Vec<Outcome>> = vec![Vec::new(); cfg.allocators.len()];
        // Interleave the runs so a slow minute of the machine hits every allocator alike.
        for _ in 0..cfg.runs.max(1) {
            for (ai, a) in cfg.allocators.iter().enumerate() {
                done += 1;
                eprintln!("preload: [{done}/{total}] {w} under {a}");
                let preload = preload_of(a, &env.shim)?;
                let mut cmd = command(w, cfg, &env)?;
                if let Some(p) = &preload {
                    cmd.env("LD_PRELOAD", p);
                }
                let tlb_before = vmarena_platform::process::tlb_shootdowns();
                let raw = run_child(&mut cmd)?;
                let tlb = tlb_before
                    .zip(vmarena_platform::process::tlb_shootdowns())
                    .map(|(a, b)| b.saturating_sub(a));
                let line = String::from_utf8_lossy(&raw.stdout).lines().last().unwrap_or("").to_string();
                let bench = w == "malloc-large" || w == "xthread";
                let mut o = Outcome {
                    workload: w.clone(),
                    allocator: a.clone(),
                    seconds: raw.seconds,
                    cpu_seconds: raw.cpu_seconds,
                    peak_rss_kib: raw.maxrss_kib,
                    minor_faults: raw.minflt,
                    tlb_shootdowns: tlb,
                    ..Default::default()
                };
                // What is compared with glibc: the output, or the benchmark's checksum.
                let key = if bench {
                    json_u64(&line, "checksum").map(|c| c.to_le_bytes().to_vec()).unwrap_or_default()
                } else {
                    raw.stdout.clone()
                };
                if bench {
                    o.seconds =
                        json_f64(&line, "work_s").ok_or_else(|| format!("{w}: no report in '{line}'"))?;
                    o.cpu_seconds = json_f64(&line, "work_cpu_s").unwrap_or(0.0);
                    o.peak_rss_kib = json_u64(&line, "peak_rss_kib").unwrap_or(0);
                    o.idle_rss_kib = json_u64(&line, "idle_rss_kib");
                    o.idle_anon_kib = json_u64(&line, "idle_anon_kib");
                    o.peak_live_kib = json_u64(&line, "peak_live_kib");
                    o.maps = json_u64(&line, "maps");
                    o.minor_faults = json_u64(&line, "minor_faults").unwrap_or(0);
                }
                match &glibc_out {
                    None => {
                        glibc_out = Some(key);
                        o.output_matches_glibc = true;
                    }
                    Some(g) => o.output_matches_glibc = *g == key,
                }
                if !o.output_matches_glibc {
                    return Err(format!("{w} under {a}: output differs from the first allocator's"));
                }
                per_alloc[ai].push(o);
            }
        }
        for (ai, mut runs) in per_alloc.into_iter().enumerate() {
            runs.sort_by(|x, y| x.seconds.total_cmp(&y.seconds));
            let mut o = runs[runs.len() / 2].clone();
            if cfg.syscalls {
                eprintln!("preload: {w} under {} with strace", cfg.allocators[ai]);
                let preload = preload_of(&cfg.allocators[ai], &env.shim)?;
                o.syscalls = strace_counts(&command(w, cfg, &env)?, &preload, &std::env::temp_dir())?;
            }
            results.push(o);
        }
    }
    let _ = std::fs::remove_dir_all(&env.data);
    Ok(results)
}

fn mib(kib: u64) -> String {
    format!("{:.0}", kib as f64 / 1024.0)
}

/// The tables: one per workload, ratios to vmarena.
pub fn print(cfg: &PreloadConfig, results: &[Outcome], m: &Machine) {
    println!("{}", m.line());
    for w in &cfg.workloads {
        let rows: Vec<&Outcome> = results.iter().filter(|o| &o.workload == w).collect();
        let vm = rows.iter().find(|o| o.allocator == "vmarena").map(|o| o.seconds);
        println!("\n{w}: {}", describe(w, cfg));
        let mut head =
            "| allocator | time s | time / vmarena | CPU s | peak RSS MiB | live peak MiB | idle RSS MiB | idle anon MiB | maps | minor faults | TLB IPIs |"
                .to_string();
        let mut rule = "|---|---|---|---|---|---|---|---|---|---|---|".to_string();
        if cfg.syscalls {
            for s in SYSCALLS {
                head.push_str(&format!(" {s} |"));
                rule.push_str("---|");
            }
        }
        println!("{head}\n{rule}");
        for o in rows {
            let ratio = vm.map(|v| format!("{:.2}", o.seconds / v)).unwrap_or_else(|| "-".into());
            let opt = |v: Option<u64>| v.map(mib).unwrap_or_else(|| "-".into());
            let mut line = format!(
                "| {} | {:.3} | {} | {:.3} | {} | {} | {} | {} | {} | {} | {} |",
                o.allocator,
                o.seconds,
                ratio,
                o.cpu_seconds,
                mib(o.peak_rss_kib),
                opt(o.peak_live_kib),
                opt(o.idle_rss_kib),
                opt(o.idle_anon_kib),
                o.maps.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
                o.minor_faults,
                o.tlb_shootdowns.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
            );
            for (_, n) in &o.syscalls {
                line.push_str(&format!(" {n} |"));
            }
            println!("{line}");
        }
    }
}

fn describe(w: &str, cfg: &PreloadConfig) -> String {
    match w {
        "malloc-large" => format!(
            "20 live buffers, {} iterations, 5-25 MiB, every byte written (work time, figures from the program)",
            cfg.large_iterations
        ),
        "xthread" => format!(
            "{} threads x {} ops, 64 live blocks each, 4 KiB-4 MiB log-uniform, every page written, half the frees on another thread",
            cfg.xthread_threads, cfg.xthread_ops
        ),
        "python" => "python3, 4 threads x 400 bytearrays of 0.1-8 MB grown and hashed (wall time)".into(),
        "sort" => "sort -S 256M --parallel=2 on 3M lines (130 MB) (wall time)".into(),
        "xz" => "xz -T2 -6 on the same file (wall time)".into(),
        _ => String::new(),
    }
}

/// Every parameter, the machine and every figure.
pub fn json(cfg: &PreloadConfig, results: &[Outcome], m: &Machine) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "command": "preload",
        "machine": m,
        "workloads": cfg.workloads,
        "allocators": cfg.allocators,
        "runs": cfg.runs,
        "large_iterations": cfg.large_iterations,
        "xthread_threads": cfg.xthread_threads,
        "xthread_ops": cfg.xthread_ops,
        "syscalls": cfg.syscalls,
        "results": results,
    }))
    .unwrap()
}

/// `vmarena preload`: run, print, write JSON.
pub fn main(cfg: &PreloadConfig, m: &Machine) -> Result<(), String> {
    if cfg.runs == 0 || cfg.large_iterations == 0 || cfg.xthread_threads == 0 || cfg.xthread_ops == 0 {
        return Err("--runs, --large-iterations, --xthread-threads and --xthread-ops must be positive".into());
    }
    let results = run(cfg)?;
    print(cfg, &results, m);
    if let Some(path) = &cfg.json {
        write_output(path, &json(cfg, &results, m))?;
    }
    Ok(())
}
