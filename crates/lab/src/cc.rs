//! The lab's C programs: written from sources embedded in the binary (with `include/vmarena.h`
//! and `c/rseq_seq.h`)
//! into a scratch folder and compiled there with `$CC` (default `cc`), so that a built lab runs
//! them without the source tree.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The header every program may include as "vmarena.h".
pub const HEADER: &str = include_str!("../../../include/vmarena.h");

/// The restartable sequences' shared pieces, which every program may include as "rseq_seq.h".
pub const RSEQ_HEADER: &str = include_str!("c/rseq_seq.h");

/// A scratch folder of this process (removed by the caller).
pub fn scratch(what: &str) -> Result<PathBuf, String> {
    let d = std::env::temp_dir().join(format!("vmarena-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    Ok(d)
}

/// Compile `source` (the text of `name`.c) into `scratch/output` with `flags` after it; with
/// `link_vmarena`, against the `libvmarena.so` of `libs` (run path set).
pub fn compile(
    scratch: &Path,
    name: &str,
    source: &str,
    output: &str,
    flags: &[&str],
    libs: Option<&Path>,
) -> Result<PathBuf, String> {
    let src = scratch.join(format!("{name}.c"));
    std::fs::write(&src, source).map_err(|e| format!("{}: {e}", src.display()))?;
    std::fs::write(scratch.join("vmarena.h"), HEADER).map_err(|e| format!("{}: {e}", scratch.display()))?;
    std::fs::write(scratch.join("rseq_seq.h"), RSEQ_HEADER)
        .map_err(|e| format!("{}: {e}", scratch.display()))?;
    let bin = scratch.join(output);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.args(["-std=gnu11", "-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .arg(format!("-I{}", scratch.display()))
        .args(flags);
    if let Some(libs) = libs {
        cmd.arg(format!("-L{}", libs.display()))
            .arg(format!("-Wl,--disable-new-dtags,-rpath,{}", libs.display())) // DT_RPATH: before LD_LIBRARY_PATH
            .arg("-lvmarena");
    }
    let status = cmd
        .arg("-lpthread")
        .status()
        .map_err(|e| format!("{cc}: {e} (scripts/setup.sh installs a C compiler)"))?;
    if !status.success() {
        return Err(format!("compiling {} failed", src.display()));
    }
    Ok(bin)
}

/// The value a program printed after the word `key` ("ns_per_op 12.5"), if it exited 0.
pub fn reported(out: &std::process::Output, key: &str) -> Option<f64> {
    if !out.status.success() {
        return None;
    }
    reported_in(&String::from_utf8_lossy(&out.stdout), key)
}

/// The number after `key` in a successful program's output text.
pub fn reported_in(stdout: &str, key: &str) -> Option<f64> {
    stdout.split_whitespace().skip_while(|w| *w != key).nth(1).and_then(|v| v.parse::<f64>().ok())
}
