//! `VmSpace` tests (tier 1): the vmalloc family on real memory, bad input, guards, purge.

mod common;

use std::ptr::NonNull;
use vmarena::*;

fn space(strategy: Strategy) -> VmSpace {
    let so = SpaceOptions { space_bytes: 1 << 30, ..Default::default() };
    let ao = ArenaOptions { strategy, purge_thread: false, decay_interval_ms: 0, ..Default::default() };
    VmSpace::new(&format!("test-{strategy}"), so, ao).unwrap()
}

#[test]
fn vmalloc_family_on_real_memory() {
    for st in Strategy::ALL {
        let s = space(st);
        let p = s.vmalloc(1).unwrap();
        assert_eq!(p.as_ptr() as usize % 4096, 0);
        assert_eq!(s.size(p.as_ptr()), Some(4096));
        assert!(s.contains(p.as_ptr()) && s.contains(unsafe { p.as_ptr().add(100) }));
        assert!(!s.contains(&st as *const _ as *const u8));
        // SAFETY: 4096 usable bytes.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0xA5, 4096) };
        let q = s.vmalloc_aligned(3 * 4096, 1 << 21).unwrap();
        assert_eq!(q.as_ptr() as usize % (1 << 21), 0);
        let z = s.vzalloc(5000).unwrap();
        // SAFETY: 8192 usable bytes.
        assert!(unsafe { std::slice::from_raw_parts(z.as_ptr(), 8192) }.iter().all(|&b| b == 0));
        s.vfree(p.as_ptr()).unwrap();
        s.vfree(q.as_ptr()).unwrap();
        s.vfree(z.as_ptr()).unwrap();
        assert_eq!(s.vfree(std::ptr::null_mut()), Ok(()));
        s.check().unwrap();
    }
}

/// `vfree_sized` reports what `size` said of the area, for small areas (thread caches) and
/// large ones, and refuses what `vfree` refuses.
#[test]
fn vfree_sized_reports_the_usable_bytes() {
    for st in Strategy::ALL {
        let s = space(st);
        for bytes in [1usize, 4096, 5000, 300 << 10, 3 << 20] {
            let p = s.vmalloc(bytes).unwrap().as_ptr();
            let usable = s.size(p).unwrap();
            assert!(usable >= bytes);
            assert_eq!(s.vfree_sized(p), Ok(usable), "{st} {bytes}");
            assert!(s.vfree_sized(p).is_err(), "{st}: a second free is refused");
        }
        assert_eq!(s.vfree_sized(std::ptr::null_mut()), Ok(0));
    }
}

#[test]
fn vzalloc_clears_reused_dirty_memory() {
    let s = space(Strategy::Nodes);
    let mut seen_reuse = false;
    for _ in 0..64 {
        let p = s.vmalloc(3 * 4096).unwrap();
        // SAFETY: 3 pages usable.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0xFF, 3 * 4096) };
        s.vfree(p.as_ptr()).unwrap();
        let z = s.vzalloc(3 * 4096).unwrap();
        seen_reuse |= z == p;
        // SAFETY: 3 pages usable.
        let bytes = unsafe { std::slice::from_raw_parts(z.as_ptr(), 3 * 4096) };
        assert!(bytes.iter().all(|&b| b == 0), "vzalloc returned dirty memory");
        s.vfree(z.as_ptr()).unwrap();
    }
    assert!(seen_reuse, "the dirty area was reused at least once");
    assert!(s.stats(false).vzalloc_memsets > 0);
    // After a purge the pooled areas are clean: vzalloc needs no memset.
    s.purge();
    let before = s.stats(false).vzalloc_memsets;
    let z = s.vzalloc(3 * 4096).unwrap();
    assert_eq!(s.stats(false).vzalloc_memsets, before, "released memory is known zero");
    s.vfree(z.as_ptr()).unwrap();
}

#[test]
fn vrealloc_keeps_contents() {
    for st in Strategy::ALL {
        let s = space(st);
        let p = s.vrealloc(None, 100).unwrap();
        // SAFETY: at least 100 bytes.
        unsafe { (0..100).for_each(|i| *p.as_ptr().add(i) = i as u8) };
        let same = s.vrealloc(Some(p), 4000).unwrap();
        assert_eq!(same, p, "growth within the page is in place");
        // A neighbour right after it.
        let next = s.vmalloc(4096).unwrap();
        assert_eq!(
            next.as_ptr() as usize,
            p.as_ptr() as usize + 2 * 4096,
            "{st}: a neighbour after the guard"
        );
        let big = s.vrealloc(Some(p), 5 * 4096).unwrap();
        assert_ne!(big, p);
        // SAFETY: at least 100 bytes.
        assert!((0..100).all(|i| unsafe { *big.as_ptr().add(i) } == i as u8));
        assert_eq!(s.vfree(p.as_ptr()), Err(VmError::NotLive(p.as_ptr() as usize)), "old area freed");
        let small = s.vrealloc(Some(big), 10).unwrap();
        assert_eq!(small, big, "shrink is in place");
        assert!((0..10).all(|i| unsafe { *small.as_ptr().add(i) } == i as u8));
        assert_eq!(s.vrealloc(Some(small), 0), Err(VmError::ZeroSize));
        s.vfree(small.as_ptr()).unwrap();
        s.vfree(next.as_ptr()).unwrap();
        s.check().unwrap();
    }
}

fn moves_space(moves: bool) -> VmSpace {
    let so = SpaceOptions { space_bytes: 1 << 30, ..Default::default() };
    let ao = ArenaOptions {
        strategy: Strategy::Nodes,
        page_moves: moves,
        purge_thread: false,
        decay_interval_ms: 0,
        ..Default::default()
    };
    VmSpace::new("moves", so, ao).unwrap()
}

fn stamp(p: NonNull<u8>, bytes: usize) {
    for off in (0..bytes).step_by(4096) {
        // SAFETY: inside the caller's live area.
        unsafe { (p.as_ptr().add(off) as *mut u64).write(off as u64 ^ 0x5a5a) };
    }
}

fn stamped(p: NonNull<u8>, bytes: usize) -> bool {
    // SAFETY: inside the caller's live area.
    (0..bytes)
        .step_by(4096)
        .all(|off| unsafe { (p.as_ptr().add(off) as *const u64).read() } == off as u64 ^ 0x5a5a)
}

/// A large area (above the pools and the thread caches) whose next pages are free grows where
/// it lies: into the tree's free space, into the front of the freed area after it (the rest
/// stays lazy and is handed out by the next request of its size), or into all of that area
/// when it is within the slack. Contents stay, nothing moves or is copied, and the arena's
/// invariants hold after each.
#[test]
fn vrealloc_grows_a_large_area_in_place_into_the_free_pages_after_it() {
    let mib = 1usize << 20;
    for from in ["tree", "lazy front", "lazy whole"] {
        let s = moves_space(true);
        let p = s.vmalloc(2 * mib).unwrap();
        stamp(p, 2 * mib);
        let next = (from != "tree").then(|| {
            let n = s.vmalloc(2 * mib).unwrap();
            assert_eq!(n.as_ptr() as usize, p.as_ptr() as usize + 2 * mib + 4096, "{from}: a neighbour");
            s.vfree(n.as_ptr()).unwrap();
            n
        });
        // Into all of the freed neighbour: its pages and its guard, less the grown area's old
        // guard, which becomes data.
        let to = if from == "lazy whole" { 4 * mib + 4096 } else { 3 * mib };
        let moved = s.stats(false).arena.moved_pages;
        let q = s.vrealloc(Some(p), to).unwrap();
        assert_eq!(q, p, "{from}: grown in place");
        assert_eq!(s.size(p.as_ptr()), Some(to), "{from}");
        assert!(stamped(p, 2 * mib), "{from}: contents kept");
        let st = s.stats(false).arena;
        assert_eq!(st.grown_in_place, 1, "{from}");
        assert_eq!(st.grown_in_place_pages as usize, (to - 2 * mib) / 4096, "{from}");
        assert_eq!(st.moved_pages, moved, "{from}: nothing moved");
        s.check().unwrap();
        stamp(p, to);
        if from == "lazy front" {
            // The rest of the freed neighbour is still lazy, and reusable.
            let rest = s.vmalloc(mib).unwrap();
            assert_eq!(rest.as_ptr() as usize, next.unwrap().as_ptr() as usize + mib, "the rest");
            assert!(stamped(p, to), "{from}: the rest's reuse did not touch the grown area");
            s.vfree(rest.as_ptr()).unwrap();
        }
        assert_eq!(s.vfree(p.as_ptr()), Ok(()));
        assert_eq!(s.vfree(p.as_ptr()), Err(VmError::NotLive(p.as_ptr() as usize)), "{from}: one area");
        s.purge();
        s.check().unwrap();
        assert_eq!(s.stats(false).arena.live_areas, 0);
    }
}

/// A large area that grows (a neighbour right after it) moves its pages by `UFFDIO_MOVE`
/// instead of copying them: every page's bytes arrive, the old area's memory goes with them
/// (the space holds one copy, not two), the emptied old area goes to the free tree rather than
/// a lazy list (where it would pass for resident memory), and the arena counts the move. With
/// page moves off the bytes are copied and both copies stay resident until a purge, the old
/// one lazy.
#[test]
fn vrealloc_moves_a_large_areas_pages() {
    let old_bytes = 8 << 20;
    for moves in [true, false] {
        let s = moves_space(moves);
        let p = s.vmalloc(old_bytes).unwrap();
        let next = s.vmalloc(1 << 20).unwrap();
        assert_eq!(
            next.as_ptr() as usize,
            p.as_ptr() as usize + old_bytes + 4096,
            "a neighbour after the guard"
        );
        stamp(p, old_bytes);
        let before = s.stats(false).arena.moved_pages;
        let q = s.vrealloc(Some(p), 2 * old_bytes).unwrap();
        assert_ne!(q, p);
        assert!(stamped(q, old_bytes), "contents arrived");
        let st = s.stats(false).arena;
        let moved = st.moved_pages - before;
        let resident = s.resident_bytes() as usize;
        // The old area, lazy after a copy: its data pages and its guard.
        let old_lazy = (old_bytes / 4096 + 1) as u64;
        if moves && vmarena_platform::uffd::Uffd::new().is_none() {
            eprintln!("no UFFDIO_MOVE here (Linux 6.8+, userfaultfd allowed): the bytes were copied");
            assert_eq!(moved, 0);
            assert_eq!((st.emptied_on_free, st.lazy_pages), (0, old_lazy));
        } else if moves {
            assert_eq!(moved as usize, old_bytes / 4096, "every data page moved");
            assert!(resident < old_bytes + (2 << 20), "one copy resident: {resident}");
            assert_eq!((st.emptied_on_free, st.lazy_pages), (1, 0), "the emptied area is not lazy");
            // Its range is free space again: a request of its size is carved there.
            let again = s.vmalloc(old_bytes).unwrap();
            assert_eq!(again, p, "the old range reused from the tree");
            s.vfree(again.as_ptr()).unwrap();
        } else {
            assert_eq!(moved, 0);
            assert!(resident >= 2 * old_bytes, "the copy and the lazily freed original: {resident}");
            assert_eq!((st.emptied_on_free, st.lazy_pages), (0, old_lazy));
        }
        s.check().unwrap();
        assert_eq!(s.vfree(p.as_ptr()), Err(VmError::NotLive(p.as_ptr() as usize)), "old area freed");
        s.vfree(q.as_ptr()).unwrap();
        s.vfree(next.as_ptr()).unwrap();
        s.purge();
        s.check().unwrap();
    }
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    for st in Strategy::ALL {
        let s = space(st);
        let live = s.vmalloc(8192).unwrap();
        let freed = s.vmalloc(4096).unwrap();
        s.vfree(freed.as_ptr()).unwrap();
        let before = (s.stats(false).arena, s.vmallocinfo());
        assert_eq!(s.vmalloc(0), Err(VmError::ZeroSize));
        assert_eq!(s.vzalloc(0), Err(VmError::ZeroSize));
        assert_eq!(s.vmalloc(usize::MAX), Err(VmError::Overflow(usize::MAX)));
        assert!(
            matches!(s.vmalloc(usize::MAX - 4095), Err(VmError::NoSpace(ref m)) if m.contains("larger than the whole"))
        );
        assert_eq!(s.vmalloc_aligned(4096, 3), Err(VmError::BadAlignment(3)));
        assert_eq!(s.vmalloc_aligned(4096, 0), Err(VmError::BadAlignment(0)));
        assert!(
            matches!(s.vmalloc(2 << 30), Err(VmError::NoSpace(ref m)) if m.contains("test-") && m.contains("1024 MiB"))
        );
        // Fill the space, then ask for more than is left: the full purge runs and the error
        // names the space and its limits.
        let hog = s.vmalloc((1 << 30) - 64 * 4096).unwrap();
        assert!(
            matches!(s.vmalloc(256 * 1024), Err(VmError::NoSpace(ref m)) if m.contains("restricted to") && m.contains("after a full purge"))
        );
        s.vfree(hog.as_ptr()).unwrap();
        let interior = unsafe { live.as_ptr().add(4096) };
        assert_eq!(s.vfree(interior), Err(VmError::NotLive(interior as usize)));
        let unaligned = unsafe { live.as_ptr().add(1) };
        assert_eq!(s.vfree(unaligned), Err(VmError::NotLive(unaligned as usize)));
        assert_eq!(s.vfree(freed.as_ptr()), Err(VmError::NotLive(freed.as_ptr() as usize)), "double free");
        let mut local = 0u64;
        let foreign = &mut local as *mut u64 as *mut u8;
        assert_eq!(s.vfree(foreign), Err(VmError::NotLive(foreign as usize)));
        assert_eq!(s.size(interior), None);
        assert!(s.vrealloc(NonNull::new(interior), 10).is_err());
        let mut after = s.stats(false).arena;
        // Interior and double free reach the arena; unaligned and foreign pointers are refused
        // by the space before that.
        assert_eq!(after.bad_frees, before.0.bad_frees + 2);
        assert_eq!(after.alloc_failures, before.0.alloc_failures + 1);
        after.bad_frees = before.0.bad_frees;
        // The oversized request ran the full purge of the failure path (which changes pools
        // and counters) and was then refused; compare what callers can see.
        assert_eq!((after.live_areas, after.live_pages), (before.0.live_areas, before.0.live_pages));
        let info = s.vmallocinfo();
        assert_eq!(info.lines().filter(|l| l.ends_with("vmalloc")).count(), 1, "{st}: {info}");
        assert_eq!(s.size(live.as_ptr()), Some(8192));
        s.vfree(live.as_ptr()).unwrap();
        s.check().unwrap();
    }
}

#[test]
fn nonblocking_never_purges() {
    let so = SpaceOptions { space_bytes: 64 * 4096, ..Default::default() };
    let ao = ArenaOptions { purge_thread: false, decay_interval_ms: 0, ..Default::default() };
    let s = VmSpace::new("tiny", so, ao).unwrap();
    let p = s.vmalloc(63 * 4096).unwrap();
    s.vfree(p.as_ptr()).unwrap();
    assert_eq!(s.vmalloc_nonblocking(2 * 4096), Err(VmError::WouldBlock));
    let q = s.vmalloc(2 * 4096).unwrap();
    s.vfree(q.as_ptr()).unwrap();
}

#[test]
fn vmallocinfo_has_the_kernel_format() {
    let s = space(Strategy::Nodes);
    let p = s.vmalloc(2 * 4096).unwrap();
    let q = s.vmalloc(4096).unwrap();
    s.vfree(q.as_ptr()).unwrap();
    let info = s.vmallocinfo();
    let lines: Vec<&str> = info.lines().collect();
    assert_eq!(lines.len(), 2, "{info}");
    let live = lines.iter().find(|l| l.ends_with(" vmalloc")).unwrap();
    let want = format!("0x{:016x}-0x{:016x}   12288 ", p.as_ptr() as usize, p.as_ptr() as usize + 12288);
    assert!(live.starts_with(&want), "{live}");
    assert!(live.contains("tests/space.rs:") && live.contains(" pages=2 vmalloc"), "{live}");
    let lazy = lines.iter().find(|l| l.ends_with("unpurged vm_area")).unwrap();
    assert!(
        lazy.starts_with(&format!("0x{:016x}-", q.as_ptr() as usize)) && lazy.contains("    8192 "),
        "{lazy}"
    );
    s.vfree(p.as_ptr()).unwrap();
}

#[test]
fn purge_returns_memory_at_once() {
    let s = space(Strategy::Nodes);
    let ptrs: Vec<_> = (0..64).map(|_| s.vmalloc(256 * 1024).unwrap()).collect();
    for p in &ptrs {
        // SAFETY: 256 KiB usable.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 1, 256 * 1024) };
    }
    assert!(s.resident_bytes() >= 16 << 20);
    for p in ptrs {
        s.vfree(p.as_ptr()).unwrap();
    }
    assert!(s.resident_bytes() >= 16 << 20, "lazy: still resident before the purge");
    let released = s.purge();
    assert_eq!(released, 64 * 65, "pages of every area, guard pages included");
    assert_eq!(s.resident_bytes(), 0);
}

/// A request larger than every lazy area joins adjacent ones: the guards between them are
/// removed, so writing the whole new area does not fault, and the old contents are there.
#[test]
fn joined_lazy_areas_have_no_guard_inside() {
    let so = SpaceOptions { space_bytes: 1 << 30, ..Default::default() };
    let ao = ArenaOptions { nodes: 1, decay_interval_ms: 0, ..Default::default() };
    let s = VmSpace::new("join", so, ao).unwrap();
    let mib = 1 << 20;
    let a = s.vmalloc(2 * mib).unwrap();
    let b = s.vmalloc(2 * mib).unwrap();
    let c = s.vmalloc(2 * mib).unwrap();
    assert_eq!(b.as_ptr() as usize, a.as_ptr() as usize + 2 * mib + 4096, "the test needs adjacent areas");
    // SAFETY: 2 MiB each.
    unsafe {
        std::ptr::write_bytes(a.as_ptr(), 1, 2 * mib);
        std::ptr::write_bytes(b.as_ptr(), 2, 2 * mib);
    }
    s.vfree(a.as_ptr()).unwrap();
    s.vfree(b.as_ptr()).unwrap();
    let j = s.vmalloc(3 * mib).unwrap();
    assert_eq!(j, a);
    assert_eq!(s.stats(false).arena.lazy_joins, 1);
    // SAFETY: 3 MiB of data; a's old guard page, at 2 MiB, is data now.
    let bytes = unsafe { std::slice::from_raw_parts_mut(j.as_ptr(), 3 * mib) };
    assert_eq!(bytes[0], 1);
    assert_eq!(bytes[2 * mib + 4096], 2, "b's first byte, kept resident");
    bytes.fill(7);
    s.vfree(j.as_ptr()).unwrap();
    s.vfree(c.as_ptr()).unwrap();
    s.check().unwrap();
}

/// A lazy area followed by free space grows into it: its old guard page becomes data.
#[test]
fn a_grown_lazy_area_has_no_guard_inside() {
    let so = SpaceOptions { space_bytes: 1 << 30, ..Default::default() };
    let ao = ArenaOptions { nodes: 1, decay_interval_ms: 0, ..Default::default() };
    let s = VmSpace::new("extend", so, ao).unwrap();
    let mib = 1 << 20;
    let a = s.vmalloc(2 * mib).unwrap();
    // SAFETY: 2 MiB.
    unsafe { std::ptr::write_bytes(a.as_ptr(), 3, 2 * mib) };
    s.vfree(a.as_ptr()).unwrap();
    let g = s.vmalloc(3 * mib).unwrap();
    assert_eq!(g, a);
    assert_eq!(s.stats(false).arena.lazy_extends, 1);
    // SAFETY: 3 MiB of data; a's old guard page, at 2 MiB, is data now.
    let bytes = unsafe { std::slice::from_raw_parts_mut(g.as_ptr(), 3 * mib) };
    assert_eq!(bytes[0], 3, "the reused part keeps its pages");
    assert_eq!(bytes[3 * mib - 1], 0, "the growth is fresh");
    bytes.fill(9);
    s.vfree(g.as_ptr()).unwrap();
    s.check().unwrap();
}

/// A lazy area reused whole within the slack (`lazy_slack_percent`, on in the default space):
/// `size` reports all of it, and `vzalloc` clears all of it, not only the pages asked for.
#[test]
fn an_area_reused_whole_within_the_slack_is_usable_and_zeroed_whole() {
    let so = SpaceOptions { space_bytes: 1 << 30, ..Default::default() };
    let ao = ArenaOptions {
        purge_thread: false,
        decay_interval_ms: 0,
        pool_max_pages: 16,
        thread_cache: false,
        lazy_slack_percent: DEFAULT_SPACE_LAZY_SLACK_PERCENT,
        ..Default::default()
    };
    let s = VmSpace::new("slack", so, ao).unwrap();
    let page = 4096;
    let p = s.vmalloc(300 * page).unwrap();
    // SAFETY: 300 pages usable.
    unsafe { std::ptr::write_bytes(p.as_ptr(), 0xC3, 300 * page) };
    s.vfree(p.as_ptr()).unwrap();
    // 250 data pages and a guard against 301 pages: 50 pages of slack, within 50%.
    let z = s.vzalloc(250 * page).unwrap();
    assert_eq!(z, p, "the lazy area, whole");
    assert_eq!(s.size(z.as_ptr()), Some(300 * page));
    // SAFETY: 300 pages usable.
    let bytes = unsafe { std::slice::from_raw_parts(z.as_ptr(), 300 * page) };
    assert!(bytes.iter().all(|&b| b == 0), "the slack pages read zero too");
    assert_eq!(s.stats(false).arena.slack_pages, 50);
    s.vfree(z.as_ptr()).unwrap();
    s.check().unwrap();
}

/// Congruent areas (`pcpu_get_vm_areas`): each at its offset from one aligned base, each its
/// own area with its own contents, freed one by one; bad offsets and overlaps (a guard page
/// included) are refused with nothing changed.
#[test]
fn congruent_areas_sit_at_their_offsets_and_are_areas_of_their_own() {
    let so = SpaceOptions { space_bytes: 1 << 30, ..Default::default() };
    let ao = ArenaOptions { purge_thread: false, decay_interval_ms: 0, ..Default::default() };
    let s = VmSpace::new("congruent", so, ao).unwrap();
    let page = 4096;
    let unit = 64 * page;
    let parts: Vec<(usize, usize)> = (0..4).map(|cpu| (cpu * unit, 10 * page + 1)).collect();
    let areas = s.vmalloc_congruent(&parts, 1 << 20).unwrap();
    assert_eq!(areas.len(), 4);
    let base = areas[0].as_ptr() as usize;
    assert_eq!(base % (1 << 20), 0, "aligned base");
    for (i, p) in areas.iter().enumerate() {
        assert_eq!(p.as_ptr() as usize, base + i * unit, "area {i} at its offset");
        assert_eq!(s.size(p.as_ptr()), Some(11 * page), "area {i}: its size in whole pages");
        common::fill(p.as_ptr(), 11 * page, i as u64 + 1);
    }
    for (i, p) in areas.iter().enumerate() {
        common::verify(p.as_ptr(), 11 * page, i as u64 + 1);
    }
    let before = s.stats(false).arena.live_areas;
    assert!(matches!(s.vmalloc_congruent(&[(100, page)], page), Err(VmError::Invalid(_))));
    assert!(matches!(s.vmalloc_congruent(&[(0, page)], 3 * page), Err(VmError::BadAlignment(_))));
    // One page of data and its guard: the next area may start two pages on, not one.
    assert!(matches!(s.vmalloc_congruent(&[(0, page), (page, page)], page), Err(VmError::Invalid(_))));
    let tight = s.vmalloc_congruent(&[(0, page), (2 * page, page)], page).unwrap();
    assert_eq!(tight[1].as_ptr() as usize - tight[0].as_ptr() as usize, 2 * page);
    assert_eq!(s.stats(false).arena.live_areas, before + 2);
    for p in areas.iter().chain(&tight) {
        s.vfree(p.as_ptr()).unwrap();
    }
    assert_eq!(s.stats(false).arena.live_areas, 0);
    s.check().unwrap();
}

/// Four threads grow their own large areas with `vrealloc` (in place, or moving or copying
/// their pages) while the others allocate and free around them; every page carries its
/// owner's stamp, checked after each growth and before each free: an area grown over a
/// neighbour, pages moved into the wrong place or lost would show.
#[test]
fn concurrent_growth_keeps_every_owners_pages() {
    let s = moves_space(true);
    let relocated = std::thread::scope(|sc| {
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let s = &s;
                sc.spawn(move || {
                    let mut x = 0x2545_f491_4f6c_dd1du64 ^ ((t + 1) * 0x9e37);
                    let mut live: Vec<(NonNull<u8>, usize, u64)> = Vec::new();
                    // Growths that gave the area a new address (moved or copied).
                    let mut relocated = 0u64;
                    let fill = |p: NonNull<u8>, from: usize, to: usize, v: u64| {
                        for off in (from.next_multiple_of(4096)..to).step_by(4096) {
                            // SAFETY: inside this thread's live area.
                            unsafe { (p.as_ptr().add(off) as *mut u64).write(v ^ off as u64) };
                        }
                    };
                    // The first page of `[0, to)` that lacks its stamp: its offset, and the
                    // stamp found xor the offset (another owner's stamp, or the offset for zeros).
                    let lost = |p: NonNull<u8>, to: usize, v: u64| {
                        (0..to).step_by(4096).find_map(|off| {
                            // SAFETY: inside this thread's live area.
                            let got = unsafe { (p.as_ptr().add(off) as *const u64).read() };
                            (got != v ^ off as u64).then_some((off, got ^ off as u64))
                        })
                    };
                    let holds = |p: NonNull<u8>, to: usize, v: u64| lost(p, to, v).is_none();
                    for i in 0..300u64 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        match x % 4 {
                            0 | 1 if !live.is_empty() => {
                                let k = (x >> 8) as usize % live.len();
                                let (p, len, v) = live[k];
                                let grown = len + (1 << 20) + (x >> 20) as usize % (3 << 20);
                                let before = lost(p, len, v);
                                assert!(
                                    before.is_none(),
                                    "thread {t}: area overwritten: {before:x?}, stamp {v:x}"
                                );
                                let q = s.vrealloc(Some(p), grown).unwrap();
                                let bad = lost(q, len, v);
                                assert!(
                                    bad.is_none(),
                                    "thread {t}: contents lost in a growth of {len} to {grown} bytes \
                                     (in place: {}): (offset, stamp found) {bad:x?}, stamp {v:x}",
                                    q == p
                                );
                                relocated += u64::from(q != p);
                                fill(q, len, grown, v);
                                live[k] = (q, grown, v);
                            }
                            2 if live.len() > 2 => {
                                let (p, len, v) = live.swap_remove((x >> 8) as usize % live.len());
                                assert!(holds(p, len, v), "thread {t}: area overwritten");
                                s.vfree(p.as_ptr()).unwrap();
                            }
                            _ => {
                                let len = (1 << 20) + (x >> 12) as usize % (2 << 20);
                                let p = s.vmalloc(len).unwrap();
                                let v = t << 40 | i << 8;
                                fill(p, 0, len, v);
                                live.push((p, len, v));
                            }
                        }
                        if live.iter().map(|l| l.1).sum::<usize>() > (96 << 20) {
                            let (p, len, v) = live.swap_remove(0);
                            assert!(holds(p, len, v), "thread {t}: area overwritten");
                            s.vfree(p.as_ptr()).unwrap();
                        }
                    }
                    for (p, len, v) in live {
                        assert!(holds(p, len, v), "thread {t}: area overwritten");
                        s.vfree(p.as_ptr()).unwrap();
                    }
                    relocated
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum::<u64>()
    });
    s.purge();
    s.check().unwrap();
    let st = s.stats(false).arena;
    assert_eq!(st.live_areas, 0);
    // Both ways of growing ran: where the pages after an area were free, and to a new address.
    assert!(st.grown_in_place > 0, "no growth in place: {st:?}");
    assert!(relocated > 0, "no growth to a new address");
}
