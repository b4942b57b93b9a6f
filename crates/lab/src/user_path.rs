//! `vmarena user-path`: the vmalloc path as a user calls it, against the allocators a user
//! would pick instead, at each thread count, in fresh processes.
//!
//! The program (`src/c/user_path.c`) runs the kernel's test_vmalloc shapes from threads it
//! creates, writing every page of every block: fix_size (3 pages), full_fit (1-page
//! alloc a, alloc b, free a, alloc c, free c, free b), random_size (1 to 100 pages) and
//! long_busy (15,000 live pages per thread, then 1-page pairs); and mid_size (17, 32, 64,
//! 128, 192 and 256 pages in turn: exact sizes of the kernel's pool range, each asked for
//! again every six loops). Contenders:
//!
//! | contender | calls | process |
//! |---|---|---|
//! | `vmarena` | `vmarena_vmalloc` / `vmarena_vfree` | linked against `libvmarena.so` (the default space, options from the environment) |
//! | `glibc`, `jemalloc`, `mimalloc`, `tcmalloc` | `malloc` / `free` | glibc alone, or the peer preloaded |
//! | `glibc-aligned`, ... | `posix_memalign(4096)` / `free` | the same, page aligned as vmarena's blocks are |
//! | `vmarena:NAME=VALUE+...` | as `vmarena` | with `VMARENA_NAME=VALUE` set for each pair (an option of the default space's tables; an experiment's pair sets `VMARENA_EXPERIMENTS=1` too) |
//! | `rseq-model` | as `vmarena` | linked against a model of per-CPU magazines in restartable sequences, with vmarena's per-area compare-and-swap (`src/c/rseq_magazine_model.c`): not vmarena, a bound on what that front end could give the hit paths; not in the default list |
//!
//! Each (workload, threads, contender) runs `--runs` times in a fresh process, contenders
//! alternating; the median ns per operation (wall time over loops x threads) is reported, with
//! vmarena's ratio to the best of glibc, jemalloc and mimalloc and to tcmalloc, each
//! contender's throughput at the highest thread count over the first, and each contender's
//! median peak RSS and minor faults (`wait4`), so that an option's trade of time for memory
//! shows in one run. With `--live` the program also counts the bytes its threads hold, and
//! each peak RSS is shown with the live peak of its runs (those runs' times carry the count's
//! atomic add).
//!
//! The ratio to the best peer is also given paired (`crate::paired`): the median, over the
//! rounds, of vmarena's time over that peer's time in the same round, with the rounds' range
//! and how many rounds vmarena won; variants and the model get the same figure in a table of
//! their own.

use crate::machine::{write_output, Machine};
use crate::paired_ratio::paired;
use crate::preload::run_child;
use crate::{cc, libs};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = include_str!("c/user_path.c");
const MODEL: &str = include_str!("c/rseq_magazine_model.c");
const MODEL_CONTENDER: &str = "rseq-model";
const WORKLOADS: &[&str] = &["fix_size", "full_fit", "random_size", "long_busy", "mid_size"];
const PEERS: &[&str] = &["glibc", "jemalloc", "mimalloc"];

/// Options of `vmarena user-path`.
#[derive(clap::Args, Clone, Debug)]
pub struct UserPathConfig {
    /// Workloads: fix_size, full_fit, random_size, long_busy (test_vmalloc's shapes) and
    /// mid_size (17 to 256 pages, six exact sizes in turn).
    #[arg(long, value_delimiter = ',', default_value = "fix_size,full_fit,random_size,long_busy,mid_size")]
    pub workloads: Vec<String>,
    /// Thread counts.
    #[arg(long, value_delimiter = ',', default_value = "1,2,8,64")]
    pub threads: Vec<u32>,
    /// Contenders: vmarena, glibc, jemalloc, mimalloc, tcmalloc, PEER-aligned for each peer,
    /// vmarena:NAME=VALUE+... (vmarena with VMARENA_NAME=VALUE for each pair, an option of
    /// `vmarena options`'s space or arena table), and rseq-model (a model of per-CPU magazines
    /// in restartable sequences with vmarena's per-area compare-and-swap, not vmarena: what
    /// that design could give the hit paths; x86-64).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "vmarena,glibc,jemalloc,mimalloc,tcmalloc,glibc-aligned,jemalloc-aligned,mimalloc-aligned,tcmalloc-aligned"
    )]
    pub contenders: Vec<String>,
    /// Loops per thread (random_size and mid_size run a tenth of them).
    #[arg(long, default_value_t = 200_000)]
    pub loops: u64,
    /// Write no page of the blocks: the allocator's calls alone, which the page writes of the
    /// default form (one byte a page, as a program that uses its memory) partly hide.
    #[arg(long)]
    pub bare: bool,
    /// Count the bytes the program's threads hold in one shared counter (an atomic add in
    /// every call, so the times are not the path's) and report each run's live peak beside
    /// its peak RSS: with many threads on few CPUs the live peak differs between allocators
    /// (threads stopped while they hold a block), and the RSS is read against it.
    #[arg(long)]
    pub live: bool,
    /// Fresh processes per (workload, threads, contender); the median is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Folder with libvmarena.so (default: beside this program).
    #[arg(long)]
    pub lib_dir: Option<PathBuf>,
    /// Write every parameter, the machine and every figure to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One (workload, threads, contender): every run's ns per operation, peak RSS, minor faults,
/// start-up (the first page's allocation and free in `main`, before the timer) and, with
/// `--live`, live peak (the most bytes the threads held at once).
#[derive(Serialize, Clone, Debug, Default)]
pub struct Cell {
    pub workload: String,
    pub threads: u32,
    pub contender: String,
    pub ns_per_op: Vec<f64>,
    pub first_call_ns: Vec<f64>,
    pub maxrss_kib: Vec<u64>,
    pub minor_faults: Vec<u64>,
    pub live_peak_kib: Vec<u64>,
}

impl Cell {
    fn median(&self) -> f64 {
        crate::median::median(&self.ns_per_op)
    }

    fn median_of(v: &[u64]) -> f64 {
        crate::median::median(&v.iter().map(|&x| x as f64).collect::<Vec<_>>())
    }
}

struct Setup {
    bin: PathBuf,
    preload: Option<PathBuf>,
    aligned: bool,
    env: Vec<(String, String)>,
}

/// The environment of a `vmarena:NAME=VALUE+...` contender: `VMARENA_NAME=VALUE` for each
/// pair, where `VMARENA_NAME` is the variable of an option of the default space (space or
/// arena table), and `VMARENA_EXPERIMENTS=1` when one of them is an experiment, which the
/// library reads only then.
pub fn variant_env(spec: &str) -> Result<Vec<(String, String)>, String> {
    let options: Vec<vmarena::OptionDoc> =
        [vmarena::SpaceOptions::TABLE, vmarena::ArenaOptions::TABLE].into_iter().flatten().copied().collect();
    let mut env = Vec::new();
    let mut experiment = false;
    for pair in spec.split('+') {
        let (name, value) = pair
            .split_once('=')
            .filter(|(n, v)| !n.is_empty() && !v.is_empty())
            .ok_or_else(|| format!("contender 'vmarena:{spec}': '{pair}' is not NAME=VALUE"))?;
        let var = format!("VMARENA_{}", name.strip_prefix("VMARENA_").unwrap_or(name).to_ascii_uppercase());
        let doc = options.iter().find(|d| d.env == var).ok_or_else(|| {
            format!(
                "contender 'vmarena:{spec}': {var} is not an option of the default space (`vmarena options` lists them)"
            )
        })?;
        if env.iter().any(|(v, _)| *v == var) {
            return Err(format!("contender 'vmarena:{spec}': {var} is set twice"));
        }
        experiment |= doc.experiment;
        env.push((var, value.to_string()));
    }
    if experiment {
        env.push(("VMARENA_EXPERIMENTS".into(), "1".into()));
    }
    Ok(env)
}

fn setup(c: &str, abi: &Path, plain: &Path, model: Option<&Path>) -> Result<Setup, String> {
    if c == "vmarena" {
        return Ok(Setup { bin: abi.into(), preload: None, aligned: false, env: Vec::new() });
    }
    if c == MODEL_CONTENDER {
        let bin = model.ok_or("the rseq model was not built")?;
        return Ok(Setup { bin: bin.into(), preload: None, aligned: false, env: Vec::new() });
    }
    if let Some(spec) = c.strip_prefix("vmarena:") {
        return Ok(Setup { bin: abi.into(), preload: None, aligned: false, env: variant_env(spec)? });
    }
    let (peer, aligned) = match c.strip_suffix("-aligned") {
        Some(p) => (p, true),
        None => (c, false),
    };
    let preload = libs::peer(peer).ok_or_else(|| {
        format!(
            "unknown contender '{c}' (vmarena, vmarena:NAME=VALUE+..., glibc, jemalloc, mimalloc, tcmalloc, PEER-aligned, rseq-model)"
        )
    })??;
    Ok(Setup { bin: plain.into(), preload, aligned, env: Vec::new() })
}

/// The program linked against the model (`c/rseq_magazine_model.c`), built in a folder of its
/// own as `libvmarena.so`, where the program's run path finds it.
fn build_model(scratch: &Path) -> Result<PathBuf, String> {
    let dir = scratch.join("rseq-model");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    cc::compile(&dir, "rseq_magazine_model", MODEL, "libvmarena.so", &["-shared", "-fPIC"], None)?;
    cc::compile(scratch, "user_path", SOURCE, "user_path_model", &["-DVMARENA_ABI"], Some(&dir))
}

fn loops_of(w: &str, loops: u64) -> u64 {
    if w == "random_size" || w == "mid_size" {
        (loops / 10).max(1)
    } else {
        loops
    }
}

pub fn run(cfg: &UserPathConfig) -> Result<Vec<Cell>, String> {
    let libs = libs::lib_dir(&cfg.lib_dir)?;
    libs::require(&libs, &["libvmarena.so"])?;
    let scratch = cc::scratch("user-path")?;
    let abi =
        cc::compile(&scratch, "user_path", SOURCE, "user_path_vmarena", &["-DVMARENA_ABI"], Some(&libs))?;
    let plain = cc::compile(&scratch, "user_path", SOURCE, "user_path_malloc", &[], None)?;
    let model =
        if cfg.contenders.iter().any(|c| c == MODEL_CONTENDER) { Some(build_model(&scratch)?) } else { None };
    let setups = cfg
        .contenders
        .iter()
        .map(|c| setup(c, &abi, &plain, model.as_deref()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut cells = Vec::new();
    for w in &cfg.workloads {
        for &t in &cfg.threads {
            let first = cells.len();
            for c in &cfg.contenders {
                cells.push(Cell { workload: w.clone(), threads: t, contender: c.clone(), ..Cell::default() });
            }
            for round in 0..cfg.runs {
                eprintln!("[user-path] {w}, {t} thread(s), run {} of {}", round + 1, cfg.runs);
                for (i, s) in setups.iter().enumerate() {
                    let mut cmd = Command::new(&s.bin);
                    cmd.args([w.clone(), t.to_string(), loops_of(w, cfg.loops).to_string()]);
                    if s.aligned {
                        cmd.arg("aligned");
                    }
                    if cfg.bare {
                        cmd.arg("bare");
                    }
                    if cfg.live {
                        cmd.arg("live");
                    }
                    if let Some(p) = &s.preload {
                        cmd.env("LD_PRELOAD", p);
                    }
                    cmd.envs(s.env.iter().map(|(k, v)| (k, v)));
                    let raw =
                        run_child(&mut cmd).map_err(|e| format!("{w} under {}: {e}", cfg.contenders[i]))?;
                    let stdout = String::from_utf8_lossy(&raw.stdout);
                    let ns = cc::reported_in(&stdout, "ns_per_op").ok_or_else(|| {
                        format!("{w} under {}: no ns_per_op in its output: {stdout}", cfg.contenders[i])
                    })?;
                    let first_call = cc::reported_in(&stdout, "first_call_ns").ok_or_else(|| {
                        format!("{w} under {}: no first_call_ns in its output: {stdout}", cfg.contenders[i])
                    })?;
                    let live = match cfg.live {
                        true => Some(cc::reported_in(&stdout, "live_peak_kib").ok_or_else(|| {
                            format!(
                                "{w} under {}: no live_peak_kib in its output: {stdout}",
                                cfg.contenders[i]
                            )
                        })?),
                        false => None,
                    };
                    let cell = &mut cells[first + i];
                    cell.live_peak_kib.extend(live.map(|k| k as u64));
                    cell.ns_per_op.push(ns);
                    cell.first_call_ns.push(first_call);
                    cell.maxrss_kib.push(raw.maxrss_kib);
                    cell.minor_faults.push(raw.minflt);
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(cells)
}

fn find<'a>(cells: &'a [Cell], w: &str, t: u32, c: &str) -> Option<&'a Cell> {
    cells.iter().find(|x| x.workload == w && x.threads == t && x.contender == c)
}

/// The fastest (by median) of glibc, jemalloc and mimalloc, plain or aligned, at (w, t).
fn best_peer<'a>(cells: &'a [Cell], w: &str, t: u32) -> Option<&'a Cell> {
    PEERS
        .iter()
        .flat_map(|p| [p.to_string(), format!("{p}-aligned")])
        .filter_map(|c| find(cells, w, t, &c))
        .min_by(|a, b| a.median().total_cmp(&b.median()))
}

/// A contender measured against the peers: vmarena, a variant of it, or the model.
fn ours(c: &str) -> bool {
    c == "vmarena" || c.starts_with("vmarena:") || c == MODEL_CONTENDER
}

/// `c`'s time over the best peer's, paired round by round: "median (range), won of rounds vs
/// peer", or "-".
fn paired_cell(cells: &[Cell], w: &str, t: u32, c: &str) -> String {
    match (find(cells, w, t, c), best_peer(cells, w, t)) {
        (Some(v), Some(b)) => {
            let p = paired(&v.ns_per_op, &b.ns_per_op);
            format!(
                "{:.2}x ({:.2}-{:.2}), {} of {} vs {}",
                p.median, p.min, p.max, p.won, p.rounds, b.contender
            )
        }
        _ => "-".into(),
    }
}

pub fn print(cfg: &UserPathConfig, cells: &[Cell], m: &Machine) {
    println!(
        "# vmarena user-path: ns per operation (wall / (loops x threads)), median of {} fresh processes, {}{}",
        cfg.runs,
        if cfg.bare { "no page written (--bare)" } else { "every page written (one byte a page)" },
        if cfg.live { "; live bytes counted (--live: an atomic add in every call)" } else { "" }
    );
    println!("# {}", m.line());
    let has = |c: &str| cfg.contenders.iter().any(|x| x == c);
    print!("| workload | threads |");
    for c in &cfg.contenders {
        print!(" {c} |");
    }
    // The ratio to the best of the three peers needs one of them in the run, the ratio to
    // tcmalloc needs tcmalloc.
    let has_peer = PEERS.iter().any(|p| has(p) || has(&format!("{p}-aligned")));
    let best_col = has("vmarena") && has_peer;
    let tc_col = has("vmarena") && has("tcmalloc");
    if best_col {
        print!(" vmarena / best of glibc, jemalloc, mimalloc | paired: median (range), rounds won |");
    }
    if tc_col {
        print!(" vmarena / tcmalloc |");
    }
    println!();
    let extra = 2 * usize::from(best_col) + usize::from(tc_col);
    println!("|---|---|{}", "---|".repeat(cfg.contenders.len() + extra));
    for w in &cfg.workloads {
        for &t in &cfg.threads {
            print!("| {w} | {t} |");
            for c in &cfg.contenders {
                match find(cells, w, t, c) {
                    Some(x) => print!(" {:.1} |", x.median()),
                    None => print!(" - |"),
                }
            }
            let v = find(cells, w, t, "vmarena").map(Cell::median).unwrap_or(f64::NAN);
            if best_col {
                // The best plain call of the three peers, and of their aligned forms.
                let best = best_peer(cells, w, t);
                print!(" {:.2}x |", v / best.map_or(f64::NAN, Cell::median));
                print!(" {} |", paired_cell(cells, w, t, "vmarena"));
            }
            if tc_col {
                let tc = find(cells, w, t, "tcmalloc").map(Cell::median).unwrap_or(f64::NAN);
                print!(" {:.2}x |", v / tc);
            }
            println!();
        }
    }
    // Variants and the model, paired against the peers as vmarena is above.
    let others: Vec<&String> = cfg.contenders.iter().filter(|c| ours(c) && *c != "vmarena").collect();
    if !others.is_empty() && has_peer {
        println!("\nPaired against the best of glibc, jemalloc and mimalloc (the median of the rounds' ratios, their range, the rounds won):\n");
        print!("| workload | threads |");
        for c in &others {
            print!(" {c} |");
        }
        println!("\n|---|---|{}", "---|".repeat(others.len()));
        for w in &cfg.workloads {
            for &t in &cfg.threads {
                print!("| {w} | {t} |");
                for c in &others {
                    print!(" {} |", paired_cell(cells, w, t, c));
                }
                println!();
            }
        }
    }
    if let (Some(&lo), Some(&hi)) = (cfg.threads.first(), cfg.threads.last()) {
        if hi != lo {
            println!(
                "\nThroughput at {hi} threads over {lo} (ops per second; {:.1} would be perfect):\n",
                hi as f64 / lo as f64
            );
            print!("| workload |");
            for c in &cfg.contenders {
                print!(" {c} |");
            }
            println!("\n|---|{}", "---|".repeat(cfg.contenders.len()));
            for w in &cfg.workloads {
                print!("| {w} |");
                for c in &cfg.contenders {
                    match (find(cells, w, lo, c), find(cells, w, hi, c)) {
                        // ns per operation is wall time over all operations: throughput is its inverse.
                        (Some(a), Some(b)) => print!(" {:.2}x |", a.median() / b.median()),
                        _ => print!(" - |"),
                    }
                }
                println!();
            }
        }
    }
    if cfg.live {
        println!("\nPeak RSS (MiB), the live peak in parentheses (the most bytes the threads held at once, MiB) / minor faults (thousands), medians:\n");
    } else {
        println!("\nPeak RSS (MiB) / minor faults (thousands), medians:\n");
    }
    print!("| workload | threads |");
    for c in &cfg.contenders {
        print!(" {c} |");
    }
    println!("\n|---|---|{}", "---|".repeat(cfg.contenders.len()));
    for w in &cfg.workloads {
        for &t in &cfg.threads {
            print!("| {w} | {t} |");
            for c in &cfg.contenders {
                match find(cells, w, t, c) {
                    Some(x) if cfg.live => print!(
                        " {:.1} ({:.1}) / {:.1} |",
                        Cell::median_of(&x.maxrss_kib) / 1024.0,
                        Cell::median_of(&x.live_peak_kib) / 1024.0,
                        Cell::median_of(&x.minor_faults) / 1000.0
                    ),
                    Some(x) => print!(
                        " {:.1} / {:.1} |",
                        Cell::median_of(&x.maxrss_kib) / 1024.0,
                        Cell::median_of(&x.minor_faults) / 1000.0
                    ),
                    None => print!(" - |"),
                }
            }
            println!();
        }
    }
    print_first_calls(cfg, cells);
}

/// Each contender's start-up: the median over all its runs of the first page's allocation and
/// free, which `main` makes before the threads start (a once-per-process cost that no timed
/// loop includes).
fn print_first_calls(cfg: &UserPathConfig, cells: &[Cell]) {
    println!("\nStart-up: the first allocation and free of one page in main, before the timer (us, median of all runs):\n");
    println!("| {} |", cfg.contenders.join(" | "));
    println!("|{}", "---|".repeat(cfg.contenders.len()));
    for c in &cfg.contenders {
        let all: Vec<f64> = cells
            .iter()
            .filter(|x| &x.contender == c)
            .flat_map(|x| x.first_call_ns.iter().copied())
            .collect();
        if all.is_empty() {
            print!("| - ");
        } else {
            print!("| {:.1} ", crate::median::median(&all) / 1000.0);
        }
    }
    println!("|");
}

pub fn json(cfg: &UserPathConfig, cells: &[Cell], m: &Machine) -> String {
    serde_json::json!({
        "command": "user-path",
        "loops": cfg.loops,
        "bare": cfg.bare,
        "live": cfg.live,
        "runs": cfg.runs,
        "machine": m,
        "cells": cells,
    })
    .to_string()
}

pub fn main(cfg: &UserPathConfig, m: &Machine) -> Result<(), String> {
    if cfg.runs == 0 || cfg.loops == 0 || cfg.threads.is_empty() || cfg.threads.contains(&0) {
        return Err("--runs, --loops and --threads must be positive".into());
    }
    if let Some(w) = cfg.workloads.iter().find(|w| !WORKLOADS.contains(&w.as_str())) {
        return Err(format!("unknown workload '{w}' (fix_size, full_fit, random_size, long_busy, mid_size)"));
    }
    // Variants are checked before anything is built.
    for spec in cfg.contenders.iter().filter_map(|c| c.strip_prefix("vmarena:")) {
        variant_env(spec)?;
    }
    let cells = run(cfg)?;
    print(cfg, &cells, m);
    if let Some(path) = &cfg.json {
        write_output(path, &json(cfg, &cells, m))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::variant_env;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn a_variant_names_options_of_the_default_space() {
        assert_eq!(
            variant_env("thread_cache_pages_max=8192+VMARENA_GUARD_PAGES=2").unwrap(),
            pairs(&[("VMARENA_THREAD_CACHE_PAGES_MAX", "8192"), ("VMARENA_GUARD_PAGES", "2")])
        );
        // An experiment is read only with VMARENA_EXPERIMENTS=1, so the variant sets it.
        assert_eq!(
            variant_env("SHARED_LAZY=0").unwrap(),
            pairs(&[("VMARENA_SHARED_LAZY", "0"), ("VMARENA_EXPERIMENTS", "1")])
        );
    }

    #[test]
    fn a_malformed_variant_is_refused_with_its_reason() {
        for (spec, why) in [
            ("bogus=1", "VMARENA_BOGUS is not an option"),
            ("SPACE_BYTES", "is not NAME=VALUE"),
            ("SPACE_BYTES=", "is not NAME=VALUE"),
            ("=1", "is not NAME=VALUE"),
            ("GUARD_PAGES=1+guard_pages=2", "VMARENA_GUARD_PAGES is set twice"),
            // Frame-pool options are not the default space's.
            ("FRAMES_PCP=0", "not an option of the default space"),
        ] {
            let e = variant_env(spec).unwrap_err();
            assert!(e.contains(why), "{spec}: {e}");
        }
    }
}
