//! `vmarena layout`: the functions a process runs, laid out together at the front of the
//! libraries' text, and whether a build got that layout.
//!
//! When a process first touches a page of a mapped file whose pages are cached, the kernel maps
//! the cached pages around it too (`fault_around_bytes`, 64 KiB): a library whose hot functions
//! lie spread over its text has all of it resident after a few calls. The linker's symbol order
//! (`crates/vmarena/hot-text.txt`, passed by that crate's build script; the shim's link gets
//! `libvmarena.so`'s link arguments, so the file holds both libraries' lists) puts the
//! functions a process runs first, so that they share a few such windows.
//!
//! `--write` finds those functions: it runs each library's workloads under gdb
//! (`gdb/first_calls.py`: one temporary breakpoint per function, so each stops the program once,
//! which otherwise runs natively, rseq and helper threads included) and writes the names in the
//! order they first ran, a workload's new names after the earlier ones', the shim's list first.
//! Workloads:
//!
//! | library | workloads |
//! |---|---|
//! | `libvmarena.so` | `user_path` (C ABI): every shape at 1, 2 and 64 threads; random_size at 2 threads for about 2 s (decay purges) |
//! | `libvmarena_preload.so` | `user_path` (malloc under the shim): the same shapes and threads; `give_back` (2 GiB freed, 3 s of purges after); a `python3` run, when one is on `PATH` (small objects, `bytearray` growth by realloc, zlib) |
//!
//! The report (every form) gives, per library: the names in its order file and how many the
//! built library has, whether the linker kept their order, the bytes they take and the 64 KiB
//! windows they span, and the library's resident pages in fresh `user_path` processes
//! (`USER_PATH_RESIDENT`). `--check` exits 1 when a library has under 80% of its order's names
//! (a new compiler or dependency changes their hashes: `--write` again) or when fewer than 95%
//! of them follow each other in the text (the linker ignored the order).

use crate::median::median;
use crate::{cc, libs};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const USER_PATH: &str = include_str!("c/user_path.c");
const GIVE_BACK: &str = include_str!("c/give_back.c");
const FIRST_CALLS: &str = include_str!("gdb/first_calls.py");
/// The share of an order's names a build must have: builds of the same source from different
/// trees differed in a few of the instances they keep apart (29 of 321 names, in a clean clone
/// against the tree that wrote the file).
const FOUND_MIN: f64 = 0.8;
/// The share of them that must follow each other in the text.
const IN_ORDER_MIN: f64 = 0.95;
/// The kernel's default fault-around window.
const WINDOW_BYTES: u64 = 64 << 10;
const SHAPES: [&str; 5] = ["fix_size", "full_fit", "random_size", "mid_size", "long_busy"];
const THREADS: [u32; 3] = [1, 2, 64];
/// A Python program with small objects, a `bytearray` grown by `realloc`, and zlib.
const PYTHON: &str = "import zlib, json\n\
d = {str(i): bytes(i % 5000) for i in range(20000)}\n\
b = bytearray()\n\
for i in range(300):\n    b += bytes(65536)\n\
z = zlib.compress(bytes(b))\n\
s = json.dumps(sorted(d))\n\
del b, d\n\
print(len(z), len(s))\n";

/// Options of `vmarena layout`.
#[derive(clap::Args, Clone, Debug)]
pub struct LayoutConfig {
    /// Run the workloads under gdb and write the libraries' order (crates/vmarena/hot-text.txt)
    /// into the source tree at --source; then rebuild
    /// (cargo build --release) and run `vmarena layout` again to see the new layout.
    #[arg(long)]
    pub write: bool,
    /// Exit 1 when a built library lacks 20% or more of its order's names, or does not have them
    /// in that order.
    #[arg(long, conflicts_with = "write")]
    pub check: bool,
    /// The source tree --write writes into.
    #[arg(long, default_value = ".")]
    pub source: PathBuf,
    /// Fresh processes per resident-pages figure.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Folder with libvmarena.so and libvmarena_preload.so (default: beside this program).
    #[arg(long)]
    pub lib_dir: Option<PathBuf>,
}

/// One of the libraries with an order.
struct Library {
    file: &'static str,
    /// Whether its workloads call malloc under it (the shim) or the C ABI.
    preloaded: bool,
}

/// The shim first: its link gets `libvmarena.so`'s link arguments too (the order file among
/// them, which then wins), so the one file holds both lists, the shim's first, each after a
/// heading line `# == FILE` (a comment to the linker).
const LIBRARIES: [Library; 2] = [
    Library { file: "libvmarena_preload.so", preloaded: true },
    Library { file: "libvmarena.so", preloaded: false },
];

/// The order file, relative to the source tree.
const ORDER_PATH: &str = "crates/vmarena/hot-text.txt";
/// The order this lab was built with (the one the libraries beside it were linked with).
const ORDER: &str = include_str!("../../vmarena/hot-text.txt");

pub fn main(cfg: &LayoutConfig) -> Result<bool, String> {
    let dir = libs::lib_dir(&cfg.lib_dir)?;
    libs::require(&dir, &LIBRARIES.map(|l| l.file))?;
    let scratch = cc::scratch("layout")?;
    let result = run(cfg, &dir, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn run(cfg: &LayoutConfig, dir: &Path, scratch: &Path) -> Result<bool, String> {
    let abi =
        cc::compile(scratch, "user_path", USER_PATH, "user_path_vmarena", &["-DVMARENA_ABI"], Some(dir))?;
    let plain = cc::compile(scratch, "user_path", USER_PATH, "user_path_malloc", &[], None)?;
    if cfg.write {
        let give_back = cc::compile(scratch, "give_back", GIVE_BACK, "give_back", &[], None)?;
        let mut lists = Vec::new();
        for lib in &LIBRARIES {
            let program = if lib.preloaded { &plain } else { &abi };
            let names = first_calls(lib, dir, scratch, program, &give_back)?;
            println!("{}: {} functions ran", lib.file, names.len());
            lists.push((lib.file, names));
        }
        let path = cfg.source.join(ORDER_PATH);
        write_order(&path, &lists)?;
        println!("written to {}", path.display());
        println!("rebuild (cargo build --release) and run `vmarena layout` to see the layout");
        return Ok(true);
    }
    let mut lacking = Vec::new();
    println!("| library | names | in the build | in order | bytes | 64 KiB windows | text | resident (fix_size, 1 thread) | resident (random_size, 2 threads) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for lib in &LIBRARIES {
        let path = dir.join(lib.file);
        let symbols = text_symbols(&path)?;
        let report = Report::of(&order_names(ORDER, None), &order_names(ORDER, Some(lib.file)), &symbols);
        let program = if lib.preloaded { &plain } else { &abi };
        let fix = resident(lib, dir, program, "fix_size", 1, cfg.runs)?;
        let random = resident(lib, dir, program, "random_size", 2, cfg.runs)?;
        println!(
            "| {} | {} | {} | {:.0}% | {} | {} | {} KiB | {} | {} |",
            lib.file,
            report.names,
            report.found,
            report.in_order * 100.0,
            report.bytes,
            report.windows,
            text_kib(&path)?,
            fix,
            random
        );
        if report.names == 0
            || (report.found as f64) < FOUND_MIN * report.names as f64
            || report.in_order < IN_ORDER_MIN
        {
            lacking.push(format!(
                "{}: the build does not have {}'s order (compiler or dependencies changed: `vmarena layout --write`, \
                 then rebuild; or the linker ignored it: build.rs passes it only to a linker that takes \
                 --symbol-ordering-file)",
                lib.file, ORDER_PATH
            ));
        }
    }
    println!("resident: the library's pages mapped at the end of a fresh user_path run, median of {}; text: its executable mapping's size", cfg.runs);
    for l in &lacking {
        println!("{l}");
    }
    Ok(lacking.is_empty() || !cfg.check)
}

/// The names of an order file (lines that are not comments), each once: all of them, or those
/// under the heading of `lib`.
fn order_names<'a>(text: &'a str, lib: Option<&str>) -> Vec<&'a str> {
    let mut under = None;
    let mut seen = HashSet::new();
    let mut names = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(h) = line.strip_prefix("# ==") {
            under = Some(h.trim());
        } else if !line.is_empty()
            && !line.starts_with('#')
            && (lib.is_none() || under == lib)
            && seen.insert(line)
        {
            names.push(line);
        }
    }
    names
}

/// The function symbols of a library: (offset, size, name), in offset order (nm).
fn text_symbols(lib: &Path) -> Result<Vec<(u64, u64, String)>, String> {
    let out = Command::new("nm")
        .args(["--defined-only", "--print-size", "--numeric-sort"])
        .arg(lib)
        .output()
        .map_err(|e| format!("nm: {e} (binutils, which scripts/setup.sh installs)"))?;
    if !out.status.success() {
        return Err(format!("nm {} failed", lib.display()));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut symbols = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (offset, size, kind, name) = match f.as_slice() {
            [o, s, k, n] => (o, *s, k, n),
            [o, k, n] => (o, "0", k, n),
            _ => continue,
        };
        if !["t", "T", "W", "w"].contains(kind) {
            continue;
        }
        if let (Ok(o), Ok(s)) = (u64::from_str_radix(offset, 16), u64::from_str_radix(size, 16)) {
            symbols.push((o, s, name.to_string()));
        }
    }
    Ok(symbols)
}

/// The size of a library's executable segment, in KiB (readelf's program headers).
fn text_kib(lib: &Path) -> Result<u64, String> {
    let out = Command::new("readelf").args(["-lW"]).arg(lib).output().map_err(|e| format!("readelf: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() == Some(&"LOAD") && f.get(6) == Some(&"R") && f.get(7) == Some(&"E") {
            if let Some(Ok(size)) = f.get(5).map(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16)) {
                return Ok(size.div_ceil(1024));
            }
        }
    }
    Err(format!("{}: no executable segment", lib.display()))
}

/// How a build keeps an order.
struct Report {
    names: usize,
    /// Names the build has.
    found: usize,
    /// The share of the order's names in the build placed after the one before them (by offset).
    in_order: f64,
    /// Bytes of the found functions.
    bytes: u64,
    /// 64 KiB windows of the text the found functions touch.
    windows: usize,
}

impl Report {
    /// `order`: the whole file's names (the linker's order); `names`: the library's own.
    fn of(order: &[&str], names: &[&str], symbols: &[(u64, u64, String)]) -> Report {
        let at: HashMap<&str, (u64, u64)> = symbols.iter().map(|(o, s, n)| (n.as_str(), (*o, *s))).collect();
        let placed: Vec<(u64, u64)> = order.iter().filter_map(|n| at.get(n).copied()).collect();
        let ascending = placed.windows(2).filter(|w| w[1].0 >= w[0].0).count();
        let found: Vec<(u64, u64)> = names.iter().filter_map(|n| at.get(n).copied()).collect();
        let windows: HashSet<u64> = found
            .iter()
            .flat_map(|&(o, s)| (o / WINDOW_BYTES)..=((o + s.max(1) - 1) / WINDOW_BYTES))
            .collect();
        Report {
            names: names.len(),
            found: found.len(),
            in_order: if placed.len() < 2 { 0.0 } else { ascending as f64 / (placed.len() - 1) as f64 },
            bytes: found.iter().map(|f| f.1).sum(),
            windows: windows.len(),
        }
    }
}

/// The median resident KiB of `lib` (all its mappings, and the executable one) at the end of
/// fresh user_path runs.
fn resident(
    lib: &Library,
    dir: &Path,
    program: &Path,
    shape: &str,
    threads: u32,
    runs: usize,
) -> Result<String, String> {
    let (mut all, mut text) = (Vec::new(), Vec::new());
    for _ in 0..runs.max(1) {
        let mut cmd = Command::new(program);
        cmd.args([shape, &threads.to_string(), "20000"]).env("USER_PATH_RESIDENT", lib.file);
        if lib.preloaded {
            cmd.env("LD_PRELOAD", dir.join(lib.file));
        }
        let out = cmd.output().map_err(|e| format!("{}: {e}", program.display()))?;
        match (cc::reported(&out, "resident_kib"), cc::reported(&out, "text_kib")) {
            (Some(a), Some(t)) if a >= 0.0 => {
                all.push(a);
                text.push(t);
            }
            _ => {
                return Err(format!(
                    "{} {shape} under {}: no resident pages reported",
                    program.display(),
                    lib.file
                ))
            }
        }
    }
    Ok(format!("{:.0} KiB ({:.0} text)", median(&all), median(&text)))
}

/// A program to run: its path, arguments and environment.
type Run = (PathBuf, Vec<String>, Vec<(String, String)>);

/// The runs of a library's workloads.
fn workloads(lib: &Library, program: &Path, give_back: &Path) -> Vec<Run> {
    let busy = vec![("USER_PATH_BUSY".to_string(), "2000".to_string())];
    let mut runs = Vec::new();
    for shape in SHAPES {
        for t in THREADS {
            let loops = if t == 64 { 500 } else { 5000 };
            runs.push((
                program.to_path_buf(),
                vec![shape.into(), t.to_string(), loops.to_string()],
                busy.clone(),
            ));
        }
    }
    runs.push((program.to_path_buf(), vec!["random_size".into(), "2".into(), "6000000".into()], busy));
    if lib.preloaded {
        runs.push((give_back.to_path_buf(), vec!["2048".into()], Vec::new()));
        if let Some(python) = python_executable() {
            runs.push((python, vec!["-c".into(), PYTHON.into()], Vec::new()));
        }
    }
    runs
}

/// The interpreter `python3` runs (gdb starts programs without a shell, and `python3` may be a
/// script that starts it).
fn python_executable() -> Option<PathBuf> {
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && path.is_file()).then_some(path)
}

/// The functions of `lib` its workloads ran, in the order they first ran.
fn first_calls(
    lib: &Library,
    dir: &Path,
    scratch: &Path,
    program: &Path,
    give_back: &Path,
) -> Result<Vec<String>, String> {
    let path = dir.join(lib.file);
    let script = scratch.join("first_calls.py");
    std::fs::write(&script, FIRST_CALLS).map_err(|e| format!("{}: {e}", script.display()))?;
    let symbols_file = scratch.join(format!("{}.symbols", lib.file));
    let symbols = text_symbols(&path)?;
    let listing: String = symbols.iter().map(|(o, _, n)| format!("{o:x} {n}\n")).collect();
    std::fs::write(&symbols_file, listing).map_err(|e| format!("{}: {e}", symbols_file.display()))?;
    let out_file = scratch.join(format!("{}.ran", lib.file));
    let _ = std::fs::remove_file(&out_file);
    let mut names = Vec::new();
    let mut seen = HashSet::new();
    let runs = workloads(lib, program, give_back);
    for (i, (prog, args, env)) in runs.iter().enumerate() {
        eprintln!(
            "layout: {} {}/{}: {} {}",
            lib.file,
            i + 1,
            runs.len(),
            prog.display(),
            args.join(" ").lines().next().unwrap_or("")
        );
        let mut cmd = Command::new("gdb");
        cmd.args(["-q", "-nx", "-batch", "-x"]).arg(&script).arg("--args").arg(prog).args(args);
        cmd.env("FIRST_CALLS_LIB", lib.file)
            .env("FIRST_CALLS_SYMBOLS", &symbols_file)
            .env("FIRST_CALLS_OUT", &out_file)
            .envs(env.iter().map(|(k, v)| (k, v)));
        if lib.preloaded {
            cmd.env("FIRST_CALLS_PRELOAD", &path);
        }
        let out = cmd.output().map_err(|e| format!("gdb: {e} (install gdb)"))?;
        let ran = std::fs::read_to_string(&out_file).unwrap_or_default();
        let _ = std::fs::remove_file(&out_file);
        if ran.is_empty() {
            return Err(format!(
                "gdb ran no function of {} in {}: {}",
                lib.file,
                prog.display(),
                String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
            ));
        }
        for name in ran.lines() {
            if seen.insert(name.to_string()) {
                names.push(name.to_string());
            }
        }
    }
    Ok(names)
}

fn write_order(path: &Path, lists: &[(&str, Vec<String>)]) -> Result<(), String> {
    let mut text = String::from(
        "# The functions processes run, in the order they first ran: the linker's symbol order\n\
         # (build.rs), so that they lie together at the front of the text; the shim's list first\n\
         # (its link gets this file too), then libvmarena.so's. Written by `vmarena layout --write`;\n\
         # the names carry the compiler's hashes, so a new compiler or a dependency's new version\n\
         # needs the file written again (`vmarena layout --check`).\n",
    );
    for (file, names) in lists {
        text.push_str(&format!("# == {file}\n"));
        for n in names {
            text.push_str(n);
            text.push('\n');
        }
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_counts_the_names_found_their_order_and_their_windows() {
        let symbols = vec![
            (0x1000, 0x100, "a".to_string()),
            (0x1100, 0x100, "b".to_string()),
            (0x20000, 0x10, "c".to_string()),
            (0x2fff0, 0x20, "d".to_string()),
        ];
        let names = ["a", "b", "missing", "d", "c"];
        let r = Report::of(&names, &names, &symbols);
        assert_eq!((r.names, r.found, r.bytes), (5, 4, 0x230));
        // a -> b -> d ascend, d -> c does not.
        assert!((r.in_order - 2.0 / 3.0).abs() < 1e-9);
        // a and b in window 0, c in window 2, d across windows 2 and 3.
        assert_eq!(r.windows, 3);
        let file = "# comment\n# == one\nx\n\n  y \n# == two\ny\nz\n";
        assert_eq!(order_names(file, None), vec!["x", "y", "z"]);
        assert_eq!(order_names(file, Some("two")), vec!["y", "z"]);
    }
}
