//! vmarena on older kernels and in sandboxes (tier 1 for the fallbacks): every program runs
//! under `vmarena-sandbox`, a seccomp filter that answers as Linux 4.18, 5.4, 5.10, 5.15, 6.1
//! or 6.8 would, as Docker's default profile does, or with one optional feature refused
//! (`crates/platform/src/bin/vmarena-sandbox.rs`). For each profile: `/bin/true` and a Python
//! program that allocates large blocks and starts a child under the shim (with `membarrier`
//! refused these hung at load: the constructor's failure message allocated, the allocation
//! entered the shim, and the shim's first call waited for the constructor's one-time cell);
//! the C ABI's test program linked against `libvmarena.so`; the shim's routing case; and a
//! fork while three threads allocate, with and without the shim.
//!
//! Each program runs under a watchdog: a hang fails the test instead of stalling the run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

mod common;
use common::{
    cargo_build, compile, compile_path, root, run_limited, shim, vm_allocs, vmarena_link_flags, PROGRAM_FLAGS,
};

/// The profiles, as `vmarena-sandbox` arguments.
const PROFILES: &[&[&str]] = &[
    &["--kernel", "4.18"],
    &["--kernel", "5.4"],
    &["--kernel", "5.10"],
    &["--kernel", "5.15"],
    &["--kernel", "6.1"],
    &["--kernel", "6.8"],
    &["--docker"],
    &["--deny", "membarrier"],
    &["--deny", "membarrier-rseq"],
    &["--deny", "rseq"],
    &["--deny", "userfaultfd"],
    &["--deny", "process_madvise"],
    &["--deny", "process-madvise-dontneed"],
    &["--deny", "madv-guard"],
    &["--deny", "mremap-dontunmap"],
    &["--deny", "memfd_create"],
];

fn sandbox() -> &'static Path {
    static S: OnceLock<PathBuf> = OnceLock::new();
    S.get_or_init(|| {
        cargo_build(&["build", "-p", "vmarena-platform", "--bin", "vmarena-sandbox"]).join("vmarena-sandbox")
    })
}

fn linked(source_dir: &str, source: &str, output: &str) -> PathBuf {
    let link = vmarena_link_flags();
    let flags: Vec<&str> =
        PROGRAM_FLAGS.iter().copied().chain(link.iter().map(String::as_str)).chain(["-lpthread"]).collect();
    compile_path(&root().join(source_dir).join(source), output, &flags)
}

fn abi_test() -> &'static Path {
    static B: OnceLock<PathBuf> = OnceLock::new();
    B.get_or_init(|| linked("crates/vmarena/tests/c", "abi_test.c", "sandbox_abi_test"))
}

fn hostile() -> &'static Path {
    static B: OnceLock<PathBuf> = OnceLock::new();
    B.get_or_init(|| linked("crates/preload/tests/c", "hostile.c", "sandbox_hostile"))
}

fn shim_test() -> &'static Path {
    static B: OnceLock<PathBuf> = OnceLock::new();
    B.get_or_init(|| {
        compile("shim_test.c", "sandbox_shim_test", &[&PROGRAM_FLAGS[..], &["-lpthread"]].concat())
    })
}

/// The Python interpreter itself (a version manager's `python3` may be a shell script).
fn python() -> Option<PathBuf> {
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    p.exists().then_some(p)
}

/// Run `program args` under the sandbox with `profile`, with the environment `env`, and a
/// watchdog of 120 s.
fn run(profile: &[&str], env: &[(&str, &str)], program: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(sandbox());
    cmd.args(profile).arg("--").arg(program).args(args).env("VMARENA_SPACE_BYTES", "8G");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_limited(&mut cmd, Duration::from_secs(120))
}

/// Whether this process may bind-mount a file in a mount namespace of its own (`unshare -m`,
/// root or a user namespace with the right): the tests that hide or replace a file under
/// `/proc` need it, and say they skipped where it is missing.
fn mount_namespace_permitted() -> bool {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let (a, b) = (dir.join("bind_probe_a"), dir.join("bind_probe_b"));
    std::fs::write(&a, "a").unwrap();
    std::fs::write(&b, "b").unwrap();
    let probe = format!("mount --bind {} {}", a.display(), b.display());
    Command::new("unshare").args(["-m", "sh", "-c", &probe]).output().is_ok_and(|o| o.status.success())
}

fn check(profile: &[&str], what: &str, out: &Output, must_contain: &str) {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && text.contains(must_contain),
        "{profile:?}: {what}: {:?}\n{text}",
        out.status
    );
}

const PYTHON_PROGRAM: &str = "\
import subprocess, sys
blocks = [bytearray(1 << 20) for _ in range(8)]
for i, b in enumerate(blocks):
    b[-1] = i
assert [b[-1] for b in blocks] == list(range(8))
r = subprocess.run([sys.executable, '-c', 'print(len(bytearray(3 << 20)))'], capture_output=True, text=True)
assert r.stdout.strip() == str(3 << 20), r
print('python ok')
";

#[test]
fn every_profile_runs_programs_under_the_shim_and_the_c_abi() {
    let shim = shim().to_str().unwrap().to_string();
    let py = python();
    if py.is_none() {
        eprintln!("no python3: its part is skipped");
    }
    for profile in PROFILES {
        eprintln!("profile {profile:?}");
        let with_shim: &[(&str, &str)] = &[("LD_PRELOAD", &shim), ("VMARENA_PRELOAD_STATS", "1")];
        let t = run(profile, with_shim, Path::new("/bin/true"), &[]);
        check(profile, "/bin/true under the shim", &t, "");
        if let Some(py) = &py {
            let out = run(profile, with_shim, py, &["-c", PYTHON_PROGRAM]);
            check(profile, "python under the shim", &out, "python ok");
            // The parent's large blocks went to vmarena, not to the next allocator.
            let served = vm_allocs(&out);
            assert!(served >= 8, "{profile:?}: python's large blocks were not served by vmarena ({served})");
        }
        let abi = run(profile, &[], abi_test(), &[]);
        check(profile, "the C ABI test", &abi, " passed, 0 failed");
        let routing = run(profile, &[("LD_PRELOAD", &shim)], shim_test(), &["routing"]);
        check(profile, "the shim's routing", &routing, "ok routing");
        let fork = run(profile, &[], hostile(), &["fork_alloc", "40"]);
        check(profile, "forks during allocation", &fork, "ok fork_alloc");
        let fork = run(profile, &[("LD_PRELOAD", &shim)], hostile(), &["fork_alloc", "40"]);
        check(profile, "forks during allocation under the shim", &fork, "ok fork_alloc");
    }
}

/// The sandbox does refuse what it says: each profile's answers as seen by a program.
#[test]
fn the_sandbox_refuses_what_each_profile_names() {
    let probe = "\
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def call(*a):
    r = libc.syscall(*a)
    return 0 if r >= 0 else ctypes.get_errno()
print('membarrier', call(324, 1 << 4, 0, 0))
print('membarrier_rseq', call(324, 1 << 8, 0, 0))
print('process_madvise', call(440, -1, 0, 0, 0, 0))
print('userfaultfd', call(323, 0o2000000 | 1))
";
    let Some(py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    let answers = |profile: &[&str]| {
        let out = run(profile, &[], &py, &["-c", probe]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let none = answers(&[]);
    assert!(none.contains("membarrier 0\n"), "{none}");
    let denied = answers(&["--deny", "membarrier"]);
    assert!(denied.contains(&format!("membarrier {}\n", libc::ENOSYS)), "{denied}");
    let old = answers(&["--kernel", "5.4"]);
    assert!(old.contains("membarrier 0\n"), "{old}");
    assert!(old.contains(&format!("membarrier_rseq {}\n", libc::EINVAL)), "{old}");
    assert!(old.contains(&format!("process_madvise {}\n", libc::ENOSYS)), "{old}");
    assert!(old.contains(&format!("userfaultfd {}\n", libc::EINVAL)), "{old}");
    let docker = answers(&["--docker"]);
    assert!(docker.contains(&format!("userfaultfd {}\n", libc::EPERM)), "{docker}");
}

/// Page moves keep within the process's map limit: with `vm.max_map_count` read as 2,000 (a
/// file bind-mounted over it in a mount namespace of the test's own; skipped where that is not
/// permitted) and userfaultfd refused, so that moves are `mremap`s that split the reservation,
/// two threads with 2,500 live areas each of 4 KiB..16 MiB stay within an eighth of it above
/// the program's own mappings. The same run with the real limit shows that moves add far more.
#[test]
fn page_moves_keep_within_the_processs_map_limit() {
    if !mount_namespace_permitted() {
        eprintln!("skipped: no mount namespace here (unshare -m and a bind mount need root)");
        return;
    }
    let prog = linked("crates/preload/tests/c", "map_limit.c", "sandbox_map_limit");
    let limit_file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("max_map_count_2000");
    std::fs::write(&limit_file, "2000\n").unwrap();
    let peak = |limited: bool| -> Option<(u64, u64)> {
        let inner = format!(
            "{}exec {} --deny userfaultfd -- {}",
            if limited {
                format!("mount --bind {} /proc/sys/vm/max_map_count && ", limit_file.display())
            } else {
                String::new()
            },
            sandbox().display(),
            prog.display()
        );
        let out = Command::new("unshare")
            .args(["-m", "sh", "-c", &inner])
            .env("VMARENA_SPACE_BYTES", "64G")
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
            return None;
        }
        assert!(text.contains("ok map_limit"), "{text}");
        let field =
            |k: &str| text.lines().find_map(|l| l.strip_prefix(k)).and_then(|v| v.trim().parse().ok());
        Some((field("maps_base ")?, field("maps_peak ")?))
    };
    let (base, limited) = peak(true).expect("the run with the limit read as 2,000");
    let (_, free) = peak(false).expect("the run with the real limit");
    eprintln!("mappings: {base} before, peak {limited} with a limit of 2000, {free} with the real limit");
    assert!(limited <= base + 2000 / 8 + 64, "moves passed the map budget: {limited} mappings (base {base})");
    assert!(
        free > base + 2000 / 8 + 64,
        "moves added too few mappings for the test to show anything: {free}"
    );
}

/// Without PSI (Linux before 4.20, or a kernel built without it): `/proc/pressure/memory`
/// replaced by a file that does not read as one, in a mount namespace of the test's own
/// (skipped where that is not permitted; seccomp cannot hide a file). Python under the shim runs
/// and its large blocks are vmarena's; the low-memory monitor is simply not started.
#[test]
fn without_psi_the_shim_serves_all_the_same() {
    let Some(py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    if !mount_namespace_permitted() {
        eprintln!("skipped: no mount namespace here (unshare -m and a bind mount need root)");
        return;
    }
    let fake = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("not_psi");
    std::fs::write(&fake, "not a pressure file\n").unwrap();
    let inner =
        format!("mount --bind {} /proc/pressure/memory && exec {} -c \"$0\"", fake.display(), py.display());
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &inner, PYTHON_PROGRAM])
        .env("LD_PRELOAD", shim())
        .env("VMARENA_PRELOAD_STATS", "1")
        .env("VMARENA_SPACE_BYTES", "8G")
        .output()
        .expect("unshare runs");
    check(&["(no PSI)"], "python under the shim", &out, "python ok");
    let served = vm_allocs(&out);
    assert!(served >= 8, "python's large blocks were not served by vmarena ({served})");
}
