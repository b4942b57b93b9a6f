//! `vmarena int-arena`: vmarena's integer arena against the crates people use for one, on two
//! traces that stand for real use (a GPU heap and a JIT code range, `trace.rs`), at each thread
//! count, contenders interleaved round by round (`contenders.rs`).
//!
//! Reported per trace, thread count and contender: throughput (million operations a second,
//! all threads, median of the rounds) and its ratio to vmarena's; requests refused; and, with
//! the trace's long-lived allocations still live at its end, the fragmentation of the free
//! space (the free ranges between them, how many are slivers shorter than the trace's smallest
//! request, all free space, the largest range and its share of it, computed
//! from the allocations' extents, the same way for every contender) and the heap the contender
//! holds (glibc's `mallinfo2`, from before it was built) per live allocation. Every allocation's
//! start is checked against its alignment and nocross boundary, and the live extents against
//! overlap: a violation fails the command.

mod contenders;
mod trace;

use crate::machine::Machine;
use crate::median::median;
use contenders::{IntArena, OffsetAlloc, RangeAlloc, TreeMutex, VmarenaArena, VmemCrate, CONTENDERS};
use std::sync::Barrier;
use std::time::Instant;
use trace::{Op, Shape, Trace};
use vmarena_core::crosses;
use vmarena_engine::{Fit, Strategy};

/// Parameters of `vmarena int-arena`.
#[derive(clap::Args, Clone, serde::Serialize)]
pub struct IntArenaConfig {
    /// Traces: gpu (a 4 GiB device heap, 256 B-64 MiB, aligned 256 B-64 KiB), jit (a 256 MiB
    /// code range, 64 B-16 KiB functions aligned 16-64, never across 2 MiB).
    #[arg(long, value_delimiter = ',', default_value = "gpu,jit")]
    pub traces: Vec<String>,
    /// Thread counts; each thread replays a trace of its own against the shared arena.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// Contenders: vmarena (the default: instant fit, segregated free lists in per-CPU
    /// stripes), vmarena-1 (the same in one stripe), vmarena-best (best fit on the same
    /// stripes), vmarena-lowest (lowest fit: per-CPU nodes, thread caches, free tree),
    /// vmarena-lowest-global (lowest fit, one lock), tree-mutex (vmarena's free tree under a
    /// mutex), vmem (padded requests through alloc), vmem-xalloc (its own constrained
    /// allocation), offset-allocator, range-alloc.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "vmarena,vmarena-1,vmarena-best,vmarena-lowest,vmarena-lowest-global,tree-mutex,vmem,vmem-xalloc,offset-allocator,range-alloc"
    )]
    pub contenders: Vec<String>,
    /// Allocations per thread (the JIT trace then holds about 42,000 live functions a thread;
    /// range-alloc and vmem slow down with the number of free ranges).
    #[arg(long, default_value_t = 100_000)]
    pub allocs: usize,
    /// Rounds; each runs every contender once, in turn.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Seed of the traces (thread t replays seed + t).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write every parameter and figure as JSON to this file.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<std::path::PathBuf>,
}

/// One replay of one contender.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Sample {
    pub mops: f64,
    pub failures: u64,
    pub live: u64,
    pub free_ranges: u64,
    /// Free ranges shorter than the trace's smallest request.
    pub slivers: u64,
    pub largest_free: u64,
    pub free_total: u64,
    pub heap_bytes: i64,
}

/// Every round of one trace, thread count and contender.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Cell {
    pub trace: String,
    pub threads: usize,
    pub contender: String,
    pub samples: Vec<Sample>,
    /// Why the contender stopped (a panic, a misplaced or overlapping allocation): its later
    /// rounds are skipped.
    pub error: Option<String>,
}

impl Cell {
    fn median_of(&self, f: impl Fn(&Sample) -> f64) -> f64 {
        median(&self.samples.iter().map(f).collect::<Vec<_>>())
    }
}

/// Bytes glibc's malloc holds for the program (in use, mapped chunks included).
fn heap_bytes() -> i64 {
    // SAFETY: mallinfo2 has no preconditions.
    let mi = unsafe { libc::mallinfo2() };
    (mi.uordblks + mi.hblkhd) as i64
}

/// Replay `traces` (one per thread) against the contender `make` builds.
fn replay<A: IntArena>(shape: Shape, traces: &[Trace], make: impl FnOnce() -> A) -> Result<Sample, String> {
    let mut tables: Vec<Vec<Option<A::H>>> = traces.iter().map(|t| vec![None; t.slots]).collect();
    let before = heap_bytes();
    let arena = make();
    let barrier = Barrier::new(traces.len());
    let runs = std::thread::scope(|s| {
        let handles: Vec<_> = traces
            .iter()
            .zip(tables.iter_mut())
            .map(|(t, table)| {
                let (arena, barrier) = (&arena, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let (mut failures, mut misplaced) = (0u64, 0u64);
                    for op in &t.ops {
                        match *op {
                            Op::Alloc { slot, size, align } => match arena.alloc(size, align) {
                                Some(h) => {
                                    let at = arena.start(&h);
                                    misplaced +=
                                        u64::from(at % align != 0 || crosses(at, size, shape.nocross));
                                    table[slot as usize] = Some(h);
                                }
                                None => failures += 1,
                            },
                            Op::Free { slot } => {
                                if let Some(h) = table[slot as usize].take() {
                                    arena.free(h);
                                }
                            }
                        }
                    }
                    (start, Instant::now(), t.ops.len() as u64, failures, misplaced)
                })
            })
            .collect();
        // Every thread joined (a scope panics over one left unjoined), then the first panic.
        let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        joined.into_iter().collect::<Result<Vec<_>, _>>()
    })
    .map_err(|p| {
        // The contender's state is whatever its panic left: never touched again.
        std::mem::forget(std::mem::take(&mut tables));
        let why =
            p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
        format!("panicked: {}", why.unwrap_or_default())
    });
    let runs = match runs {
        Ok(r) => r,
        Err(e) => {
            std::mem::forget(arena);
            return Err(e);
        }
    };
    let heap = heap_bytes() - before;
    let first = runs.iter().map(|r| r.0).min().expect("a thread");
    let last = runs.iter().map(|r| r.1).max().expect("a thread");
    let ops: u64 = runs.iter().map(|r| r.2).sum();
    let misplaced: u64 = runs.iter().map(|r| r.4).sum();
    if misplaced > 0 {
        return Err(format!("{misplaced} allocations broke their alignment or nocross boundary"));
    }
    // The long-lived allocations still live: their extents, in order, must not overlap.
    let mut ext: Vec<_> = tables.iter().flatten().flatten().map(|h| arena.extent(h)).collect();
    ext.sort_by_key(|r| r.start);
    let (lo, hi) = (shape.base, shape.base + shape.span);
    let (mut at, mut ranges, mut largest, mut free, mut slivers) = (lo, 0u64, 0u64, 0u64, 0u64);
    for r in ext.iter().chain(std::iter::once(&(hi..hi))) {
        if r.start < at || r.end > hi {
            return Err(format!("extent {:#x}..{:#x} overlaps another or leaves the arena", r.start, r.end));
        }
        if r.start > at {
            ranges += 1;
            largest = largest.max(r.start - at);
            free += r.start - at;
            slivers += u64::from(r.start - at < shape.min_request);
        }
        at = r.end;
    }
    for h in tables.iter_mut().flatten().filter_map(Option::take) {
        arena.free(h);
    }
    let wall_us = (last - first).as_secs_f64() * 1e6;
    Ok(Sample {
        mops: ops as f64 / wall_us,
        failures: runs.iter().map(|r| r.3).sum(),
        live: ext.len() as u64,
        free_ranges: ranges,
        slivers,
        largest_free: largest,
        free_total: free,
        heap_bytes: heap,
    })
}

fn run_one(contender: &str, shape: Shape, traces: &[Trace]) -> Result<Sample, String> {
    match contender {
        "vmarena" => replay(shape, traces, || VmarenaArena::new(shape, Strategy::Nodes, Fit::Instant, 0)),
        "vmarena-1" => replay(shape, traces, || VmarenaArena::new(shape, Strategy::Nodes, Fit::Instant, 1)),
        "vmarena-best" => replay(shape, traces, || VmarenaArena::new(shape, Strategy::Nodes, Fit::Best, 0)),
        "vmarena-lowest" => {
            replay(shape, traces, || VmarenaArena::new(shape, Strategy::Nodes, Fit::Lowest, 0))
        }
        "vmarena-lowest-global" => {
            replay(shape, traces, || VmarenaArena::new(shape, Strategy::Global, Fit::Lowest, 0))
        }
        "tree-mutex" => replay(shape, traces, || TreeMutex::new(shape)),
        "vmem" => replay(shape, traces, || VmemCrate::new(shape, false)),
        "vmem-xalloc" => replay(shape, traces, || VmemCrate::new(shape, true)),
        "offset-allocator" => replay(shape, traces, || OffsetAlloc::new(shape)),
        "range-alloc" => replay(shape, traces, || RangeAlloc::new(shape)),
        other => Err(format!("unknown contender '{other}' (known: {})", CONTENDERS.join(", "))),
    }
}

/// Every round, every cell.
pub fn run(cfg: &IntArenaConfig) -> Result<Vec<Cell>, String> {
    let shapes: Vec<Shape> = cfg
        .traces
        .iter()
        .map(|n| trace::shape(n).ok_or_else(|| format!("unknown trace '{n}' (known: gpu, jit)")))
        .collect::<Result<_, _>>()?;
    if let Some(c) = cfg.contenders.iter().find(|c| !CONTENDERS.contains(&c.as_str())) {
        return Err(format!("unknown contender '{c}' (known: {})", CONTENDERS.join(", ")));
    }
    if cfg.threads.contains(&0) || cfg.allocs == 0 || cfg.rounds == 0 {
        return Err("threads, allocs and rounds must be at least 1".into());
    }
    let mut cells = Vec::new();
    for shape in &shapes {
        for &threads in &cfg.threads {
            for c in &cfg.contenders {
                cells.push(Cell {
                    trace: shape.name.into(),
                    threads,
                    contender: c.clone(),
                    samples: vec![],
                    error: None,
                });
            }
        }
    }
    for round in 0..cfg.rounds {
        for shape in &shapes {
            for &threads in &cfg.threads {
                let traces: Vec<Trace> =
                    (0..threads).map(|t| trace::generate(*shape, cfg.allocs, cfg.seed + t as u64)).collect();
                let here = |c: &&mut Cell| c.trace == shape.name && c.threads == threads && c.error.is_none();
                for cell in cells.iter_mut().filter(here) {
                    eprintln!(
                        "int-arena: round {}/{}, {} at {threads} thread(s), {}",
                        round + 1,
                        cfg.rounds,
                        shape.name,
                        cell.contender
                    );
                    match run_one(&cell.contender, *shape, &traces) {
                        Ok(s) => cell.samples.push(s),
                        Err(e) => {
                            eprintln!("int-arena: {} on {}: {e}", cell.contender, shape.name);
                            cell.error = Some(e);
                        }
                    }
                }
            }
        }
    }
    Ok(cells)
}

/// Whether every vmarena contender ran without a violation (peers may fail: their rows say
/// how).
pub fn own_ok(cells: &[Cell]) -> bool {
    cells.iter().all(|c| !c.contender.starts_with("vmarena") || c.error.is_none())
}

/// The table: one row per cell, ratios to vmarena's throughput in the same trace and threads.
pub fn print(cfg: &IntArenaConfig, cells: &[Cell], m: &Machine) {
    println!("{}", m.line());
    println!(
        "int-arena: {} allocations per thread, {} rounds (medians), seed {}",
        cfg.allocs, cfg.rounds, cfg.seed
    );
    println!(
        "\n| trace | threads | contender | Mops/s | vs vmarena | refused | live | free ranges | of them slivers | free MiB | largest free MiB | largest/free | heap B per live |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for c in cells {
        if let Some(e) = &c.error {
            println!(
                "| {} | {} | {} | {} | | | | | | | | | |",
                c.trace,
                c.threads,
                c.contender,
                e.replace('|', "/")
            );
            continue;
        }
        let own = cells
            .iter()
            .find(|o| o.trace == c.trace && o.threads == c.threads && o.contender == "vmarena")
            .map(|o| o.median_of(|s| s.mops));
        let mops = c.median_of(|s| s.mops);
        let ratio = own.map_or("-".into(), |v| format!("{:.2}x", mops / v));
        let live = c.median_of(|s| s.live as f64);
        let largest = c.median_of(|s| s.largest_free as f64);
        let share = c.median_of(|s| s.largest_free as f64 / s.free_total.max(1) as f64);
        println!(
            "| {} | {} | {} | {:.2} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.0}% | {:.0} |",
            c.trace,
            c.threads,
            c.contender,
            mops,
            ratio,
            c.median_of(|s| s.failures as f64),
            live,
            c.median_of(|s| s.free_ranges as f64),
            c.median_of(|s| s.slivers as f64),
            c.median_of(|s| s.free_total as f64) / (1 << 20) as f64,
            largest / (1 << 20) as f64,
            share * 100.0,
            c.median_of(|s| s.heap_bytes as f64 / s.live.max(1) as f64),
        );
    }
}

pub fn json(cfg: &IntArenaConfig, cells: &[Cell], m: &Machine) -> String {
    serde_json::to_string_pretty(&serde_json::json!({ "config": cfg, "machine": m, "cells": cells }))
        .expect("serialisable")
}
