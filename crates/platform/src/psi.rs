//! Memory stall from Linux PSI (pressure stall information), sampled.
//!
//! A `memory.pressure` file reads `some avg10=.. avg60=.. avg300=.. total=<us>` (and a `full`
//! line): `total` is the time, in microseconds, during which at least one task stalled on
//! memory. [`PsiStall`] names that file and reads the total on demand, opening and closing it
//! each time (no descriptor of vmarena's stays in the program's table between reads); a caller that
//! samples it once a window and compares the growth with a stall budget sees what a PSI trigger
//! (`some <stall_us> <window_us>`) would report, at window boundaries. Where the process sits
//! in a cgroup v2 group, that group's file is used, so a container's memory limit counts;
//! otherwise the system-wide `/proc/pressure/memory`.
//!
//! Why not a trigger: the kernel waits for an RCU grace period when a trigger is destroyed
//! (`psi_trigger_destroy` calls `synchronize_rcu`), and a process destroys it when it exits,
//! so every process that had armed one took 15 ms more to exit on the test machine (a C
//! program that arms `some 100000 2000000` on `/proc/pressure/memory` and returns: 16.0 ms
//! against 0.6, medians of 15). A library inside short-lived programs must not add that;
//! reading the file arms nothing. Reading needs no privilege and no window constraint.
//!
//! Limits: the kernel needs `CONFIG_PSI` (and PSI not disabled on the command line); where no
//! file can be read, [`PsiStall::open`] says why, and the caller falls back to explicit
//! pressure calls.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// A `memory.pressure` file whose "some" stall total can be read.
pub struct PsiStall {
    path: PathBuf,
    c_path: CString,
}

/// The `memory.pressure` files to try, best first.
fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(cg) = std::fs::read_to_string("/proc/self/cgroup") {
        // cgroup v2: the line "0::<path>". Only meaningful where /sys/fs/cgroup is the v2 root.
        if let Some(p) = cg.lines().find_map(|l| l.strip_prefix("0::")) {
            if p != "/" && std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
                out.push(PathBuf::from(format!("/sys/fs/cgroup{p}/memory.pressure")));
            }
        }
    }
    out.push(PathBuf::from("/proc/pressure/memory"));
    out
}

/// The `total=` of the `some` line of a `memory.pressure` text.
fn some_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace().find_map(|f| f.strip_prefix("total="))?.parse().ok()
}

impl PsiStall {
    /// Open the first `memory.pressure` file that reads as one. The error names every file
    /// tried and why it failed.
    pub fn open() -> Result<PsiStall, String> {
        let mut why = Vec::new();
        for path in candidates() {
            let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
                continue;
            };
            let s = PsiStall { path, c_path };
            match s.some_total_us() {
                Ok(_) => return Ok(s),
                Err(e) => why.push(e),
            }
        }
        Err(why.join("; "))
    }

    /// The file read.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Microseconds during which some task stalled on memory, since boot (or since the group
    /// was made). An error means the file is gone or no longer reads as expected (for
    /// example, its cgroup was removed). The file is opened (close-on-exec), read and closed:
    /// the descriptor lives for this call only.
    pub fn some_total_us(&self) -> Result<u64, String> {
        // SAFETY: a NUL-terminated path; the descriptor is closed below, on every path.
        let fd = unsafe { libc::open(self.c_path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(format!("{}: {}", self.path.display(), std::io::Error::last_os_error()));
        }
        let mut buf = [0u8; 256];
        let n = loop {
            // SAFETY: `buf` is valid for `buf.len()` bytes for the duration of the call.
            let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n >= 0 {
                break n as usize;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                // SAFETY: our own descriptor, opened above.
                unsafe { libc::close(fd) };
                return Err(format!("reading {}: {e}", self.path.display()));
            }
        };
        // SAFETY: our own descriptor, opened above.
        unsafe { libc::close(fd) };
        let text = String::from_utf8_lossy(&buf[..n]);
        some_total(&text)
            .ok_or_else(|| format!("{}: no 'some ... total=' line in {text:?}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_some_total_is_parsed() {
        let text = "some avg10=0.00 avg60=0.12 avg300=0.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n";
        assert_eq!(some_total(text), Some(123456));
        assert_eq!(some_total("full avg10=0.00 total=7\n"), None);
        assert_eq!(some_total("some avg10=0.00 total=x\n"), None);
    }

    #[test]
    fn the_stall_total_reads_and_never_falls_or_explains() {
        match PsiStall::open() {
            Ok(s) => {
                assert!(s.path().ends_with("memory.pressure") || s.path().ends_with("memory"));
                let a = s.some_total_us().unwrap();
                let b = s.some_total_us().unwrap();
                assert!(b >= a, "{a} then {b}");
            }
            Err(why) => assert!(why.contains("pressure"), "{why}"),
        }
    }
}
