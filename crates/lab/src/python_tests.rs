//! `vmarena python-tests`: CPython's own regression tests (`python3 -m test`, a memory-heavy
//! selection) without the shim and under it, at the default threshold and at the smallest one
//! (1 byte: every allocation of the interpreter goes to vmarena), with the outcome of every
//! test case compared.
//!
//! Each configuration runs the whole selection once, verbose (`-v`), so that every test case
//! prints its outcome; `-M` lets the big-memory tests that fit run. A case passes when it ends
//! `ok`, `skipped` or `expected failure`, and fails otherwise (`FAIL`, `ERROR`, `unexpected
//! success`, or missing from the output because its process died). A difference is a case whose
//! outcome under the shim is not its outcome without it; any difference makes the command fail.
//! Tests that fail without the shim on this machine (a root user, a missing locale) are listed
//! as such and compared like the others.

use crate::machine::{write_output, Machine};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The default selection: container, buffer, compression, serialisation and I/O tests, whose
/// objects span the shim's threshold; and the process tests (`test_subprocess`, `test_os`,
/// `test_posix`, `test_signal`), which list and pass descriptors, fork, exec and send signals,
/// where a library inside the process shows itself.
const MEMORY_HEAVY: &str = "test_bytes,test_bigmem,test_array,test_list,test_dict,test_set,test_deque,\
test_memoryview,test_mmap,test_zlib,test_lzma,test_bz2,test_hashlib,test_pickle,test_struct,test_re,\
test_collections,test_gc,test_json,test_tuple,test_io,test_long,test_zipfile,test_tarfile,test_bufio,\
test_sqlite3,test_marshal,test_itertools,test_decimal,test_subprocess,test_os,test_posix,test_signal";

/// Options of `vmarena python-tests`.
#[derive(clap::Args, Clone, Debug)]
pub struct PythonTestsConfig {
    /// Test modules of CPython's suite (`python3 -m test --list-tests` lists them).
    #[arg(long, value_delimiter = ',', default_value = MEMORY_HEAVY)]
    pub tests: Vec<String>,
    /// Shim thresholds to run at, in bytes ("default": the shim's own); a run without the shim
    /// always comes first.
    #[arg(long, value_delimiter = ',', default_value = "default,1")]
    pub thresholds: Vec<String>,
    /// The interpreter.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Memory limit for the big-memory tests (regrtest's -M).
    #[arg(long, default_value = "2G")]
    pub memlimit: String,
    /// Worker processes (regrtest's -j).
    #[arg(long, default_value_t = 2)]
    pub jobs: u32,
    /// The shim (default: libvmarena_preload.so beside this program).
    #[arg(long)]
    pub shim: Option<PathBuf>,
    /// Write every parameter, the machine and every figure to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One configuration's run.
#[derive(Serialize, Clone, Debug, Default)]
pub struct SuiteRun {
    /// "no shim", or the shim's threshold.
    pub config: String,
    pub seconds: f64,
    /// Test case (`module.Class.method`) -> outcome as regrtest printed it.
    pub cases: BTreeMap<String, String>,
    /// regrtest's last line ("Result: SUCCESS", ...).
    pub result: String,
    /// Cases whose pass/fail differs from the run without the shim, with both outcomes.
    pub differences: Vec<(String, String, String)>,
    /// Allocations the shim served in a probe run of the interpreter with the same settings
    /// (`bytearray(1 MiB)`, statistics on): the proof that the shim was loaded and serving.
    pub probe_vm_allocs: Option<u64>,
}

impl SuiteRun {
    fn count(&self, f: impl Fn(&str) -> bool) -> usize {
        self.cases.values().filter(|o| f(o)).count()
    }
}

fn passes(outcome: &str) -> bool {
    outcome == "ok" || outcome.starts_with("skipped") || outcome == "expected failure"
}

const OUTCOMES: &[&str] = &["ok", "FAIL", "ERROR", "skipped", "expected failure", "unexpected success"];

/// The outcome a verbose line ends with, if any.
fn outcome_of(text: &str) -> Option<String> {
    let t = text.trim();
    OUTCOMES
        .iter()
        .find(|o| t == **o || (**o == "skipped" && t.starts_with("skipped")))
        .map(|o| o.to_string())
}

/// Every "name (module.Class.name) ... outcome" of a verbose run; an outcome printed on a later
/// line (the test wrote output of its own) is taken from the first line that is only an outcome.
pub fn parse_cases(out: &str) -> BTreeMap<String, String> {
    let mut cases = BTreeMap::new();
    let mut pending: Option<String> = None;
    for line in out.lines() {
        if let Some((head, tail)) = line.split_once(" ... ") {
            if let (Some(open), true) = (head.rfind(" ("), head.ends_with(')')) {
                let id = head[open + 2..head.len() - 1].to_string();
                match outcome_of(tail) {
                    Some(o) => {
                        cases.insert(id, o);
                        pending = None;
                    }
                    None => pending = Some(id),
                }
                continue;
            }
        }
        if let Some(id) = &pending {
            if let Some(o) = outcome_of(line) {
                cases.insert(id.clone(), o);
                pending = None;
            }
        }
    }
    cases
}

/// The interpreter under the environment of `suite`, with the shim's statistics on, allocating
/// one large buffer: how many allocations the shim sent to vmarena.
fn probe(cfg: &PythonTestsConfig, suite: &Command) -> Result<u64, String> {
    let mut cmd = Command::new(&cfg.python);
    cmd.args(["-c", "b = bytearray(1 << 20); b[-1] = 1"]).env("VMARENA_PRELOAD_STATS", "1");
    for (k, v) in suite.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let out = cmd.output().map_err(|e| format!("{}: {e}", cfg.python))?;
    let err = String::from_utf8_lossy(&out.stderr);
    // One summary per process (a wrapper script of the interpreter starts several).
    let served: u64 = err
        .lines()
        .filter_map(|l| l.strip_prefix("vmarena preload: vm_allocs"))
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum();
    if served == 0 {
        return Err(format!("the shim served nothing in a probe run of {}: {err}", cfg.python));
    }
    Ok(served)
}

fn run_one(cfg: &PythonTestsConfig, shim: Option<(&Path, &str)>) -> Result<SuiteRun, String> {
    let mut cmd = Command::new(&cfg.python);
    cmd.args(["-m", "test", "-v", "-j", &cfg.jobs.to_string(), "-M", &cfg.memlimit]).args(&cfg.tests);
    let config = match shim {
        None => "no shim".to_string(),
        Some((path, threshold)) => {
            cmd.env("LD_PRELOAD", path);
            if threshold != "default" {
                cmd.env("VMARENA_PRELOAD_THRESHOLD", threshold);
            }
            format!("shim, threshold {threshold}")
        }
    };
    let probe_vm_allocs = match shim {
        None => None,
        Some(_) => Some(probe(cfg, &cmd)?),
    };
    eprintln!("[python-tests] {config}: {} test modules", cfg.tests.len());
    let t0 = Instant::now();
    let out = cmd.output().map_err(|e| format!("{}: {e}", cfg.python))?;
    let seconds = t0.elapsed().as_secs_f64();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if text.contains("No module named test") || text.contains("No module named 'test.") {
        return Err(format!(
            "{} has no regression tests (Debian: apt-get install libpython3-testsuite)",
            cfg.python
        ));
    }
    let cases = parse_cases(&text);
    let result =
        text.lines().rev().find(|l| l.starts_with("Result:")).unwrap_or("Result: none printed").to_string();
    eprintln!(
        "[python-tests]   {} cases, {} failing, {seconds:.1} s, {result}",
        cases.len(),
        cases.values().filter(|o| !passes(o)).count()
    );
    Ok(SuiteRun { config, seconds, cases, result, differences: Vec::new(), probe_vm_allocs })
}

/// Fill each shim run's differences against the first run (no shim).
pub fn compare(runs: &mut [SuiteRun]) {
    let Some((base, rest)) = runs.split_first_mut() else { return };
    for r in rest {
        let mut d = Vec::new();
        for (id, o) in &base.cases {
            let got = r.cases.get(id).map(String::as_str).unwrap_or("missing");
            if passes(o) != passes(got) {
                d.push((id.clone(), o.clone(), got.to_string()));
            }
        }
        for (id, o) in &r.cases {
            if !base.cases.contains_key(id) && !passes(o) {
                d.push((id.clone(), "missing".into(), o.clone()));
            }
        }
        r.differences = d;
    }
}

pub fn print(cfg: &PythonTestsConfig, runs: &[SuiteRun], m: &Machine) {
    println!(
        "# vmarena python-tests: {} (-M {}, -j {}), {} modules",
        cfg.python,
        cfg.memlimit,
        cfg.jobs,
        cfg.tests.len()
    );
    println!("# {}", m.line());
    println!("| configuration | cases | ok | skipped | failed | differences from no shim | probe: allocations served | seconds |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in runs {
        let diffs = if r.config == "no shim" { "-".to_string() } else { r.differences.len().to_string() };
        let probe = r.probe_vm_allocs.map_or("-".to_string(), |n| n.to_string());
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.1} |",
            r.config,
            r.cases.len(),
            r.count(|o| passes(o) && !o.starts_with("skipped")),
            r.count(|o| o.starts_with("skipped")),
            r.count(|o| !passes(o)),
            diffs,
            probe,
            r.seconds
        );
    }
    if let Some(base) = runs.first() {
        let failing: Vec<&String> = base.cases.iter().filter(|(_, o)| !passes(o)).map(|(id, _)| id).collect();
        if !failing.is_empty() {
            println!("\nFailing without the shim (compared like the others):");
            for id in failing {
                println!("- {id}: {}", base.cases[id]);
            }
        }
    }
    for r in runs.iter().filter(|r| !r.differences.is_empty()) {
        println!("\nDifferences, {}:", r.config);
        for (id, before, after) in &r.differences {
            println!("- {id}: {before} without the shim, {after} with it");
        }
    }
}

pub fn json(cfg: &PythonTestsConfig, runs: &[SuiteRun], m: &Machine) -> String {
    serde_json::json!({
        "command": "python-tests",
        "python": cfg.python,
        "tests": cfg.tests,
        "memlimit": cfg.memlimit,
        "jobs": cfg.jobs,
        "machine": m,
        "runs": runs,
    })
    .to_string()
}

pub fn main(cfg: &PythonTestsConfig, m: &Machine) -> Result<bool, String> {
    if cfg.tests.is_empty() || cfg.jobs == 0 {
        return Err("--tests must name at least one module and --jobs be positive".into());
    }
    for t in &cfg.thresholds {
        if t != "default" && t.parse::<u64>().map_or(true, |v| v == 0) {
            return Err(format!("threshold '{t}': a positive number of bytes or \"default\""));
        }
    }
    let shim = crate::libs::shim(&cfg.shim)?;
    // The interpreter itself, not a wrapper script that finds it (pyenv's shims, say).
    let mut cfg = cfg.clone();
    let exe = Command::new(&cfg.python)
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .map_err(|e| format!("{}: {e}", cfg.python))?;
    let exe = String::from_utf8_lossy(&exe.stdout).trim().to_string();
    if !exe.is_empty() {
        cfg.python = exe;
    }
    let cfg = &cfg;
    let mut runs = vec![run_one(cfg, None)?];
    if runs[0].cases.is_empty() {
        return Err(format!(
            "no test case outcome in the output of {} -m test: {}",
            cfg.python, runs[0].result
        ));
    }
    for t in &cfg.thresholds {
        runs.push(run_one(cfg, Some((&shim, t)))?);
    }
    compare(&mut runs);
    print(cfg, &runs, m);
    if let Some(path) = &cfg.json {
        write_output(path, &json(cfg, &runs, m))?;
    }
    Ok(runs.iter().all(|r| r.differences.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbose_lines_give_each_case_its_outcome() {
        let out = "test_a (test.test_x.T.test_a) ... ok\n\
                   test_b (test.test_x.T.test_b) ... FAIL\n\
                   test_c (test.test_x.T.test_c) ... some output\nmore\nERROR\n\
                   test_d (test.test_x.T.test_d) ... skipped 'needs root'\n\
                   test_e (test.test_x.T.test_e) ... expected failure\n";
        let c = parse_cases(out);
        assert_eq!(c.len(), 5);
        assert_eq!(c["test.test_x.T.test_a"], "ok");
        assert_eq!(c["test.test_x.T.test_b"], "FAIL");
        assert_eq!(c["test.test_x.T.test_c"], "ERROR");
        assert_eq!(c["test.test_x.T.test_d"], "skipped");
        assert!(passes(&c["test.test_x.T.test_e"]));
    }

    #[test]
    fn a_case_that_fails_or_vanishes_under_the_shim_is_a_difference() {
        let base = SuiteRun {
            config: "no shim".into(),
            cases: [("a", "ok"), ("b", "ok"), ("c", "FAIL"), ("d", "ok")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
            ..Default::default()
        };
        let shim = SuiteRun {
            config: "shim".into(),
            cases: [("a", "ok"), ("b", "ERROR"), ("c", "FAIL"), ("e", "FAIL")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
            ..Default::default()
        };
        let mut runs = vec![base, shim];
        compare(&mut runs);
        let ids: Vec<&str> = runs[1].differences.iter().map(|d| d.0.as_str()).collect();
        assert_eq!(ids, ["b", "d", "e"]);
    }
}
