//! Step Move (tiers 1 and 2): which lazy areas give their memory to an area carved from the
//! tree or to a lazy run's growth, what becomes of them, what the purge heals afterwards, and
//! what a refused move leaves. The backing records the moves instead of making them; `tests/page_moves.rs` of the vmarena
//! crate moves real memory.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use vmarena_core::Span;
use vmarena_engine::*;

/// One guard page per area, as a memory space has by default.
const GUARD: u64 = 1;

#[derive(Default)]
struct Log {
    moves: Mutex<Vec<(u64, u64, u64)>>,
    released: Mutex<Vec<(u64, u64)>>,
    released_free: Mutex<Vec<(u64, u64)>>,
    retired: Mutex<Vec<(u64, u64)>>,
    healed: Mutex<Vec<(u64, u64)>>,
    refuse: AtomicBool,
    /// Moves stay within the mapping (`UFFDIO_MOVE`): nothing to heal.
    in_place: AtomicBool,
}

struct MoveBacking(Arc<Log>);

impl Backing for MoveBacking {
    fn prepare(&self, _: u64, _: u64) {}
    fn release(&self, a: &[Span]) -> usize {
        self.0.released.lock().unwrap().extend(a.iter().map(|s| (s.start, s.pages)));
        1
    }
    fn retire(&self, a: &[Span]) -> usize {
        self.0.retired.lock().unwrap().extend(a.iter().map(|s| (s.start, s.pages)));
        1
    }
    fn zeroes_on_release(&self) -> bool {
        true
    }
    fn release_free(&self, r: &[Span]) -> usize {
        self.0.released_free.lock().unwrap().extend(r.iter().map(|s| (s.start, s.pages)));
        1
    }
    fn guard_pages(&self) -> u64 {
        GUARD
    }
    fn moves_pages(&self) -> bool {
        true
    }
    fn move_pages(&self, moves: &[(u64, u64, u64)]) -> Vec<Moved> {
        self.0.moves.lock().unwrap().extend_from_slice(moves);
        let how = if self.0.refuse.load(Relaxed) {
            Moved::No
        } else if self.0.in_place.load(Relaxed) {
            Moved::InPlace
        } else {
            Moved::Remapped
        };
        vec![how; moves.len()]
    }
    fn heal(&self, r: &[Span]) -> usize {
        self.0.healed.lock().unwrap().extend(r.iter().map(|s| (s.start, s.pages)));
        r.len()
    }
}

fn arena_with(page_moves: bool, lazy_split: bool) -> (Arena, Arc<Log>) {
    let log = Arc::new(Log::default());
    let opts = ArenaOptions {
        strategy: Strategy::Nodes,
        nodes: 1,
        purge_thread: false,
        decay_interval_ms: 0,
        thread_cache: false,
        page_moves,
        lazy_split,
        // As the default space: areas above 16 pages are never pooled.
        pool_max_pages: 16,
        ..Default::default()
    };
    (Arena::new("mover", 0, 1 << 20, opts, Box::new(MoveBacking(log.clone()))).unwrap(), log)
}

fn arena(page_moves: bool) -> (Arena, Arc<Log>) {
    arena_with(page_moves, true)
}

/// Three adjacent areas, the middle one of `pages` pages; the middle one freed, so it is lazy
/// with live neighbours (nothing can grow it) and only step Move can use its memory. Returns
/// its start.
fn lazy_between_of(a: &Arena, pages: u64) -> u64 {
    let x = a.alloc(&AllocRequest::pages(300)).unwrap();
    let m = a.alloc(&AllocRequest::pages(pages)).unwrap();
    let y = a.alloc(&AllocRequest::pages(300)).unwrap();
    assert_eq!((m.start, y.start), (x.start + 300, x.start + 300 + pages), "lowest fit, in a row");
    a.free(m.start).unwrap();
    assert_eq!(a.stats().lazy_pages, pages);
    m.start
}

/// A lazy area of 300 pages between live ones (see [`lazy_between_of`]).
fn lazy_between(a: &Arena) -> u64 {
    lazy_between_of(a, 300)
}

#[test]
fn a_lazy_area_that_fits_gives_all_its_data_pages_and_goes_to_the_tree() {
    let (a, log) = arena(true);
    let donor = lazy_between(&a);
    let free_before = a.stats().free_pages;
    let c = a.alloc(&AllocRequest::pages(1000)).unwrap();
    assert!(!c.fresh, "moved memory is not known to be zero");
    assert_eq!(*log.moves.lock().unwrap(), vec![(donor, c.start, 300 - GUARD)]);
    let st = a.stats();
    assert_eq!((st.page_moves, st.moved_pages, st.move_failures), (1, 299, 0));
    assert_eq!(st.lazy_pages, 0, "the donor left the lazy list");
    assert_eq!(st.free_pages, free_before - 1000 + 300, "the donor's range is free space");
    assert_eq!(*log.retired.lock().unwrap(), vec![(donor, 300)], "its guard was retired");
    assert!(log.released.lock().unwrap().is_empty(), "nothing left to release: the memory moved");
    assert_eq!(st.moved_maps, 2);
    a.check().unwrap();
}

#[test]
fn a_larger_lazy_area_gives_its_front_and_the_rest_stays_lazy() {
    // Without splits the 300-page lazy area serves no request of 261 pages in place: the tree
    // does, and the donor gives the area's 260 data pages.
    let (a, log) = arena_with(true, false);
    let donor = lazy_between(&a);
    let c = a.alloc(&AllocRequest::pages(261)).unwrap();
    assert_eq!(*log.moves.lock().unwrap(), vec![(donor, c.start, 260)]);
    let st = a.stats();
    assert_eq!((st.moved_pages, st.lazy_pages), (260, 40));
    assert!(log.retired.lock().unwrap().is_empty(), "the guard stays with the rest");
    a.check().unwrap();
    // The rest is still a lazy area of its own, guard at its end: the purge releases it whole.
    a.purge();
    assert_eq!(*log.released.lock().unwrap(), vec![(donor + 260, 40)]);
    assert_eq!(*log.retired.lock().unwrap(), vec![(donor + 260, 40)]);
    assert_eq!(a.stats().lazy_pages, 0);
    a.check().unwrap();
}

#[test]
fn a_lazy_run_grown_into_free_space_takes_moved_memory_for_its_growth() {
    let (a, log) = arena(true);
    // p is lazy between the arena's start and a live q; r is lazy with free space above it.
    let p = a.alloc(&AllocRequest::pages(400)).unwrap();
    let q = a.alloc(&AllocRequest::pages(400)).unwrap();
    let r = a.alloc(&AllocRequest::pages(300)).unwrap();
    assert_eq!((p.start, q.start, r.start), (0, 400, 800));
    a.free(p.start).unwrap();
    a.free(r.start).unwrap();
    // No lazy area holds 700 pages and p cannot grow: r grows up by 400 pages (399 of data and
    // the new guard), and p, the oldest lazy area, gives its 399 data pages to that growth.
    let c = a.alloc(&AllocRequest::pages(700)).unwrap();
    assert_eq!(c.start, r.start);
    assert!(!c.fresh);
    assert_eq!(*log.moves.lock().unwrap(), vec![(p.start, r.start + 300, 399)]);
    let st = a.stats();
    assert_eq!((st.lazy_extends, st.extend_pages, st.moved_pages), (1, 400, 399));
    assert_eq!(st.lazy_pages, 0, "the run and the donor both left the lazy list");
    assert_eq!(
        *log.retired.lock().unwrap(),
        vec![(r.start, 300), (p.start, 400)],
        "r's guard is inside the area now, p went to the tree"
    );
    a.check().unwrap();
    // The purge heals the growth's range once the area is gone.
    a.free(c.start).unwrap();
    a.free(q.start).unwrap();
    a.purge();
    assert_eq!(a.stats().moved_maps, 0);
    a.check().unwrap();
}

#[test]
fn the_purge_heals_an_area_once_its_whole_range_is_free() {
    let (a, log) = arena(true);
    let _donor = lazy_between(&a);
    let c = a.alloc(&AllocRequest::pages(1000)).unwrap();
    a.purge();
    assert!(log.healed.lock().unwrap().is_empty(), "the area is live: nothing to heal");
    assert_eq!(a.stats().moved_maps, 2);
    a.free(c.start).unwrap();
    a.purge();
    // Healed with the free space around it: here everything above it, up to the arena's end.
    assert_eq!(*log.healed.lock().unwrap(), vec![(c.start, (1 << 20) - c.start)]);
    let st = a.stats();
    assert_eq!((st.heals, st.moved_maps), (1, 0));
    a.check().unwrap();
}

/// A move that stays within the mapping (`UFFDIO_MOVE`) moves the same memory but adds no
/// mapping: nothing is recorded, so the purge heals nothing.
#[test]
fn an_in_place_move_leaves_nothing_to_heal() {
    let (a, log) = arena(true);
    log.in_place.store(true, Relaxed);
    let _donor = lazy_between(&a);
    let c = a.alloc(&AllocRequest::pages(1000)).unwrap();
    let st = a.stats();
    assert!(!c.fresh && st.moved_pages > 0 && st.page_moves > 0, "the donor's memory moved in: {st:?}");
    assert_eq!(st.moved_maps, 0);
    a.free(c.start).unwrap();
    a.purge();
    assert!(log.healed.lock().unwrap().is_empty(), "no mapping of its own: nothing to heal");
    assert_eq!(a.stats().heals, 0);
    a.check().unwrap();
}

#[test]
fn a_refused_move_releases_the_donor_as_a_purge_would() {
    let (a, log) = arena(true);
    log.refuse.store(true, Relaxed);
    let donor = lazy_between(&a);
    let c = a.alloc(&AllocRequest::pages(1000)).unwrap();
    assert!(c.fresh, "nothing moved: the area is fresh");
    let st = a.stats();
    assert_eq!((st.page_moves, st.moved_pages, st.move_failures, st.moved_maps), (1, 0, 1, 0));
    assert_eq!(*log.released.lock().unwrap(), vec![(donor, 300)]);
    assert_eq!(st.lazy_pages, 0);
    a.check().unwrap();
}

#[test]
fn nothing_moves_when_the_option_is_off_or_the_area_is_small() {
    let (a, log) = arena(false);
    lazy_between(&a);
    a.alloc(&AllocRequest::pages(1000)).unwrap();
    assert!(log.moves.lock().unwrap().is_empty());
    assert_eq!(a.stats().lazy_pages, 300);

    // A lazy area of 256 pages has 255 of data: less than one move takes.
    let (a, log) = arena(true);
    lazy_between_of(&a, 256);
    a.alloc(&AllocRequest::pages(1000)).unwrap();
    assert!(log.moves.lock().unwrap().is_empty());
    assert_eq!(a.stats().lazy_pages, 256);
    // One page more, 256 data pages, and they move.
    let (a, log) = arena(true);
    lazy_between_of(&a, 257);
    let c = a.alloc(&AllocRequest::pages(1000)).unwrap();
    assert_eq!(log.moves.lock().unwrap().len(), 1);
    assert_eq!(a.stats().moved_pages, 256);
    assert!(!c.fresh);
    a.check().unwrap();

    // Without splits, an area of 256 pages comes from the tree with 255 data pages: too few.
    let (a, log) = arena_with(true, false);
    lazy_between(&a);
    a.alloc(&AllocRequest::pages(256)).unwrap();
    assert!(log.moves.lock().unwrap().is_empty());
    assert_eq!(a.stats().lazy_pages, 300);
}
