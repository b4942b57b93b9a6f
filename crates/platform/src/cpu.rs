//! The current CPU and the CPU count.

use std::sync::OnceLock;

/// The CPU this thread runs on now (it may move right after). 0 if unknown.
#[inline]
pub fn current() -> usize {
    // SAFETY: sched_getcpu has no preconditions (vDSO on Linux, a few ns).
    let c = unsafe { libc::sched_getcpu() };
    if c < 0 {
        0
    } else {
        c as usize
    }
}

/// Online CPUs, as the kernel counts `num_online_cpus()` (at least 1). Cached.
pub fn count() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        if n < 1 {
            1
        } else {
            n as usize
        }
    })
}

/// Highest CPU number plus one, for sizing per-CPU tables (at least `count()`).
pub fn possible() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        (n.max(1) as usize).max(count())
    })
}
