//! One large reservation of address space: a single anonymous mapping.
//!
//! `mmap(PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)`: no memory is
//! committed until a page is touched. Or, made with [`Reservation::new_inaccessible`], the same
//! mapping with no access at all, whose parts the owner makes readable and writable as it needs
//! them ([`Reservation::commit`]): under `vm.overcommit_memory=2`, where `MAP_NORESERVE` is
//! ignored and a writable private mapping is charged in full against the commit limit, an
//! inaccessible one is charged nothing, and each part is charged when it is committed. Guards are PTE markers and releases are `madvise`, so
//! neither splits the mapping; only page moves do ([`crate::page_move`]), and their callers
//! bound and heal the mappings they add, far from the 65,530-mapping limit.

use std::io;

/// An owned reservation; unmapped on drop.
#[derive(Debug)]
pub struct Reservation {
    base: usize,
    len_bytes: usize,
}

impl Reservation {
    /// Reserve `len_bytes` (rounded up to whole pages), aligned to `align_bytes` (a power of two,
    /// at least the page size).
    pub fn new(len_bytes: usize, align_bytes: usize) -> io::Result<Self> {
        Self::map(len_bytes, align_bytes, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// [`Reservation::new`] with no access: every byte faults until [`Reservation::commit`]
    /// makes it readable and writable.
    pub fn new_inaccessible(len_bytes: usize, align_bytes: usize) -> io::Result<Self> {
        Self::map(len_bytes, align_bytes, libc::PROT_NONE)
    }

    /// [`Reservation::new`] read-only: every byte reads as zero (the kernel's shared zero page,
    /// no memory) and a write faults until [`Reservation::commit`]. Not charged under strict
    /// overcommit either, since only writable private mappings are.
    pub fn new_read_only(len_bytes: usize, align_bytes: usize) -> io::Result<Self> {
        Self::map(len_bytes, align_bytes, libc::PROT_READ)
    }

    /// Make `[base + offset, base + offset + len)` (page-aligned, inside) readable and
    /// writable. The kernel charges it against the commit limit where overcommit is strict,
    /// and refuses with ENOMEM past that limit (or past the map count), changing nothing.
    pub fn commit(&self, offset: usize, len: usize) -> io::Result<()> {
        let addr = self.part(offset, len)?;
        // SAFETY: the range lies inside this reservation, which its owner hands out only after
        // committing it; adding access changes no contents.
        let r = unsafe { libc::mprotect(addr as *mut libc::c_void, len, libc::PROT_READ | libc::PROT_WRITE) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Give `[base + offset, base + offset + len)` (page-aligned, inside, holding nothing the
    /// owner still needs) back: a fresh inaccessible mapping replaces it in one call
    /// (`mmap(MAP_FIXED)`, so no other mapping can land there meanwhile), which ends its
    /// charge under strict overcommit (an `mprotect` to no access keeps the charge of a range
    /// that was ever written) and drops its pages. [`Reservation::commit`] makes it usable again.
    pub fn decommit(&self, offset: usize, len: usize) -> io::Result<()> {
        let addr = self.part(offset, len)?;
        // SAFETY: the range lies inside this reservation and holds nothing its owner needs;
        // MAP_FIXED replaces it atomically with a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The address of `[base + offset, base + offset + len)`, or EINVAL unless it is
    /// page-aligned and inside the reservation.
    fn part(&self, offset: usize, len: usize) -> io::Result<usize> {
        let page = crate::page_size();
        if (offset | len) & (page - 1) != 0 || offset.checked_add(len).map_or(true, |e| e > self.len_bytes) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(self.base + offset)
    }

    fn map(len_bytes: usize, align_bytes: usize, prot: libc::c_int) -> io::Result<Self> {
        let page = crate::page_size();
        if len_bytes == 0 || !align_bytes.is_power_of_two() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let align = align_bytes.max(page);
        let len = len_bytes
            .checked_add(page - 1)
            .map(|l| l & !(page - 1))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        let over =
            len.checked_add(align - page).ok_or_else(|| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing; no existing
        // memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                over,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let raw = p as usize;
        let base = (raw + align - 1) & !(align - 1);
        // Trim the slack at both ends so exactly one mapping of `len` bytes remains.
        // SAFETY: both trimmed ranges lie inside the mapping just created and are not used.
        unsafe {
            if base > raw {
                libc::munmap(raw as *mut libc::c_void, base - raw);
            }
            let tail = raw + over - (base + len);
            if tail > 0 {
                libc::munmap((base + len) as *mut libc::c_void, tail);
            }
        }
        Ok(Reservation { base, len_bytes: len })
    }

    /// Ask for transparent huge pages over the whole reservation (`MADV_HUGEPAGE`, one call;
    /// the mapping's flags change, it is not split). Returns false if the kernel refused (no
    /// THP support, or THP switched off).
    pub fn advise_huge(&self) -> bool {
        // SAFETY: the range is exactly this reservation's mapping; the advice changes how
        // future faults are served, never the contents.
        unsafe { libc::madvise(self.base as *mut libc::c_void, self.len_bytes, libc::MADV_HUGEPAGE) == 0 }
    }

    /// First byte of the reservation.
    pub fn base(&self) -> usize {
        self.base
    }

    /// Length in bytes.
    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    /// True when `addr` lies inside the reservation.
    #[inline]
    pub fn contains(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.base) < self.len_bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: the mapping is owned by this value; whoever handed out memory from it must
        // have stopped using it before dropping the reservation (the space guarantees that).
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len_bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_aligned_and_touch() {
        let r = Reservation::new(10 << 20, 2 << 20).unwrap();
        assert_eq!(r.base() % (2 << 20), 0);
        assert_eq!(r.len_bytes(), 10 << 20);
        assert!(r.contains(r.base()) && r.contains(r.base() + r.len_bytes() - 1));
        assert!(!r.contains(r.base() + r.len_bytes()) && !r.contains(r.base().wrapping_sub(1)));
        // SAFETY: inside the reservation, which is readable and writable.
        unsafe { *(r.base() as *mut u8).add(4096 * 3) = 7 };
        assert_eq!(unsafe { *(r.base() as *const u8).add(4096 * 3) }, 7);
    }

    #[test]
    fn an_inaccessible_reservation_is_usable_where_committed() {
        let page = crate::page_size();
        let r = Reservation::new_inaccessible(64 * page, page).unwrap();
        assert_eq!(crate::process::resident_bytes(r.base(), r.len_bytes()), 0);
        r.commit(4 * page, 8 * page).unwrap();
        // SAFETY: committed above.
        unsafe { *(r.base() as *mut u8).add(11 * page) = 9 };
        assert_eq!(crate::process::resident_bytes(r.base(), r.len_bytes()), page as u64);
        r.decommit(8 * page, 4 * page).unwrap();
        assert_eq!(
            crate::process::resident_bytes(r.base(), r.len_bytes()),
            0,
            "the written page went with it"
        );
        r.commit(8 * page, 4 * page).unwrap();
        // SAFETY: committed again; a fresh page reads zero.
        assert_eq!(unsafe { *(r.base() as *const u8).add(11 * page) }, 0);
        assert!(r.commit(page / 2, page).is_err(), "unaligned");
        assert!(r.commit(60 * page, 8 * page).is_err(), "past the end");
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(Reservation::new(0, 4096).is_err());
        assert!(Reservation::new(4096, 3000).is_err());
        assert!(Reservation::new(usize::MAX - 10, 4096).is_err());
    }
}
