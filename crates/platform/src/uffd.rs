//! Moving pages with a userfaultfd (`UFFDIO_MOVE`, Linux 6.8+) instead of `mremap`.
//!
//! `mremap` moves page-table entries under the process's mmap lock taken for writing, so
//! every page fault, `madvise` and guard install of the other threads waits for it, and it
//! leaves the moved range a mapping of its own ([`crate::page_move`]). `UFFDIO_MOVE` moves
//! the same entries under per-mapping locks and leaves the mapping whole; the cost is that the
//! destination must lie in a range registered with a userfaultfd. A range registered in
//! write-protect mode only, where nothing is ever write-protected, delivers no fault events:
//! faults are served as before and nobody needs to read the descriptor.
//!
//! Owns: the userfaultfd descriptor (closed on drop). The registration lasts while the
//! mapping does; a mapping made afresh over part of it (`mmap(MAP_FIXED)`, a `mremap`
//! destination) is not registered until [`Uffd::register`] is called for it again.
//! [`Uffd::move_pages`] then fails and the caller falls back to `mremap`.
//!
//! Fork: a userfaultfd acts on the address space of the process that opened it, whoever calls
//! it. A forked child inherits the descriptor (and not the registration), so its moves would
//! move the parent's pages. Every call therefore checks that the caller is the process that
//! opened it and otherwise does nothing (the child's moves are `mremap`s).
//!
//! The descriptor is opened with `UFFD_USER_MODE_ONLY`, which unprivileged processes may use
//! whatever `vm.unprivileged_userfaultfd` says.
#![allow(unsafe_code)]

const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFD_API: u64 = 0xAA;
const UFFD_FEATURE_MOVE: u64 = 1 << 16;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES: u64 = 1 << 1;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioMove {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    moved: i64,
}

/// `_IOWR(0xAA, nr, T)` of `<linux/userfaultfd.h>`.
const fn iowr<T>(nr: u64) -> libc::c_ulong {
    ((3u64 << 30) | ((std::mem::size_of::<T>() as u64) << 16) | (0xAA << 8) | nr) as libc::c_ulong
}
const UFFDIO_API_IOCTL: libc::c_ulong = iowr::<UffdioApi>(0x3F);
const UFFDIO_REGISTER: libc::c_ulong = iowr::<UffdioRegister>(0x00);
const UFFDIO_MOVE: libc::c_ulong = iowr::<UffdioMove>(0x05);

/// A userfaultfd that can move pages (see the module doc).
#[derive(Debug)]
pub struct Uffd {
    fd: crate::kept_fd::KeptFd,
    /// The process that opened it, the only one it may act for.
    owner: u32,
}

impl Uffd {
    /// A descriptor with `UFFDIO_MOVE`, or `None` where the kernel has no userfaultfd, refuses
    /// one, or cannot move.
    pub fn new() -> Option<Uffd> {
        // SAFETY: the syscall takes flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | UFFD_USER_MODE_ONLY) };
        if fd < 0 {
            return None;
        }
        let fd = crate::kept_fd::KeptFd::adopt(fd as libc::c_int).ok()?;
        let mut api = UffdioApi { api: UFFD_API, features: UFFD_FEATURE_MOVE, ioctls: 0 };
        // SAFETY: UFFDIO_API reads and writes the struct passed, which lives across the call.
        let r = unsafe { libc::ioctl(fd.raw(), UFFDIO_API_IOCTL, &mut api) };
        (r == 0 && api.features & UFFD_FEATURE_MOVE != 0).then_some(Uffd { fd, owner: std::process::id() })
    }

    /// True in the process that opened the descriptor (see the module doc on fork).
    fn ours(&self) -> bool {
        std::process::id() == self.owner
    }

    /// Register `[addr, addr + len)` (page-aligned, anonymous private memory the caller owns)
    /// in write-protect mode: moves may land there, and no fault is ever reported. Returns
    /// whether the kernel accepted it.
    pub fn register(&self, addr: usize, len: usize) -> bool {
        let Some(fd) = self.fd.get().filter(|_| self.ours()) else {
            return false;
        };
        let mut reg = UffdioRegister {
            range: UffdioRange { start: addr as u64, len: len as u64 },
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads the range and writes `ioctls` of the struct passed; the
        // range is the caller's own memory, whose faults this changes in nothing (no page is
        // write-protected).
        unsafe { libc::ioctl(fd, UFFDIO_REGISTER, &mut reg) == 0 }
    }

    /// Move the pages of `[from, from + len)` to `[to, to + len)` (page-aligned, disjoint, the
    /// target registered and holding no page); pages missing at `from` count as moved and stay
    /// missing. Afterwards `from` holds no page. Returns the bytes moved, from the front: all
    /// of `len`, or fewer where the kernel stopped (an unregistered target, a page shared with
    /// a forked process, a target that is not empty), and then the rest of `from` holds what
    /// it held: the kernel can stop with `EAGAIN` after moving pages it does not count (Linux
    /// 6.18 reported 181 of 308 pages moved when all 308 had), and those are put back
    /// ([`restore_uncounted`]).
    pub fn move_pages(&self, from: usize, to: usize, len: usize) -> usize {
        // Gone (closed or replaced by the program): nothing moves, the caller uses mremap.
        let Some(fd) = self.fd.get().filter(|_| self.ours()) else {
            return 0;
        };
        let mut mv = UffdioMove {
            dst: to as u64,
            src: from as u64,
            len: len as u64,
            mode: UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES,
            moved: 0,
        };
        // SAFETY: UFFDIO_MOVE reads the struct and writes `moved`; both ranges are the caller's
        // own memory (contract above), and the kernel moves whole pages between them.
        let r = unsafe { libc::ioctl(fd, UFFDIO_MOVE, &mut mv) };
        if r == 0 {
            return len;
        }
        // On failure `moved` is the bytes moved before the error, or a negative errno.
        let done = usize::try_from(mv.moved).unwrap_or(0).min(len);
        restore_uncounted(from + done, to + done, len - done);
        done
    }
}

/// After a move that stopped early: every page of `[from, from + len)` that is gone from
/// `from` and present at `to` moved without being counted; copy it back to `from`, so the rest
/// of the range is as it was before the move. Returns the pages put back. Both ranges belong
/// to the caller, and nothing else touched `to` since its pages were dropped before the move,
/// so a page present there came from `from`. Residency comes from `mincore`, 512 pages at a
/// time into a buffer on the stack (no allocation on this path).
pub fn restore_uncounted(from: usize, to: usize, len: usize) -> usize {
    const CHUNK_PAGES: usize = 512;
    let page = crate::page_size();
    let (mut src, mut dst) = ([0u8; CHUNK_PAGES], [0u8; CHUNK_PAGES]);
    let mut restored = 0;
    let mut off = 0;
    while off < len {
        let l = (CHUNK_PAGES * page).min(len - off);
        let n = l.div_ceil(page);
        // SAFETY: both ranges are mappings of this process (the caller's), and each buffer has
        // a byte for each of the `n` pages asked about.
        let ok = unsafe {
            libc::mincore((from + off) as *mut libc::c_void, l, src.as_mut_ptr()) == 0
                && libc::mincore((to + off) as *mut libc::c_void, l, dst.as_mut_ptr()) == 0
        };
        if ok {
            for i in (0..n).filter(|&i| src[i] & 1 == 0 && dst[i] & 1 != 0) {
                let o = off + i * page;
                // SAFETY: a whole page of each range, both the caller's and disjoint; the
                // page at `to + o` holds the bytes that were at `from + o`.
                unsafe { std::ptr::copy_nonoverlapping((to + o) as *const u8, (from + o) as *mut u8, page) };
                restored += 1;
            }
        }
        off += l;
    }
    restored
}

/// A userfaultfd for one range, opened and registered over the whole range on first need
/// ([`LazyUffd::get`]): a process that never moves a page holds no descriptor for it.
///
/// Fork: the cell is a [`ForkOnce`](crate::fork_once::ForkOnce), so a fork during the opening
/// does not leave the child waiting; a child that finds the parent's descriptor gets nothing
/// from it (see [`Uffd`]) and moves by `mremap`.
pub struct LazyUffd {
    base: usize,
    len: usize,
    cell: crate::fork_once::ForkOnce<Option<Uffd>>,
}

impl LazyUffd {
    /// For `[base, base + len)`, a range of anonymous private memory the caller owns.
    pub fn new(base: usize, len: usize) -> LazyUffd {
        LazyUffd { base, len, cell: crate::fork_once::ForkOnce::new() }
    }

    /// The descriptor, opened and registered over the range on the first call; `None` where the
    /// kernel has no `UFFDIO_MOVE`, refuses a userfaultfd or the registration (the answer of
    /// the first call stays).
    pub fn get(&self) -> Option<&Uffd> {
        self.cell.get_or_init(|| Uffd::new().filter(|u| u.register(self.base, self.len))).as_ref()
    }

    /// The descriptor if it was opened already (never opens one).
    pub fn opened(&self) -> Option<&Uffd> {
        self.cell.get().and_then(|u| u.as_ref())
    }
}

impl std::fmt::Debug for LazyUffd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.cell.get() {
            None => "not opened",
            Some(None) => "refused",
            Some(Some(_)) => "opened",
        };
        write!(f, "LazyUffd({:#x}+{:#x}, {state})", self.base, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_move_into_a_registered_range_and_leave_the_mapping_whole() {
        let Some(u) = Uffd::new() else {
            eprintln!("no UFFDIO_MOVE on this kernel: nothing to test");
            return;
        };
        let page = crate::page_size();
        let r = crate::Reservation::new(64 * page, page).unwrap();
        assert!(u.register(r.base(), r.len_bytes()));
        let (a, b) = (r.base() + 4 * page, r.base() + 32 * page);
        // SAFETY: both ranges lie in the reservation, which this test owns.
        unsafe { std::ptr::write_bytes(a as *mut u8, 0x5a, 6 * page) };
        // Eight pages of which two were never touched: holes move as holes.
        assert_eq!(u.move_pages(a, b, 8 * page), 8 * page);
        // SAFETY: as above.
        let (moved, hole, left) = unsafe {
            (
                *((b + 5 * page + 7) as *const u8),
                *((b + 7 * page) as *const u8),
                *((a + 5 * page) as *const u8),
            )
        };
        assert_eq!((moved, hole, left), (0x5a, 0, 0));
        assert_eq!(crate::page_move::mappings_over(r.base(), r.len_bytes()), 1, "no mapping of its own");
        // Faults in the registered range are served as ever (no event to read).
        // SAFETY: as above.
        unsafe { *((r.base() + 60 * page) as *mut u8) = 3 };
        // A target that is not empty is refused, and nothing moves.
        // SAFETY: as above.
        unsafe { std::ptr::write_bytes(a as *mut u8, 1, page) };
        assert_eq!(u.move_pages(a, b, page), 0);
        // SAFETY: as above.
        assert_eq!(unsafe { (*(a as *const u8), *(b as *const u8)) }, (1, 0x5a));
    }

    /// A move that stopped early after moving pages it did not count (as Linux 6.18 was seen
    /// to do): those pages go back to the source, so the caller's copy of the rest keeps every
    /// byte; pages that stayed at the source, and holes, are left alone.
    #[test]
    fn pages_moved_without_being_counted_are_put_back() {
        let page = crate::page_size();
        let r = crate::Reservation::new(64 * page, page).unwrap();
        let (a, b) = (r.base(), r.base() + 32 * page);
        for i in 0..12 {
            // SAFETY: both ranges lie in the reservation, which this test owns.
            unsafe { std::ptr::write_bytes((a + i * page) as *mut u8, 10 + i as u8, page) };
        }
        // What an uncounted move leaves: pages 2, 3 and 7 at the target and gone from the
        // source; page 9 a hole at both; the others still at the source.
        for i in [2, 3, 7] {
            // SAFETY: as above.
            unsafe {
                std::ptr::copy_nonoverlapping((a + i * page) as *const u8, (b + i * page) as *mut u8, page)
            };
            crate::release::release(&[(a + i * page, page)], crate::release::Advice::DontNeed);
        }
        crate::release::release(&[(a + 9 * page, page)], crate::release::Advice::DontNeed);
        assert_eq!(restore_uncounted(a, b, 12 * page), 3);
        for i in 0..12 {
            // SAFETY: as above.
            let (first, last) =
                unsafe { (*((a + i * page) as *const u8), *((a + (i + 1) * page - 1) as *const u8)) };
            let want = if i == 9 { 0 } else { 10 + i as u8 };
            assert_eq!((first, last), (want, want), "page {i} holds what it held");
        }
        assert_eq!(restore_uncounted(a, b, 12 * page), 0, "nothing left to put back");
    }

    /// A forked child's call does nothing: through the inherited descriptor it would move the
    /// parent's pages.
    #[test]
    fn a_forked_child_cannot_move_the_parents_pages() {
        let Some(u) = Uffd::new() else { return };
        let page = crate::page_size();
        let r = crate::Reservation::new(16 * page, page).unwrap();
        assert!(u.register(r.base(), r.len_bytes()));
        // SAFETY: the reservation is this test's.
        unsafe { std::ptr::write_bytes(r.base() as *mut u8, 7, page) };
        // SAFETY: the child only makes the two calls (no allocation, no lock) and leaves with
        // _exit; the parent waits for it.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = u.move_pages(r.base(), r.base() + 8 * page, page) == 0 && !u.register(r.base(), page);
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child's calls were refused");
        // SAFETY: as above.
        let (here, there) = unsafe { (*(r.base() as *const u8), *((r.base() + 8 * page) as *const u8)) };
        assert_eq!((here, there), (7, 0), "the parent's page did not move");
        // The parent still moves pages it touched after the fork. (The page the fork shared
        // stays refused, here even after it was written again: the caller's mremap moves it.)
        let fresh = r.base() + 2 * page;
        // SAFETY: as above.
        unsafe { std::ptr::write_bytes(fresh as *mut u8, 8, page) };
        assert_eq!(u.move_pages(fresh, r.base() + 10 * page, page), page);
        // SAFETY: as above.
        assert_eq!(unsafe { *((r.base() + 10 * page) as *const u8) }, 8);
    }

    #[test]
    fn an_unregistered_target_is_refused() {
        let Some(u) = Uffd::new() else { return };
        let page = crate::page_size();
        let r = crate::Reservation::new(16 * page, page).unwrap();
        // SAFETY: the reservation is this test's.
        unsafe { std::ptr::write_bytes(r.base() as *mut u8, 9, page) };
        assert_eq!(u.move_pages(r.base(), r.base() + 8 * page, page), 0);
        // SAFETY: as above.
        assert_eq!(unsafe { *(r.base() as *const u8) }, 9);
    }
}
