//! `vmarena programs`: unmodified programs with large buffers under every peer and the shim.
//!
//! Each program runs as a child process once per allocator and round: glibc alone, jemalloc,
//! mimalloc and tcmalloc preloaded (Debian's libraries), and vmarena's shim over glibc; on
//! request the shim over a peer (`vmarena+PEER`: both preloaded, the shim first, so that the
//! requests the shim passes on, those below its threshold, go to that peer). Rounds
//! are interleaved (every program under every allocator, then the next round) and each round
//! starts at another allocator, so a slow minute of a shared machine falls on all of them.
//! Every output is checked against the first allocator's; a difference stops the run.
//!
//! Programs (sizes scaled by `--scale`):
//! - `xz`, `zstd`: a compressor with a large window on generated text (`xz -T1 -7`, 16 MiB
//!   dictionary, on 12 MB; `zstd -T1 -6 --long=27`, 128 MiB window, on 100 MB);
//! - `sort`: GNU sort with a 256 MiB buffer on 3M lines;
//! - `sqlite3`: an in-memory database with a 256 MiB cache: a table of 1M rows, an index and
//!   sorts (the sorter's buffer grows by `realloc`);
//! - `python-bytes`: four threads building, growing and hashing bytearrays of 0.1-8 MB;
//! - `python-zlib`: a 100 MB bytes text joined, zlib-compressed and rejoined;
//! - `numpy`: array expressions with 64 MB temporaries (a `python3` with numpy: the one on
//!   `PATH` or `/usr/bin/python3`; skipped, and said so, when neither has it);
//! - `give-back`: a C program that frees 2 GiB of 0.25-4 MiB blocks and reports its resident
//!   set 0.1 s, 1 s and 3 s after the free.
//!
//! Figures per (program, allocator): median wall time, CPU time (user and system, all
//! threads), peak RSS and minor faults over the rounds (each its own median), from `wait4` in
//! a small C program between the lab and the program (`rusage.rs`).

use crate::machine::{write_output, Machine};
use crate::median::median;
use crate::preload::{preload_of, run_child};
use crate::rusage::field;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Options of `vmarena programs`.
#[derive(clap::Args, Clone, Debug)]
pub struct ProgramsConfig {
    /// Programs: xz, zstd, sort, sqlite3, python-bytes, python-zlib, numpy, give-back.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "xz,zstd,sort,sqlite3,python-bytes,python-zlib,numpy,give-back"
    )]
    pub programs: Vec<String>,
    /// Allocators: glibc, jemalloc, mimalloc, tcmalloc, vmarena (the shim over glibc), and
    /// vmarena+PEER (the shim over that peer, which serves the requests below its threshold).
    #[arg(long, value_delimiter = ',', default_value = "glibc,jemalloc,mimalloc,tcmalloc,vmarena")]
    pub allocators: Vec<String>,
    /// Interleaved rounds; medians are reported.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Scale of every program's input and of give-back's 2 GiB (0.01 to 4).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// The shim (default: libvmarena_preload.so beside this program).
    #[arg(long)]
    pub shim: Option<PathBuf>,
    /// Write every parameter, the machine and every figure to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

const PROGRAMS: &[&str] =
    &["xz", "zstd", "sort", "sqlite3", "python-bytes", "python-zlib", "numpy", "give-back"];

/// One program under one allocator: medians over the rounds.
#[derive(Serialize, Clone, Debug, Default)]
pub struct Outcome {
    pub program: String,
    pub allocator: String,
    pub seconds: f64,
    pub cpu_seconds: f64,
    pub peak_rss_kib: u64,
    pub minor_faults: u64,
    /// give-back only: the resident set before the frees, right after, and 0.1 s, 1 s and 3 s
    /// after them (KiB), and the frees' time (ms).
    pub give_back: Option<GiveBack>,
    /// Every round's wall time, in the order run.
    pub round_seconds: Vec<f64>,
}

#[derive(Serialize, Clone, Copy, Debug, Default)]
pub struct GiveBack {
    pub free_ms: f64,
    pub held_kib: u64,
    pub after_kib: u64,
    pub at_100ms_kib: u64,
    pub at_1s_kib: u64,
    pub at_3s_kib: u64,
}

/// One round of one program under one allocator: wall and CPU seconds, peak RSS (KiB), minor
/// faults, and give-back's figures.
type Round = (f64, f64, u64, u64, Option<GiveBack>);

/// A skipped program and why.
#[derive(Serialize, Clone, Debug)]
pub struct Skipped {
    pub program: String,
    pub why: String,
}

struct Setup {
    data: PathBuf,
    shim: PathBuf,
    give_back: Option<PathBuf>,
    numpy_python: Option<String>,
    lines: u64,
}

fn scaled(x: f64, scale: f64) -> u64 {
    ((x * scale).round() as u64).max(1)
}

/// The command of `program` (what it needs was checked by [`run`]).
fn command(program: &str, s: &Setup, scale: f64) -> Result<Command, String> {
    let lines = s.data.join("lines.txt");
    let py = |script: &str, arg: u64, python: &str| {
        let mut c = Command::new(python);
        c.args(["-c", script, &arg.to_string()]);
        c
    };
    Ok(match program {
        "xz" => {
            let mut c = Command::new("xz");
            c.args(["-T1", "-7", "-c"]).arg(s.data.join("head.txt"));
            c
        }
        "zstd" => {
            let mut c = Command::new("zstd");
            c.args(["-q", "-T1", "-6", "--long=27", "-c"]).arg(&lines);
            c
        }
        "sort" => {
            let mut c = Command::new("sort");
            c.args(["-S", "256M", "--parallel=2"]).arg(&lines).env("LC_ALL", "C");
            c
        }
        "sqlite3" => {
            let mut c = Command::new("sqlite3");
            c.arg(":memory:").arg(SQLITE.replace("ROWS", &scaled(1_000_000.0, scale).to_string()));
            c
        }
        "python-bytes" => py(BYTEARRAYS, scaled(400.0, scale), "python3"),
        "python-zlib" => py(ZLIB, s.lines, "python3"),
        "numpy" => {
            let python = s.numpy_python.as_deref().ok_or("no python3 with numpy")?;
            py(NUMPY, scaled(8_000_000.0, scale), python)
        }
        "give-back" => {
            let mut c = Command::new(s.give_back.as_ref().ok_or("give_back was not built")?);
            c.arg(scaled(2048.0, scale).to_string());
            c
        }
        o => return Err(format!("unknown program '{o}' ({})", PROGRAMS.join(", "))),
    })
}

const BYTEARRAYS: &str = include_str!("../../bench/scripts/bytearrays.py");
const ZLIB: &str = include_str!("../../bench/scripts/zlib_bytes.py");
const NUMPY: &str = include_str!("../../bench/scripts/numpy_temporaries.py");
const GIVE_BACK: &str = include_str!("c/give_back.c");
/// A 64-bit digest of a program's output (the lab keeps no output whole).
fn digest(bytes: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = std::hash::DefaultHasher::new();
    h.write(bytes);
    h.finish()
}

/// An in-memory database with a 256 MiB page cache: ROWS rows with text keys and blobs, an
/// index on the keys, and sorts that the index cannot serve.
const SQLITE: &str = "PRAGMA cache_size=-262144; PRAGMA temp_store=MEMORY;
CREATE TABLE t(a INTEGER, b TEXT, c BLOB);
WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ROWS)
  INSERT INTO t SELECT i, printf('%08x-%d', (i * 2654435761) % 4294967291, i % 977), zeroblob(100 + i % 300) FROM s;
CREATE INDEX tb ON t(b);
SELECT count(*), sum(length(b)), min(b), max(b) FROM (SELECT b FROM t ORDER BY (a * 7919) % 1000003, a);
SELECT a, b FROM t ORDER BY length(c) DESC, b LIMIT 3 OFFSET 1000;
SELECT count(DISTINCT b % 1000) FROM t;";

/// The text the compressors and sort read: `lines` lines of about 43 bytes, and its first
/// eighth for xz.
fn make_data(dir: &Path, lines: u64) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut s = String::with_capacity(lines as usize * 44);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for i in 0..lines {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{:016x} {} line {i}\n", x, x % 1000));
    }
    let head = &s[..s.len() / 8];
    let head = &head[..head.rfind('\n').map_or(0, |i| i + 1)];
    for (name, body) in [("lines.txt", s.as_str()), ("head.txt", head)] {
        let p = dir.join(name);
        std::fs::write(&p, body).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

/// The first of `python3` (on `PATH`) and `/usr/bin/python3` that imports numpy.
fn python_with_numpy() -> Option<String> {
    ["python3", "/usr/bin/python3"].into_iter().map(String::from).find(|p| {
        Command::new(p)
            .args(["-c", "import numpy"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Whether an executable named `exe` is in a folder of `PATH`.
fn on_path(exe: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(exe).is_file()))
}

/// What a run's output is compared on: give_back's checksum, a digest of every other
/// program's stdout.
fn output_key(program: &str, stdout: &[u8]) -> u64 {
    if program == "give-back" {
        let line = String::from_utf8_lossy(stdout);
        return field(&line, "checksum").map_or(0, |c| c as u64);
    }
    digest(stdout)
}

/// The `LD_PRELOAD` of an allocator name (`None`: glibc alone): `vmarena+PEER` is the shim and
/// then the peer.
fn preload_list(alloc: &str, shim: &Path) -> Result<Option<String>, String> {
    let parts: Vec<&str> = match alloc.split_once('+') {
        Some(("vmarena", peer)) if !peer.is_empty() && peer != "vmarena" && peer != "glibc" => {
            vec!["vmarena", peer]
        }
        Some(_) => {
            return Err(format!(
                "unknown allocator '{alloc}' (glibc, jemalloc, mimalloc, tcmalloc, vmarena, vmarena+PEER)"
            ))
        }
        None => vec![alloc],
    };
    let mut libs = Vec::new();
    for p in parts {
        if let Some(lib) = preload_of(p, shim)? {
            libs.push(lib.display().to_string());
        }
    }
    Ok((!libs.is_empty()).then(|| libs.join(" ")))
}

/// True for the shim's forms (`vmarena`, `vmarena+PEER`), which the ratios set against the peers.
fn is_shim(alloc: &str) -> bool {
    alloc == "vmarena" || alloc.starts_with("vmarena+")
}

/// Run every program under every allocator, `rounds` times interleaved.
pub fn run(cfg: &ProgramsConfig) -> Result<(Vec<Outcome>, Vec<Skipped>), String> {
    if cfg.rounds == 0 || !(0.01..=4.0).contains(&cfg.scale) {
        return Err("--rounds must be positive and --scale within 0.01 to 4".into());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let shim = cfg.shim.clone().unwrap_or_else(|| exe.parent().unwrap().join("libvmarena_preload.so"));
    for a in &cfg.allocators {
        preload_list(a, &shim)?;
    }
    let scratch = crate::cc::scratch("programs")?;
    let lines = scaled(3_000_000.0, cfg.scale);
    let mut setup = Setup { data: scratch.clone(), shim, give_back: None, numpy_python: None, lines };
    let mut skipped = Vec::new();
    let mut programs = Vec::new();
    for p in &cfg.programs {
        let exe_needed = match p.as_str() {
            "xz" | "zstd" | "sort" | "sqlite3" => Some(p.as_str()),
            "python-bytes" | "python-zlib" => Some("python3"),
            "numpy" | "give-back" => None,
            o => return Err(format!("unknown program '{o}' ({})", PROGRAMS.join(", "))),
        };
        if let Some(e) = exe_needed.filter(|e| !on_path(e)) {
            skipped.push(Skipped {
                program: p.clone(),
                why: format!("{e} is not on PATH (scripts/setup.sh installs it)"),
            });
            continue;
        }
        if p == "numpy" {
            setup.numpy_python = python_with_numpy();
            if setup.numpy_python.is_none() {
                skipped.push(Skipped {
                    program: p.clone(),
                    why: "no python3 imports numpy (scripts/setup.sh installs python3-numpy)".into(),
                });
                continue;
            }
        }
        if p == "give-back" {
            setup.give_back =
                Some(crate::cc::compile(&scratch, "give_back", GIVE_BACK, "give_back", &[], None)?);
        }
        programs.push(p.clone());
    }
    if programs.iter().any(|p| ["xz", "zstd", "sort"].contains(&p.as_str())) {
        eprintln!("programs: writing {lines} lines to {}", scratch.display());
        make_data(&scratch, lines)?;
    }
    let result = run_rounds(cfg, &setup, &programs);
    let _ = std::fs::remove_dir_all(&scratch);
    result.map(|r| (r, skipped))
}

fn run_rounds(cfg: &ProgramsConfig, setup: &Setup, programs: &[String]) -> Result<Vec<Outcome>, String> {
    let n_alloc = cfg.allocators.len();
    let total = programs.len() * n_alloc * cfg.rounds;
    let mut done = 0;
    // runs[program][allocator]: every round's (wall, cpu, peak RSS, faults, give-back).
    let mut runs: Vec<Vec<Vec<Round>>> = vec![vec![Vec::new(); n_alloc]; programs.len()];
    let mut first_output: Vec<Option<u64>> = vec![None; programs.len()];
    for round in 0..cfg.rounds {
        for (pi, p) in programs.iter().enumerate() {
            for k in 0..n_alloc {
                let ai = (k + round) % n_alloc;
                let a = &cfg.allocators[ai];
                done += 1;
                eprintln!("programs: [{done}/{total}] round {} of {}: {p} under {a}", round + 1, cfg.rounds);
                let mut cmd = command(p, setup, cfg.scale)?;
                if let Some(libs) = preload_list(a, &setup.shim)? {
                    cmd.env("LD_PRELOAD", libs);
                }
                let raw = run_child(&mut cmd)?;
                let key = output_key(p, &raw.stdout);
                match &first_output[pi] {
                    None => first_output[pi] = Some(key),
                    Some(k) if *k != key => {
                        return Err(format!("{p} under {a}: output differs from the first run's"));
                    }
                    Some(_) => {}
                }
                let give_back = (p == "give-back").then(|| {
                    let line = String::from_utf8_lossy(&raw.stdout).to_string();
                    let kib = |k: &str| field(&line, k).unwrap_or(0.0) as u64;
                    GiveBack {
                        free_ms: field(&line, "free_ms").unwrap_or(0.0),
                        held_kib: kib("held_kib"),
                        after_kib: kib("after_kib"),
                        at_100ms_kib: kib("at_100ms_kib"),
                        at_1s_kib: kib("at_1s_kib"),
                        at_3s_kib: kib("at_3s_kib"),
                    }
                });
                runs[pi][ai].push((raw.seconds, raw.cpu_seconds, raw.maxrss_kib, raw.minflt, give_back));
            }
        }
    }
    let mut out = Vec::new();
    for (pi, p) in programs.iter().enumerate() {
        for (ai, a) in cfg.allocators.iter().enumerate() {
            let r = &runs[pi][ai];
            let med = |f: &dyn Fn(&Round) -> f64| median(&r.iter().map(f).collect::<Vec<_>>());
            let give_back = (p == "give-back").then(|| {
                let g = |f: &dyn Fn(&GiveBack) -> f64| med(&|x| x.4.as_ref().map_or(0.0, f));
                GiveBack {
                    free_ms: g(&|b| b.free_ms),
                    held_kib: g(&|b| b.held_kib as f64) as u64,
                    after_kib: g(&|b| b.after_kib as f64) as u64,
                    at_100ms_kib: g(&|b| b.at_100ms_kib as f64) as u64,
                    at_1s_kib: g(&|b| b.at_1s_kib as f64) as u64,
                    at_3s_kib: g(&|b| b.at_3s_kib as f64) as u64,
                }
            });
            out.push(Outcome {
                program: p.clone(),
                allocator: a.clone(),
                seconds: med(&|x| x.0),
                cpu_seconds: med(&|x| x.1),
                peak_rss_kib: med(&|x| x.2 as f64) as u64,
                minor_faults: med(&|x| x.3 as f64) as u64,
                give_back,
                round_seconds: r.iter().map(|x| x.0).collect(),
            });
        }
    }
    Ok(out)
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// The lowest of `f` over the peers (every allocator but vmarena) for `program`.
fn best_peer(results: &[Outcome], program: &str, f: impl Fn(&Outcome) -> f64) -> Option<(f64, String)> {
    results
        .iter()
        .filter(|o| o.program == program && !is_shim(&o.allocator))
        .map(|o| (f(o), o.allocator.clone()))
        .min_by(|x, y| x.0.total_cmp(&y.0))
}

/// The tables: time, CPU, peak RSS and faults per program and allocator with the shim's ratios
/// to the best peer; the give-back shape.
pub fn print(cfg: &ProgramsConfig, results: &[Outcome], skipped: &[Skipped], m: &Machine) {
    println!(
        "# vmarena programs: unmodified programs, medians of {} interleaved rounds (scale {})",
        cfg.rounds, cfg.scale
    );
    println!("# {}", m.line());
    for s in skipped {
        println!("# skipped {}: {}", s.program, s.why);
    }
    // give-back sleeps for its samples: its figures are in a table of its own.
    let programs: Vec<&String> = cfg
        .programs
        .iter()
        .filter(|p| *p != "give-back" && results.iter().any(|o| &o.program == *p))
        .collect();
    let shims: Vec<&String> = cfg.allocators.iter().filter(|a| is_shim(a)).collect();
    let mut head = "| program | measure |".to_string();
    let mut rule = "|---|---|".to_string();
    for a in &cfg.allocators {
        head.push_str(&format!(" {a} |"));
        rule.push_str("---|");
    }
    for v in &shims {
        head.push_str(&format!(" {v} / best peer |"));
        rule.push_str("---|");
    }
    println!("\n{head}\n{rule}");
    // The time ratios of each shim form, for its geometric mean.
    let mut time_ratios: Vec<Vec<f64>> = vec![Vec::new(); shims.len()];
    for p in &programs {
        let row = |name: &str, f: &dyn Fn(&Outcome) -> f64, fmt: &dyn Fn(f64) -> String| {
            let mut line = format!("| {p} | {name} |");
            for a in &cfg.allocators {
                let o = results.iter().find(|o| &o.program == *p && &o.allocator == a);
                line.push_str(&format!(" {} |", o.map(|o| fmt(f(o))).unwrap_or_else(|| "-".into())));
            }
            let best = best_peer(results, p, f);
            let mut ratios = Vec::new();
            for v in &shims {
                let vm = results.iter().find(|o| &o.program == *p && &o.allocator == *v).map(f);
                let ratio = vm.zip(best.as_ref()).filter(|(_, b)| b.0 > 0.0).map(|(x, b)| (x / b.0, &b.1));
                match &ratio {
                    Some((r, who)) => line.push_str(&format!(" {r:.2}x ({who}) |")),
                    None => line.push_str(" - |"),
                }
                ratios.push(ratio.map(|r| r.0));
            }
            println!("{line}");
            ratios
        };
        for (i, r) in row("time s", &|o| o.seconds, &|v| format!("{v:.3}")).into_iter().enumerate() {
            time_ratios[i].extend(r);
        }
        row("CPU s", &|o| o.cpu_seconds, &|v| format!("{v:.3}"));
        row("peak RSS MiB", &|o| o.peak_rss_kib as f64, &|v| mib(v as u64));
        row("minor faults (k)", &|o| o.minor_faults as f64, &|v| format!("{:.1}", v / 1000.0));
    }
    for (v, rs) in shims.iter().zip(&time_ratios).filter(|(_, rs)| !rs.is_empty()) {
        let g = (rs.iter().map(|r| r.ln()).sum::<f64>() / rs.len() as f64).exp();
        println!("\nGeometric mean of {v}'s time over the best peer's: {g:.3}x ({} programs)", rs.len());
    }
    if results.iter().any(|o| o.give_back.is_some()) {
        println!("\ngive-back: resident set (MiB) before the frees of {} MiB, right after, and 0.1 s, 1 s and 3 s after; the frees' time", scaled(2048.0, cfg.scale));
        println!("\n| allocator | held | after the frees | 0.1 s | 1 s | 3 s | frees ms | CPU s | minor faults (k) |\n|---|---|---|---|---|---|---|---|---|");
        for o in results.iter().filter(|o| o.give_back.is_some()) {
            let g = o.give_back.unwrap();
            println!(
                "| {} | {} | {} | {} | {} | {} | {:.1} | {:.3} | {:.1} |",
                o.allocator,
                mib(g.held_kib),
                mib(g.after_kib),
                mib(g.at_100ms_kib),
                mib(g.at_1s_kib),
                mib(g.at_3s_kib),
                g.free_ms,
                o.cpu_seconds,
                o.minor_faults as f64 / 1000.0
            );
        }
    }
}

/// Every parameter, the machine and every figure.
pub fn json(cfg: &ProgramsConfig, results: &[Outcome], skipped: &[Skipped], m: &Machine) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "command": "programs",
        "machine": m,
        "programs": cfg.programs,
        "allocators": cfg.allocators,
        "rounds": cfg.rounds,
        "scale": cfg.scale,
        "skipped": skipped,
        "results": results,
    }))
    .unwrap_or_default()
}

pub fn main(cfg: &ProgramsConfig, m: &Machine) -> Result<(), String> {
    let (results, skipped) = run(cfg)?;
    print(cfg, &results, &skipped, m);
    if let Some(path) = &cfg.json {
        write_output(path, &json(cfg, &results, &skipped, m))?;
    }
    Ok(())
}
