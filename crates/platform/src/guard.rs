//! Guard markers: pages that fault on any access, without splitting the mapping.
//!
//! `MADV_GUARD_INSTALL` (Linux 6.13) turns pages into guard markers in the page tables: any
//! access raises SIGSEGV, the VMA is not split, and `MADV_DONTNEED`/`MADV_FREE` leave the
//! markers in place; `MADV_GUARD_REMOVE` clears them. Support is probed once; on older kernels
//! guards are only gaps (the address is reserved but readable and writable).

use crate::fork_once::ForkOnce;

pub use crate::release::{MADV_GUARD_INSTALL, MADV_GUARD_REMOVE};

/// True when the running kernel enforces guard markers.
pub fn supported() -> bool {
    static S: ForkOnce<bool> = ForkOnce::new();
    *S.get_or_init(|| {
        let page = crate::page_size();
        let Ok(r) = crate::Reservation::new(2 * page, page) else {
            return false;
        };
        // SAFETY: the range is a private mapping owned by `r` and unused.
        unsafe { libc::madvise(r.base() as *mut libc::c_void, page, MADV_GUARD_INSTALL) == 0 }
    })
}

/// Make `[addr, addr + len)` guard pages. Returns false if the kernel refused.
pub fn install(addr: usize, len: usize) -> bool {
    // SAFETY: the caller owns the range and nothing lives there (it is a guard gap).
    unsafe { libc::madvise(addr as *mut libc::c_void, len, MADV_GUARD_INSTALL) == 0 }
}

/// Clear guard markers in `[addr, addr + len)`. Returns false if the kernel refused.
pub fn remove(addr: usize, len: usize) -> bool {
    // SAFETY: the caller owns the range; removing markers makes it ordinary memory again.
    unsafe { libc::madvise(addr as *mut libc::c_void, len, MADV_GUARD_REMOVE) == 0 }
}

/// Clear guard markers in many ranges, batched where the kernel allows. Returns syscalls made.
pub fn remove_many(ranges: &[(usize, usize)]) -> usize {
    crate::release::advise(ranges, MADV_GUARD_REMOVE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_survive_dontneed_and_go_with_remove() {
        if !supported() {
            eprintln!("skipped: this kernel has no MADV_GUARD_INSTALL");
            return;
        }
        let page = crate::page_size();
        let r = crate::Reservation::new(4 * page, page).unwrap();
        assert!(install(r.base() + page, page));
        // A release over the whole range must keep the marker: probe with mincore-free means,
        // by removing it and checking that removal reports success, then reading the page.
        crate::release::release(&[(r.base(), 4 * page)], crate::Advice::DontNeed);
        assert!(remove_many(&[(r.base() + page, page), (r.base() + 3 * page, page)]) >= 1);
        // SAFETY: the marker is gone, the page is ordinary memory of the reservation again.
        unsafe { *(r.base() as *mut u8).add(page) = 1 };
    }
}
