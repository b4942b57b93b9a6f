//! `vmarena first-call`: how long the first allocation of a thread takes in a process that
//! already has threads, per contender, over fresh processes.
//!
//! A server's first request is usually served by a worker thread, after the process started
//! its threads: whatever an allocator sets up on its first call (a space, a registration, a
//! per-thread cache) is paid there. The probe (`src/c/first_call.c`) starts an idle thread,
//! then a worker that times its first and second allocation of `--size` bytes, writing one
//! byte per page. Contenders:
//!
//! | contender | call | process |
//! |---|---|---|
//! | `vmarena` | `vmarena_vmalloc` | linked against `libvmarena.so` (the default space is built on this call) |
//! | `shim` | `malloc` | under `libvmarena_preload.so` (vmarena serves it when `--size` is at or above the threshold) |
//! | `glibc`, `jemalloc`, `mimalloc`, `tcmalloc` | `malloc` | glibc alone, or the peer preloaded |
//!
//! Every run is a fresh process; contenders alternate run by run. Reported: the median, the
//! smallest and the largest first-call time, the median of the minor page faults the worker
//! thread took in its first call, and the median second call.

use crate::machine::{write_output, Machine};
use crate::median::median;
use crate::{cc, libs};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = include_str!("c/first_call.c");

/// Options of `vmarena first-call`.
#[derive(clap::Args, Clone, Debug)]
pub struct FirstCallConfig {
    /// Contenders: vmarena, shim, glibc, jemalloc, mimalloc, tcmalloc.
    #[arg(long, value_delimiter = ',', default_value = "vmarena,shim,glibc,jemalloc,mimalloc,tcmalloc")]
    pub contenders: Vec<String>,
    /// Fresh processes per contender.
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    /// Bytes of each allocation.
    #[arg(long, default_value_t = 1 << 20)]
    pub size: u64,
    /// Folder with libvmarena.so and libvmarena_preload.so (default: beside this program).
    #[arg(long)]
    pub lib_dir: Option<PathBuf>,
    /// Write every parameter, the machine and every figure to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One contender's runs.
#[derive(Serialize, Clone, Debug, Default)]
pub struct FirstCall {
    pub contender: String,
    /// First-call times of every run, in ms, in run order.
    pub first_ms: Vec<f64>,
    /// Second-call times, in ms.
    pub second_ms: Vec<f64>,
    /// Minor page faults the calling thread took during its first call (its writes included).
    pub first_faults: Vec<u64>,
}

/// The probe binary and the LD_PRELOAD of a contender.
fn setup(c: &str, libs: &Path, abi: &Path, plain: &Path) -> Result<(PathBuf, Option<PathBuf>), String> {
    Ok(match c {
        "vmarena" => (abi.to_path_buf(), None),
        "shim" => (plain.to_path_buf(), Some(libs.join("libvmarena_preload.so"))),
        peer => {
            let lib = libs::peer(peer).ok_or_else(|| {
                format!("unknown contender '{peer}' (vmarena, shim, glibc, jemalloc, mimalloc, tcmalloc)")
            })??;
            (plain.to_path_buf(), lib)
        }
    })
}

fn parse(out: &str) -> Option<(f64, f64, u64)> {
    let w: Vec<&str> = out.split_whitespace().collect();
    match w[..] {
        ["first_ms", f, "second_ms", s, "first_faults", n] => {
            Some((f.parse().ok()?, s.parse().ok()?, n.parse().ok()?))
        }
        _ => None,
    }
}

pub fn run(cfg: &FirstCallConfig) -> Result<Vec<FirstCall>, String> {
    let libs = libs::lib_dir(&cfg.lib_dir)?;
    libs::require(&libs, &["libvmarena.so", "libvmarena_preload.so"])?;
    let scratch = cc::scratch("first-call")?;
    let abi =
        cc::compile(&scratch, "first_call", SOURCE, "first_call_vmarena", &["-DVMARENA_ABI"], Some(&libs))?;
    let plain = cc::compile(&scratch, "first_call", SOURCE, "first_call_malloc", &[], None)?;
    let setups =
        cfg.contenders.iter().map(|c| setup(c, &libs, &abi, &plain)).collect::<Result<Vec<_>, _>>()?;
    let mut results: Vec<FirstCall> =
        cfg.contenders.iter().map(|c| FirstCall { contender: c.clone(), ..Default::default() }).collect();
    for round in 0..cfg.runs {
        eprintln!("[first-call] round {} of {}", round + 1, cfg.runs);
        for ((bin, preload), r) in setups.iter().zip(results.iter_mut()) {
            let mut cmd = Command::new(bin);
            cmd.arg(cfg.size.to_string());
            if let Some(p) = preload {
                cmd.env("LD_PRELOAD", p);
            }
            let out = cmd.output().map_err(|e| format!("{}: {e}", bin.display()))?;
            let text = String::from_utf8_lossy(&out.stdout);
            let (f, s, n) = parse(&text).filter(|_| out.status.success()).ok_or_else(|| {
                format!("{}: {} {text}{}", r.contender, out.status, String::from_utf8_lossy(&out.stderr))
            })?;
            r.first_ms.push(f);
            r.second_ms.push(s);
            r.first_faults.push(n);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(results)
}

pub fn print(cfg: &FirstCallConfig, results: &[FirstCall], m: &Machine) {
    println!(
        "# vmarena first-call: the first allocation of {} bytes from a second thread, {} fresh processes each",
        cfg.size, cfg.runs
    );
    println!("# {}", m.line());
    println!("| contender | first call, median ms | min | max | first call, median faults | second call, median ms |");
    println!("|---|---|---|---|---|---|");
    for r in results {
        let min = r.first_ms.iter().copied().fold(f64::INFINITY, f64::min);
        let max = r.first_ms.iter().copied().fold(0.0, f64::max);
        let faults: Vec<f64> = r.first_faults.iter().map(|&n| n as f64).collect();
        println!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.0} | {:.4} |",
            r.contender,
            median(&r.first_ms),
            min,
            max,
            median(&faults),
            median(&r.second_ms)
        );
    }
}

pub fn json(cfg: &FirstCallConfig, results: &[FirstCall], m: &Machine) -> String {
    serde_json::json!({
        "command": "first-call",
        "size": cfg.size,
        "runs": cfg.runs,
        "machine": m,
        "results": results,
    })
    .to_string()
}

pub fn main(cfg: &FirstCallConfig, m: &Machine) -> Result<(), String> {
    if cfg.runs == 0 || cfg.size == 0 || cfg.contenders.is_empty() {
        return Err("--runs and --size must be positive and --contenders name one".into());
    }
    let results = run(cfg)?;
    print(cfg, &results, m);
    if let Some(path) = &cfg.json {
        write_output(path, &json(cfg, &results, m))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probes_line_is_parsed() {
        assert_eq!(parse("first_ms 0.3 second_ms 0.01 first_faults 45\n"), Some((0.3, 0.01, 45)));
        assert_eq!(parse("first_ms 0.3 second_ms 0.01\n"), None);
        assert_eq!(parse("garbage"), None);
    }
}
