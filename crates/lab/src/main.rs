//! `vmarena`: the lab. Benchmarks of the vmarena engine and (as later issues land) the kernel's
//! test_vmalloc workloads and comparisons with other allocators.
//!
//! Results go to stdout as tables; progress goes to stderr; `--json FILE` writes every
//! parameter, the machine and every figure.

mod cc;
mod first_call;
mod fixed;
mod frames;
mod fuzz;
mod int_arena;
mod layout;
mod libs;
mod lock_model;
mod machine;
mod median;
mod pair;
mod paired_ratio;
mod percpu_counter;
mod preload;
mod programs;
mod python_tests;
mod rusage;
mod suite;
mod test_vmalloc;
mod user_path;

use clap::{Parser, Subcommand};

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
    /// What the primitives under the engine cost on this machine, uncontended, in ns: a
    /// StatLock lock+unlock, an atomic fetch_add, the CPU id from rseq and from sched_getcpu.
    LockCost {
        /// Iterations of each loop.
        #[arg(long, default_value_t = 20_000_000)]
        iterations: u64,
    },
    /// Nanoseconds per vmalloc+vfree pair for each strategy and thread count, in one run.
    ///
    /// Each thread repeats vmalloc(size) + vfree on a space of its strategy. Reports the median
    /// of interleaved rounds, throughput scaling against the first thread count, pool hit
    /// rate, purges, and lock figures per lock class (acquisitions and contended acquisitions
    /// per pair, share of thread time spent waiting).
    Pair(pair::PairConfig),
    /// The kernel's test_vmalloc cases and report lines, against vmarena's strategies.
    ///
    /// Parameters take the kernel's names, as flags or as modprobe words
    /// (`vmarena test-vmalloc run_test_mask=7 nr_threads=2`); --mode applies a preset of
    /// test_vmalloc.sh. Every strategy in --strategy runs the same cases in this process;
    /// a comparison table ends the report.
    TestVmalloc(Box<test_vmalloc::Args>),
    /// FreeBSD's exec-args experiment: N workers take, write and give back a fixed-size buffer.
    ///
    /// Worker counts are multiples of the CPUs. Each run compares FixedPool (release on low
    /// memory, or on every put with MADV_FREE or MADV_DONTNEED), a single locked free list over
    /// the same slots, vmalloc/vfree, glibc malloc/free and mmap/munmap: wall, kernel and user
    /// time per cycle, faults, the per-CPU hit rate, steals, sleeps and releases.
    Fixed(fixed::FixedConfig),
    /// The page layer: a frame pool's buddy zone with and without per-CPU lists and batch queues.
    ///
    /// Workloads fault (page_fault1 shape, order 0), fault-mthp (order 3), fault-thp (order 9),
    /// bulk (64-frame bulk allocations), build (kbuild-like mixed orders) and xcpu (producer and
    /// consumer threads in pairs), each under every configuration in one run: blocks per second,
    /// zone-lock acquisitions per 1000 blocks and wait share, refills, drains, trylock failures,
    /// batch-queue flushes, and with --timing the time spent on compound blocks.
    Frames(frames::FramesConfig),
    /// Unmodified programs under glibc, jemalloc, mimalloc and vmarena's LD_PRELOAD shim.
    ///
    /// Workloads: malloc-large (mimalloc-bench's shape: 20 live buffers of 5-25 MiB, every byte
    /// written), xthread (rptest/larson shape, 4 KiB-4 MiB, cross-thread frees), and Python,
    /// sort and xz on generated input. Time, CPU time (all threads, over the timed work of the
    /// benchmark programs or the whole run of the others), peak RSS (and the benchmark
    /// programs' own live peak), RSS after one idle second (and its anonymous part), mappings, minor faults, TLB
    /// shootdowns (machine-wide, from /proc/interrupts) and (with --syscalls) memory system
    /// calls per allocator, ratios to vmarena; every output is checked against the first
    /// allocator's.
    Preload(preload::PreloadConfig),
    /// Unmodified programs with large buffers (xz, zstd, sort, sqlite3, python with bytes, zlib
    /// and numpy) and a give-back shape, under glibc, jemalloc, mimalloc, tcmalloc and the shim.
    ///
    /// Rounds interleaved (each starting at another allocator), every output checked against
    /// the first run's: median wall time, CPU time, peak RSS and minor faults, with the shim's
    /// ratio to the best peer on each and the geometric mean of its time ratios; give-back
    /// frees 2 GiB of 0.25-4 MiB blocks and reports the resident set 0.1 s, 1 s and 3 s later.
    /// A program this machine lacks is skipped and named.
    Programs(programs::ProgramsConfig),
    /// Random sequences of C ABI calls, valid and invalid, checked against a shadow model.
    ///
    /// Areas, fixed pool slots, frames and their mappings, with sizes of 0, sizes that
    /// overflow, bad alignments, interior, foreign and stale pointers, the wrong release
    /// function, pool, order or count among them, and areas handed between threads; under the
    /// shim (mode shim) the malloc family too. Each run lasts --seconds; every failed check
    /// is printed with the seed, and the command exits 1.
    Fuzz(fuzz::FuzzConfig),
    /// The vmalloc path as a user calls it: vmarena's C ABI against plain malloc (and page-aligned
    /// posix_memalign) under glibc, jemalloc, mimalloc and tcmalloc.
    ///
    /// The kernel's test_vmalloc shapes (fix_size, full_fit, random_size, long_busy) and
    /// mid_size from threads the program creates, every page written, fresh processes,
    /// contenders alternating: median ns per operation, vmarena's ratio to the best peer (also
    /// paired round by round) and to tcmalloc, throughput at the highest thread count over
    /// the first, each contender's median peak RSS and minor faults, and its start-up (one
    /// page allocated and freed in main before the timer, so that no timed loop includes it).
    /// vmarena:NAME=VALUE contenders run the C ABI with options set, beside the default.
    UserPath(user_path::UserPathConfig),
    /// A per-CPU counter on vmarena's per-CPU objects against one shared atomic counter.
    ///
    /// Threads increment one counter: shared (one atomic counter), rseq (a vmarena_percpu_alloc'd
    /// counter, each increment a plain add to the current CPU's copy in a restartable
    /// sequence), atomic (the same counter, an atomic add to the current CPU's copy); the sum
    /// of the copies is checked exact. Fresh processes, modes alternating: median ns per
    /// increment and each mode's ratio to shared, at 1, 2 and 64 threads by default.
    PercpuCounter(percpu_counter::PercpuCounterConfig),
    /// The first allocation of a thread in a process that already has threads, per contender.
    ///
    /// vmarena's C ABI (vmarena_vmalloc, the default space built on this call), malloc under
    /// the shim, and malloc under glibc, jemalloc, mimalloc and tcmalloc: fresh processes,
    /// contenders alternating; the median, min and max of the first call, its median minor page
    /// faults (the calling thread's), and the median second call, in ms.
    FirstCall(first_call::FirstCallConfig),
    /// mimalloc-bench's programs, built from a checkout (--dir), under every allocator and the
    /// shim's compositions with each.
    ///
    /// Interleaved runs, medians: time (or the suite's relative time), spread, peak RSS, minor
    /// faults; each composition over the allocator alone, each shim composition over the
    /// interposition floor (`interposer`, a preloaded library that only forwards) when it ran,
    /// and the shim over the best peer; deterministic outputs compared with glibc's (any
    /// difference exits 1).
    Suite(suite::SuiteConfig),
    /// vmarena's integer arena (vmem's interface) against the vmem, offset-allocator and
    /// range-alloc crates and a mutex around vmarena's free tree.
    ///
    /// Traces: a GPU heap (256 B-64 MiB, aligned 256 B-64 KiB, long- and short-lived mixed,
    /// frees in an order of their own) and a JIT code range (64 B-16 KiB functions, aligned
    /// 16-64, never across 2 MiB). Each thread replays its own trace; contenders alternate round
    /// by round. Reported: throughput (median) and its ratio to vmarena's, refusals, and with
    /// the trace's long-lived allocations live, the free ranges between them, the largest, and
    /// the heap held per live allocation. Placement is checked (alignment, nocross, overlap).
    IntArena(int_arena::IntArenaConfig),
    /// CPython's regression tests (python3 -m test, a memory-heavy selection) without the
    /// shim and under it, at the default threshold and at 1 byte, every test case's outcome
    /// compared; any difference is listed and makes the command exit 1.
    PythonTests(python_tests::PythonTestsConfig),
    /// The libraries' hot text: the functions processes run, laid out together at the front of
    /// each library's text by the linker's symbol order (crates/vmarena/hot-text.txt).
    ///
    /// Reports, per library, how many of its order's names the build has and in that order,
    /// the bytes and 64 KiB fault-around windows they take, and the library's resident pages
    /// in fresh user_path processes. --write runs the workloads under gdb (a temporary
    /// breakpoint per function; the programs run natively otherwise) and writes the orders;
    /// --check exits 1 when a build lacks its order (compiler or dependencies changed, or a
    /// linker without --symbol-ordering-file).
    Layout(layout::LayoutConfig),
}

fn main() {
    // Output piped into `head` and the like ends quietly when the reader goes away, as for other
    // command-line tools (Rust programs start with SIGPIPE ignored, so printing would panic).
    // SAFETY: restoring the default action of a signal before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let m = machine::Machine::detect();
    match cli.command {
        Command::Options => print_tables(),
        Command::LockCost { iterations } => lock_cost(iterations.max(1), &m),
        Command::TestVmalloc(a) => {
            if let Err(e) = test_vmalloc::main(*a, &m) {
                eprintln!("vmarena test-vmalloc: {e}");
                std::process::exit(2);
            }
        }
        Command::Fixed(cfg) => {
            let runs = fixed::run(&cfg).unwrap_or_else(|e| {
                eprintln!("vmarena fixed: {e}");
                std::process::exit(2);
            });
            fixed::print(&cfg, &runs, &m);
            if let Some(path) = &cfg.json {
                if let Err(e) = machine::write_output(path, &fixed::json(&cfg, &runs, &m)) {
                    eprintln!("vmarena fixed: cannot write {e}");
                    std::process::exit(1);
                }
            }
        }
        Command::Frames(cfg) => {
            let runs = frames::run(&cfg).unwrap_or_else(|e| {
                eprintln!("vmarena frames: {e}");
                std::process::exit(2);
            });
            frames::print(&cfg, &runs, &m);
            if let Some(path) = &cfg.json {
                if let Err(e) = machine::write_output(path, &frames::json(&cfg, &runs, &m)) {
                    eprintln!("vmarena frames: cannot write {e}");
                    std::process::exit(1);
                }
            }
        }
        Command::IntArena(cfg) => {
            let cells = int_arena::run(&cfg).unwrap_or_else(|e| {
                eprintln!("vmarena int-arena: {e}");
                std::process::exit(2);
            });
            int_arena::print(&cfg, &cells, &m);
            if let Some(path) = &cfg.json {
                if let Err(e) = machine::write_output(path, &int_arena::json(&cfg, &cells, &m)) {
                    eprintln!("vmarena int-arena: cannot write {e}");
                    std::process::exit(1);
                }
            }
            if !int_arena::own_ok(&cells) {
                std::process::exit(1);
            }
        }
        Command::Layout(cfg) => match layout::main(&cfg) {
            Ok(true) => {}
            Ok(false) => std::process::exit(1),
            Err(e) => {
                eprintln!("vmarena layout: {e}");
                std::process::exit(2);
            }
        },
        Command::UserPath(cfg) => {
            if let Err(e) = user_path::main(&cfg, &m) {
                eprintln!("vmarena user-path: {e}");
                std::process::exit(2);
            }
        }
        Command::PercpuCounter(cfg) => {
            if let Err(e) = percpu_counter::main(&cfg, &m) {
                eprintln!("vmarena percpu-counter: {e}");
                std::process::exit(2);
            }
        }
        Command::FirstCall(cfg) => {
            if let Err(e) = first_call::main(&cfg, &m) {
                eprintln!("vmarena first-call: {e}");
                std::process::exit(2);
            }
        }
        Command::Suite(cfg) => match suite::main(&cfg, &m) {
            Ok(true) => {}
            Ok(false) => std::process::exit(1),
            Err(e) => {
                eprintln!("vmarena suite: {e}");
                std::process::exit(2);
            }
        },
        Command::PythonTests(cfg) => match python_tests::main(&cfg, &m) {
            Ok(true) => {}
            Ok(false) => std::process::exit(1),
            Err(e) => {
                eprintln!("vmarena python-tests: {e}");
                std::process::exit(2);
            }
        },
        Command::Fuzz(cfg) => match fuzz::main(&cfg, &m) {
            Ok(true) => {}
            Ok(false) => std::process::exit(1),
            Err(e) => {
                eprintln!("vmarena fuzz: {e}");
                std::process::exit(2);
            }
        },
        Command::Preload(cfg) => {
            if let Err(e) = preload::main(&cfg, &m) {
                eprintln!("vmarena preload: {e}");
                std::process::exit(2);
            }
        }
        Command::Programs(cfg) => {
            if let Err(e) = programs::main(&cfg, &m) {
                eprintln!("vmarena programs: {e}");
                std::process::exit(2);
            }
        }
        Command::Pair(cfg) => {
            if cfg.threads.is_empty()
                || cfg.threads.contains(&0)
                || cfg.rounds == 0
                || cfg.pairs == 0
                || cfg.bytes == 0
            {
                eprintln!("vmarena pair: --threads, --rounds, --pairs and --size must be positive");
                std::process::exit(2);
            }
            let results = pair::run(&cfg);
            pair::print(&cfg, &results, &m);
            if let Some(path) = &cfg.json {
                if let Err(e) = machine::write_output(path, &pair::json(&cfg, &results, &m)) {
                    eprintln!("vmarena pair: cannot write {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}

fn print_tables() {
    use vmarena_engine_tables::*;
    println!("### Space options (`VmSpace`, default space)\n");
    options_with_default_space_md(vmarena::SpaceOptions::TABLE);
    println!("\n### Arena options (every strategy)\n");
    options_with_default_space_md(vmarena::ArenaOptions::TABLE);
    println!("\n### Fixed pool options (`FixedPool`; the C ABI's pools read the environment)\n");
    options_md(vmarena::FixedOptions::TABLE);
    println!("\n### Frame pool options (`FramePool`; the C ABI's pools read the environment)\n");
    options_md(vmarena::FrameOptions::TABLE);
    println!("\n### Memory-pressure options (read once per process)\n");
    options_md(vmarena::PressureOptions::TABLE);
    println!(
        "\n### Experiments (read from the environment only with `VMARENA_EXPERIMENTS=1`)\n\n\
         Switches that compare a design choice with its alternative; their defaults are what every \
         user gets.\n"
    );
    let experiments: Vec<vmarena::OptionDoc> = [vmarena::SpaceOptions::TABLE, vmarena::ArenaOptions::TABLE]
        .into_iter()
        .flatten()
        .filter(|d| d.experiment)
        .copied()
        .collect();
    experiments_md(&experiments);
    println!("\n### Arena statistics (`Arena::stats`, `VmSpace::stats`)\n");
    stats_md(vmarena::ArenaStats::TABLE);
    println!("\n### Fixed pool statistics (`FixedPool::cache_stats`, `FixedPool::stats`)\n");
    let mut fixed = vmarena::FixedStats::TABLE.to_vec();
    fixed.extend_from_slice(vmarena::FixedPoolStats::TABLE);
    stats_md(&fixed);
    println!("\n### Frame pool statistics (`FramePool::stats`, `vmarena_frames_stats`)\n");
    stats_md(vmarena::FrameStats::TABLE);
}

mod vmarena_engine_tables {
    pub fn stats_md(t: &[vmarena::StatDoc]) {
        println!("| name | unit | meaning |\n|---|---|---|");
        for d in t {
            println!("| `{}` | {} | {} |", d.name, d.unit, d.doc);
        }
    }

    /// The stable options of a table, with a column for the default space's value where it
    /// differs (experiments are listed apart).
    pub fn options_with_default_space_md(t: &[vmarena::OptionDoc]) {
        rows_with_default_space(t.iter().filter(|d| !d.experiment));
    }

    /// The experiments of every table, with the same columns.
    pub fn experiments_md(t: &[vmarena::OptionDoc]) {
        rows_with_default_space(t.iter());
    }

    fn rows_with_default_space<'a>(rows: impl Iterator<Item = &'a vmarena::OptionDoc>) {
        println!(
            "| option | unit | default | default space (C ABI, shim, `VmAlloc`) | environment | meaning |\n|---|---|---|---|---|---|"
        );
        for d in rows {
            let unit = d.unit.replace('|', "\\|");
            let own = vmarena::DEFAULT_SPACE_DIFFERENCES
                .iter()
                .find(|x| x.0 == d.name)
                .map_or("same".to_string(), |x| format!("`{}`", x.1));
            println!("| `{}` | {} | `{}` | {} | `{}` | {} |", d.name, unit, d.default, own, d.env, d.doc);
        }
    }

    pub fn options_md(t: &[vmarena::OptionDoc]) {
        println!("| option | unit | default | environment | meaning |\n|---|---|---|---|---|");
        for d in t.iter().filter(|d| !d.experiment) {
            let unit = d.unit.replace('|', "\\|");
            println!("| `{}` | {} | `{}` | `{}` | {} |", d.name, unit, d.default, d.env, d.doc);
        }
    }
}

/// Time `f` over `n` iterations: nanoseconds per iteration.
fn per_iter(n: u64, mut f: impl FnMut()) -> f64 {
    let t = std::time::Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn lock_cost(n: u64, m: &machine::Machine) {
    use std::hint::black_box;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let lock = vmarena_engine::StatLock::new(0u64);
    let counter = AtomicU64::new(0);
    println!("# vmarena lock-cost: {n} iterations each, uncontended, one thread");
    println!("# {}", m.line());
    let rows = [
        ("StatLock lock+unlock", per_iter(n, || *black_box(&lock).lock() += 1)),
        (
            "AtomicU64::fetch_add",
            per_iter(n, || {
                black_box(black_box(&counter).fetch_add(1, Relaxed));
            }),
        ),
        (
            "CPU id (rseq)",
            per_iter(n, || {
                black_box(vmarena_platform::cpu::current());
            }),
        ),
        (
            "CPU id (sched_getcpu)",
            per_iter(n, || {
                black_box(vmarena_platform::cpu::sched_getcpu());
            }),
        ),
    ];
    for (what, ns) in rows {
        println!("{what:<24} {ns:>8.2} ns");
    }
}
