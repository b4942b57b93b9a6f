//! `vmarena`: the lab. Benchmarks of the vmarena engine and (as later issues land) the kernel's
//! test_vmalloc workloads and comparisons with other allocators.
//!
//! Results go to stdout as tables; progress goes to stderr; `--json FILE` writes every
//! parameter, the machine and every figure.

mod machine;
mod pair;

use clap::{Parser, Subcommand};
use vmarena::Strategy;

#[derive(Parser)]
#[command(name = "vmarena", version, about = "vmarena lab: benchmarks of the vmalloc engine", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print every option (with its environment variable) and every statistic, as Markdown.
    Options,
    /// Nanoseconds per vmalloc+vfree pair for each strategy and thread count, in one run.
    ///
    /// Each thread repeats vmalloc(size) + vfree on a space of its strategy. Reports the median
    /// of interleaved rounds, throughput scaling against the first thread count, pool hit
    /// rate, purges, and lock figures per lock class (acquisitions and contended acquisitions
    /// per pair, share of thread time spent waiting).
    Pair {
        /// Strategies to compare, comma separated.
        #[arg(long, value_delimiter = ',', default_value = "global,split,nodes")]
        strategy: Vec<Strategy>,
        /// Thread counts, comma separated; the first is the scaling baseline.
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        threads: Vec<usize>,
        /// Bytes per allocation.
        #[arg(long, default_value_t = 4096)]
        size: usize,
        /// Pairs per thread per round.
        #[arg(long, default_value_t = 1_000_000)]
        pairs: u64,
        /// Rounds (the median is reported).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Write one byte to each area (page faults then dominate).
        #[arg(long)]
        touch: bool,
        /// Guard pages after each area.
        #[arg(long, default_value_t = 1)]
        guard_pages: u64,
        /// Measure lock hold times too (costs two clock reads per lock).
        #[arg(long)]
        lock_timing: bool,
        /// What the pairs run against: memory (a VmSpace) or none (the bare integer engine).
        #[arg(long, value_enum, default_value = "memory")]
        backing: pair::Backing,
        /// Write all parameters, the machine and every figure as JSON.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
}

fn main() {
    let cli = Cli::parse();
    let m = machine::Machine::detect();
    match cli.command {
        Command::Options => print_tables(),
        Command::Pair {
            strategy,
            threads,
            size,
            pairs,
            rounds,
            touch,
            guard_pages,
            lock_timing,
            backing,
            json,
        } => {
            if threads.is_empty() || threads.contains(&0) || rounds == 0 || pairs == 0 || size == 0 {
                eprintln!("vmarena pair: --threads, --rounds, --pairs and --size must be positive");
                std::process::exit(2);
            }
            let cfg = pair::PairConfig {
                strategies: strategy,
                threads,
                bytes: size,
                pairs,
                rounds,
                touch,
                guard_pages,
                lock_timing,
                backing,
            };
            let results = pair::run(&cfg);
            pair::print(&cfg, &results, &m);
            if let Some(path) = json {
                if let Err(e) = std::fs::write(&path, pair::json(&cfg, &results, &m)) {
                    eprintln!("vmarena pair: cannot write {}: {e}", path.display());
                    std::process::exit(1);
                }
            }
        }
    }
}

fn print_tables() {
    use vmarena_engine_tables::*;
    println!("### Space options (`VmSpace`, default space)\n");
    options_md(vmarena::SpaceOptions::TABLE);
    println!("\n### Arena options (every strategy)\n");
    options_md(vmarena::ArenaOptions::TABLE);
    println!("\n### Arena statistics (`Arena::stats`, `VmSpace::stats`)\n");
    println!("| name | unit | meaning |\n|---|---|---|");
    for d in vmarena::ArenaStats::TABLE {
        println!("| `{}` | {} | {} |", d.name, d.unit, d.doc);
    }
}

mod vmarena_engine_tables {
    pub fn options_md(t: &[vmarena::OptionDoc]) {
        println!("| option | unit | default | environment | meaning |\n|---|---|---|---|---|");
        for d in t {
            let unit = d.unit.replace('|', "\\|");
            println!("| `{}` | {} | `{}` | `{}` | {} |", d.name, unit, d.default, d.env, d.doc);
        }
    }
}
