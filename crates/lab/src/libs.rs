//! The shared libraries the lab runs programs with: vmarena's own (`libvmarena.so`,
//! `libvmarena_preload.so`, beside the lab binary or in a folder the user names) and the
//! peers' (Debian's jemalloc, mimalloc and tcmalloc, which `scripts/setup.sh` installs), by the
//! names every command uses for them.

use std::path::{Path, PathBuf};

/// Where Debian installs the peers' shared libraries.
pub const LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";

/// What a peer's name stands for in `LD_PRELOAD`: `None` for a name that is no peer;
/// `Some(Ok(None))` for glibc (nothing to preload); `Some(Ok(Some(path)))` for jemalloc,
/// mimalloc or tcmalloc; `Some(Err(..))` when that library is not installed.
pub fn peer(name: &str) -> Option<Result<Option<PathBuf>, String>> {
    let file = match name {
        "glibc" => return Some(Ok(None)),
        "jemalloc" => "libjemalloc.so.2",
        "mimalloc" => "libmimalloc.so.2",
        "tcmalloc" => "libtcmalloc_minimal.so.4",
        _ => return None,
    };
    let p = Path::new(LIBDIR).join(file);
    Some(if p.exists() {
        Ok(Some(p))
    } else {
        Err(format!("{name}: {} not found (scripts/setup.sh installs it)", p.display()))
    })
}

/// Where `libvmarena.so` and `libvmarena_preload.so` are: `dir`, or beside the lab binary.
pub fn lib_dir(dir: &Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(d) = dir {
        return Ok(d.clone());
    }
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    Ok(exe.parent().map(Path::to_path_buf).unwrap_or_default())
}

/// Check that each of `libs` is in `dir`.
pub fn require(dir: &Path, libs: &[&str]) -> Result<(), String> {
    for lib in libs {
        if !dir.join(lib).exists() {
            return Err(format!("{} not found: build with cargo build --release", dir.join(lib).display()));
        }
    }
    Ok(())
}

/// The shim: `given`, or `libvmarena_preload.so` beside the lab binary; an error when missing.
pub fn shim(given: &Option<PathBuf>) -> Result<PathBuf, String> {
    let p = match given {
        Some(p) => p.clone(),
        None => lib_dir(&None)?.join("libvmarena_preload.so"),
    };
    if !p.exists() {
        return Err(format!("{} not found: build with cargo build --release", p.display()));
    }
    Ok(p)
}
