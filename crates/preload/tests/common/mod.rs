//! What the shim's tests share: builds of the current sources into a target directory of the
//! tests' own, and C programs compiled from `tests/c`.
#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Run `cargo ARGS` (a build of the current sources, at opt-level 1) into a target directory
/// of its own (the test run holds the main one); the directory the libraries land in.
pub fn cargo_build(args: &[&str]) -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("preload-target");
    let status = Command::new(env!("CARGO"))
        .args(args)
        .args(["--quiet", "--target-dir"])
        .arg(&target)
        .env("CARGO_PROFILE_DEV_OPT_LEVEL", "1")
        .current_dir(root())
        .status()
        .expect("cargo is needed to build the libraries");
    assert!(status.success(), "cargo {args:?} failed");
    target.join("debug")
}

/// Compile `tests/c/SOURCE` into `OUTPUT` in the test's scratch directory with `flags`
/// (libraries among them, which come after the source): see [`compile_path`].
pub fn compile(source: &str, output: &str, flags: &[&str]) -> PathBuf {
    compile_path(&root().join("crates/preload/tests/c").join(source), output, flags)
}

/// Compile the C or C++ source `source` into `OUTPUT` in the test's scratch directory with
/// `flags`: with `$CC` (default `cc`), or with `$CXX` (default `c++`) for a `.cpp` source.
pub fn compile_path(source: &Path, output: &str, flags: &[&str]) -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(output);
    let cc = if source.extension().is_some_and(|e| e == "cpp") {
        std::env::var("CXX").unwrap_or_else(|_| "c++".into())
    } else {
        std::env::var("CC").unwrap_or_else(|_| "cc".into())
    };
    let ok = Command::new(&cc)
        .arg("-o")
        .arg(&out)
        .arg(source)
        .args(flags)
        .status()
        .unwrap_or_else(|e| panic!("{cc}: {e} (scripts/setup.sh installs the compilers)"));
    assert!(ok.success(), "compiling {} failed", source.display());
    out
}

/// The flags of the test programs.
pub const PROGRAM_FLAGS: [&str; 5] = ["-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror"];

/// `libvmarena.so` (the C ABI) built from the current sources; the directory it is in.
pub fn libvmarena_dir() -> &'static PathBuf {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| cargo_build(&["rustc", "-p", "vmarena", "--lib", "--crate-type", "cdylib"]))
}

/// `libvmarena_preload.so` built from the current sources.
pub fn shim() -> &'static PathBuf {
    static S: OnceLock<PathBuf> = OnceLock::new();
    S.get_or_init(|| {
        let shim = cargo_build(&["build", "-p", "vmarena-preload", "--lib"]).join("libvmarena_preload.so");
        assert!(shim.exists(), "{} not built", shim.display());
        shim
    })
}

/// The flags that link a program against `libvmarena.so` (header, search path, run path).
pub fn vmarena_link_flags() -> Vec<String> {
    let lib_dir = libvmarena_dir();
    vec![
        format!("-I{}", root().join("include").display()),
        format!("-L{}", lib_dir.display()),
        // DT_RPATH, searched before the LD_LIBRARY_PATH cargo sets for tests (its own target
        // folder, where an older libvmarena.so may lie).
        format!("-Wl,--disable-new-dtags,-rpath,{}", lib_dir.display()),
        "-lvmarena".into(),
    ]
}

/// Run `cmd` with a watchdog of `limit`: a hang is a failure, not a stuck test run.
pub fn run_limited(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the program starts");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if rx.recv_timeout(limit).is_err() {
            // SAFETY: kill(2) with a pid of our own child that has not been waited for yet.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            return true;
        }
        false
    });
    let out = child.wait_with_output().expect("wait");
    let _ = tx.send(());
    let killed = watchdog.join().unwrap();
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!killed, "{cmd:?} still ran after {limit:?}: killed");
    out
}

/// The `vm_allocs` figures of every process's exit summary (`VMARENA_PRELOAD_STATS=1`) on its
/// stderr, summed: the blocks vmarena served.
pub fn vm_allocs(out: &Output) -> u64 {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("vmarena preload: vm_allocs"))
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum()
}
