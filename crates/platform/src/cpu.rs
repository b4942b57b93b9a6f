//! The current CPU and the CPU count.
//!
//! The current CPU is read from the rseq area glibc (2.35+) registers for every thread: the
//! kernel keeps `cpu_id` there up to date, so reading it is two loads (thread pointer plus
//! `__rseq_offset`). Where glibc did not register rseq (older glibc, another libc, or
//! `GLIBC_TUNABLES=glibc.pthread.rseq=0`), `sched_getcpu()` answers (a vDSO call).

use crate::fork_once::ForkOnce;
use std::sync::atomic::{AtomicIsize, Ordering};

/// Offset of the rseq area from the thread pointer; `NO_RSEQ` when unusable; `UNKNOWN` before
/// the first call.
static RSEQ_OFFSET: AtomicIsize = AtomicIsize::new(UNKNOWN);
const UNKNOWN: isize = isize::MIN;
const NO_RSEQ: isize = isize::MIN + 1;

#[cold]
fn probe_rseq() -> isize {
    // SAFETY: dlsym with a NUL-terminated name; the symbols, when present, are glibc's
    // exported constants of the documented types.
    let off = unsafe {
        let size = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr()) as *const u32;
        let off = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()) as *const isize;
        if size.is_null() || off.is_null() || *size < 8 {
            NO_RSEQ
        } else {
            *off
        }
    };
    RSEQ_OFFSET.store(off, Ordering::Relaxed);
    off
}

#[inline(always)]
fn thread_pointer() -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        let tp: usize;
        // SAFETY: on x86_64 Linux, fs:0 holds the thread pointer (the TCB points to itself).
        unsafe { std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags)) };
        Some(tp)
    }
    #[cfg(target_arch = "aarch64")]
    {
        let tp: usize;
        // SAFETY: tpidr_el0 holds the thread pointer on aarch64 Linux.
        unsafe {
            std::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nostack, nomem, preserves_flags))
        };
        Some(tp)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        None
    }
}

/// The rseq area's offset from the thread pointer, the same for every thread, where glibc
/// registered one.
pub(crate) fn rseq_offset() -> Option<isize> {
    let mut off = RSEQ_OFFSET.load(Ordering::Relaxed);
    if off == UNKNOWN {
        off = probe_rseq();
    }
    (off != NO_RSEQ && thread_pointer().is_some()).then_some(off)
}

/// The address of this thread's rseq area (`struct rseq`: `cpu_id` at byte 4, `rseq_cs` at
/// byte 8), where glibc registered one.
#[inline]
pub(crate) fn rseq_area() -> Option<usize> {
    let off = rseq_offset()?;
    thread_pointer().map(|tp| (tp as isize + off) as usize)
}

/// The CPU this thread runs on now (it may move right after). 0 if unknown.
#[inline]
pub fn current() -> usize {
    if let Some(area) = rseq_area() {
        // struct rseq { u32 cpu_id_start; u32 cpu_id; ... } at tp + __rseq_offset.
        let p = (area + 4) as *const i32;
        // SAFETY: glibc registered this thread's rseq area at tp + __rseq_offset (its size
        // is at least 8 bytes, checked in probe_rseq); the kernel updates cpu_id, hence
        // the volatile read.
        let cpu = unsafe { p.read_volatile() };
        if cpu >= 0 {
            return cpu as usize;
        }
    }
    sched_getcpu()
}

/// `sched_getcpu()`, 0 if it fails.
#[inline]
pub fn sched_getcpu() -> usize {
    // SAFETY: sched_getcpu has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    if c < 0 {
        0
    } else {
        c as usize
    }
}

/// Online CPUs, as the kernel counts `num_online_cpus()` (at least 1). Cached.
pub fn count() -> usize {
    static N: ForkOnce<usize> = ForkOnce::new();
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
    static N: ForkOnce<usize> = ForkOnce::new();
    *N.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        (n.max(1) as usize).max(count())
    })
}

/// Pin the calling thread to `cpu` (tests and experiments that need a given node). False when
/// the CPU does not exist or is not allowed.
pub fn pin_current_thread(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it (cpu < CPU_SETSIZE).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rseq_cpu_agrees_with_sched_getcpu() {
        // Pin to each CPU in turn so that both reads must give the same answer.
        for cpu in 0..count() {
            if !pin_current_thread(cpu) {
                continue;
            }
            assert_eq!(current(), cpu);
            assert_eq!(sched_getcpu(), cpu);
        }
        eprintln!("rseq in use: {}", RSEQ_OFFSET.load(Ordering::Relaxed) != NO_RSEQ);
    }
}
