//! The shim's C++ operators on a real C++ program (`tests/c/cpp_operators.cpp`), with each
//! allocator a user would put after the shim: glibc (through the C++ runtime's operators),
//! jemalloc, mimalloc and tcmalloc (each with operators of its own). Large `new`s must reach
//! vmarena, as the shim's statistics count them; small ones must stay with the next allocator,
//! as its own ownership query or counters say; every `delete` form must release each block to
//! its owner (a block given to the wrong one crashes or corrupts the program, and the patterns
//! are checked before every delete); `std::bad_alloc`, the nothrow forms and the new-handler
//! behave as the next allocator's.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

mod common;
use common::{compile, shim};

const PEERS: &[(&str, Option<&str>)] = &[
    ("glibc", None),
    ("jemalloc", Some("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")),
    ("mimalloc", Some("/usr/lib/x86_64-linux-gnu/libmimalloc.so.2")),
    ("tcmalloc", Some("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")),
];

fn program() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        compile(
            "cpp_operators.cpp",
            "cpp_operators",
            &["-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-fsized-deallocation", "-ldl"],
        )
    })
}

/// A counter of the shim's exit summary.
fn stat(summary: &str, name: &str) -> u64 {
    let prefix = format!("vmarena preload: {name} ");
    summary
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the summary:\n{summary}"))
}

/// With statistics on, every call takes the shim's full path, which counts; with them off, small
/// calls take the pass-through (the next form, or the next `malloc` and `free` when the next
/// form is the C++ runtime's), which only the program's own checks can see.
fn run_with(peer: &str, lib: Option<&str>, stats: bool) {
    let mut preload = shim().display().to_string();
    if let Some(lib) = lib {
        assert!(Path::new(lib).exists(), "{lib} is missing: scripts/setup.sh installs it");
        preload = format!("{preload} {lib}");
    }
    let out = Command::new(program())
        .arg(peer)
        .env("LD_PRELOAD", &preload)
        .env("VMARENA_PRELOAD_THRESHOLD", "65536")
        .env("VMARENA_PRELOAD_STATS", if stats { "1" } else { "0" })
        .output()
        .expect("the program starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("ok cpp_operators"),
        "{peer}: {out:?}\n{stdout}\n{stderr}"
    );
    let large: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("large news "))
        .and_then(|v| v.parse().ok())
        .expect("the program reports its large news");
    assert!(large >= 3 * 20, "{peer}: {large} large news");
    if !stats {
        return;
    }
    assert_eq!(stat(&stderr, "cpp_vm_news"), large, "{peer}: large news served by vmarena\n{stderr}");
    assert_eq!(stat(&stderr, "cpp_vm_deletes"), large, "{peer}: deletes of vmarena areas\n{stderr}");
    assert!(stat(&stderr, "cpp_next_news") >= 3 * 18, "{peer}: small news passed on\n{stderr}");
    assert!(stat(&stderr, "cpp_next_deletes") >= 3 * 18, "{peer}: small deletes passed on\n{stderr}");
}

#[test]
fn cpp_operators_with_each_allocator_next() {
    for (peer, lib) in PEERS {
        run_with(peer, *lib, true);
    }
}

#[test]
fn cpp_operators_pass_through_with_each_allocator_next() {
    for (peer, lib) in PEERS {
        run_with(peer, *lib, false);
    }
}
