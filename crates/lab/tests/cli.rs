//! Lab CLI tests (tier 1): parsing, the report format, the JSON output, the tables. The runs
//! here are tiny; the real benchmarks are run by hand (see BENCHMARKS.md / DESIGN.md).

use std::process::Command;

fn vmarena(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vmarena")).args(args).output().unwrap()
}

/// The folder of the lab binary, when this build put `libvmarena.so` beside it (a test that
/// needs the library says it skipped otherwise).
fn lib_dir() -> Option<std::path::PathBuf> {
    let libs = std::path::Path::new(env!("CARGO_BIN_EXE_vmarena")).parent()?.to_path_buf();
    if libs.join("libvmarena.so").exists() {
        Some(libs)
    } else {
        eprintln!("skipped: no libvmarena.so beside the lab binary in this build");
        None
    }
}

#[test]
fn pair_runs_every_strategy_and_reports_ratios() {
    // A folder that does not exist yet, as `results/` in a fresh clone.
    let dir = std::env::temp_dir().join(format!("vmarena-pair-{}", std::process::id()));
    let json = dir.join("new/pair.json");
    let out = vmarena(&[
        "pair",
        "--pairs",
        "2000",
        "--rounds",
        "1",
        "--threads",
        "1,2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for s in ["global", "split", "nodes"] {
        for t in [1, 2] {
            let row = stdout.lines().find(|l| {
                let f: Vec<_> = l.split_whitespace().collect();
                f.len() > 3 && f[0] == s && f[1] == t.to_string()
            });
            let row = row.unwrap_or_else(|| panic!("no row for {s} at {t} threads:\n{stdout}"));
            let ns: f64 = row.split_whitespace().nth(2).unwrap().parse().unwrap();
            assert!(ns > 0.0, "{row}");
        }
    }
    assert!(stdout.contains("throughput at 2 thread(s): nodes/global = "), "{stdout}");
    assert!(stdout.contains("# machine: "), "{stdout}");
    let j = std::fs::read_to_string(&json).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let v: serde_json::Value = serde_json::from_str(&j).expect("valid JSON");
    assert_eq!(v["benchmark"], "pair");
    assert_eq!(v["results"].as_array().unwrap().len(), 6, "3 strategies x 2 thread counts");
    assert!(v["machine"]["cpu_model"].is_string() && v["machine"]["cores"].as_u64().unwrap() >= 1);
    for r in v["results"].as_array().unwrap() {
        assert!(r["ns_per_pair"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["rounds_ns_per_pair"].as_array().unwrap().len(), 1);
        assert!(!r["locks"].as_array().unwrap().is_empty());
    }
}

#[test]
fn bad_arguments_are_refused_with_a_clear_message() {
    let out = vmarena(&["pair", "--strategy", "bogus"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown strategy 'bogus'"));
    let out = vmarena(&["pair", "--threads", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be positive"));
    let out = vmarena(&["fuzz", "--threads", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--threads 1 to 64"));
    let out = vmarena(&["fuzz", "--modes", "kernel"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown mode 'kernel'"));
    let out = vmarena(&["first-call", "--contenders", "bogus", "--lib-dir", env!("CARGO_MANIFEST_DIR")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown contender 'bogus'") || err.contains("not found"), "{err}");
    let out = vmarena(&["first-call", "--runs", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--runs and --size must be positive"));
    let out = vmarena(&["user-path", "--workloads", "bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown workload 'bogus'"));
    let out = vmarena(&["python-tests", "--thresholds", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("threshold '0'"));
}

#[test]
fn options_table_lists_every_environment_variable() {
    let out = vmarena(&["options"]);
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    for env in ["VMARENA_SPACE_BYTES", "VMARENA_GUARD_PAGES", "VMARENA_STRATEGY", "VMARENA_LAZY_MAX_PAGES"] {
        assert!(s.contains(env), "{env} missing:\n{s}");
    }
    assert!(s.contains("| `pool_hits` | allocs |"), "{s}");
}

/// `docs/options.md` holds the whole output of `vmarena options`, as printed: the tables there
/// are the declarations' (fails on any stale row, and on a table the command prints and the page
/// lacks).
#[test]
fn the_options_page_matches_the_code() {
    let out = vmarena(&["options"]);
    let tables = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(tables.contains("### Space options") && tables.contains("### Arena statistics"), "{tables}");
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/options.md")).unwrap();
    assert!(page.contains(&tables), "docs/options.md is stale: paste `vmarena options` over its tables");
}

#[test]
fn test_vmalloc_runs_each_contender_in_a_child_and_reports_everything() {
    let json = std::env::temp_dir().join(format!("vmarena-tv-{}.json", std::process::id()));
    let out = vmarena(&[
        "test-vmalloc",
        "run_test_mask=9",
        "nr_threads=2",
        "test_loop_count=200",
        "--strategy",
        "nodes",
        "--peer",
        "glibc,mmap",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for who in ["## vmarena-nodes", "## glibc", "## mmap"] {
        assert!(stdout.contains(who), "{who} missing:\n{stdout}");
    }
    // Two workers x two cases x three contenders, in the kernel's format.
    let summaries =
        stdout.lines().filter(|l| l.starts_with("Summary: ") && l.contains(" passed: 1 failed: 0 ")).count();
    assert_eq!(summaries, 12, "{stdout}");
    assert_eq!(stdout.matches("All test took worker1=").count(), 3);
    assert!(stdout.contains("lock wait share: "), "vmarena's lock figures");
    assert!(stdout.contains("ns per loop (ratio to ref)") && stdout.contains("peak MiB"), "{stdout}");
    assert!(stdout.contains("TLB IPIs"), "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).ok();
    assert_eq!(v["params"]["run_test_mask"], 9);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    for r in results {
        assert!(r["proc"]["peak_rss"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["workers"].as_array().unwrap().len(), 2);
        // Counted where the kernel has the row (x86), absent elsewhere, never a made-up zero.
        let has_row = vmarena_platform::process::tlb_shootdowns().is_some();
        assert_eq!(r["proc"]["tlb_shootdowns"].is_u64(), has_row, "{r}");
    }
    assert_eq!(results[0]["proc"]["managed_idle"], 0, "vmarena released its areas after the idle period");
    // A bad parameter is refused with the kernel script's kind of message.
    let bad = vmarena(&["test-vmalloc", "nr_thread=2"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown parameter 'nr_thread'"));
}

#[test]
fn test_vmalloc_sweep_draws_one_line_per_contender() {
    let svg = std::env::temp_dir().join(format!("vmarena-tv-{}.svg", std::process::id()));
    let out = vmarena(&[
        "test-vmalloc",
        "run_test_mask=1",
        "test_loop_count=200",
        "--sweep",
        "1,2",
        "--strategy",
        "nodes",
        "--peer",
        "mmap",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("# nr_threads=1") && stdout.contains("# nr_threads=2"), "{stdout}");
    let row = stdout.lines().find(|l| l.starts_with("vmarena-nodes ") && l.split_whitespace().count() == 3);
    let row = row.unwrap_or_else(|| panic!("no throughput row:\n{stdout}"));
    assert!(row.split_whitespace().skip(1).all(|v| v.parse::<f64>().unwrap() > 0.0), "{row}");
    let text = std::fs::read_to_string(&svg).unwrap();
    std::fs::remove_file(&svg).ok();
    assert!(text.starts_with("<svg"));
    assert_eq!(text.matches("<polyline").count(), 2);
    assert!(text.contains(">vmarena-nodes<") && text.contains(">mmap<"));
}

#[test]
fn lock_cost_reports_every_primitive() {
    let out = vmarena(&["lock-cost", "--iterations", "10000"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for what in ["StatLock lock+unlock", "AtomicU64::fetch_add", "CPU id (rseq)", "CPU id (sched_getcpu)"] {
        let line =
            stdout.lines().find(|l| l.starts_with(what)).unwrap_or_else(|| panic!("{what}:\n{stdout}"));
        let ns: f64 = line.split_whitespace().rev().nth(1).unwrap().parse().unwrap();
        assert!(ns > 0.0 && ns < 1e6, "{line}");
    }
}

#[test]
fn fixed_compares_pools_with_peers_and_writes_json() {
    let dir = std::env::temp_dir().join(format!("vmarena-fixed-{}", std::process::id()));
    let json = dir.join("fixed.json");
    let out = vmarena(&[
        "fixed",
        "--workers",
        "1,4",
        "--cycles",
        "4000",
        "--contenders",
        "fixed,fixed-dontneed,locked-list,glibc",
        "--slots",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("## FixedPool per-CPU hit rate by workers"), "{s}");
    assert!(s.contains("| fixed | ") && s.contains("| locked-list | ") && s.contains("| glibc | "), "{s}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8);
    for r in runs {
        assert!(r["cycles"].as_u64().unwrap() >= 4000 && r["wall_ns"].as_u64().unwrap() > 0, "{r}");
    }
    let get = |name: &str, workers: u64, key: &str| {
        runs.iter().find(|r| r["contender"] == name && r["workers"] == workers).unwrap()[key]
            .as_u64()
            .unwrap()
    };
    let cpus = v["machine"]["cores"].as_u64().unwrap();
    // Every get of a pool is a hit, a pop or a steal; with 2 slots and 4 x CPUs workers that
    // sleep holding them, getters must have slept.
    let gets = |w| get("fixed", w, "cache_hits") + get("fixed", w, "list_pops") + get("fixed", w, "steals");
    assert_eq!(gets(cpus), get("fixed", cpus, "cycles"));
    assert!(get("fixed", 4 * cpus, "sleeps") > 0);
    assert_eq!(get("fixed-dontneed", cpus, "releases"), get("fixed-dontneed", cpus, "cycles"));
    assert_eq!(get("fixed", cpus, "releases"), 0, "no low-memory event, no release");
    let out = vmarena(&["fixed", "--contenders", "bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown contender 'bogus'"));
    std::fs::remove_dir_all(dir).ok();
}

/// A reader that went away (`vmarena options | head -1`) ends the program with SIGPIPE, as
/// other tools, not with a panic on the broken pipe.
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::ExitStatusExt;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just opened and are owned here only.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_vmarena")).arg("options").stdout(writer).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The rseq model of per-CPU magazines builds and runs beside vmarena, at 1 and 2 threads (the
/// program exits on a failed allocation or a refused free, so a model that refused a free of
/// an area it handed out fails the command); an unknown contender is refused by name.
#[test]
fn user_path_runs_the_rseq_model_beside_vmarena() {
    let Some(libs) = lib_dir() else { return };
    let out = vmarena(&[
        "user-path",
        "--workloads",
        "fix_size,full_fit,long_busy",
        "--threads",
        "1,2",
        "--loops",
        "5000",
        "--runs",
        "1",
        "--contenders",
        "vmarena,rseq-model,glibc",
        "--lib-dir",
        libs.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("| workload | threads | vmarena | rseq-model | glibc |"), "{text}");
    for row in ["| full_fit | 2 |", "| long_busy | 2 |"] {
        let line =
            text.lines().find(|l| l.starts_with(row)).unwrap_or_else(|| panic!("{row} missing: {text}"));
        let ns: Vec<f64> = line.split('|').take(6).filter_map(|c| c.trim().parse().ok()).collect();
        assert!(ns.len() == 4 && ns[1..].iter().all(|&x| x > 0.0), "{line}");
    }
    // The model is paired against the peers too, in a table of its own.
    let paired = text.split("Paired against the best of glibc").nth(1).expect("a paired table");
    let row = paired.lines().find(|l| l.starts_with("| full_fit | 1 |")).expect("a paired row");
    assert!(row.contains("x (") && row.contains("of 1 vs glibc"), "{row}");
    let out = vmarena(&["user-path", "--contenders", "rseq-modle"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown contender 'rseq-modle'"));
}

/// The per-CPU counter program runs each mode, and each run's sum is checked exact by the
/// program (a per-CPU copy that lost or doubled increments would fail the command).
#[test]
fn percpu_counter_runs_every_mode_with_exact_sums() {
    let Some(libs) = lib_dir() else { return };
    let out = vmarena(&[
        "percpu-counter",
        "--runs",
        "1",
        "--threads",
        "1,3",
        "--increments",
        "300000",
        "--lib-dir",
        libs.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("| threads | shared | rseq | atomic | rseq / shared | atomic / shared |"),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("| 3 |")), "{text}");
    let out = vmarena(&["percpu-counter", "--modes", "lock"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown mode 'lock'"));
}

/// A `vmarena:NAME=VALUE` contender runs the C ABI program with that option set: the table
/// gets its column, and the memory and start-up tables their figures; a space too small for
/// one area fails the run with the program's own message (at main's first call, before the
/// threads), so the variable reached the process.
#[test]
fn user_path_variants_run_with_their_options() {
    let Some(libs) = lib_dir() else { return };
    let lib_dir = libs.to_str().unwrap();
    let base = ["user-path", "--workloads", "fix_size", "--threads", "1", "--loops", "2000", "--runs", "1"];
    let mut args = base.to_vec();
    args.extend(["--lib-dir", lib_dir, "--contenders", "vmarena,vmarena:thread_cache=0"]);
    let out = vmarena(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("| workload | threads | vmarena | vmarena:thread_cache=0 |"), "{text}");
    let memory = text.split("Peak RSS (MiB) / minor faults (thousands)").nth(1).expect("memory table");
    let row = memory.lines().find(|l| l.starts_with("| fix_size | 1 |")).expect("a memory row");
    let cells: Vec<&str> = row.split('|').map(str::trim).filter(|c| !c.is_empty()).collect();
    assert_eq!(cells.len(), 4, "{row}");
    for c in &cells[2..] {
        let (rss, faults) = c.split_once(" / ").expect("RSS / faults");
        assert!(rss.parse::<f64>().unwrap() > 0.0 && faults.parse::<f64>().unwrap() > 0.0, "{row}");
    }
    // The start-up table: one positive figure per contender, in the contenders' order.
    let start = text.split("Start-up: the first allocation and free").nth(1).expect("start-up table");
    let row = start.lines().filter(|l| l.starts_with('|')).nth(2).expect("a start-up row");
    let firsts: Vec<f64> =
        row.split('|').map(str::trim).filter(|c| !c.is_empty()).map(|c| c.parse().unwrap()).collect();
    assert!(firsts.len() == 2 && firsts.iter().all(|&us| us > 0.0), "{row}");

    let mut args = base.to_vec();
    args.extend(["--lib-dir", lib_dir, "--contenders", "vmarena:space_bytes=4096"]);
    let out = vmarena(&args);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("VMARENA_SPACE_BYTES") && err.contains("allocation of 4096 bytes failed"), "{err}");

    let out = vmarena(&["user-path", "--contenders", "vmarena:bogus=1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("VMARENA_BOGUS is not an option"));
}

#[test]
fn int_arena_compares_every_contender_and_checks_placement() {
    let dir = std::env::temp_dir().join(format!("vmarena-int-arena-{}", std::process::id()));
    let json = dir.join("int.json");
    let contenders =
        "vmarena,vmarena-1,vmarena-best,vmarena-lowest,vmarena-lowest-global,tree-mutex,vmem,offset-allocator,range-alloc";
    let out = vmarena(&[
        "int-arena",
        "--allocs",
        "3000",
        "--rounds",
        "1",
        "--contenders",
        contenders,
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for trace in ["gpu", "jit"] {
        for threads in ["1", "2"] {
            for c in contenders.split(',') {
                let row = format!("| {trace} | {threads} | {c} | ");
                let line =
                    stdout.lines().find(|l| l.starts_with(&row)).unwrap_or_else(|| panic!("{row}: {stdout}"));
                assert!(!line.contains("panicked"), "{line}");
            }
        }
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2 * 2 * contenders.split(',').count());
    for c in cells {
        let s = &c["samples"][0];
        assert!(s["mops"].as_f64().unwrap() > 0.0 && s["live"].as_u64().unwrap() > 0, "{c}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let bad = vmarena(&["int-arena", "--contenders", "vmarena,nosuch", "--allocs", "10"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown contender 'nosuch'"));
}

#[test]
fn programs_checks_outputs_and_reports_the_give_back_shape() {
    let Some(libs) = lib_dir() else { return };
    if !libs.join("libvmarena_preload.so").exists() {
        eprintln!("skipped: no libvmarena_preload.so beside the lab binary in this build");
        return;
    }
    let json = std::env::temp_dir().join(format!("vmarena-programs-{}.json", std::process::id()));
    // The shim over jemalloc too, where jemalloc is installed (scripts/setup.sh installs it).
    let over = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2").exists();
    let allocators = if over { "glibc,vmarena,vmarena+jemalloc" } else { "glibc,vmarena" };
    let out = vmarena(&[
        "programs",
        "--programs",
        "sqlite3,python-zlib,give-back",
        "--allocators",
        allocators,
        "--rounds",
        "1",
        "--scale",
        "0.02",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for p in ["sqlite3", "python-zlib"] {
        let row = stdout.lines().find(|l| l.starts_with(&format!("| {p} | time s |")));
        let row = row.unwrap_or_else(|| panic!("no time row for {p}:\n{stdout}"));
        assert!(row.contains("x (glibc)"), "{row}");
    }
    assert!(stdout.contains("Geometric mean of vmarena's time over the best peer's"), "{stdout}");
    // A composition is a form of the shim: set against the peers, never counted as one.
    assert_eq!(
        stdout.contains("Geometric mean of vmarena+jemalloc's time over the best peer's"),
        over,
        "{stdout}"
    );
    assert!(!stdout.contains("x (vmarena"), "a shim form taken for the best peer:\n{stdout}");
    let j = std::fs::read_to_string(&json).unwrap();
    std::fs::remove_file(&json).ok();
    let v: serde_json::Value = serde_json::from_str(&j).expect("valid JSON");
    assert_eq!(v["command"], "programs");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), if over { 9 } else { 6 }, "3 programs x the allocators");
    for r in results.iter().filter(|r| r["program"] == "give-back") {
        let g = &r["give_back"];
        let (held, at_3s) = (g["held_kib"].as_u64().unwrap(), g["at_3s_kib"].as_u64().unwrap());
        // 41 MiB of blocks were held; three seconds after their frees both allocators gave
        // them back (glibc unmaps them, vmarena's idle decay releases them).
        assert!(held > 40 << 10, "{r}");
        assert!(at_3s < held / 2, "{r}");
    }
    let out = vmarena(&["programs", "--programs", "bogus"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown program 'bogus'"), "{out:?}");
    let out = vmarena(&["programs", "--allocators", "vmarena+nosuch"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown allocator 'nosuch'"), "{out:?}");
}

/// `--bare` writes no page: long_busy's 15,000 live areas then fault in nothing (a glibc
/// block's header would be written by malloc itself: vmarena's areas only).
#[test]
fn user_path_bare_writes_no_page() {
    let Some(libs) = lib_dir() else { return };
    let faults = |bare: bool| {
        let mut args =
            vec!["user-path", "--workloads", "long_busy", "--threads", "1", "--loops", "2000", "--runs", "1"];
        args.extend(["--lib-dir", libs.to_str().unwrap(), "--contenders", "vmarena"]);
        if bare {
            args.push("--bare");
        }
        let out = vmarena(&args);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
        let header = if bare { "no page written (--bare)" } else { "every page written" };
        assert!(text.lines().next().unwrap_or("").contains(header), "{text}");
        let memory = text.split("Peak RSS (MiB) / minor faults (thousands)").nth(1).expect("memory table");
        let row =
            memory.lines().find(|l| l.starts_with("| long_busy | 1 |")).expect("a memory row").to_string();
        let cells: Vec<f64> = row
            .split('|')
            .map(str::trim)
            .filter(|c| c.contains(" / "))
            .map(|c| c.split_once(" / ").unwrap().1.parse::<f64>().unwrap())
            .collect();
        assert_eq!(cells.len(), 1, "{row}");
        cells[0]
    };
    let (written, bare) = (faults(false), faults(true));
    assert!(written > 15.0, "15,000 pages written fault at least 15 thousand times: {written}");
    assert!(bare < written / 2.0, "bare {bare} against written {written} (thousands)");
}

/// `--live` counts what the threads hold: long_busy's 15,000 live one-page blocks and the
/// loop's one more, 60,004 KiB at the peak, shown beside the peak RSS.
#[test]
fn user_path_live_reports_the_most_the_threads_held() {
    let Some(libs) = lib_dir() else { return };
    let args = [
        "user-path",
        "--workloads",
        "long_busy",
        "--threads",
        "1",
        "--loops",
        "2000",
        "--runs",
        "1",
        "--live",
        "--contenders",
        "vmarena",
        "--lib-dir",
        libs.to_str().unwrap(),
    ];
    let out = vmarena(&args);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.lines().next().unwrap_or("").contains("live bytes counted"), "{text}");
    let memory = text.split("the live peak in parentheses").nth(1).expect("memory table");
    let row = memory.lines().find(|l| l.starts_with("| long_busy | 1 |")).expect("a memory row");
    let cell = row.split('|').map(str::trim).find(|c| c.contains(" / ")).expect("a cell");
    // "RSS (LIVE) / FAULTS"
    let (rss, rest) = cell.split_once(" (").expect("a live peak");
    let live: f64 = rest.split_once(')').unwrap().0.parse().unwrap();
    let rss: f64 = rss.parse().unwrap();
    assert!((live - 60_004.0 / 1024.0).abs() < 0.06, "{row}");
    assert!(rss >= live, "every held page was written: {row}");
}
