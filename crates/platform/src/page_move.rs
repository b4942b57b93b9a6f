//! Moving resident pages between addresses of a reservation, and healing the mapping after.
//!
//! `mremap(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP)` moves the page-table entries of
//! a range to another address of the same process: the pages themselves stay where they are in
//! memory, so a move costs a small fraction of what faulting the same pages in fresh costs
//! (`crates/bench/c/page_cost.c` measures both). The source stays mapped and reads as zero
//! afterwards, so there is never a hole in the reservation that another `mmap` could take.
//!
//! A moved range keeps its page offset and so cannot merge with the mapping around its new
//! address: every move leaves the reservation in more mappings. [`remap_fresh`] replaces
//! ranges that hold nothing any more (free space) with a fresh mapping that merges with its
//! neighbours again. Callers count the mappings they create and heal them; the process-wide
//! limit (`vm.max_map_count`, 65,530 by default) is shared with the rest of the program.

/// Move the memory of `[from, from + len)` to `[to, to + len)` (page-aligned, disjoint, both
/// inside one reservation the caller owns; nothing at `to` is kept). Afterwards `from` reads
/// as zero. On failure the ranges are as before, except that `to` may have been replaced by a
/// fresh zero mapping (the kernel may have unmapped it before refusing): it reads as zero
/// either way. Returns whether the memory moved.
pub fn move_pages(from: usize, to: usize, len: usize, huge: bool) -> bool {
    // SAFETY: both ranges lie inside a private anonymous mapping the caller owns and nobody
    // else uses; MREMAP_FIXED replaces only `to`, and MREMAP_DONTUNMAP leaves `from` mapped.
    let p = unsafe {
        libc::mremap(
            from as *mut libc::c_void,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP,
            to as *mut libc::c_void,
        )
    };
    if p == libc::MAP_FAILED {
        // Whatever happened to `to`, make it ordinary zero memory of the reservation again.
        remap_fresh(&[(to, len)], huge);
        return false;
    }
    true
}

/// Replace each range (page-aligned, inside a reservation the caller owns, holding nothing
/// anyone needs: free space with no guard marker) with a fresh private anonymous mapping,
/// `MADV_HUGEPAGE` when `huge`, so that it merges with the mapping around it. Returns the
/// syscalls made.
pub fn remap_fresh(ranges: &[(usize, usize)], huge: bool) -> usize {
    for &(addr, len) in ranges {
        // SAFETY: the caller owns `[addr, addr + len)` and nothing lives in it (contract
        // above); MAP_FIXED replaces it atomically, so no other mapping can land there. The
        // huge-page advice is given below, for all ranges in one batch.
        let r = unsafe { crate::memfd::map_anonymous_fixed(addr, len, false) };
        debug_assert!(r.is_ok(), "mmap(MAP_FIXED) over our own range failed: {r:?}");
    }
    let mut calls = ranges.len();
    if huge {
        calls += crate::release::advise(ranges, libc::MADV_HUGEPAGE);
    }
    calls
}

/// Mappings that overlap `[base, base + len)`, from `/proc/self/maps` (for tests and reports;
/// it reads the whole file). A reservation whose neighbour merged with it still counts one.
pub fn mappings_over(base: usize, len: usize) -> usize {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return 0 };
    maps.lines()
        .filter_map(|l| {
            let (range, _) = l.split_once(' ')?;
            let (s, e) = range.split_once('-')?;
            Some((usize::from_str_radix(s, 16).ok()?, usize::from_str_radix(e, 16).ok()?))
        })
        .filter(|&(s, e)| s < base + len && e > base)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_pages_keep_their_contents_and_healing_rejoins_the_mapping() {
        let page = crate::page_size();
        let r = crate::Reservation::new(64 * page, page).unwrap();
        let (a, b) = (r.base() + 4 * page, r.base() + 32 * page);
        // SAFETY: both ranges lie in the reservation, which this test owns.
        unsafe { std::ptr::write_bytes(a as *mut u8, 0x5a, 8 * page) };
        assert!(move_pages(a, b, 8 * page, false));
        // SAFETY: as above.
        let (moved, left) = unsafe { (*((b + 5 * page + 7) as *const u8), *((a + 5 * page) as *const u8)) };
        assert_eq!((moved, left), (0x5a, 0));
        assert!(mappings_over(r.base(), r.len_bytes()) > 1, "a moved range is a mapping of its own");
        remap_fresh(&[(b, 8 * page)], false);
        assert_eq!(mappings_over(r.base(), r.len_bytes()), 1);
        // SAFETY: as above; the healed range is ordinary zero memory.
        assert_eq!(unsafe { *((b + 5 * page + 7) as *const u8) }, 0);
    }

    #[test]
    fn a_refused_move_leaves_zero_memory_at_the_target() {
        let page = crate::page_size();
        let r = crate::Reservation::new(16 * page, page).unwrap();
        let (a, b) = (r.base(), r.base() + 8 * page);
        // SAFETY: both ranges lie in the reservation, which this test owns.
        unsafe {
            std::ptr::write_bytes(a as *mut u8, 1, 4 * page);
            std::ptr::write_bytes(b as *mut u8, 2, 4 * page);
        }
        // A source that is not page-aligned is refused (EINVAL).
        assert!(!move_pages(a + 1, b, 2 * page, false));
        // SAFETY: as above.
        let (src, dst) = unsafe { (*(a as *const u8), *((b + page) as *const u8)) };
        assert_eq!((src, dst), (1, 0));
    }
}
