//! The preload shim on real processes (tier 1 for the shim, tier 4 for real programs): the
//! shared library is built from the current sources, a C program exercises every routed
//! function under `LD_PRELOAD` (`tests/c/shim_test.c`), a program linked against the C ABI
//! shares the shim's space (`tests/c/one_space.c`), and Python, `sort` and `xz` run under
//! it with their output compared with a run without it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

mod common;
use common::{compile, root, shim, vm_allocs, vmarena_link_flags, PROGRAM_FLAGS};

struct Built {
    shim: PathBuf,
    test_bin: PathBuf,
    dl_lib: PathBuf,
}

/// Build `libvmarena_preload.so` and the C programs, once per test run.
fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let shim = shim().clone();
        let test_bin = compile("shim_test.c", "shim_test", &[&PROGRAM_FLAGS[..], &["-lpthread"]].concat());
        let dl_lib = compile("dl_lib.c", "libshim_dl_test.so", &["-O1", "-shared", "-fPIC"]);
        Built { shim, test_bin, dl_lib }
    })
}

fn run(cmd: &mut Command, preload: bool) -> Output {
    if preload {
        cmd.env("LD_PRELOAD", &built().shim).env("VMARENA_SPACE_BYTES", "16G");
    }
    let out = cmd.output().expect("the program starts");
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

fn case(name: &str, env: &[(&str, &str)], args: &[&Path]) -> Output {
    let mut c = Command::new(&built().test_bin);
    c.arg(name).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    run(&mut c, true)
}

fn assert_case_ok(out: &Output, name: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains(&format!("ok {name}")), "{name}: {out:?}");
}

#[test]
fn every_routed_function_routes_by_size_and_by_address() {
    assert_case_ok(&case("routing", &[], &[]), "routing");
}

#[test]
fn the_threshold_comes_from_the_environment() {
    assert_case_ok(&case("threshold", &[("VMARENA_PRELOAD_THRESHOLD", "200000")], &[]), "threshold");
    assert_case_ok(&case("threshold", &[("VMARENA_PRELOAD_THRESHOLD", "4096")], &[]), "threshold");
}

/// A large free through the shim moves glibc's trim threshold as glibc's own free of that
/// block would, up to eight shim thresholds: with a 512 KiB shim threshold glibc's heap keeps
/// 2 MiB of freed small blocks at its top instead of trimming at 128 KiB; at the default 64 KiB
/// it trims again past 512 KiB, the value the summary reports. The option turns the mirroring
/// off, and so does a threshold the program sets itself, with `mallopt` or in the environment,
/// as it turns off glibc's own adjustment.
#[test]
fn large_frees_move_glibcs_thresholds_as_its_own_frees_would() {
    let t = "glibc_thresholds";
    let mode = |m: &str| PathBuf::from(m);
    assert_case_ok(&case(t, &[("VMARENA_PRELOAD_THRESHOLD", "524288")], &[&mode("follows")]), t);
    let capped = case(t, &[("VMARENA_PRELOAD_STATS", "1")], &[&mode("kept")]);
    assert_case_ok(&capped, t);
    let summary = String::from_utf8_lossy(&capped.stderr);
    assert!(
        summary.contains("glibc mmap threshold 4194304 bytes, trim threshold 524288\n"),
        "the cap at the default threshold: {summary}"
    );
    let off = [("VMARENA_EXPERIMENTS", "1"), ("VMARENA_PRELOAD_GLIBC_THRESHOLDS", "0")];
    assert_case_ok(&case(t, &off, &[&mode("kept")]), t);
    assert_case_ok(&case(t, &[], &[&mode("mallopt")]), t);
    assert_case_ok(&case(t, &[("GLIBC_TUNABLES", "glibc.malloc.top_pad=131072")], &[&mode("kept")]), t);
    assert_case_ok(&case(t, &[("MALLOC_TRIM_THRESHOLD_", "131072")], &[&mode("kept")]), t);
}

/// After the default space's idle purge, glibc's free memory inside its heap goes back too
/// (`malloc_trim`); with the option off it stays.
#[test]
fn glibcs_free_memory_goes_back_after_an_idle_purge() {
    let t = "glibc_trim";
    assert_case_ok(&case(t, &[], &[&PathBuf::from("on")]), t);
    let off = [("VMARENA_EXPERIMENTS", "1"), ("VMARENA_PRELOAD_GLIBC_TRIM", "0")];
    assert_case_ok(&case(t, &off, &[&PathBuf::from("off")]), t);
}

/// The shim registers the process for `membarrier` at its first `malloc`, while the process
/// has one thread (later, with threads, registration waits for an RCU grace period): here no
/// request reaches vmarena, yet the program finds the process registered.
#[test]
fn the_process_is_registered_for_barriers_before_any_large_request() {
    assert_case_ok(&case("membarrier", &[("VMARENA_PRELOAD_THRESHOLD", "1099511627776")], &[]), "membarrier");
}

#[test]
fn threads_that_exit_keep_their_patterns() {
    assert_case_ok(&case("threads", &[], &[]), "threads");
}

/// The exit summary has a line per lock site used; with `lock_timing` the acquisitions are
/// counted, and the node locks of the threads' frees are among them.
#[test]
fn the_summary_reports_lock_figures_by_site() {
    let lock_lines = |out: &Output| -> Vec<(String, u64)> {
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter_map(|l| l.strip_prefix("vmarena preload: lock "))
            .map(|l| {
                let (site, figs) = l.split_once(" acquired ").expect("acquired figure");
                (site.trim().to_string(), figs.split(' ').next().unwrap().parse().unwrap())
            })
            .collect()
    };
    let stats = [("VMARENA_PRELOAD_STATS", "1"), ("VMARENA_PRELOAD_LOCK_TIMING", "1")];
    let out = case("threads", &stats, &[]);
    assert_case_ok(&out, "threads");
    let timed = lock_lines(&out);
    let shard = timed.iter().find(|(s, _)| s == "free: shard node").expect("free: shard node line");
    assert!(shard.1 > 0, "acquisitions counted with lock_timing: {timed:?}");
    let out = case("threads", &stats[..1], &[]);
    assert_case_ok(&out, "threads");
    assert!(lock_lines(&out).iter().all(|(_, n)| *n == 0), "no acquisitions counted without timing");
}

#[test]
fn a_child_can_allocate_after_fork_while_parent_threads_churn() {
    assert_case_ok(&case("fork", &[], &[]), "fork");
}

#[test]
fn a_dlopened_library_shares_the_routing() {
    assert_case_ok(&case("dlopen", &[], &[&built().dl_lib]), "dlopen");
}

#[test]
fn the_shim_is_what_makes_the_c_test_pass() {
    // Without the shim the test program must fail (it looks for vmarena): the checks can fail.
    let out = run(Command::new(&built().test_bin).arg("routing"), false);
    assert!(!out.status.success());
}

#[test]
fn pointers_vmarena_never_allocated_get_the_next_allocators_behaviour() {
    // glibc aborts on a pointer it did not allocate, with its own message.
    let out = case("foreign_free", &[], &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("free(): invalid pointer"), "{out:?}");
    // A second free of a vmarena area: vmarena says so and stops the program.
    let out = case("double_free", &[], &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("vmarena preload: free(") && err.contains("not the start of a live area"), "{err}");
}

/// `tests/c/one_space.c`, linked against `libvmarena.so` (the C ABI) built from the current
/// sources into the shim's target directory, once per test run.
fn one_space_bin() -> &'static Path {
    static B: OnceLock<PathBuf> = OnceLock::new();
    B.get_or_init(|| {
        let link = vmarena_link_flags();
        let flags: Vec<&str> = PROGRAM_FLAGS.iter().copied().chain(link.iter().map(String::as_str)).collect();
        compile("one_space.c", "one_space", &flags)
    })
}

/// The shim carries the C ABI, and a preloaded library comes first in the symbol lookup: a
/// program linked against `libvmarena.so` gets the shim's default space for its `vmarena_*`
/// calls, one space with its large `malloc`s. Without the shim the two stay apart (the check
/// of the shared case fails there).
#[test]
fn the_c_abi_of_a_preloaded_process_is_the_shims_space() {
    assert_case_ok(&run(Command::new(one_space_bin()).arg("shared"), true), "one_space");
    assert_case_ok(&run(Command::new(one_space_bin()).arg("separate"), false), "one_space");
    let out = run(Command::new(one_space_bin()).arg("shared"), false);
    assert!(!out.status.success(), "the shared check passed without the shim: {out:?}");
}

fn with_stats(c: &mut Command) -> &mut Command {
    c.env("VMARENA_PRELOAD_STATS", "1")
}

#[test]
fn python_threads_with_large_bytearrays() {
    let script = include_str!("../../bench/scripts/bytearrays.py");
    let plain = run(Command::new("python3").args(["-c", script, "60"]), false);
    let shim = run(with_stats(Command::new("python3").args(["-c", script, "60"])), true);
    assert!(plain.status.success() && shim.status.success());
    assert_eq!(plain.stdout, shim.stdout, "same digests with and without the shim");
    assert!(vm_allocs(&shim) > 100, "python's large bytearrays went to vmarena");
}

fn data_file(name: &str, lines: usize) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let mut s = String::with_capacity(lines * 24);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for i in 0..lines {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{:016x} line {i}\n", x));
    }
    std::fs::write(&p, s).unwrap();
    p
}

#[test]
fn sort_with_large_buffers() {
    let input = data_file("sort-input.txt", 400_000);
    let sort = |preload: bool| {
        let mut c = Command::new("sort");
        c.args(["-S", "32M", "--parallel=2"]).arg(&input).env("LC_ALL", "C");
        run(with_stats(&mut c), preload)
    };
    let plain = sort(false);
    let shim = sort(true);
    assert!(plain.status.success() && shim.status.success());
    assert!(plain.stdout == shim.stdout && plain.stdout.len() > 1000, "sort output differs under the shim");
    assert!(vm_allocs(&shim) > 0, "sort's buffers went to vmarena");
}

#[test]
fn xz_with_two_threads_round_trips() {
    let input = data_file("xz-input.txt", 300_000);
    let packed = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("xz-input.txt.xz");
    let _ = std::fs::remove_file(&packed);
    let out = run(with_stats(Command::new("xz").args(["-T2", "-6", "-k", "-f"]).arg(&input)), true);
    assert!(out.status.success());
    assert!(vm_allocs(&out) > 0, "xz's windows went to vmarena");
    let back = run(with_stats(Command::new("xz").args(["-T2", "-d", "-c"]).arg(&packed)), true);
    assert!(back.status.success());
    assert!(back.stdout == std::fs::read(&input).unwrap(), "xz round trip under the shim lost data");
}

#[test]
fn the_options_page_lists_the_shims_options_as_declared() {
    // The shim is a cdylib the lab cannot link (its malloc would interpose the lab's own), so
    // `vmarena options` cannot print this table; the declarations are checked against the page.
    let decl = std::fs::read_to_string(root().join("crates/preload/src/stats.rs")).unwrap();
    let page = std::fs::read_to_string(root().join("docs/options.md")).unwrap();
    let mut seen = 0;
    let lines: Vec<&str> = decl.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let l = l.trim();
        let Some((name, rest)) = l.split_once(':') else { continue };
        let experiment = l.ends_with("\", experiment;");
        if !(l.ends_with("\";") || experiment) || !l.contains("\"VMARENA_PRELOAD_") {
            continue;
        }
        let rest = rest.trim_end_matches(", experiment;");
        let default = rest.split_once('=').unwrap().1.split(',').next().unwrap().trim();
        let env = rest.rsplit('"').nth(1).unwrap();
        let unit = rest.split('"').nth(1).unwrap();
        let doc = lines[i - 1].trim().trim_start_matches("///").trim();
        let note = if experiment { "Experiment (read only with `VMARENA_EXPERIMENTS=1`). " } else { "" };
        let row = format!("| `{name}` | {unit} | `{default}` | `{env}` | {note}{doc} |");
        assert!(page.contains(&row), "docs/options.md lacks the row\n{row}");
        seen += 1;
    }
    assert_eq!(seen, 5, "every option of PreloadOptions was found in stats.rs");
}

/// A program whose large blocks vmarena serves, and which never moves a page, sees no
/// descriptor of vmarena's in its table: the userfaultfd is opened by the first move only and
/// the PSI file is opened for each read and closed again. Before, every process under the shim
/// held both (at 512 and 513), and a program that lists its descriptors (CPython's
/// `test_subprocess` among them) saw them.
#[test]
fn a_program_that_moves_no_page_holds_no_descriptor_of_vmarenas() {
    let script = "\
import os, time
blocks = [bytearray(1 << 20) for _ in range(64)]
del blocks
time.sleep(0.3)
print(sorted(int(f) for f in os.listdir('/proc/self/fd')))
";
    let plain = run(Command::new("python3").args(["-c", script]), false);
    let shim = run(Command::new("python3").args(["-c", script]), true);
    assert!(plain.status.success() && shim.status.success());
    let fds = |o: &Output| String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(fds(&shim), fds(&plain), "descriptors under the shim differ from those without it");
    // The same run with the exit summary on (which keeps a copy of stderr to print it): the
    // large blocks were vmarena's.
    let counted = run(Command::new("python3").args(["-c", script]).env("VMARENA_PRELOAD_STATS", "1"), true);
    let served = vm_allocs(&counted);
    assert!(served >= 64, "vmarena served {served} blocks:\n{}", String::from_utf8_lossy(&counted.stderr));
}

/// Under the shim, malloc's introspection sees vmarena's blocks (`mallinfo2`, `mallinfo`,
/// `malloc_info`, `malloc_stats`) and `malloc_trim` gives vmarena's cached memory back. Before,
/// `mallinfo2()` reported `hblkhd` 0 with a 1 MiB block live, and `malloc_trim(0)` left
/// vmarena's cache alone.
#[test]
fn mallocs_introspection_sees_vmarenas_blocks() {
    let out = case("introspection", &[], &[]);
    assert_case_ok(&out, "introspection");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("vmarena (LD_PRELOAD shim):") && stderr.contains("in use bytes"), "{stderr}");
}

/// Run `cmd` with its soft and hard `RLIMIT_AS` at `limit` bytes.
fn limit_address_space(cmd: &mut Command, limit: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe and touches only the child's limits.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit { rlim_cur: limit, rlim_max: limit };
            if libc::setrlimit(libc::RLIMIT_AS, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Under a 4 GB address-space limit the default space first reserves a quarter of the room
/// (about 950 MB); ten live blocks of 128 MiB pass it, and the space grows by a further
/// reservation instead of sending the last ones to the next allocator (which printed the
/// fallback's line before): every block is vmarena's, its bytes intact, freed through the
/// shim's routing. Run with the exit statistics (which count the blocks) and without them
/// (where frees below the pass-through bound skip vmarena with one compare: the further
/// reservation lies below the first, and the bound must follow it).
#[test]
fn under_an_address_space_limit_the_space_grows_past_its_first_reservation() {
    let script = "\
bs = [bytearray(128 << 20) for _ in range(10)]
for i, b in enumerate(bs): b[0] = i; b[-1] = i
assert all(b[0] == i and b[-1] == i for i, b in enumerate(bs))
del bs
print('ok')";
    for stats in [false, true] {
        let mut cmd = Command::new("python3");
        cmd.args(["-c", script]).env("LD_PRELOAD", shim()).env_remove("VMARENA_SPACE_BYTES");
        if stats {
            cmd.env("VMARENA_PRELOAD_STATS", "1");
        }
        limit_address_space(&mut cmd, 4_000_000 << 10);
        let out = cmd.output().expect("python3 starts");
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("{}{stderr}", String::from_utf8_lossy(&out.stdout));
        assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"), "{out:?}");
        assert!(!stderr.contains("vmarena: "), "no fallback for lack of room:\n{stderr}");
        if stats {
            assert!(vm_allocs(&out) >= 10, "vmarena served every block:\n{stderr}");
        }
    }
}

/// Under an address-space limit (`ulimit -v` 1.5 GB) the default space takes a quarter of the
/// room, and a block larger than it is served by the next allocator in the rest, with one line
/// on stderr that says why (the shim's fallback); the program never sees a failure.
#[test]
fn under_an_address_space_limit_a_block_past_the_space_goes_to_the_next_allocator() {
    let script = "b = bytearray(900 << 20); b[-1] = 1; c = bytearray(1 << 20); print('ok', len(b) + len(c))";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script]).env("LD_PRELOAD", shim()).env_remove("VMARENA_SPACE_BYTES");
    limit_address_space(&mut cmd, 1_500_000 << 10);
    let out = cmd.output().expect("python3 starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{}{stderr}", String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok 944766976"), "{out:?}");
    assert_eq!(stderr.matches("vmarena: ").count(), 1, "one line says why:\n{stderr}");
    assert!(stderr.contains("RLIMIT_AS"), "{stderr}");
}
