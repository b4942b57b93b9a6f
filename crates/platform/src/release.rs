//! Releasing the memory of address ranges, in batches.
//!
//! `MADV_DONTNEED` drops the pages at once (the next touch faults in a zero page);
//! `MADV_FREE` lets the kernel take them lazily under pressure (cheaper, but RSS falls only when
//! the kernel needs the memory, and the old contents may survive). A purge releases many areas:
//! where the kernel allows `process_madvise` on the calling process with these advices (Linux
//! 6.13 and later; since 6.16 `MADV_DONTNEED` there also batches the TLB flush), up to `IOV_MAX`
//! ranges go in one syscall; otherwise one `madvise` per range. The choice is probed on first
//! use and remembered; a fork re-opens the pidfd.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// How released pages are given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// `MADV_DONTNEED`: pages dropped now; they read as zero afterwards.
    DontNeed,
    /// `MADV_FREE`: pages reclaimable lazily; contents undefined until rewritten.
    Free,
}

impl Advice {
    fn raw(self) -> i32 {
        match self {
            Advice::DontNeed => libc::MADV_DONTNEED,
            Advice::Free => libc::MADV_FREE,
        }
    }

    /// True when pages released this way are known to read as zero afterwards.
    pub fn zeroes(self) -> bool {
        matches!(self, Advice::DontNeed)
    }
}

/// `MADV_GUARD_INSTALL` (Linux 6.13; not yet in every libc): the advice [`crate::guard`] installs
/// guard markers with.
pub const MADV_GUARD_INSTALL: i32 = 102;
/// `MADV_GUARD_REMOVE`: the advice that clears them (batched here like the others).
pub const MADV_GUARD_REMOVE: i32 = 103;

const IOV_MAX: usize = 1024;
const BATCH_UNKNOWN: u8 = 0;
const BATCH_YES: u8 = 1;
const BATCH_NO: u8 = 2;
/// Whether `process_madvise` works, probed per advice: DONTNEED, FREE, GUARD_REMOVE, other.
static BATCH: [AtomicU8; 4] = [const { AtomicU8::new(BATCH_UNKNOWN) }; 4];

fn batch_slot(advice: i32) -> &'static AtomicU8 {
    &BATCH[match advice {
        libc::MADV_DONTNEED => 0,
        libc::MADV_FREE => 1,
        MADV_GUARD_REMOVE => 2,
        _ => 3,
    }]
}
/// (pid, pidfd) of the process that opened the pidfd; re-opened after a fork, and when the
/// program closed it or reused its number (`kept_fd`).
static PIDFD: Mutex<Option<(i32, crate::kept_fd::KeptFd)>> = Mutex::new(None);

fn self_pidfd() -> Option<i32> {
    // Never waits: a fork while another thread held the mutex leaves it held in the child,
    // which then releases without batching rather than hang.
    let mut g = PIDFD.try_lock().ok()?;
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    if let Some(fd) = g.as_ref().filter(|(p, _)| *p == pid).and_then(|(_, k)| k.get()) {
        return Some(fd);
    }
    if let Some((p, old)) = g.take() {
        // A descriptor inherited from the parent refers to the parent; one the program
        // replaced is the program's. Neither is closed here.
        if p != pid || old.get().is_none() {
            std::mem::forget(old);
        }
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        return None;
    }
    let k = crate::kept_fd::KeptFd::adopt(fd).ok()?;
    let raw = k.raw();
    *g = Some((pid, k));
    Some(raw)
}

/// Release `ranges` (`(addr, len_bytes)` pairs, page aligned, inside memory the caller owns
/// and nobody uses). Returns the number of syscalls made.
pub fn release(ranges: &[(usize, usize)], advice: Advice) -> usize {
    advise(ranges, advice.raw())
}

/// Apply the raw `madvise` advice to every range, batched with `process_madvise` where the
/// kernel accepts that advice there. Returns the number of syscalls made.
pub fn advise(ranges: &[(usize, usize)], advice: i32) -> usize {
    if ranges.is_empty() {
        return 0;
    }
    let slot = batch_slot(advice);
    let mut calls = 0;
    if slot.load(Ordering::Relaxed) != BATCH_NO && ranges.len() > 1 {
        if let Some(fd) = self_pidfd() {
            let mut done = 0;
            while done < ranges.len() {
                let chunk = &ranges[done..(done + IOV_MAX).min(ranges.len())];
                let iov: Vec<libc::iovec> = chunk
                    .iter()
                    .map(|&(a, l)| libc::iovec { iov_base: a as *mut libc::c_void, iov_len: l })
                    .collect();
                // SAFETY: iov points to `iov.len()` valid iovecs describing memory of this
                // process that the caller owns; the advice does not touch other memory.
                let r = unsafe {
                    libc::syscall(libc::SYS_process_madvise, fd, iov.as_ptr(), iov.len(), advice, 0)
                };
                calls += 1;
                let want: usize = chunk.iter().map(|&(_, l)| l).sum();
                if r < 0 || r as usize != want {
                    // Not supported for this advice (older kernels allow only a few advices
                    // on process_madvise): fall back to one madvise per range, for good.
                    slot.store(BATCH_NO, Ordering::Relaxed);
                    return calls + advise_each(&ranges[done..], advice);
                }
                slot.store(BATCH_YES, Ordering::Relaxed);
                done += chunk.len();
            }
            return calls;
        }
    }
    calls + advise_each(ranges, advice)
}

fn advise_each(ranges: &[(usize, usize)], advice: i32) -> usize {
    for &(a, l) in ranges {
        // SAFETY: as for `release`: the range is owned by the caller and unused.
        unsafe {
            libc::madvise(a as *mut libc::c_void, l, advice);
        }
    }
    ranges.len()
}

/// True once a batched release with `advice` has succeeded (for reports).
pub fn batching_in_use(advice: Advice) -> bool {
    batch_slot(advice.raw()).load(Ordering::Relaxed) == BATCH_YES
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reservation;

    #[test]
    fn released_pages_read_zero_and_leave_rss() {
        let page = crate::page_size();
        let r = Reservation::new(64 * page, page).unwrap();
        let p = r.base() as *mut u8;
        for i in 0..64 {
            // SAFETY: inside the reservation.
            unsafe { *p.add(i * page) = 0xAB };
        }
        let ranges: Vec<(usize, usize)> = (0..64).step_by(2).map(|i| (r.base() + i * page, page)).collect();
        let calls = release(&ranges, Advice::DontNeed);
        assert!((1..=32).contains(&calls));
        eprintln!("32 ranges released in {calls} calls (batched: {})", batching_in_use(Advice::DontNeed));
        for i in 0..64 {
            // SAFETY: inside the reservation.
            let v = unsafe { *p.add(i * page) };
            assert_eq!(v, if i % 2 == 0 { 0 } else { 0xAB }, "page {i}");
        }
    }
}
