//! `vmarena fuzz`: random sequences of C ABI calls, valid and invalid, against a shadow model,
//! for as long as asked; under the shim too, with the `malloc` family mixed in.
//!
//! The program is `crates/preload/tests/c/fuzz.c` (the test suite runs it for a few seconds;
//! its header says what it calls and checks). The lab compiles it ([`crate::cc`]) against the `libvmarena.so` beside this binary and runs
//! it once per mode (C ABI alone, or under `libvmarena_preload.so`) and thread count, each for
//! `--seconds`. Every run prints its seed; a mismatch prints the first ones with it and makes
//! the command fail.

use crate::machine::{write_output, Machine};
use crate::{cc, libs};
use serde::Serialize;
use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = include_str!("../../preload/tests/c/fuzz.c");

/// Options of `vmarena fuzz`.
#[derive(clap::Args, Clone, Debug)]
pub struct FuzzConfig {
    /// Seconds of each run.
    #[arg(long, default_value_t = 60.0)]
    pub seconds: f64,
    /// Thread counts; one run each per mode.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<u32>,
    /// Modes: c-abi (libvmarena.so), shim (the same program under libvmarena_preload.so, with
    /// malloc, calloc, realloc, posix_memalign and free mixed in).
    #[arg(long, value_delimiter = ',', default_value = "c-abi,shim")]
    pub modes: Vec<String>,
    /// Seed of the first run (each later run adds one); default: from the clock.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Folder with libvmarena.so and libvmarena_preload.so (default: beside this program).
    #[arg(long)]
    pub lib_dir: Option<PathBuf>,
    /// Write every parameter, the machine and every figure to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One run's summary line.
#[derive(Serialize, Clone, Debug, Default)]
pub struct FuzzRun {
    pub mode: String,
    pub threads: u32,
    pub seed: u64,
    pub seconds: f64,
    pub calls: u64,
    pub bad_inputs: u64,
    pub checks: u64,
    pub mismatches: u64,
    /// `(operation, calls, bad inputs)` as the program counted them.
    pub ops: Vec<(String, u64, u64)>,
}

fn field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// Parse the program's output (see fuzz.c: "op NAME calls N bad M" lines, then the summary).
pub fn parse(stdout: &str) -> Option<FuzzRun> {
    let mut run = FuzzRun::default();
    for l in stdout.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if let ["op", name, "calls", calls, "bad", bad] = w[..] {
            run.ops.push((name.to_string(), calls.parse().ok()?, bad.parse().ok()?));
        } else if l.starts_with("fuzz ") {
            run.seed = field(l, "seed")?;
            run.calls = field(l, "calls")?;
            run.bad_inputs = field(l, "bad")?;
            run.checks = field(l, "checks")?;
            run.mismatches = field(l, "mismatches")?;
            return Some(run);
        }
    }
    None
}

pub fn run(cfg: &FuzzConfig) -> Result<Vec<FuzzRun>, String> {
    let libs = libs::lib_dir(&cfg.lib_dir)?;
    libs::require(&libs, &["libvmarena.so", "libvmarena_preload.so"])?;
    let scratch = cc::scratch("fuzz")?;
    let bin = cc::compile(&scratch, "fuzz", SOURCE, "fuzz", &["-O1"], Some(&libs))?;
    let mut seed = cfg.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(1)
    });
    let mut runs = Vec::new();
    for mode in &cfg.modes {
        for &threads in &cfg.threads {
            eprintln!("[fuzz] {mode}, {threads} thread(s), seed {seed}: {} s", cfg.seconds);
            let mut cmd = Command::new(&bin);
            cmd.args([cfg.seconds.to_string(), threads.to_string(), seed.to_string()]);
            if mode == "shim" {
                cmd.arg("shim").env("LD_PRELOAD", libs.join("libvmarena_preload.so"));
            }
            let out = cmd.output().map_err(|e| format!("{}: {e}", bin.display()))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let mut r = parse(&stdout).ok_or_else(|| {
                format!(
                    "{mode}, {threads} thread(s), seed {seed}: no summary ({}):\n{stdout}{stderr}",
                    out.status
                )
            })?;
            if r.mismatches > 0 {
                eprint!("{stderr}");
            }
            eprintln!(
                "[fuzz]   {} calls, {} bad inputs, {} checks, {} mismatches",
                r.calls, r.bad_inputs, r.checks, r.mismatches
            );
            r.mode = mode.clone();
            r.threads = threads;
            r.seconds = cfg.seconds;
            runs.push(r);
            seed += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(runs)
}

pub fn print(cfg: &FuzzConfig, runs: &[FuzzRun], m: &Machine) {
    println!("# vmarena fuzz: {} s per run", cfg.seconds);
    println!("# {}", m.line());
    println!("| mode | threads | seed | calls | bad inputs | checks | mismatches |");
    println!("|---|---|---|---|---|---|---|");
    for r in runs {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.mode, r.threads, r.seed, r.calls, r.bad_inputs, r.checks, r.mismatches
        );
    }
}

pub fn json(cfg: &FuzzConfig, runs: &[FuzzRun], m: &Machine) -> String {
    serde_json::json!({
        "command": "fuzz",
        "seconds": cfg.seconds,
        "machine": m,
        "runs": runs,
    })
    .to_string()
}

pub fn main(cfg: &FuzzConfig, m: &Machine) -> Result<bool, String> {
    if cfg.seconds <= 0.0 || cfg.threads.is_empty() || cfg.threads.iter().any(|&t| t == 0 || t > 64) {
        return Err("--seconds must be positive and --threads 1 to 64".into());
    }
    if let Some(bad) = cfg.modes.iter().find(|m| *m != "c-abi" && *m != "shim") {
        return Err(format!("unknown mode '{bad}' (c-abi, shim)"));
    }
    let runs = run(cfg)?;
    print(cfg, &runs, m);
    if let Some(path) = &cfg.json {
        write_output(path, &json(cfg, &runs, m))?;
    }
    Ok(runs.iter().all(|r| r.mismatches == 0))
}
