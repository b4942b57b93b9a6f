//! `vmarena percpu-counter`: a per-CPU counter on vmarena's per-CPU objects against one shared
//! atomic counter, at each thread count, in fresh processes.
//!
//! The program (`src/c/percpu_counter.c`) has threads increment one counter; the reader sums
//! the CPUs' copies and the program fails unless the sum is exact. Modes: `shared` (one atomic
//! counter), `rseq` (a `vmarena_percpu_alloc`'d counter, each increment a plain add to the
//! current CPU's copy inside a restartable sequence), `atomic` (the same counter, an atomic add
//! to the copy of the CPU the thread reads it runs on). Modes alternate within each run; the
//! table gives median ns per increment and each mode's ratio to `shared`.

use crate::machine::{write_output, Machine};
use crate::{cc, libs};
use serde::Serialize;
use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = include_str!("c/percpu_counter.c");
const MODES: &[&str] = &["shared", "rseq", "atomic"];

/// Options of `vmarena percpu-counter`.
#[derive(clap::Args, Clone, Debug)]
pub struct PercpuCounterConfig {
    /// Modes: shared (one atomic counter), rseq (per-CPU copies, restartable sequences),
    /// atomic (per-CPU copies, atomic adds).
    #[arg(long, value_delimiter = ',', default_value = "shared,rseq,atomic")]
    pub modes: Vec<String>,
    /// Thread counts.
    #[arg(long, value_delimiter = ',', default_value = "1,2,64")]
    pub threads: Vec<u32>,
    /// Increments in all, split among the threads.
    #[arg(long, default_value_t = 20_000_000)]
    pub increments: u64,
    /// Fresh processes per (mode, threads); the median is reported.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Folder with libvmarena.so (default: beside this program).
    #[arg(long)]
    pub lib_dir: Option<PathBuf>,
    /// Write every parameter, the machine and every figure to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One (mode, threads): every run's ns per increment.
#[derive(Serialize, Clone, Debug, Default)]
pub struct Cell {
    pub mode: String,
    pub threads: u32,
    pub ns_per_increment: Vec<f64>,
}

impl Cell {
    fn median(&self) -> f64 {
        crate::median::median(&self.ns_per_increment)
    }
}

pub fn run(cfg: &PercpuCounterConfig) -> Result<Vec<Cell>, String> {
    let libs = libs::lib_dir(&cfg.lib_dir)?;
    libs::require(&libs, &["libvmarena.so"])?;
    let scratch = cc::scratch("percpu-counter")?;
    let bin = cc::compile(&scratch, "percpu_counter", SOURCE, "percpu_counter", &[], Some(&libs))?;
    let mut cells = Vec::new();
    for &t in &cfg.threads {
        let first = cells.len();
        cells.extend(cfg.modes.iter().map(|m| Cell { mode: m.clone(), threads: t, ..Default::default() }));
        let per_thread = (cfg.increments / u64::from(t)).max(1);
        for round in 0..cfg.runs {
            eprintln!("[percpu-counter] {t} thread(s), run {} of {}", round + 1, cfg.runs);
            for (i, m) in cfg.modes.iter().enumerate() {
                let out = Command::new(&bin)
                    .args([m.clone(), t.to_string(), per_thread.to_string()])
                    .output()
                    .map_err(|e| format!("{}: {e}", bin.display()))?;
                let ns = cc::reported(&out, "ns_per_increment").ok_or_else(|| {
                    format!(
                        "{m} at {t} threads: {} {}{}",
                        out.status,
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    )
                })?;
                cells[first + i].ns_per_increment.push(ns);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(cells)
}

pub fn print(cfg: &PercpuCounterConfig, cells: &[Cell], m: &Machine) {
    println!(
        "# vmarena percpu-counter: ns per increment (wall / increments), median of {} fresh processes; every sum checked exact",
        cfg.runs
    );
    println!("# {}", m.line());
    print!("| threads |");
    for mode in &cfg.modes {
        print!(" {mode} |");
    }
    let shared = cfg.modes.iter().any(|x| x == "shared");
    for mode in cfg.modes.iter().filter(|x| shared && *x != "shared") {
        print!(" {mode} / shared |");
    }
    println!();
    let ratios = if shared { cfg.modes.len() - 1 } else { 0 };
    println!("|---|{}", "---|".repeat(cfg.modes.len() + ratios));
    for &t in &cfg.threads {
        let get = |mode: &str| cells.iter().find(|c| c.threads == t && c.mode == mode).map(Cell::median);
        print!("| {t} |");
        for mode in &cfg.modes {
            print!(" {:.2} |", get(mode).unwrap_or(f64::NAN));
        }
        if let Some(base) = get("shared") {
            for mode in cfg.modes.iter().filter(|x| *x != "shared") {
                print!(" {:.2}x |", get(mode).unwrap_or(f64::NAN) / base);
            }
        }
        println!();
    }
}

pub fn main(cfg: &PercpuCounterConfig, m: &Machine) -> Result<(), String> {
    if cfg.runs == 0 || cfg.increments == 0 || cfg.threads.is_empty() || cfg.threads.contains(&0) {
        return Err("--runs, --increments and --threads must be positive".into());
    }
    if let Some(x) = cfg.modes.iter().find(|x| !MODES.contains(&x.as_str())) {
        return Err(format!("unknown mode '{x}' (shared, rseq, atomic)"));
    }
    let cells = run(cfg)?;
    print(cfg, &cells, m);
    if let Some(path) = &cfg.json {
        let out = serde_json::json!({
            "command": "percpu-counter",
            "increments": cfg.increments,
            "runs": cfg.runs,
            "machine": m,
            "cells": cells,
        });
        write_output(path, &out.to_string())?;
    }
    Ok(())
}
