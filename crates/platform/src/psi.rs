//! Memory-pressure notifications from Linux PSI (pressure stall information).
//!
//! A trigger is a line `some <stall_us> <window_us>` written to a `memory.pressure` file: the
//! kernel then raises `POLLPRI` on that descriptor whenever tasks stalled on memory for at
//! least `stall_us` within a `window_us` window (at most one event per window). Where the
//! process sits in a cgroup v2 group, that group's file is used, so a container's memory limit
//! counts; otherwise the system-wide `/proc/pressure/memory`.
//!
//! Limits (Documentation/accounting/psi.rst): the kernel needs `CONFIG_PSI` (and PSI not
//! disabled on the command line); the window is 500 ms to 10 s; unprivileged processes may
//! create triggers since Linux 6.5 only with a window that is a multiple of 2 s. Where a trigger
//! cannot be created, [`PsiTrigger::open`] says why, and the caller falls back to explicit
//! pressure calls.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::IntoRawFd;
use std::path::PathBuf;

/// An armed memory-pressure trigger.
pub struct PsiTrigger {
    fd: crate::kept_fd::KeptFd,
    path: PathBuf,
    line: String,
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

impl PsiTrigger {
    /// Arm a trigger for `stall_us` of "some" memory stall within `window_us`. The error
    /// names every file tried and why it failed.
    pub fn open(stall_us: u64, window_us: u64) -> Result<PsiTrigger, String> {
        let line = format!("some {stall_us} {window_us}");
        let mut why = Vec::new();
        for path in candidates() {
            // Close-on-exec (std's default), then moved out of the program's way (`kept_fd`).
            let f = OpenOptions::new().read(true).write(true).open(&path);
            let mut f = match f {
                Ok(f) => f,
                Err(e) => {
                    why.push(format!("{}: {e}", path.display()));
                    continue;
                }
            };
            // The kernel wants the trigger in one write, terminated by NUL (a few bytes: the
            // one write call write_all makes).
            let mut bytes = line.clone().into_bytes();
            bytes.push(0);
            match f.write_all(&bytes) {
                Ok(_) => {
                    let fd = crate::kept_fd::KeptFd::adopt(f.into_raw_fd())
                        .map_err(|e| format!("{}: keeping the descriptor: {e}", path.display()))?;
                    return Ok(PsiTrigger { fd, path, line });
                }
                Err(e) => why.push(format!("{}: writing '{line}': {e}", path.display())),
            }
        }
        Err(why.join("; "))
    }

    /// The file the trigger is armed on.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The trigger line (`some <stall_us> <window_us>`).
    pub fn line(&self) -> &str {
        &self.line
    }

    /// Block until the kernel reports pressure (`Ok(true)`), or `timeout_ms` passes
    /// (`Ok(false)`; negative waits forever). An error means the trigger is gone (for
    /// example, its cgroup was removed).
    pub fn wait(&self, timeout_ms: i32) -> Result<bool, String> {
        let gone = || format!("{}: the trigger's descriptor was closed by the program", self.path.display());
        let fd = self.fd.get().ok_or_else(gone)?;
        let mut p = libc::pollfd { fd, events: libc::POLLPRI, revents: 0 };
        loop {
            // SAFETY: `p` is one valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(format!("poll on {}: {e}", self.path.display()));
            }
            // Woken on a number the program may have reused meanwhile: only our file counts.
            if self.fd.get() != Some(fd) {
                return Err(gone());
            }
            if n == 0 {
                return Ok(false);
            }
            if p.revents & libc::POLLERR != 0 {
                return Err(format!("{}: trigger removed", self.path.display()));
            }
            return Ok(p.revents & libc::POLLPRI != 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_arms_or_explains() {
        match PsiTrigger::open(100_000, 2_000_000) {
            Ok(t) => {
                assert!(t.path().ends_with("memory.pressure") || t.path().ends_with("memory"));
                // No memory pressure on an idle test machine within 10 ms.
                assert_eq!(t.wait(10), Ok(false));
            }
            Err(why) => assert!(why.contains("pressure"), "{why}"),
        }
        let bad = PsiTrigger::open(100_000, 1);
        assert!(bad.is_err(), "a 1 us window is refused by the kernel");
    }
}
