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
//!
//! Each (workload, threads, contender) runs `--runs` times in a fresh process, contenders
//! alternating; the median ns per operation (wall time over loops x threads) is reported, with
//! vmarena's ratio to the best of glibc, jemalloc and mimalloc and to tcmalloc, and each
//! contender's throughput at the highest thread count over the first.

use crate::machine::{write_output, Machine};
use crate::{cc, libs};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = include_str!("c/user_path.c");
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
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<u32>,
    /// Contenders: vmarena, glibc, jemalloc, mimalloc, tcmalloc, and PEER-aligned for each peer.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "vmarena,glibc,jemalloc,mimalloc,tcmalloc,glibc-aligned,jemalloc-aligned,mimalloc-aligned,tcmalloc-aligned"
    )]
    pub contenders: Vec<String>,
    /// Loops per thread (random_size and mid_size run a tenth of them).
    #[arg(long, default_value_t = 200_000)]
    pub loops: u64,
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

/// One (workload, threads, contender): every run's ns per operation.
#[derive(Serialize, Clone, Debug, Default)]
pub struct Cell {
    pub workload: String,
    pub threads: u32,
    pub contender: String,
    pub ns_per_op: Vec<f64>,
}

impl Cell {
    fn median(&self) -> f64 {
        crate::median::median(&self.ns_per_op)
    }
}

struct Setup {
    bin: PathBuf,
    preload: Option<PathBuf>,
    aligned: bool,
}

fn setup(c: &str, abi: &Path, plain: &Path) -> Result<Setup, String> {
    if c == "vmarena" {
        return Ok(Setup { bin: abi.into(), preload: None, aligned: false });
    }
    let (peer, aligned) = match c.strip_suffix("-aligned") {
        Some(p) => (p, true),
        None => (c, false),
    };
    let preload = libs::peer(peer).ok_or_else(|| {
        format!("unknown contender '{c}' (vmarena, glibc, jemalloc, mimalloc, tcmalloc, PEER-aligned)")
    })??;
    Ok(Setup { bin: plain.into(), preload, aligned })
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
    let setups = cfg.contenders.iter().map(|c| setup(c, &abi, &plain)).collect::<Result<Vec<_>, _>>()?;
    let mut cells = Vec::new();
    for w in &cfg.workloads {
        for &t in &cfg.threads {
            let first = cells.len();
            for c in &cfg.contenders {
                cells.push(Cell {
                    workload: w.clone(),
                    threads: t,
                    contender: c.clone(),
                    ns_per_op: Vec::new(),
                });
            }
            for round in 0..cfg.runs {
                eprintln!("[user-path] {w}, {t} thread(s), run {} of {}", round + 1, cfg.runs);
                for (i, s) in setups.iter().enumerate() {
                    let mut cmd = Command::new(&s.bin);
                    cmd.args([w.clone(), t.to_string(), loops_of(w, cfg.loops).to_string()]);
                    if s.aligned {
                        cmd.arg("aligned");
                    }
                    if let Some(p) = &s.preload {
                        cmd.env("LD_PRELOAD", p);
                    }
                    let out = cmd.output().map_err(|e| format!("{}: {e}", s.bin.display()))?;
                    let ns = cc::reported(&out, "ns_per_op").ok_or_else(|| {
                        format!(
                            "{w} under {}: {} {}{}",
                            cfg.contenders[i],
                            out.status,
                            String::from_utf8_lossy(&out.stdout),
                            String::from_utf8_lossy(&out.stderr)
                        )
                    })?;
                    cells[first + i].ns_per_op.push(ns);
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

pub fn print(cfg: &UserPathConfig, cells: &[Cell], m: &Machine) {
    println!(
        "# vmarena user-path: ns per operation (wall / (loops x threads)), median of {} fresh processes, every page written",
        cfg.runs
    );
    println!("# {}", m.line());
    let has = |c: &str| cfg.contenders.iter().any(|x| x == c);
    print!("| workload | threads |");
    for c in &cfg.contenders {
        print!(" {c} |");
    }
    // The ratio to the best of the three peers needs one of them in the run, the ratio to
    // tcmalloc needs tcmalloc.
    let best_col = has("vmarena") && PEERS.iter().any(|p| has(p) || has(&format!("{p}-aligned")));
    let tc_col = has("vmarena") && has("tcmalloc");
    if best_col {
        print!(" vmarena / best of glibc, jemalloc, mimalloc |");
    }
    if tc_col {
        print!(" vmarena / tcmalloc |");
    }
    println!();
    let extra = usize::from(best_col) + usize::from(tc_col);
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
                let best = PEERS
                    .iter()
                    .flat_map(|p| [p.to_string(), format!("{p}-aligned")])
                    .filter_map(|c| find(cells, w, t, &c).map(Cell::median))
                    .fold(f64::INFINITY, f64::min);
                print!(" {:.2}x |", v / best);
            }
            if tc_col {
                let tc = find(cells, w, t, "tcmalloc").map(Cell::median).unwrap_or(f64::NAN);
                print!(" {:.2}x |", v / tc);
            }
            println!();
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
}

pub fn json(cfg: &UserPathConfig, cells: &[Cell], m: &Machine) -> String {
    serde_json::json!({
        "command": "user-path",
        "loops": cfg.loops,
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
    let cells = run(cfg)?;
    print(cfg, &cells, m);
    if let Some(path) = &cfg.json {
        write_output(path, &json(cfg, &cells, m))?;
    }
    Ok(())
}
