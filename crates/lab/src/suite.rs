//! `vmarena suite`: the programs of mimalloc-bench (the benchmark suite allocator authors use),
//! built from a checkout the user points at, under every allocator and every composition of the
//! shim with one, in one run.
//!
//! The lab carries no code of the suite: it knows each program's sources, flags and arguments
//! (those of the suite's `bench/CMakeLists.txt` and `bench.sh`, for 2 CPUs), compiles them from
//! `DIR/bench` with `cc` and `c++` into a scratch folder, and runs each program under each
//! allocator `--runs` times, interleaved (run 1 of every pair, then run 2, ...). Reported per
//! pair: the median of the program's time (wall time, or for programs that run for a fixed
//! time the suite's own "relative time" from their output), its spread, the median peak RSS and
//! minor faults; then the ratios that matter for the shim: each composition over the same
//! allocator alone, and the shim alone over the best of the peers. Outputs that are
//! deterministic (cfrac, espresso, barnes without its timing lines) are compared with glibc's.
//!
//! Each ratio is also given paired round by round (`crate::paired`): the rounds run every
//! allocator of a program one after the other, so a pair shares its round's host load.
//!
//! The interposition floor: `interposer` and `interposer+PEER` preload a library built from
//! `c/interposer.c` that defines every function the shim defines and only jumps to the next
//! definition, the least any preloaded shim costs. With it in the run, each shim composition is
//! also reported over the interposer with the same allocator next: what the shim adds to the
//! cost of being interposed at all.
//!
//! Getting a checkout: `git clone https://github.com/daanx/mimalloc-bench` (any folder; only its
//! `bench/` is read).

use crate::libs;
use crate::machine::{write_output, Machine};
use crate::median::median;
use crate::paired_ratio::paired;
use crate::preload::run_child;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How a program's time is read.
#[derive(Clone, Copy)]
enum Metric {
    /// Wall time of the process.
    Wall,
    /// The number after this text in the output (the suite's relative time, in s).
    After(&'static str),
    /// `scale / N`, N the number before this text (operations per second or per run).
    Inverse(&'static str, f64),
}

/// One program of the suite: where its sources are, how it is built and run.
struct Program {
    name: &'static str,
    cxx: bool,
    dir: &'static str,
    sources: &'static [&'static str],
    flags: &'static [&'static str],
    args: &'static [&'static str],
    stdin: Option<&'static str>,
    metric: Metric,
    /// Output compared with glibc's, lines containing any of these texts left out.
    check: Option<&'static [&'static str]>,
}

const CFRAC: &[&str] = &[
    "cfrac.c",
    "pops.c",
    "pconst.c",
    "pio.c",
    "pabs.c",
    "pneg.c",
    "pcmp.c",
    "podd.c",
    "phalf.c",
    "padd.c",
    "psub.c",
    "pmul.c",
    "pdivmod.c",
    "psqrt.c",
    "ppowmod.c",
    "atop.c",
    "ptoa.c",
    "itop.c",
    "utop.c",
    "ptou.c",
    "errorp.c",
    "pfloat.c",
    "pidiv.c",
    "pimod.c",
    "picmp.c",
    "primes.c",
    "pcfrac.c",
    "pgcd.c",
];
const ESPRESSO: &[&str] = &[
    "cofactor.c",
    "cols.c",
    "compl.c",
    "contain.c",
    "cubestr.c",
    "cvrin.c",
    "cvrm.c",
    "cvrmisc.c",
    "cvrout.c",
    "dominate.c",
    "equiv.c",
    "espresso.c",
    "essen.c",
    "exact.c",
    "expand.c",
    "gasp.c",
    "getopt.c",
    "gimpel.c",
    "globals.c",
    "hack.c",
    "indep.c",
    "irred.c",
    "main.c",
    "map.c",
    "matrix.c",
    "mincov.c",
    "opo.c",
    "pair.c",
    "part.c",
    "primes.c",
    "reduce.c",
    "rows.c",
    "set.c",
    "setc.c",
    "sharp.c",
    "sminterf.c",
    "solution.c",
    "sparse.c",
    "unate.c",
    "utility.c",
    "verify.c",
];
const GNU89: &[&str] = &["-std=gnu89"];

const fn p(name: &'static str, cxx: bool, dir: &'static str, sources: &'static [&'static str]) -> Program {
    Program { name, cxx, dir, sources, flags: &[], args: &[], stdin: None, metric: Metric::Wall, check: None }
}

/// `{bench}` in an argument or the standard input stands for the checkout's `bench/` folder.
fn programs() -> Vec<Program> {
    vec![
        Program {
            flags: &["-std=gnu89", "-DNOMEMOPT=1"],
            args: &["17545186520507317056371138836327483792789528"],
            check: Some(&[]),
            ..p("cfrac", false, "cfrac", CFRAC)
        },
        Program {
            flags: GNU89,
            args: &["{bench}/espresso/largest.espresso"],
            check: Some(&[]),
            ..p("espresso", false, "espresso", ESPRESSO)
        },
        Program {
            flags: GNU89,
            stdin: Some("{bench}/barnes/input"),
            check: Some(&["TIME", "COMPUTESTART", "COMPUTEEND"]),
            ..p(
                "barnes",
                false,
                "barnes",
                &["code.c", "code_io.c", "load.c", "grav.c", "getparam.c", "util.c"],
            )
        },
        p("glibc-simple", false, "glibc-bench", &["bench-malloc-simple.c"]),
        Program {
            args: &["2"],
            metric: Metric::Inverse(" iterations", 1e9),
            ..p("glibc-thread", false, "glibc-bench", &["bench-malloc-thread.c"])
        },
        Program { args: &["5"], ..p("mleak10", false, "mleak", &["mleak.c"]) },
        Program { args: &["50"], ..p("mleak100", false, "mleak", &["mleak.c"]) },
        Program {
            flags: &["-DBENCH=4"],
            args: &["1"],
            ..p("alloc-test1", true, "alloc-test", &["test_common.cpp", "allocator_tester.cpp"])
        },
        Program {
            flags: &["-DBENCH=4"],
            args: &["2"],
            ..p("alloc-testN", true, "alloc-test", &["test_common.cpp", "allocator_tester.cpp"])
        },
        Program {
            flags: &["-DCPP=1"],
            args: &["5", "8", "1000", "5000", "100", "4141", "2"],
            metric: Metric::After("relative time: "),
            ..p("larsonN", true, "larson", &["larson.cpp"])
        },
        Program {
            flags: &["-DCPP=1", "-DSIZED=1", "-fsized-deallocation"],
            args: &["5", "8", "1000", "5000", "100", "4141", "2"],
            metric: Metric::After("relative time: "),
            ..p("larsonN-sized", true, "larson", &["larson.cpp"])
        },
        Program { args: &["2", "50", "25"], ..p("mstressN", false, "mstress", &["mstress.c"]) },
        Program {
            flags: &["-fpermissive", "-I{bench}/rptest"],
            args: &["2", "0", "1", "2", "500", "1000", "100", "8", "16000"],
            metric: Metric::Inverse(" memory ops", 2e6),
            ..p("rptestN", false, "rptest", &["rptest.c", "thread.c", "timer.c"])
        },
        Program {
            args: &["-w", "2", "-t", "5", "-s", "64"],
            metric: Metric::After("rtime: "),
            ..p("xmalloc-testN", false, "xmalloc-test", &["xmalloc-test.c"])
        },
        Program {
            args: &["1", "1000", "1", "2000000", "2"],
            ..p("cache-scratch1", true, "cache-scratch", &["cache-scratch.cpp"])
        },
        Program {
            args: &["2", "1000", "1", "2000000", "2"],
            ..p("cache-scratchN", true, "cache-scratch", &["cache-scratch.cpp"])
        },
        Program {
            args: &["1", "1000", "1", "2000000", "2"],
            ..p("cache-thrash1", true, "cache-thrash", &["cache-thrash.cpp"])
        },
        Program {
            args: &["2", "1000", "1", "2000000", "2"],
            ..p("cache-thrashN", true, "cache-thrash", &["cache-thrash.cpp"])
        },
        p("malloc-large", true, "malloc-large", &["malloc-large.cpp"]),
    ]
}

/// Options of `vmarena suite`.
#[derive(clap::Args, Clone, Debug)]
pub struct SuiteConfig {
    /// A mimalloc-bench checkout (its bench/ folder is read).
    #[arg(long)]
    pub dir: PathBuf,
    /// Programs (default: all): cfrac, espresso, barnes, glibc-simple, glibc-thread, mleak10,
    /// mleak100, alloc-test1, alloc-testN, larsonN, larsonN-sized, mstressN, rptestN,
    /// xmalloc-testN, cache-scratch1, cache-scratchN, cache-thrash1, cache-thrashN, malloc-large.
    #[arg(long, value_delimiter = ',')]
    pub programs: Vec<String>,
    /// Allocators and compositions: glibc, jemalloc, mimalloc, tcmalloc, shim (glibc next),
    /// shim+jemalloc, shim+mimalloc, shim+tcmalloc; and the interposition floor, interposer
    /// (glibc next) and interposer+PEER: a preloaded library that only forwards every call.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "glibc,jemalloc,mimalloc,tcmalloc,shim,shim+jemalloc,shim+mimalloc,shim+tcmalloc"
    )]
    pub allocators: Vec<String>,
    /// Runs of each pair, interleaved; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// The shim (default: libvmarena_preload.so beside this program).
    #[arg(long)]
    pub shim: Option<PathBuf>,
    /// Write every parameter, the machine and every run to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One run of one program under one allocator.
#[derive(Serialize, Clone, Debug)]
pub struct SuiteRun {
    pub program: String,
    pub allocator: String,
    pub seconds: f64,
    pub wall_seconds: f64,
    pub peak_rss_kib: u64,
    pub minor_faults: u64,
    /// Output equal to glibc's first run (programs with a deterministic output).
    pub output_matches: Option<bool>,
}

/// The LD_PRELOAD of an allocator name (`None`: glibc alone); `interposer` is the forwarding
/// library's path.
fn preload_of(alloc: &str, shim: &Path, interposer: &Path) -> Result<Option<String>, String> {
    let (front, peer) = match alloc.split_once('+') {
        Some((front, peer)) => (Some(front), peer),
        None if alloc == "shim" || alloc == "interposer" => (Some(alloc), "glibc"),
        None => (None, alloc),
    };
    let unknown = || {
        format!(
            "unknown allocator '{alloc}' (glibc, jemalloc, mimalloc, tcmalloc, shim, shim+PEER, \
             interposer, interposer+PEER)"
        )
    };
    let mut libs = Vec::new();
    match front {
        Some("shim") => libs.push(shim.display().to_string()),
        Some("interposer") => libs.push(interposer.display().to_string()),
        Some(_) => return Err(unknown()),
        None => {}
    }
    if let Some(path) = libs::peer(peer).ok_or_else(unknown)?? {
        libs.push(path.display().to_string());
    }
    Ok((!libs.is_empty()).then(|| libs.join(" ")))
}

/// Build the interposition floor (`c/interposer.c`) into `out`, functions aligned as the shim's
/// are (`.cargo/config.toml`), so that code placement is not what the comparison measures.
fn build_interposer(out: &Path) -> Result<PathBuf, String> {
    crate::cc::compile(
        out,
        "interposer",
        include_str!("c/interposer.c"),
        "libinterposer.so",
        &["-shared", "-fPIC", "-falign-functions=64", "-ldl"],
        None,
    )
}

fn expand(s: &str, bench: &Path) -> String {
    s.replace("{bench}", &bench.display().to_string())
}

fn build(prog: &Program, bench: &Path, out: &Path) -> Result<PathBuf, String> {
    let (cc, var) = if prog.cxx { ("c++", "CXX") } else { ("cc", "CC") };
    let cc = std::env::var(var).unwrap_or_else(|_| cc.into());
    let bin = out.join(prog.name);
    let mut cmd = Command::new(&cc);
    cmd.args(["-O2", "-w", "-o"]).arg(&bin);
    for f in prog.flags {
        cmd.arg(expand(f, bench));
    }
    for s in prog.sources {
        let src = bench.join(prog.dir).join(s);
        if !src.exists() {
            return Err(format!(
                "{}: {} not found: is {} a mimalloc-bench checkout?",
                prog.name,
                src.display(),
                bench.display()
            ));
        }
        cmd.arg(src);
    }
    let status = cmd.args(["-lpthread", "-lm"]).status().map_err(|e| format!("{cc}: {e}"))?;
    if !status.success() {
        return Err(format!("building {} failed", prog.name));
    }
    Ok(bin)
}

fn number_after(text: &str, key: &str) -> Option<f64> {
    let at = text.find(key)? + key.len();
    let s: String = text[at..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    s.parse().ok()
}

fn number_before(text: &str, key: &str) -> Option<f64> {
    let at = text.find(key)?;
    let s: String = text[..at]
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    // rptest prints a row of progress dots right before its figure.
    s.trim_start_matches('.').parse().ok()
}

fn filtered(out: &[u8], drop: &[&str]) -> String {
    let text = String::from_utf8_lossy(out);
    text.lines().filter(|l| !drop.iter().any(|d| l.contains(d))).collect::<Vec<_>>().join("\n")
}

pub fn run(cfg: &SuiteConfig) -> Result<Vec<SuiteRun>, String> {
    // Absolute: the programs run in a scratch folder and read their inputs from the checkout.
    let dir = std::fs::canonicalize(&cfg.dir).map_err(|e| format!("{}: {e}", cfg.dir.display()))?;
    let bench = dir.join("bench");
    if !bench.is_dir() {
        return Err(format!(
            "{} has no bench/ folder: point --dir at a mimalloc-bench checkout",
            cfg.dir.display()
        ));
    }
    let shim = libs::shim(&cfg.shim)?;
    let all = programs();
    let chosen: Vec<&Program> = if cfg.programs.is_empty() {
        all.iter().collect()
    } else {
        cfg.programs
            .iter()
            .map(|n| all.iter().find(|p| p.name == n).ok_or_else(|| format!("unknown program '{n}'")))
            .collect::<Result<_, _>>()?
    };
    let out = crate::cc::scratch("suite")?;
    let interposer = out.join("libinterposer.so");
    let preloads =
        cfg.allocators.iter().map(|a| preload_of(a, &shim, &interposer)).collect::<Result<Vec<_>, _>>()?;
    if cfg.allocators.iter().any(|a| a.starts_with("interposer")) {
        eprintln!("[suite] building the interposer");
        build_interposer(&out)?;
    }
    let mut bins = Vec::new();
    for prog in &chosen {
        eprintln!("[suite] building {}", prog.name);
        bins.push(build(prog, &bench, &out)?);
    }
    let mut reference: BTreeMap<&str, String> = BTreeMap::new();
    let mut runs = Vec::new();
    for round in 0..cfg.runs {
        for (prog, bin) in chosen.iter().zip(&bins) {
            for (alloc, preload) in cfg.allocators.iter().zip(&preloads) {
                eprintln!("[suite] run {} of {}: {} under {alloc}", round + 1, cfg.runs, prog.name);
                let mut cmd = Command::new(bin);
                cmd.args(prog.args.iter().map(|a| expand(a, &bench))).current_dir(&out);
                if let Some(pl) = preload {
                    cmd.env("LD_PRELOAD", pl);
                }
                if let Some(input) = prog.stdin {
                    let f =
                        std::fs::File::open(expand(input, &bench)).map_err(|e| format!("{input}: {e}"))?;
                    cmd.stdin(f);
                }
                let raw = run_child(&mut cmd).map_err(|e| format!("{} under {alloc}: {e}", prog.name))?;
                let text = String::from_utf8_lossy(&raw.stdout);
                let seconds = match prog.metric {
                    Metric::Wall => Some(raw.seconds),
                    Metric::After(k) => number_after(&text, k),
                    Metric::Inverse(k, scale) => {
                        number_before(&text, k).filter(|&n| n > 0.0).map(|n| scale / n)
                    }
                }
                .ok_or_else(|| format!("{} under {alloc}: no figure in its output: {text}", prog.name))?;
                let output_matches = prog.check.map(|drop| {
                    let mine = filtered(&raw.stdout, drop);
                    reference.entry(prog.name).or_insert_with(|| mine.clone()) == &mine
                });
                runs.push(SuiteRun {
                    program: prog.name.into(),
                    allocator: alloc.clone(),
                    seconds,
                    wall_seconds: raw.seconds,
                    peak_rss_kib: raw.maxrss_kib,
                    minor_faults: raw.minflt,
                    output_matches,
                });
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    Ok(runs)
}

/// Median time, min, max, median peak RSS (KiB) and median faults of one pair.
fn summary(runs: &[SuiteRun], prog: &str, alloc: &str) -> Option<(f64, f64, f64, f64, f64)> {
    let mine: Vec<&SuiteRun> = runs.iter().filter(|r| r.program == prog && r.allocator == alloc).collect();
    if mine.is_empty() {
        return None;
    }
    let t: Vec<f64> = mine.iter().map(|r| r.seconds).collect();
    let min = t.iter().copied().fold(f64::INFINITY, f64::min);
    let max = t.iter().copied().fold(0.0, f64::max);
    Some((
        median(&t),
        min,
        max,
        median(&mine.iter().map(|r| r.peak_rss_kib as f64).collect::<Vec<_>>()),
        median(&mine.iter().map(|r| r.minor_faults as f64).collect::<Vec<_>>()),
    ))
}

pub fn print(cfg: &SuiteConfig, runs: &[SuiteRun], m: &Machine) {
    let mut progs: Vec<&str> = Vec::new();
    for r in runs {
        if !progs.contains(&r.program.as_str()) {
            progs.push(&r.program);
        }
    }
    println!(
        "# vmarena suite: mimalloc-bench programs from {}, {} interleaved runs, medians",
        cfg.dir.display(),
        cfg.runs
    );
    println!("# {}", m.line());
    println!(
        "\nTime (s; the suite's relative time for larson, rptest, xmalloc-test and glibc-thread), min-max:\n"
    );
    print!("| program |");
    for a in &cfg.allocators {
        print!(" {a} |");
    }
    // Each composition over its allocator alone; each shim composition over the interposer with
    // the same allocator next, when both ran.
    let compositions: Vec<&String> =
        cfg.allocators.iter().filter(|a| a.starts_with("shim") || a.starts_with("interposer")).collect();
    let alone = |c: &str| c.split_once('+').map_or("glibc", |(_, peer)| peer).to_string();
    let floors: Vec<(&String, String)> = cfg
        .allocators
        .iter()
        .filter(|a| a.starts_with("shim"))
        .map(|a| (a, a.replacen("shim", "interposer", 1)))
        .filter(|(_, f)| cfg.allocators.contains(f))
        .collect();
    for c in &compositions {
        print!(" {c} / {} |", alone(c));
    }
    for (c, f) in &floors {
        print!(" {c} / {f} |");
    }
    println!(" shim / best peer |");
    println!("|---|{}", "---|".repeat(cfg.allocators.len() + compositions.len() + floors.len() + 1));
    for prog in &progs {
        print!("| {prog} |");
        for a in &cfg.allocators {
            match summary(runs, prog, a) {
                Some((med, lo, hi, _, _)) => print!(" {med:.3} ({lo:.3}-{hi:.3}) |"),
                None => print!(" - |"),
            }
        }
        let med = |a: &str| summary(runs, prog, a).map(|s| s.0);
        let ratio = |x: &str, y: &str| match (med(x), med(y)) {
            (Some(x), Some(y)) => format!(" {:.3}x |", x / y),
            _ => " - |".into(),
        };
        for c in &compositions {
            print!("{}", ratio(c, &alone(c)));
        }
        for (c, f) in &floors {
            print!("{}", ratio(c, f));
        }
        let best = ["glibc", "jemalloc", "mimalloc", "tcmalloc"]
            .iter()
            .filter_map(|a| med(a))
            .fold(f64::INFINITY, f64::min);
        match med("shim") {
            Some(s) if best.is_finite() => println!(" {:.3}x |", s / best),
            _ => println!(" - |"),
        }
    }
    // The same ratios paired round by round (`crate::paired`): each round ran every allocator
    // of a program one after the other.
    let pairs: Vec<(String, String)> = compositions
        .iter()
        .map(|c| (c.to_string(), alone(c)))
        .chain(floors.iter().map(|(c, f)| (c.to_string(), f.clone())))
        .collect();
    if !pairs.is_empty() && cfg.runs > 1 {
        println!(
            "\nThe same ratios paired round by round: median (range), rounds where the first was faster:\n"
        );
        print!("| program |");
        for (a, b) in &pairs {
            print!(" {a} / {b} |");
        }
        println!("\n|---|{}", "---|".repeat(pairs.len()));
        for prog in &progs {
            print!("| {prog} |");
            for (a, b) in &pairs {
                let times = |x: &str| -> Vec<f64> {
                    runs.iter()
                        .filter(|r| r.program == *prog && r.allocator == x)
                        .map(|r| r.seconds)
                        .collect()
                };
                let (ta, tb) = (times(a), times(b));
                if ta.is_empty() || ta.len() != tb.len() {
                    print!(" - |");
                    continue;
                }
                let p = paired(&ta, &tb);
                print!(" {:.3}x ({:.2}-{:.2}), {} of {} |", p.median, p.min, p.max, p.won, p.rounds);
            }
            println!();
        }
    }
    println!("\nPeak RSS (MiB) / minor faults (thousands), medians:\n");
    print!("| program |");
    for a in &cfg.allocators {
        print!(" {a} |");
    }
    println!("\n|---|{}", "---|".repeat(cfg.allocators.len()));
    for prog in &progs {
        print!("| {prog} |");
        for a in &cfg.allocators {
            match summary(runs, prog, a) {
                Some((_, _, _, rss, flt)) => print!(" {:.0} / {:.0} |", rss / 1024.0, flt / 1000.0),
                None => print!(" - |"),
            }
        }
        println!();
    }
    let checked: Vec<&SuiteRun> = runs.iter().filter(|r| r.output_matches.is_some()).collect();
    let bad: Vec<&&SuiteRun> = checked.iter().filter(|r| r.output_matches == Some(false)).collect();
    println!("\nOutputs compared with glibc's: {} runs, {} different.", checked.len(), bad.len());
    for r in bad {
        println!("- {} under {}: output differs", r.program, r.allocator);
    }
}

pub fn json(cfg: &SuiteConfig, runs: &[SuiteRun], m: &Machine) -> String {
    serde_json::json!({
        "command": "suite",
        "dir": cfg.dir,
        "allocators": cfg.allocators,
        "runs_per_pair": cfg.runs,
        "machine": m,
        "runs": runs,
    })
    .to_string()
}

pub fn main(cfg: &SuiteConfig, m: &Machine) -> Result<bool, String> {
    if cfg.runs == 0 || cfg.allocators.is_empty() {
        return Err("--runs must be positive and --allocators name one".into());
    }
    let runs = run(cfg)?;
    print(cfg, &runs, m);
    if let Some(path) = &cfg.json {
        write_output(path, &json(cfg, &runs, m))?;
    }
    Ok(runs.iter().all(|r| r.output_matches != Some(false)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_read_from_the_programs_output() {
        assert_eq!(
            number_after("Throughput = 6 operations per second, relative time: 16.198s.", "relative time: "),
            Some(16.198)
        );
        assert_eq!(number_after("rtime: 2.844, free/sec: 35.166 M", "rtime: "), Some(2.844));
        assert_eq!(number_before("169978834 iterations", " iterations"), Some(169978834.0));
        assert_eq!(number_before("...4421327 memory ops/CPU second", " memory ops"), Some(4421327.0));
        assert_eq!(number_after("nothing", "rtime: "), None);
    }

    #[test]
    fn allocator_names_become_preloads() {
        let shim = Path::new("/x/libvmarena_preload.so");
        let floor = Path::new("/s/libinterposer.so");
        assert_eq!(preload_of("glibc", shim, floor), Ok(None));
        assert_eq!(preload_of("shim", shim, floor), Ok(Some("/x/libvmarena_preload.so".into())));
        assert_eq!(preload_of("interposer", shim, floor), Ok(Some("/s/libinterposer.so".into())));
        assert!(preload_of("bogus", shim, floor).is_err());
        assert!(preload_of("shim+bogus", shim, floor).is_err());
        assert!(preload_of("other+glibc", shim, floor).is_err());
    }

    /// The interposition floor forwards every call where it would have gone: a C++ program
    /// using every operator form and the C allocation calls gives the same output under it
    /// (glibc next, and each peer next) as alone, and a program whose libraries call the
    /// allocator from their constructors (before the interposer's) starts.
    #[test]
    fn the_interposer_forwards_every_form() {
        let out = crate::cc::scratch("interposer-test").unwrap();
        let lib = build_interposer(&out).unwrap();
        let src = out.join("forms.cpp");
        std::fs::write(
            &src,
            r#"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <malloc.h>
#include <new>
int main() {
    char *p = (char *)malloc(100); strcpy(p, "abc");
    p = (char *)realloc(p, 1 << 20); p = (char *)realloc(p, 10);
    char *z = (char *)calloc(1000, 1000); for (int i = 0; i < 1000000; i++) if (z[i]) return 2;
    void *a = 0; if (posix_memalign(&a, 4096, 100) || (size_t)a % 4096) return 3;
    void *b = aligned_alloc(64, 128), *c = memalign(256, 10), *v = valloc(10);
    if (malloc_usable_size(p) < 10) return 4;
    free(a); free(b); free(c); free(v); free(z);
    int *n = new int[1000]; delete[] n;
    int *o = new (std::nothrow) int; delete o;
    struct alignas(128) A { char x[256]; };
    A *al = new A; if ((size_t)al % 128) return 5; delete al;
    A *arr = new A[3]; delete[] arr;
    void *s = ::operator new(48); ::operator delete(s, 48);
    void *t = ::operator new(64, std::align_val_t(64), std::nothrow);
    ::operator delete(t, std::align_val_t(64), std::nothrow);
    printf("%s %zu\n", p, malloc_usable_size(p) >= 10);
    free(p);
    return 0;
}
"#,
        )
        .unwrap();
        let bin = out.join("forms");
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let ok = Command::new(&cxx).args(["-std=c++17", "-O1", "-o"]).arg(&bin).arg(&src).status().unwrap();
        assert!(ok.success(), "{cxx} failed");
        let alone = Command::new(&bin).output().unwrap();
        assert!(alone.status.success());
        assert_eq!(String::from_utf8_lossy(&alone.stdout), "abc 1\n");
        for peer in ["glibc", "jemalloc", "mimalloc", "tcmalloc"] {
            let Some(Ok(next)) = libs::peer(peer) else { continue };
            let mut preload = lib.display().to_string();
            if let Some(n) = next {
                preload = format!("{preload} {}", n.display());
            }
            let under = Command::new(&bin).env("LD_PRELOAD", &preload).output().unwrap();
            assert!(under.status.success(), "{peer} next: {under:?}");
            assert_eq!(under.stdout, alone.stdout, "{peer} next");
            // `ls` links libraries (libselinux) whose constructors allocate before ours runs.
            let ls = Command::new("ls").arg("/").env("LD_PRELOAD", &preload).output().unwrap();
            assert!(ls.status.success() && !ls.stdout.is_empty(), "ls with {peer} next: {ls:?}");
        }
        let _ = std::fs::remove_dir_all(&out);
    }
}
