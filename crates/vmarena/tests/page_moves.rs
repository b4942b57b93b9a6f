//! Step Move on real memory (tier 2): an area carved from the tree takes the bytes of a lazily
//! freed area, a zeroed allocation still reads zero, and the reservation is one mapping once
//! everything is free again (`mremap`) or all along (`UFFDIO_MOVE`). The concurrent case is in
//! `stress.rs`.

mod common;

use common::{fill, verify};
use vmarena::*;
use vmarena_platform::page_move::mappings_over;
use vmarena_platform::uffd::Uffd;

const PAGE: usize = 4096;

/// A space whose moves are `mremap`s (`uffd_moves` off) or `UFFDIO_MOVE`s where the kernel has
/// them.
fn space(uffd_moves: bool) -> VmSpace {
    let so = SpaceOptions { space_bytes: 1 << 30, uffd_moves, ..Default::default() };
    let ao = ArenaOptions { nodes: 1, purge_thread: false, decay_interval_ms: 0, ..Default::default() };
    VmSpace::new("page-moves", so, ao).unwrap()
}

/// Mappings over the committed part of the reservation (the rest is one inaccessible mapping).
fn mappings(s: &VmSpace) -> usize {
    let (lo, _) = s.bounds();
    mappings_over(lo, s.committed_bytes())
}

/// Three adjacent 299-page areas (300 with the guard); the middle one filled with `tag` and
/// freed, so it is lazy between live neighbours. Returns the outer two.
fn lazy_between(s: &VmSpace, tag: u64) -> [*mut u8; 2] {
    let x = s.vmalloc(299 * PAGE).unwrap().as_ptr();
    let m = s.vmalloc(299 * PAGE).unwrap().as_ptr();
    let y = s.vmalloc(299 * PAGE).unwrap().as_ptr();
    assert_eq!((m as usize - x as usize, y as usize - m as usize), (300 * PAGE, 300 * PAGE));
    fill(m, 299 * PAGE, tag);
    s.vfree(m).unwrap();
    [x, y]
}

#[test]
fn a_new_area_holds_the_moved_bytes_and_the_mappings_heal_when_all_is_free() {
    let s = space(false);
    assert_eq!(mappings(&s), 1);
    let outer = lazy_between(&s, 0xC0FFEE);
    let c = s.vmalloc(999 * PAGE).unwrap().as_ptr();
    let st = s.stats(false).arena;
    assert_eq!((st.page_moves, st.moved_pages, st.move_failures), (1, 299, 0));
    // The donor's bytes are now the front of the new area; the rest is fresh.
    verify(c, 299 * PAGE, 0xC0FFEE);
    // SAFETY: the page lies inside the live area `c`.
    assert_eq!(unsafe { *c.add(500 * PAGE) }, 0);
    fill(c, 999 * PAGE, 7);
    assert!(mappings(&s) > 1, "the moved range is a mapping of its own while it is used");
    for p in outer.into_iter().chain([c]) {
        s.vfree(p).unwrap();
    }
    s.shrink();
    s.check().unwrap();
    assert_eq!(s.stats(false).arena.heals, 1);
    assert_eq!(mappings(&s), 1, "the heal made the reservation one mapping again");
    assert_eq!(s.resident_bytes(), 0);
}

/// The same move by `UFFDIO_MOVE`: the bytes arrive, and the reservation never splits, so
/// there is nothing to heal.
#[test]
fn a_move_by_userfaultfd_leaves_the_reservation_one_mapping() {
    if Uffd::new().is_none() {
        eprintln!("no UFFDIO_MOVE on this kernel: only the mremap moves are tested");
        return;
    }
    let s = space(true);
    let outer = lazy_between(&s, 0xFACADE);
    let c = s.vmalloc(999 * PAGE).unwrap().as_ptr();
    let st = s.stats(false).arena;
    assert_eq!((st.page_moves, st.moved_pages, st.move_failures, st.moved_maps), (1, 299, 0, 0));
    verify(c, 299 * PAGE, 0xFACADE);
    // SAFETY: the page lies inside the live area `c`.
    assert_eq!(unsafe { *c.add(500 * PAGE) }, 0);
    fill(c, 999 * PAGE, 9);
    assert_eq!(mappings(&s), 1, "a move by userfaultfd adds no mapping");
    // The donor's range is free space reading zero, and can be carved and written again.
    let d = s.vmalloc(299 * PAGE).unwrap().as_ptr();
    fill(d, 299 * PAGE, 11);
    verify(c, 999 * PAGE, 9);
    for p in outer.into_iter().chain([c, d]) {
        s.vfree(p).unwrap();
    }
    s.shrink();
    s.check().unwrap();
    assert_eq!(s.stats(false).arena.heals, 0);
    assert_eq!(mappings(&s), 1);
    assert_eq!(s.resident_bytes(), 0);
}

#[test]
fn a_zeroed_allocation_of_moved_memory_reads_zero() {
    for uffd_moves in [false, true] {
        let s = space(uffd_moves);
        let outer = lazy_between(&s, 0xBAD);
        let c = s.vzalloc(999 * PAGE).unwrap().as_ptr();
        assert_eq!(s.stats(false).arena.moved_pages, 299);
        // SAFETY: `c` is a live area of 999 pages.
        let bytes = unsafe { std::slice::from_raw_parts(c, 999 * PAGE) };
        assert!(bytes.iter().all(|&b| b == 0), "vzalloc cleared the moved pages ({uffd_moves})");
        for p in outer.into_iter().chain([c]) {
            s.vfree(p).unwrap();
        }
        s.check().unwrap();
    }
}
