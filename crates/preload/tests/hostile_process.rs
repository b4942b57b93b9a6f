//! vmarena inside processes it does not control (tier 1 for the C ABI and the shim):
//! `tests/c/hostile.c`, linked against `libvmarena.so`, runs each case once on its own and once
//! with the shim preloaded. Forks at any moment (during allocation, during the first call),
//! frees with the wrong call, sizes promised by `vmarena_size` and `malloc_usable_size`,
//! signals meant for the program, closed standard descriptors, a program that closes every
//! descriptor and reuses the numbers, sizes whose bookkeeping cannot be allocated; and small
//! shim thresholds under real programs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

mod common;
use common::{compile, run_limited, shim, vmarena_link_flags, PROGRAM_FLAGS};

fn hostile_bin() -> &'static Path {
    static B: OnceLock<PathBuf> = OnceLock::new();
    B.get_or_init(|| {
        let link = vmarena_link_flags();
        let flags: Vec<&str> = PROGRAM_FLAGS
            .iter()
            .copied()
            .chain(link.iter().map(String::as_str))
            .chain(["-lpthread"])
            .collect();
        compile("hostile.c", "hostile", &flags)
    })
}

/// `hostile CASE ARGS`, on its own (`preload` false) or under the shim.
fn case(name: &str, args: &[&str], preload: bool) -> Output {
    let mut c = Command::new(hostile_bin());
    c.arg(name).args(args).env("VMARENA_SPACE_BYTES", "16G");
    if preload {
        c.env("LD_PRELOAD", shim());
    }
    run_limited(&mut c, Duration::from_secs(240))
}

fn assert_ok(out: &Output, name: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains(&format!("ok {name}")), "{name}: {out:?}");
}

fn both(name: &str, args: &[&str]) {
    assert_ok(&case(name, args, false), name);
    assert_ok(&case(name, args, true), name);
}

#[test]
fn a_fixed_slot_or_mapped_frames_refuse_the_wrong_release_call() {
    both("ownership", &[]);
}

#[test]
fn every_byte_the_size_functions_report_survives_a_resize() {
    both("resize", &[]);
}

/// Forks while three threads allocate, free and purge: every child allocates, writes and
/// frees with an alarm as watchdog. Without handlers of its own, `libvmarena.so` left node
/// locks held in children (the shim had handlers; the C ABI alone did not).
#[test]
fn children_forked_during_allocation_can_allocate() {
    both("fork_alloc", &["200"]);
}

/// The same forks with an allocator that has `fork()` handlers of its own behind the shim
/// (`LD_PRELOAD` of the shim, then jemalloc or tcmalloc) and in front of `libvmarena.so`. That
/// allocator registers its handlers when it starts, after vmarena's load: its `prepare` ran
/// first and took its locks, and vmarena's `prepare`, allocating its guards from it, waited for
/// ever (every fork of a shell under `LD_PRELOAD="libvmarena_preload.so libjemalloc.so.2"`).
#[test]
fn children_fork_with_an_allocator_that_has_fork_handlers_beside_vmarena() {
    for lib in ["libjemalloc.so.2", "libtcmalloc_minimal.so.4"] {
        let lib = format!("/usr/lib/x86_64-linux-gnu/{lib}");
        assert!(Path::new(&lib).exists(), "{lib} is missing: scripts/setup.sh installs it");
        for preload in [format!("{} {lib}", shim().display()), lib.clone()] {
            for name in ["fork_alloc", "fork_first_use"] {
                let mut c = Command::new(hostile_bin());
                c.args([name, "40"]).env("VMARENA_SPACE_BYTES", "16G").env("LD_PRELOAD", &preload);
                let out = run_limited(&mut c, Duration::from_secs(60));
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(
                    out.status.success() && err.contains(&format!("ok {name}")),
                    "{preload}, {name}: {out:?}"
                );
            }
        }
    }
}

/// Forks while other threads map and unmap frames (`vm_map_ram`, `vm_unmap_aliases`): the
/// space's own mutexes (vmap blocks, the frame map) must be free in the child too.
#[test]
fn children_forked_during_frame_mappings_can_map() {
    both("fork_maps", &["200"]);
}

/// A thread makes the first call (the default space is being built) while another forks: the
/// child's first call must not wait for a construction no thread of its own is doing.
#[test]
fn children_forked_during_the_first_call_can_allocate() {
    both("fork_first_use", &["200"]);
}

/// A program that blocks SIGTERM and SIGUSR1 and waits for them with `sigtimedwait` gets every
/// one, and vmarena's helper threads block every signal.
#[test]
fn signals_meant_for_the_program_reach_it() {
    both("signals", &[]);
}

/// Shim thresholds from 1 byte up: real programs start, run and exit (the standard library's
/// own `malloc` calls inside vmarena, such as a new thread's handle or a thread-local
/// destructor list, go to the next allocator), with and without the low-memory monitor.
#[test]
fn every_shim_threshold_runs_real_programs() {
    let programs: [&[&str]; 4] =
        [&["ls", "/"], &["env", "true"], &["sort", "/etc/passwd"], &["python3", "-c", "pass"]];
    for threshold in ["1", "8", "100", "300", "4096"] {
        for psi in ["0", "1"] {
            for p in programs {
                let mut c = Command::new(p[0]);
                c.args(&p[1..])
                    .env("LD_PRELOAD", shim())
                    .env("VMARENA_PRELOAD_THRESHOLD", threshold)
                    .env("VMARENA_PSI", psi);
                let out = run_limited(&mut c, Duration::from_secs(60));
                assert!(out.status.success(), "{p:?} threshold {threshold} psi {psi}: {out:?}");
            }
        }
    }
}

/// Sizes the header allows whose bookkeeping cannot be allocated: NULL with ENOMEM (or
/// EINVAL), never an abort.
#[test]
fn sizes_whose_bookkeeping_cannot_be_allocated_fail_cleanly() {
    both("absurd_sizes", &[]);
}

/// Started with stdin and stdout closed: vmarena's descriptors (userfaultfd, PSI file, frame
/// pool file) do not take 0 and 1.
#[test]
fn descriptors_stay_out_of_closed_standard_numbers() {
    for preload in [false, true] {
        let mut c = Command::new(hostile_bin());
        c.arg("closed_stdio").env("VMARENA_SPACE_BYTES", "16G").stdin(Stdio::null());
        if preload {
            c.env("LD_PRELOAD", shim());
        }
        // Close 0 and 1 in the child before exec (stderr stays for the report).
        use std::os::unix::process::CommandExt;
        // SAFETY: close(2) is async-signal-safe, as pre_exec requires.
        unsafe {
            c.pre_exec(|| {
                libc::close(0);
                libc::close(1);
                Ok(())
            })
        };
        let out = c.stderr(Stdio::piped()).output().expect("the program starts");
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && String::from_utf8_lossy(&out.stderr).contains("ok closed_stdio"));
    }
}

/// The program closes every descriptor above 2 and opens its own files at those numbers:
/// vmarena stops using what it had (moves, monitor, batched release, frame mapping) and never
/// touches or closes the program's files.
#[test]
fn descriptors_closed_by_the_program_are_never_used_again() {
    let dir = std::env::temp_dir().join(format!("vmarena-closefrom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    both("closefrom", &[d]);
    let _ = std::fs::remove_dir_all(&dir);
}
