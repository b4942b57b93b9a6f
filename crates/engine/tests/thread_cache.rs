//! Thread caches (per-thread magazines in front of the node pools), on integers. The per-CPU
//! stacks in front of the magazines are off here, so that what a thread frees stays its own;
//! `cpu_cache.rs` tests them, and the concurrent tests below run with them too.

use std::collections::HashMap;
use std::panic::Location;
use std::sync::{Arc, Barrier, Mutex};
use vmarena_engine::{
    AllocRequest, AreaTag, Arena, ArenaOptions, FreeError, NoBacking, Strategy, UNKNOWN_BYTES,
};

/// Areas handed to a worker to free: `(start, pages, owner)`.
type Mailboxes = Arc<Vec<Mutex<Vec<(u64, u64, usize)>>>>;

/// The magazines alone: no per-CPU stacks in front, no depot behind (what a full stack spills
/// goes through the busy map at once; the depot's tests below turn it on).
fn opts() -> ArenaOptions {
    ArenaOptions {
        strategy: Strategy::Nodes,
        nodes: 2,
        purge_thread: false,
        decay_interval_ms: 0,
        thread_cache_max_pages: 8,
        thread_cache_pages: 64,
        cpu_cache: false,
        thread_cache_depot: false,
        ..Default::default()
    }
}

/// [`opts`] with the per-CPU stacks in front of the magazines.
fn opts_cpu() -> ArenaOptions {
    ArenaOptions { cpu_cache: true, ..opts() }
}

fn arena() -> Arena {
    let a = Arena::new("tc", 0x1000, 0x1000 + (1 << 20), opts(), Box::new(NoBacking)).unwrap();
    assert_eq!(a.thread_cache_off(), None, "this machine supports thread caches");
    a
}

#[test]
fn a_freed_small_area_is_the_next_allocation_of_its_size_without_a_lock() {
    let a = arena();
    let x = a.alloc(&AllocRequest::pages(2)).unwrap();
    a.free(x.start).unwrap();
    let st = a.stats();
    assert_eq!((st.cached_areas, st.cached_pages, st.live_areas, st.lazy_pages), (1, 2, 0, 0));
    let node_acq = |a: &Arena| a.lock_stats().iter().map(|(_, l)| l.acquisitions).sum::<u64>();
    let before = node_acq(&a);
    let y = a.alloc_cached(2, None).expect("hit");
    assert_eq!(y, x.start);
    assert_eq!(node_acq(&a), before, "a hit takes no lock");
    let st = a.stats();
    assert_eq!((st.cache_hits, st.cached_areas, st.live_areas, st.live_pages), (1, 0, 1, 2));
    // Other sizes miss and leave the cache alone.
    assert_eq!(a.alloc_cached(3, None), None);
    a.check().unwrap();
}

#[test]
fn live_pages_answers_small_areas_without_a_lock_and_refuses_cached_ones() {
    let a = arena();
    let node_acq = |a: &Arena| a.lock_stats().iter().map(|(_, l)| l.acquisitions).sum::<u64>();
    let x = a.alloc(&AllocRequest::pages(3)).unwrap();
    let big = a.alloc(&AllocRequest::pages(40)).unwrap();
    let before = node_acq(&a);
    assert_eq!(a.live_pages(x.start), Some(3));
    assert_eq!(node_acq(&a), before, "a small live area answers from its word");
    assert_eq!(a.live_pages(x.start + 1), None, "not a start");
    assert_eq!(a.live_pages(big.start), Some(40), "a large area from the busy map");
    assert!(node_acq(&a) > before);
    a.free(x.start).unwrap();
    assert_eq!(a.stats().cached_areas, 1);
    assert_eq!(a.live_pages(x.start), None, "cached: free for the user");
    a.free(big.start).unwrap();
    assert_eq!(a.live_pages(big.start), None);
    assert_eq!(a.live_pages(0), None, "outside the arena");
    a.check().unwrap();
}

#[test]
fn an_aligned_request_takes_the_newest_cached_area_that_is_aligned() {
    let a = arena();
    let req = |align_pages| AllocRequest { align_pages, ..AllocRequest::pages(3) };
    // Three areas of 3 pages, each the only start of its alignment class: one at a multiple of
    // 64 pages, then two that are not multiples of 8.
    let x64 = a.alloc(&req(64)).unwrap();
    assert_eq!(x64.start % 64, 0);
    let mut odd = Vec::new();
    while odd.len() < 2 {
        let y = a.alloc(&AllocRequest::pages(3)).unwrap();
        if y.start % 8 != 0 {
            odd.push(y.start);
        }
    }
    a.free(x64.start).unwrap();
    for &s in &odd {
        a.free(s).unwrap();
    }
    assert_eq!(a.stats().cached_areas, 3);
    // The aligned one sits under two newer entries and is found from the top.
    assert_eq!(a.alloc_cached_aligned(3, 64, None), Some(x64.start));
    assert_eq!(a.alloc_cached_aligned(3, 8, None), None, "no other cached start is a multiple of 8");
    // The others kept their order: newest first.
    assert_eq!(a.alloc_cached(3, None), Some(odd[1]));
    assert_eq!(a.alloc_cached(3, None), Some(odd[0]));
    assert_eq!(a.alloc_cached_aligned(3, 3, None), None, "an alignment that is not a power of two");
    // Through `Arena::alloc`, an aligned request served by the cache.
    a.free(x64.start).unwrap();
    let hits = a.stats().cache_hits;
    assert_eq!(a.alloc(&req(16)).unwrap().start, x64.start);
    assert_eq!(a.stats().cache_hits, hits + 1);
    a.check().unwrap();
}

#[test]
fn a_burst_of_64_frees_of_one_size_fits_with_the_default_budget() {
    let d = ArenaOptions::default();
    let o = ArenaOptions {
        thread_cache_max_pages: d.thread_cache_max_pages,
        thread_cache_pages: d.thread_cache_pages,
        ..opts()
    };
    let a = Arena::new("burst", 0x1000, 0x1000 + (1 << 20), o, Box::new(NoBacking)).unwrap();
    let xs: Vec<_> = (0..65).map(|_| a.alloc(&AllocRequest::pages(2)).unwrap().start).collect();
    for &x in &xs[..64] {
        a.free(x).unwrap();
    }
    let st = a.stats();
    assert_eq!((st.cached_areas, st.cache_flushes), (64, 0), "a burst of 64 fits");
    let hits = st.cache_hits;
    for _ in 0..64 {
        a.alloc(&AllocRequest::pages(2)).unwrap();
    }
    assert_eq!(a.stats().cache_hits, hits + 64);
    a.check().unwrap();
    for &x in &xs[..64] {
        a.free(x).unwrap();
    }
    // The 65th free finds the stack full: its 32 oldest areas go to the nodes in one batch,
    // one lock acquisition per busy shard (2 nodes here), and the newest stays cached.
    let lock_acq = |a: &Arena| a.lock_stats().iter().map(|(_, l)| l.acquisitions).sum::<u64>();
    let before = lock_acq(&a);
    a.free(xs[64]).unwrap();
    let taken = lock_acq(&a) - before;
    assert!((1..=2).contains(&taken), "one acquisition per shard, not per area: {taken}");
    let st = a.stats();
    assert_eq!((st.cached_areas, st.cache_flushes), (33, 32), "half spilled, the newest cached");
    assert_eq!(st.lazy_pages, 64, "the spilled areas wait for a purge as usual");
    a.check().unwrap();
    assert_eq!(a.alloc_cached(2, None), Some(xs[64]), "the newest free is the next hit");
    assert_eq!(a.alloc_cached(2, None), Some(xs[63]));
    // The oldest ones left: they are back in the pools, not in the magazine.
    let cached: Vec<u64> = (0..31).map(|_| a.alloc_cached(2, None).unwrap()).collect();
    assert!(cached.iter().all(|x| !xs[..32].contains(x)), "{cached:x?}");
    assert_eq!(a.alloc_cached(2, None), None);
    a.check().unwrap();
}

/// Allocate `n` areas of `pages` pages each and free them in order (into the cache, while it
/// has room).
fn alloc_free(a: &Arena, pages: u64, n: usize) -> Vec<u64> {
    let xs: Vec<_> = (0..n).map(|_| a.alloc(&AllocRequest::pages(pages)).unwrap().start).collect();
    for &x in &xs {
        a.free(x).unwrap();
    }
    xs
}

#[test]
fn a_free_into_a_full_budget_evicts_the_oldest_area_of_the_largest_larger_size() {
    // Budget 64 pages; sizes of 8, 7, 6 pages hold 2 areas each, 5 pages 3, 4 pages 4.
    let a = arena();
    let eights = alloc_free(&a, 8, 2);
    for (pages, n) in [(7, 2), (6, 2), (5, 2), (4, 3)] {
        alloc_free(&a, pages, n);
    }
    let st = a.stats();
    assert_eq!((st.cached_areas, st.cached_pages, st.cache_flushes), (11, 64, 0), "the budget is full");
    let three = a.alloc(&AllocRequest::pages(3)).unwrap().start;
    a.free(three).unwrap();
    let after = a.stats();
    assert_eq!((after.cached_areas, after.cached_pages), (11, 64 - 8 + 3), "one 8-page area made room");
    assert_eq!((after.cache_flushes, after.cache_drained), (0, st.cache_drained + 1));
    assert_eq!(after.lazy_pages, st.lazy_pages + 8, "it went to its node, resident");
    a.check().unwrap();
    // The newest 8-page area stayed, the oldest did not; the 3-page area is cached.
    assert_eq!(a.alloc_cached(8, None), Some(eights[1]));
    assert_eq!(a.alloc_cached(8, None), None);
    assert_eq!(a.alloc_cached(3, None), Some(three));
    a.check().unwrap();
}

#[test]
fn a_free_that_only_smaller_areas_could_make_room_for_goes_to_its_node() {
    let a = arena();
    for (pages, n) in [(1, 16), (2, 8), (3, 5), (4, 4)] {
        alloc_free(&a, pages, n);
    }
    let st = a.stats();
    assert_eq!((st.cached_pages, st.cache_flushes), (63, 0));
    let five = a.alloc(&AllocRequest::pages(5)).unwrap().start;
    a.free(five).unwrap();
    let after = a.stats();
    assert_eq!((after.cached_areas, after.cached_pages), (st.cached_areas, 63), "nothing evicted");
    assert_eq!((after.cache_flushes, after.cache_drained), (1, st.cache_drained));
    assert_eq!(a.alloc_cached(5, None), None, "the 5-page area went to its node");
    a.check().unwrap();
}

#[test]
fn a_miss_of_a_size_the_magazine_turned_away_grows_its_budget_until_a_drain() {
    let o = ArenaOptions { thread_cache_pages_max: 80, ..opts() };
    let a = Arena::new("tc", 0x1000, 0x1000 + (1 << 20), o, Box::new(NoBacking)).unwrap();
    for (pages, n) in [(1, 16), (2, 8), (3, 5), (4, 4)] {
        alloc_free(&a, pages, n);
    }
    let five = || a.alloc(&AllocRequest::pages(5)).unwrap().start;
    // 63 of 64 pages held: a 5-page area is turned away.
    a.free(five()).unwrap();
    let st = a.stats();
    assert_eq!((st.cache_flushes, st.cache_grows, st.cache_budget_pages), (1, 0, 64));
    // A miss of a size never turned away grows nothing; a miss of 5 pages grows the budget by 5.
    assert_eq!(a.alloc_cached(6, None), None);
    assert_eq!(a.stats().cache_grows, 0);
    let x = five();
    let st = a.stats();
    assert_eq!((st.cache_grows, st.cache_budget_pages), (1, 69));
    // Now it fits, and the next 5-page allocation takes it without a lock.
    a.free(x).unwrap();
    assert_eq!((a.stats().cached_pages, a.stats().cache_flushes), (68, 1));
    assert_eq!(a.alloc_cached(5, None), Some(x));
    a.free(x).unwrap();
    // The ghost was spent: another miss of 5 pages does not grow the budget.
    let y = five();
    assert_eq!(a.stats().cache_grows, 1);
    a.free(y).unwrap();
    a.check().unwrap();
    // A working set of 5-page areas that keeps growing: turned away and missed again and
    // again, the budget stops at its largest.
    for n in 1..=8 {
        let xs: Vec<u64> = (0..n).map(|_| five()).collect();
        for x in xs {
            a.free(x).unwrap();
        }
    }
    let st = a.stats();
    assert_eq!(st.cache_budget_pages, 80, "{st:?}");
    assert!(st.cached_pages <= 80 && st.cache_grows >= 3, "{st:?}");
    a.check().unwrap();
    // A drain empties the magazine and takes it back to the base budget with no ghosts.
    a.purge();
    let st = a.stats();
    assert_eq!((st.cached_areas, st.cache_budget_pages), (0, 64));
    let grows = st.cache_grows;
    let z = five();
    assert_eq!(a.stats().cache_grows, grows, "no ghost survived the drain");
    a.free(z).unwrap();
    a.check().unwrap();
}

/// The magazines share `thread_cache_cpu_pages` times the CPUs: a thread that registers when
/// many hold one starts with its share, and a magazine above the share empties itself at its
/// next miss (a shed; its areas go to the nodes as drained ones) and holds no more than the
/// share after. With the bound off, the same threads change nothing.
#[test]
fn the_magazines_share_a_total_so_more_threads_hold_less_each() {
    let cpus = vmarena_platform::cpu::count().clamp(1, 1024) as u64;
    for bound in [true, false] {
        let o = ArenaOptions {
            thread_cache_pages_max: 64,
            thread_cache_cpu_pages: if bound { 64 } else { 0 },
            ..opts()
        };
        let a = Arc::new(Arena::new("tc", 0x1000, 0x1000 + (1 << 20), o, Box::new(NoBacking)).unwrap());
        alloc_free(&a, 1, 16);
        let st = a.stats();
        assert_eq!((st.cached_pages, st.cache_budget_pages), (16, 64), "alone, the whole budget");
        // 4 threads a CPU register a magazine each (one cached 2-page area) and wait.
        let others = 4 * cpus as usize;
        let (ready, done) = (Arc::new(Barrier::new(others + 1)), Arc::new(Barrier::new(others + 1)));
        let hs: Vec<_> = (0..others)
            .map(|_| {
                let (a, ready, done) = (a.clone(), ready.clone(), done.clone());
                std::thread::spawn(move || {
                    alloc_free(&a, 2, 1);
                    ready.wait();
                    done.wait();
                })
            })
            .collect();
        ready.wait();
        let share = (64 * cpus / (others as u64 + 1)).max(8);
        let before = a.stats();
        assert_eq!(before.cached_pages, 16 + 2 * others as u64);
        // A miss: above the share, the main thread's magazine sheds its 16 areas.
        assert_eq!(a.alloc_cached(3, None), None);
        let st = a.stats();
        if bound {
            // (A thread that registered early may have shed its own as the others came.)
            assert_eq!(st.cache_sheds - before.cache_sheds, 1, "{st:?}");
            assert_eq!(st.cache_drained - before.cache_drained, 16);
            assert_eq!(st.cached_pages, 2 * others as u64, "the others keep theirs");
            // From now on it holds what its stack may under the share: a quarter of it.
            alloc_free(&a, 1, 32);
            assert_eq!(a.stats().cached_pages, 2 * others as u64 + (share / 4).max(1), "{:?}", a.stats());
        } else {
            assert_eq!((st.cache_sheds, st.cache_drained), (0, before.cache_drained));
            alloc_free(&a, 1, 32);
            assert_eq!(a.stats().cached_pages, 2 * others as u64 + 16, "the stack's cap of 16");
        }
        a.check().unwrap();
        done.wait();
        for h in hs {
            h.join().unwrap();
        }
        a.check().unwrap();
    }
}

#[test]
fn with_the_largest_budget_at_the_base_the_magazine_never_grows() {
    let o = ArenaOptions { thread_cache_pages_max: 0, ..opts() };
    let a = Arena::new("tc", 0x1000, 0x1000 + (1 << 20), o, Box::new(NoBacking)).unwrap();
    for _ in 0..20 {
        alloc_free(&a, 8, 12);
    }
    let st = a.stats();
    assert_eq!((st.cache_grows, st.cache_budget_pages), (0, 64));
    assert!(st.cache_flushes > 0 && st.cached_pages <= 64, "{st:?}");
    a.check().unwrap();
}

#[test]
fn double_frees_are_refused_from_any_thread_and_change_nothing() {
    let a = Arc::new(arena());
    let x = a.alloc(&AllocRequest::pages(1)).unwrap();
    a.free(x.start).unwrap();
    let st = a.stats();
    assert_eq!(a.free(x.start), Err(FreeError::NotLive { start: x.start }));
    let a2 = a.clone();
    let other = std::thread::spawn(move || a2.free(x.start)).join().unwrap();
    assert_eq!(other, Err(FreeError::NotLive { start: x.start }));
    let after = a.stats();
    assert_eq!(after.bad_frees, st.bad_frees + 2);
    assert_eq!((after.cached_areas, after.live_areas), (st.cached_areas, st.live_areas));
    assert!(a.lookup(x.start).is_none(), "a cached area is not live for its user");
    assert!(!a.update_tag(x.start, |t| t.requested_bytes = 1));
    // Two threads racing to free one live area: exactly one wins.
    for _ in 0..200 {
        let y = a.alloc(&AllocRequest::pages(1)).unwrap();
        let go = Arc::new(Barrier::new(2));
        let h: Vec<_> = (0..2)
            .map(|_| {
                let (a, go) = (a.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    a.free(y.start).is_ok()
                })
            })
            .collect();
        let wins = h.into_iter().map(|h| h.join().unwrap()).filter(|&w| w).count();
        assert_eq!(wins, 1);
    }
    a.check().unwrap();
}

#[test]
fn records_of_reused_areas_carry_the_latest_caller_and_an_unknown_size() {
    let a = arena();
    let first = Location::caller();
    let req = |caller: &'static Location<'static>, bytes| AllocRequest {
        tag: AreaTag { caller: Some(caller), requested_bytes: bytes, ..Default::default() },
        ..AllocRequest::pages(2)
    };
    let x = a.alloc(&req(first, 100)).unwrap();
    assert_eq!(a.lookup(x.start).unwrap().tag.requested_bytes, 100);
    a.free(x.start).unwrap();
    let second = Location::caller();
    let y = a.alloc(&req(second, 5000)).unwrap();
    assert_eq!(y.start, x.start);
    let rec = a.lookup(y.start).unwrap();
    assert_eq!(rec.tag.caller, Some(second));
    assert_eq!(rec.tag.requested_bytes, UNKNOWN_BYTES, "the record's 100 bytes are stale");
    let (busy, _) = a.areas();
    let listed: Vec<_> = busy.iter().flatten().filter(|(s, _)| *s == y.start).collect();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].1.tag.caller, Some(second));
    a.free(y.start).unwrap();
    let (busy, lazy) = a.areas();
    assert!(busy.iter().flatten().all(|(s, _)| *s != y.start), "cached areas are not listed live");
    assert!(
        lazy.contains(&vmarena_core::Span::new(y.start, 2)),
        "cached areas are listed with the lazy ones"
    );
}

#[test]
fn a_full_magazine_sends_frees_to_the_nodes() {
    let a = arena();
    // 64 pages of budget, at most 64 / (4 x 1) = 16 one-page entries.
    let xs: Vec<_> = (0..40).map(|_| a.alloc(&AllocRequest::pages(1)).unwrap()).collect();
    for x in &xs {
        a.free(x.start).unwrap();
    }
    let st = a.stats();
    assert_eq!(st.cached_areas, 16);
    assert_eq!(st.cache_flushes, 24);
    assert_eq!(st.lazy_pages, 24, "the rest waits for a purge as usual");
    assert_eq!(st.live_areas, 0);
    a.check().unwrap();
}

#[test]
fn purge_drains_the_magazine_of_an_idle_thread() {
    let a = Arc::new(arena());
    let (cached, park) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let t = {
        let (a, cached, park) = (a.clone(), cached.clone(), park.clone());
        std::thread::spawn(move || {
            // 64 / (4 x 3) = 5 entries for 3-page areas.
            let xs: Vec<_> = (0..5).map(|_| a.alloc(&AllocRequest::pages(3)).unwrap()).collect();
            for x in &xs {
                a.free(x.start).unwrap();
            }
            cached.wait();
            // Parked, alive, outside any call: its magazine must be taken from outside.
            park.wait();
            // Its next call finds the magazine empty and still works.
            let y = a.alloc(&AllocRequest::pages(3)).unwrap();
            a.free(y.start).unwrap();
        })
    };
    cached.wait();
    assert_eq!((a.stats().cached_areas, a.stats().lazy_pages), (5, 0));
    let r = a.purge();
    let st = a.stats();
    assert_eq!(st.cached_areas, 0);
    assert_eq!(st.cache_drained, 5);
    assert_eq!(r.pages_released, 15, "the drained areas were purged in the same call");
    a.check().unwrap();
    park.wait();
    t.join().unwrap();
    a.check().unwrap();
}

#[test]
fn a_thread_that_exits_gives_its_magazine_back() {
    let a = Arc::new(arena());
    let a2 = a.clone();
    std::thread::spawn(move || {
        let xs: Vec<_> = (0..5).map(|_| a2.alloc(&AllocRequest::pages(1)).unwrap()).collect();
        for x in &xs {
            a2.free(x.start).unwrap();
        }
        assert_eq!(a2.stats().cached_areas, 5);
    })
    .join()
    .unwrap();
    let st = a.stats();
    assert_eq!((st.cached_areas, st.cache_drained, st.lazy_pages), (0, 5, 5));
    a.check().unwrap();
}

#[test]
fn the_checker_passes_while_another_thread_drains_the_caches() {
    checker_beside_drains(opts());
}

#[test]
fn the_checker_passes_while_another_thread_drains_the_caches_and_cpu_stacks() {
    checker_beside_drains(opts_cpu());
}

fn checker_beside_drains(o: ArenaOptions) {
    // The purge worker drains idle magazines while a program may run the checker; the drained
    // areas must never be seen in flight (out of their magazine, still busy and `cached`).
    const OWNERS: usize = 4;
    let cpu = o.cpu_cache;
    let a = Arc::new(Arena::new("tc-check", 0x1000, 0x1000 + (1 << 20), o, Box::new(NoBacking)).unwrap());
    let (filled, refill) = (Arc::new(Barrier::new(OWNERS + 1)), Arc::new(Barrier::new(OWNERS + 1)));
    let rounds = 40;
    let owners: Vec<_> = (0..OWNERS)
        .map(|_| {
            let (a, filled, refill) = (a.clone(), filled.clone(), refill.clone());
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    // 64 / (4 x 1) = 16 entries for 1-page areas: a full class.
                    let xs: Vec<_> = (0..16).map(|_| a.alloc(&AllocRequest::pages(1)).unwrap()).collect();
                    for x in &xs {
                        a.free(x.start).unwrap();
                    }
                    filled.wait();
                    refill.wait();
                }
            })
        })
        .collect();
    let mut checks = 0;
    for _ in 0..rounds {
        filled.wait();
        let cached = a.stats().cached_areas;
        if cpu {
            // Owners on one CPU reuse each other's freed areas through its stacks.
            assert!((16..=16 * OWNERS as u64).contains(&cached), "{cached} cached");
        } else {
            assert_eq!(cached, 16 * OWNERS as u64);
        }
        let drainer = {
            let a = a.clone();
            std::thread::spawn(move || a.purge())
        };
        while !drainer.is_finished() {
            a.check().unwrap_or_else(|e| panic!("check beside a drain: {e}"));
            checks += 1;
        }
        drainer.join().unwrap();
        assert_eq!(a.stats().cached_areas, 0);
        a.check().unwrap();
        refill.wait();
    }
    owners.into_iter().for_each(|t| t.join().unwrap());
    assert!(checks >= rounds, "the checker ran beside every drain");
}

#[test]
fn shrink_and_allocation_failure_drain_the_caches() {
    // 64 pages: cached areas are needed to satisfy a large request.
    let a = Arena::new("small", 0, 64, opts(), Box::new(NoBacking)).unwrap();
    let xs: Vec<_> = (0..8).map(|_| a.alloc(&AllocRequest::pages(8)).unwrap()).collect();
    for x in &xs {
        a.free(x.start).unwrap();
    }
    assert!(a.stats().cached_areas > 0);
    let all = a.alloc(&AllocRequest::pages(64)).expect("the failure path drains, purges, retries");
    assert_eq!(a.stats().cached_areas, 0);
    a.free(all.start).unwrap();
    a.shrink();
    assert_eq!(a.stats().free_pages, 64);
    a.check().unwrap();
}

#[test]
fn strategies_without_caches_and_the_switch_say_why() {
    for s in [Strategy::Global, Strategy::Split] {
        let a =
            Arena::new("x", 0, 1000, ArenaOptions { strategy: s, ..opts() }, Box::new(NoBacking)).unwrap();
        assert!(a.thread_cache_off().unwrap().contains("strategy"), "{s}");
    }
    let a = Arena::new("x", 0, 1000, ArenaOptions { thread_cache: false, ..opts() }, Box::new(NoBacking))
        .unwrap();
    assert!(a.thread_cache_off().unwrap().contains("thread_cache"));
    let a = Arena::new("x", 0, u64::MAX, opts(), Box::new(NoBacking)).unwrap();
    assert!(a.thread_cache_off().unwrap().contains("state table"));
    let x = a.alloc(&AllocRequest::pages(1)).unwrap();
    a.free(x.start).unwrap();
    assert_eq!(a.stats().cached_areas, 0);
}

/// [`opts`] with the depot behind the magazines.
fn opts_depot() -> ArenaOptions {
    ArenaOptions { thread_cache_depot: true, ..opts() }
}

#[test]
fn what_a_full_stack_spills_waits_in_the_depot_and_a_miss_takes_it_back() {
    let a = Arena::new("depot", 0x1000, 0x1000 + (1 << 20), opts_depot(), Box::new(NoBacking)).unwrap();
    // 64 pages of budget: 16 one-page entries; each full stack spills its oldest 8.
    let xs: Vec<u64> = (0..40).map(|_| a.alloc(&AllocRequest::pages(1)).unwrap().start).collect();
    let carved = a.stats();
    for &x in &xs {
        a.free(x).unwrap();
    }
    let st = a.stats();
    assert_eq!(
        (st.cached_areas, st.depot_pages, st.depot_puts, st.cache_flushes),
        (40, 24, 24, 24),
        "{st:?}"
    );
    assert_eq!((st.live_areas, st.lazy_pages, st.pooled_areas), (0, 0, 0), "nothing went to a node");
    assert_eq!(st.frees, carved.frees + 40, "every free counted once");
    a.check().unwrap();
    // A second free of an area in the depot is refused and changes nothing.
    let before = a.stats();
    assert!(matches!(a.free(xs[0]), Err(FreeError::NotLive { .. })));
    let after = a.stats();
    assert_eq!(after.bad_frees, before.bad_frees + 1);
    assert_eq!((after.cached_areas, after.depot_pages, after.frees), (40, 24, before.frees));
    // The next 40 allocations are the same areas: 16 from the magazine, then the depot's,
    // taken back a spill at a time with their records as they were.
    let again: Vec<u64> = (0..40).map(|_| a.alloc(&AllocRequest::pages(1)).unwrap().start).collect();
    let st = a.stats();
    assert_eq!((st.depot_pages, st.depot_takes, st.cached_areas, st.live_areas), (0, 24, 0, 40), "{st:?}");
    assert_eq!(
        (st.pool_hits, st.chunk_allocs, st.tree_allocs),
        (carved.pool_hits, carved.chunk_allocs, carved.tree_allocs),
        "no allocation took the busy-map path"
    );
    let (mut want, mut got) = (xs.clone(), again.clone());
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want);
    a.check().unwrap();
    // A purge drains the depot down the busy-map path with the magazines.
    for &x in &again {
        a.free(x).unwrap();
    }
    assert_eq!(a.stats().depot_pages, 24);
    a.purge();
    let st = a.stats();
    assert_eq!((st.depot_pages, st.cached_areas, st.live_areas), (0, 0, 0), "{st:?}");
    a.check().unwrap();
}

#[test]
fn a_decay_tick_takes_from_the_depot_only_what_the_previous_tick_saw() {
    let a = Arena::new("depot-tick", 0x1000, 0x1000 + (1 << 20), opts_depot(), Box::new(NoBacking)).unwrap();
    let xs: Vec<u64> = (0..40).map(|_| a.alloc(&AllocRequest::pages(1)).unwrap().start).collect();
    for &x in &xs {
        a.free(x).unwrap();
    }
    assert_eq!(a.stats().depot_pages, 24);
    a.decay_purge();
    let st = a.stats();
    assert_eq!(st.depot_pages, 24, "spilled since the last tick: kept, {st:?}");
    a.check().unwrap();
    a.decay_purge();
    let st = a.stats();
    assert_eq!((st.depot_pages, st.cached_areas), (0, 0), "seen by the previous tick: taken, {st:?}");
    a.check().unwrap();
}

/// Fill one thread's magazine to its 64-page budget so that a free of 8 pages finds no larger
/// area to evict: 8 pages x 1, 4 x 4, 2 x 8, 1 x 16 and 3 x 2 (62 pages, every stack below its
/// cap), with a 5-page area left live. Returns the second 8-page area, live too.
fn fill_to_the_budget(a: &Arena) -> u64 {
    let sizes = [8u64, 8, 5].into_iter().chain([4; 4]).chain([2; 8]).chain([1; 16]).chain([3; 2]);
    let xs: Vec<(u64, u64)> = sizes.map(|p| (a.alloc(&AllocRequest::pages(p)).unwrap().start, p)).collect();
    for &(x, _) in xs.iter().skip(3).chain(&xs[..1]) {
        a.free(x).unwrap();
    }
    let st = a.stats();
    assert_eq!((st.cached_pages, st.depot_pages, st.cache_flushes), (62, 0, 0), "{st:?}");
    xs[1].0
}

#[test]
fn a_free_the_budget_refuses_waits_in_the_depot_for_the_next_miss_of_any_thread() {
    let a = Arc::new(
        Arena::new("depot-refused", 0x1000, 0x1000 + (1 << 20), opts_depot(), Box::new(NoBacking)).unwrap(),
    );
    let eight = fill_to_the_budget(&a);
    a.free(eight).unwrap();
    let st = a.stats();
    assert_eq!(
        (st.cached_pages, st.depot_pages, st.depot_puts, st.cache_flushes),
        (70, 8, 1, 1),
        "the refused area went to the depot (cached pages count the depot's), {st:?}"
    );
    assert_eq!((st.lazy_pages, st.pooled_areas, st.live_areas), (0, 0, 1), "not to a node, {st:?}");
    a.check().unwrap();
    // A second free of it is refused and changes nothing.
    assert!(matches!(a.free(eight), Err(FreeError::NotLive { .. })));
    assert_eq!(a.stats().depot_pages, 8);
    // Another thread, whose magazine is empty, gets it back with its record as it was.
    let carved = a.stats();
    let b = a.clone();
    let got = std::thread::spawn(move || b.alloc(&AllocRequest::pages(8)).unwrap()).join().unwrap();
    assert_eq!((got.start, got.pages), (eight, 8));
    let st = a.stats();
    assert_eq!((st.depot_pages, st.depot_takes, st.live_areas), (0, 1, 2), "{st:?}");
    assert_eq!(
        (st.tree_allocs, st.chunk_allocs, st.pool_hits),
        (carved.tree_allocs, carved.chunk_allocs, carved.pool_hits)
    );
    a.check().unwrap();
}

#[test]
fn a_size_the_budget_refused_grows_the_magazine_when_the_depot_serves_it() {
    let a = Arena::new("depot-grow", 0x1000, 0x1000 + (1 << 20), opts_depot(), Box::new(NoBacking)).unwrap();
    let eight = fill_to_the_budget(&a);
    a.free(eight).unwrap();
    assert_eq!((a.stats().depot_pages, a.stats().cache_budget_pages, a.stats().cache_grows), (8, 64, 0));
    // The first 8 pages come from the magazine, the second from the depot: a miss of a size
    // the budget turned away, which grows the budget by it as a miss down the busy-map path does.
    let first = a.alloc(&AllocRequest::pages(8)).unwrap().start;
    assert_ne!(first, eight);
    assert_eq!(a.alloc(&AllocRequest::pages(8)).unwrap().start, eight);
    let st = a.stats();
    assert_eq!((st.depot_takes, st.cache_grows, st.cache_budget_pages), (1, 1, 72), "{st:?}");
    // Both fit now: the second 8-page area stays in the magazine.
    a.free(first).unwrap();
    a.free(eight).unwrap();
    let st = a.stats();
    assert_eq!((st.depot_pages, st.depot_puts, st.cached_pages), (0, 1, 70), "70 pages of 72, {st:?}");
    a.check().unwrap();
}

#[test]
fn a_miss_takes_a_larger_depot_area_within_the_slack_whole() {
    let o = ArenaOptions { lazy_slack_percent: 50, ..opts_depot() };
    let a = Arc::new(Arena::new("depot-slack", 0x1000, 0x1000 + (1 << 20), o, Box::new(NoBacking)).unwrap());
    let eight = fill_to_the_budget(&a);
    a.free(eight).unwrap();
    assert_eq!(a.stats().depot_pages, 8);
    // From threads whose magazines are empty.
    let take = |pages: u64| {
        let b = a.clone();
        std::thread::spawn(move || b.alloc(&AllocRequest::pages(pages)).unwrap()).join().unwrap()
    };
    // 5 pages: 8 is more than half again larger, so the depot's area stays.
    let carved = a.stats().chunk_allocs + a.stats().tree_allocs + a.stats().pool_hits;
    let got = take(5);
    assert_ne!(got.start, eight);
    assert_eq!(got.pages, 5);
    assert_eq!((a.stats().depot_pages, a.stats().depot_takes), (8, 0));
    assert_eq!(a.stats().chunk_allocs + a.stats().tree_allocs + a.stats().pool_hits, carved + 1, "carved");
    // 6 pages: within half again: the 8-page area, whole.
    let got = take(6);
    assert_eq!((got.start, got.pages), (eight, 8));
    let st = a.stats();
    assert_eq!(
        (st.depot_pages, st.depot_takes, st.live_areas, st.live_pages),
        (0, 1, 3, 5 + 5 + 8),
        "{st:?}"
    );
    a.check().unwrap();
    // Freed, it is an area of 8 pages again.
    a.free(got.start).unwrap();
    assert!(matches!(a.free(got.start), Err(FreeError::NotLive { .. })));
    a.check().unwrap();
}

#[test]
fn a_spill_larger_than_the_lazy_limit_leaves_goes_through_the_busy_map() {
    let o = ArenaOptions { lazy_max_pages: 4, lazy_headroom: false, ..opts_depot() };
    let a = Arena::new("depot-bound", 0x1000, 0x1000 + (1 << 20), o, Box::new(NoBacking)).unwrap();
    assert_eq!(a.stats().lazy_limit, 4);
    let xs: Vec<u64> = (0..17).map(|_| a.alloc(&AllocRequest::pages(1)).unwrap().start).collect();
    for &x in &xs {
        a.free(x).unwrap();
    }
    // The 17th free spilled 8 pages: more than the 4 the limit leaves.
    let st = a.stats();
    assert_eq!((st.depot_puts, st.depot_pages, st.cache_flushes), (0, 0, 8), "{st:?}");
    assert_eq!(st.cached_areas, 9, "the spill left the magazine");
    a.check().unwrap();
}

/// Workers allocate small areas, stamp each page they own,/// Workers allocate small areas, stamp each page they own, free some of their own and hand the
/// rest to other workers to free; a drainer purges all along. The stamp map catches any page
/// handed to two owners, and the checker any area lost or double-listed.
#[test]
fn stress_with_cross_thread_frees_and_concurrent_drains_keeps_owners_apart() {
    cross_thread_stress(opts());
}

/// The same through the per-CPU stacks, which hand one thread's freed areas to another.
#[test]
fn stress_through_cpu_stacks_with_cross_thread_frees_and_drains_keeps_owners_apart() {
    cross_thread_stress(opts_cpu());
}

/// The same with the depot behind the magazines and the per-CPU stacks in front: spilled
/// areas pass between threads through it while the drainer empties it.
#[test]
fn stress_through_the_depot_with_cross_thread_frees_and_drains_keeps_owners_apart() {
    cross_thread_stress(ArenaOptions { cpu_cache: true, ..opts_depot() });
}

/// The same where a larger cached area within the slack serves a request whole: areas
/// spilled or refused by one magazine serve another's misses of nearby sizes.
#[test]
fn stress_through_the_depot_within_the_slack_keeps_owners_apart() {
    cross_thread_stress(ArenaOptions { cpu_cache: true, lazy_slack_percent: 50, ..opts_depot() });
}

fn cross_thread_stress(o: ArenaOptions) {
    const WORKERS: usize = 4;
    const ROUNDS: usize = 3000;
    let (cpu, depot, slack) = (o.cpu_cache, o.thread_cache_depot, o.lazy_slack_percent);
    let a = Arc::new(Arena::new("tc", 0x1000, 0x1000 + (1 << 20), o, Box::new(NoBacking)).unwrap());
    let owner: Arc<Mutex<HashMap<u64, usize>>> = Arc::default();
    let mailbox: Mailboxes = Arc::new((0..WORKERS).map(|_| Mutex::default()).collect());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Purges made so far: the workers start after the first, so that the drainer runs beside
    // them even where the scheduler leaves a new thread waiting (a loaded machine).
    let purges = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let drainer = {
        let (a, stop, purges) = (a.clone(), stop.clone(), purges.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                a.purge();
                purges.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::thread::yield_now();
            }
        })
    };
    let workers: Vec<_> = (0..WORKERS)
        .map(|me| {
            let (a, owner, mailbox, purges) = (a.clone(), owner.clone(), mailbox.clone(), purges.clone());
            std::thread::spawn(move || {
                while purges.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                    std::thread::yield_now();
                }
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ me as u64;
                let mut mine: Vec<(u64, u64)> = Vec::new();
                let release = |s: u64, p: u64, who: usize| {
                    let mut o = owner.lock().unwrap();
                    for pg in s..s + p {
                        assert_eq!(o.remove(&pg), Some(who), "page {pg:#x} not owned by {who} at free");
                    }
                    drop(o);
                    a.free(s).unwrap();
                };
                for i in 0..ROUNDS {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let pages = 1 + rng % 10;
                    let x = a.alloc(&AllocRequest::pages(pages)).unwrap();
                    // Within the slack, a larger area may serve the request whole.
                    assert!(x.pages >= pages && x.pages <= pages + pages * slack / 100, "{x:?} for {pages}");
                    let pages = x.pages;
                    {
                        let mut o = owner.lock().unwrap();
                        for pg in x.start..x.start + pages {
                            assert_eq!(o.insert(pg, me), None, "page {pg:#x} handed out twice");
                        }
                    }
                    mine.push((x.start, pages));
                    if mine.len() > 8 {
                        let (s, p) = mine.swap_remove((rng >> 20) as usize % mine.len());
                        if i % 3 == 0 {
                            mailbox[(me + 1) % WORKERS].lock().unwrap().push((s, p, me));
                        } else {
                            release(s, p, me);
                        }
                    }
                    let inbox = std::mem::take(&mut *mailbox[me].lock().unwrap());
                    for (s, p, who) in inbox {
                        release(s, p, who);
                    }
                }
                for (s, p) in mine {
                    release(s, p, me);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    for m in mailbox.iter() {
        for (s, p, who) in std::mem::take(&mut *m.lock().unwrap()) {
            let mut o = owner.lock().unwrap();
            for pg in s..s + p {
                assert_eq!(o.remove(&pg), Some(who));
            }
            drop(o);
            a.free(s).unwrap();
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drainer.join().unwrap();
    assert!(owner.lock().unwrap().is_empty());
    let st = a.stats();
    assert_eq!(st.live_areas, 0, "{st:?}");
    assert!(st.cache_hits > 0 && st.cache_drained > 0, "{st:?}");
    assert_eq!(st.cache_cpu_hits > 0, cpu, "{st:?}");
    if depot {
        assert!(st.depot_puts > 0 && st.depot_takes > 0, "the depot was used: {st:?}");
    } else {
        assert_eq!(st.depot_puts, 0);
    }
    a.check().unwrap();
}

/// One thread alternating over more arenas than it keeps magazines for (the front magazine
/// changes at every call, magazines are evicted and registered again), with arenas dropped
/// and created meanwhile: every area comes from the range of the arena asked, every hit
/// returns that arena's own cached area, and every arena checks clean.
#[test]
fn a_thread_switching_between_many_arenas_gets_each_arena_its_own_areas() {
    let span = 1u64 << 20;
    let make = |i: u64| {
        let lo = 0x1000 + i * 2 * span;
        Arena::new("tc-many", lo, lo + span, opts(), Box::new(NoBacking)).unwrap()
    };
    let mut arenas: Vec<(u64, Arena)> = (0..10).map(|i| (i, make(i))).collect();
    for round in 0..200u64 {
        for (i, a) in &arenas {
            let lo = 0x1000 + i * 2 * span;
            let x = a.alloc(&AllocRequest::pages(3)).unwrap();
            assert!((lo..lo + span).contains(&x.start), "round {round}: arena {i} gave {:#x}", x.start);
            a.free(x.start).unwrap();
            // The next request of the size is this arena's cached area, whatever the front was.
            let y = a.alloc_cached(3, None).expect("a hit in this arena's magazine");
            assert_eq!(y, x.start, "round {round}: arena {i}");
            a.free(y).unwrap();
        }
        if round % 50 == 49 {
            // Drop the arena the front points to, and one more; build new ones in their place.
            let (i, a) = arenas.pop().unwrap();
            drop(a);
            arenas.push((i, make(i)));
            let (j, b) = arenas.remove(0);
            drop(b);
            arenas.insert(0, (j, make(j)));
        }
    }
    for (_, a) in &arenas {
        a.check().unwrap();
        let st = a.stats();
        assert_eq!(st.live_areas, 0);
        assert!(st.cached_areas <= 1, "one cached area per arena at most, got {}", st.cached_areas);
    }
}

/// The state words of pages up to 56 apart never share a cache line (each thread's free and
/// reuse write its area's word, and areas of two threads are often carved side by side).
#[test]
fn state_words_of_neighbouring_pages_are_on_different_cache_lines() {
    let a = arena();
    let line = |p: u64| a.state_word_addr(p).expect("a page of the range") / 64;
    for p in 0x1000..0x1000 + 1024 {
        for k in 1..=56 {
            if let Some(q) = a.state_word_addr(p + k) {
                assert_ne!(line(p), q / 64, "pages {p:#x} and {:#x} share a line of words", p + k);
            }
        }
    }
}

/// Consecutive pages have their state words on the next cache line or the one after (72
/// bytes on), but where the words wrap around their table page: a bulk free in the order the
/// areas were carved reads the table forward, as a stream (docs/bench-log/many-workers.md,
/// "the state table in page order").
#[test]
fn state_words_of_consecutive_pages_are_on_consecutive_lines() {
    let a = arena();
    let line = |p: u64| a.state_word_addr(p).expect("a page of the range") / 64;
    // One table page's worth of pages (512 words), from its first page.
    let first =
        (0x1000..0x1000 + 512).find(|&p| a.state_word_addr(p).is_some_and(|w| w % 4096 == 0)).unwrap();
    let wraps =
        (first..first + 511).filter(|&p| !(1..=2).contains(&line(p + 1).wrapping_sub(line(p)))).count();
    assert!(wraps <= 9, "{wraps} of 511 steps from a page to the next do not go one or two lines on");
}

/// Two threads on the fast path write no common cache line: the memory each magazine owns
/// (its struct, its stacks, its bitmaps) and the state words of each thread's areas are on
/// lines of their own, also when both threads carved their areas side by side from one node.
#[test]
fn the_fast_paths_of_two_threads_write_no_common_cache_line() {
    use vmarena_platform::cpu::pin_current_thread;
    let a = Arc::new(arena());
    let both_cached = Arc::new(Barrier::new(3));
    let measured = Arc::new(Barrier::new(3));
    let workers: Vec<_> = (0..2)
        .map(|t| {
            let (a, both_cached, measured) = (a.clone(), both_cached.clone(), measured.clone());
            std::thread::spawn(move || {
                // One CPU for the first allocation: both threads carve from the same node.
                let pinned = pin_current_thread(0);
                let x = a.alloc(&AllocRequest::pages(2)).unwrap();
                a.free(x.start).unwrap();
                for _ in 0..1000 {
                    let y = a.alloc_cached(2, None).expect("a hit");
                    assert_eq!(y, x.start, "thread {t}: its own cached area");
                    a.free(y).unwrap();
                }
                both_cached.wait();
                measured.wait();
                (x.start, pinned)
            })
        })
        .collect();
    both_cached.wait();
    let spans = a.thread_cache_spans();
    measured.wait();
    let results: Vec<(u64, bool)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    assert_eq!(spans.len(), 2, "one magazine per thread");
    let lines_of = |ranges: &[std::ops::Range<usize>]| -> std::collections::BTreeSet<usize> {
        ranges.iter().flat_map(|r| r.start / 64..r.end.div_ceil(64)).collect()
    };
    // The magazines are in registration order, not thread order: compare the sets, and each
    // area's word against both magazines.
    let m0 = lines_of(&spans[0]);
    let m1 = lines_of(&spans[1]);
    assert!(m0.is_disjoint(&m1), "two magazines share a cache line");
    let w0 = a.state_word_addr(results[0].0).unwrap() / 64;
    let w1 = a.state_word_addr(results[1].0).unwrap() / 64;
    assert_ne!(w0, w1, "the two threads' areas share a line of state words");
    for w in [w0, w1] {
        assert!(!m0.contains(&w) && !m1.contains(&w), "a state word shares a line with a magazine");
    }
    if results.iter().all(|r| r.1) {
        let gap = results[0].0.abs_diff(results[1].0);
        assert!(gap <= 33, "areas carved from one node lie side by side (gap {gap} pages)");
    }
}

/// With `lazy_slack_percent` set, a miss of a size takes the newest area of the smallest
/// larger cached size within the slack, whole: the allocation reports the area's pages, the
/// area is freed whole, sizes whose stacks emptied are skipped, and nothing beyond the slack
/// (or at all, with no slack) is taken.
#[test]
fn a_miss_takes_the_smallest_larger_cached_area_within_the_slack() {
    let o = ArenaOptions { lazy_slack_percent: 50, ..opts() };
    let a = Arena::new("slack", 0x1000, 0x1000 + (1 << 20), o, Box::new(NoBacking)).unwrap();
    let six = alloc_free(&a, 6, 1)[0];
    let seven = alloc_free(&a, 7, 1)[0];
    // Size 6's stack empties (its occupied bit stays until a search meets it).
    assert_eq!(a.alloc_cached(6, None), Some(six));
    let st = a.stats();
    // 4 pages: up to 6 within 50%; 6 holds nothing now, 7 is beyond: a miss.
    let x = a.alloc(&AllocRequest::pages(4)).unwrap();
    assert_ne!(x.start, seven);
    assert_eq!(x.pages, 4);
    assert_eq!(a.stats().cache_slack_hits, st.cache_slack_hits);
    // 5 pages: 7 is within 50% of 5 (7 <= 5 + 2): taken whole.
    let y = a.alloc(&AllocRequest::pages(5)).unwrap();
    assert_eq!((y.start, y.pages), (seven, 7), "the 7-page area, whole");
    let st = a.stats();
    assert_eq!(st.cache_slack_hits, 1);
    a.check().unwrap();
    // Its free returns all 7 pages, and a 7-page request takes it again exactly.
    a.free(y.start).unwrap();
    assert_eq!(a.stats().cached_pages, st.cached_pages + 7);
    assert_eq!(a.alloc_cached(7, None), Some(seven));
    a.free(seven).unwrap();
    // Two candidates: the smaller one is taken.
    alloc_free(&a, 8, 1);
    let z = a.alloc(&AllocRequest::pages(6)).unwrap();
    assert_eq!((z.start, z.pages), (seven, 7), "7 before 8");
    a.free(z.start).unwrap();
    a.free(six).unwrap();
    a.free(x.start).unwrap();
    // An aligned request and `alloc_cached` take exact sizes only.
    assert_eq!(a.alloc_cached(5, None), None);
    // Aligned as the cached 7-page area is, so that only the exact-size rule keeps it out.
    let align_pages = 1 << seven.trailing_zeros().min(8);
    assert!(align_pages >= 2, "the 7-page area starts at {seven:#x}");
    let aligned = a.alloc(&AllocRequest { align_pages, ..AllocRequest::pages(5) }).unwrap();
    assert_ne!(aligned.start, seven, "an aligned request is never served within the slack");
    assert_eq!(a.stats().cache_slack_hits, st.cache_slack_hits + 1);
    a.free(aligned.start).unwrap();
    a.check().unwrap();
    // Without slack, a larger cached area never serves a smaller request.
    let b = Arena::new("exact", 0x1000, 0x1000 + (1 << 20), opts(), Box::new(NoBacking)).unwrap();
    let big = alloc_free(&b, 7, 1)[0];
    let w = b.alloc(&AllocRequest::pages(6)).unwrap();
    assert_ne!(w.start, big);
    assert_eq!((w.pages, b.stats().cache_slack_hits), (6, 0));
    b.free(w.start).unwrap();
    b.check().unwrap();
}

/// A purge that leaves all 512 pages of a state-table page in the free tree drops that table
/// page (its words are zero); a block with a live area keeps its page, and the area's word
/// (the checker would see a live area without its word).
#[test]
fn a_purge_drops_the_state_table_pages_of_blocks_it_left_free() {
    let o = ArenaOptions { thread_cache_max_pages: 128, thread_cache_pages: 16, ..opts() };
    let lo = 0x1000;
    let a = Arena::new("tc", lo, lo + (1 << 20), o, Box::new(NoBacking)).unwrap();
    let page = 4096;
    assert_eq!(a.state_table_resident_bytes(), 0, "untouched at first");
    // 40 areas of 100 pages; a table page holds the words of 512 pages (a block).
    let xs: Vec<u64> = (0..40).map(|_| a.alloc(&AllocRequest::pages(100)).unwrap().start).collect();
    let block = |x: u64| (x - lo) / 512;
    let blocks: std::collections::BTreeSet<u64> = xs.iter().map(|&x| block(x)).collect();
    assert!(blocks.len() >= 8, "{xs:x?}");
    assert_eq!(a.state_table_resident_bytes(), blocks.len() as u64 * page);
    // All but the last: every block but the last area's is free once the purge moved them to
    // the pools and the pools gave them back (the shrinker does both at once).
    for &x in &xs[..39] {
        a.free(x).unwrap();
    }
    a.purge();
    assert_eq!(a.stats().table_pages_dropped, 0, "pooled areas are not free pages");
    a.shrink();
    let st = a.stats();
    assert_eq!(st.table_pages_dropped, blocks.len() as u64 - 1, "{st:?}");
    assert_eq!(a.state_table_resident_bytes(), page, "the live area's table page stays");
    a.check().unwrap();
    // The words come back as areas do, and the live one's is intact: its free is a thread
    // cache's free, and a second one is refused.
    let y = a.alloc(&AllocRequest::pages(100)).unwrap().start;
    assert_ne!(block(y), block(xs[39]));
    assert_eq!(a.state_table_resident_bytes(), 2 * page);
    a.free(y).unwrap();
    a.free(xs[39]).unwrap();
    assert_eq!(a.free(xs[39]), Err(FreeError::NotLive { start: xs[39] }));
    a.check().unwrap();
    a.purge();
    a.shrink();
    assert_eq!(a.state_table_resident_bytes(), 0, "every block free: no table page left");
    a.check().unwrap();
}
