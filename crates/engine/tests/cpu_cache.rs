//! Per-CPU stacks of freed small areas in front of the threads' magazines, on integers
//! (`cpu_cache`). Each test pins its threads, so that "this CPU" is known; a machine that
//! refuses the stacks (no rseq, no membarrier fence) must say why, and the tests then stop.

use std::sync::Arc;
use vmarena_engine::{AllocRequest, Arena, ArenaOptions, FreeError, NoBacking, Strategy};
use vmarena_platform::cpu::pin_current_thread;

fn opts() -> ArenaOptions {
    ArenaOptions {
        strategy: Strategy::Nodes,
        nodes: 2,
        purge_thread: false,
        decay_interval_ms: 0,
        thread_cache_max_pages: 8,
        thread_cache_pages: 64,
        cpu_cache: true,
        cpu_cache_pages: 512,
        ..Default::default()
    }
}

/// An arena with per-CPU stacks, or `None` (after checking the reason) on a machine without.
fn arena_with(o: ArenaOptions) -> Option<Arena> {
    let a = Arena::new("cpu", 0x1000, 0x1000 + (1 << 20), o, Box::new(NoBacking)).unwrap();
    assert_eq!(a.thread_cache_off(), None, "this machine supports thread caches");
    match a.cpu_cache_off() {
        None => Some(a),
        Some(why) => {
            assert!(why.contains("rseq"), "only a machine without rseq may refuse: {why}");
            eprintln!("skipped: {why}");
            None
        }
    }
}

fn node_acquisitions(a: &Arena) -> u64 {
    a.lock_stats().iter().map(|(_, l)| l.acquisitions).sum()
}

#[test]
fn a_freed_area_is_the_next_allocation_of_its_size_on_its_cpu_whichever_thread_asks() {
    let Some(a) = arena_with(opts()) else { return };
    let a = Arc::new(a);
    assert!(pin_current_thread(0));
    let x = a.alloc(&AllocRequest::pages(2)).unwrap();
    a.free(x.start).unwrap();
    let st = a.stats();
    assert_eq!((st.cached_areas, st.cached_pages, st.live_areas), (1, 2, 0));
    let before = node_acquisitions(&a);
    // Another thread on the same CPU: no magazine of its own yet, and still a hit.
    let y = {
        let a = a.clone();
        std::thread::spawn(move || {
            assert!(pin_current_thread(0));
            a.alloc_cached(2, None)
        })
        .join()
        .unwrap()
    };
    assert_eq!(y, Some(x.start), "the area this CPU's stack held");
    assert_eq!(node_acquisitions(&a), before, "a hit takes no lock");
    let st = a.stats();
    assert_eq!((st.cache_hits, st.cache_cpu_hits, st.cached_areas, st.live_areas), (1, 1, 0, 1));
    // Other sizes miss and leave the stacks alone.
    assert_eq!(a.alloc_cached(3, None), None);
    a.free(x.start).unwrap();
    a.check().unwrap();
}

#[test]
fn a_full_cpu_stack_sends_frees_to_the_magazine_and_hits_come_from_the_stack_first() {
    // 64 pages a CPU: 8 pages a size, so the 2-page stack holds 4 areas; the magazine (64
    // pages, 2-page areas capped at 64 / 8 = 8) takes the next ones.
    let Some(a) = arena_with(ArenaOptions { cpu_cache_pages: 64, ..opts() }) else { return };
    assert!(pin_current_thread(1 % vmarena_platform::cpu::count()));
    let xs: Vec<u64> = (0..10).map(|_| a.alloc(&AllocRequest::pages(2)).unwrap().start).collect();
    for &x in &xs {
        a.free(x).unwrap();
    }
    let st = a.stats();
    assert_eq!((st.cached_areas, st.cached_pages, st.cache_flushes), (10, 20, 0));
    a.check().unwrap();
    // The stack's four come first (newest first), then the magazine's.
    let ys: Vec<u64> = (0..10).map(|_| a.alloc_cached(2, None).expect("a hit")).collect();
    assert_eq!(&ys[..4], &[xs[3], xs[2], xs[1], xs[0]]);
    let mut rest = ys[4..].to_vec();
    rest.sort_unstable();
    assert_eq!(rest, xs[4..].to_vec());
    let st = a.stats();
    assert_eq!((st.cache_hits, st.cache_cpu_hits, st.cached_areas), (10, 4, 0));
    for y in ys {
        a.free(y).unwrap();
    }
    a.check().unwrap();
}

#[test]
fn a_second_free_of_an_area_in_a_cpu_stack_is_refused_and_changes_nothing() {
    let Some(a) = arena_with(opts()) else { return };
    assert!(pin_current_thread(0));
    let x = a.alloc(&AllocRequest::pages(3)).unwrap();
    a.free(x.start).unwrap();
    let st = a.stats();
    assert!(matches!(a.free(x.start), Err(FreeError::NotLive { .. })));
    let after = a.stats();
    assert_eq!(after.bad_frees, st.bad_frees + 1);
    assert_eq!((after.cached_areas, after.frees), (st.cached_areas, st.frees));
    a.check().unwrap();
    // The area is handed out once.
    let y = a.alloc_cached(3, None).expect("a hit");
    assert_eq!(y, x.start);
    assert_ne!(a.alloc(&AllocRequest::pages(3)).unwrap().start, x.start);
}

/// Two threads on different CPUs free the same area at once, many times: exactly one free
/// of each area is taken, and each area is handed out once afterwards. The racers spin on a
/// round counter, so that both frees start within a few instructions of each other.
#[test]
fn racing_double_frees_through_cpu_stacks_free_once() {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
    const ROUNDS: usize = 3000;
    let Some(a) = arena_with(opts()) else { return };
    let a = Arc::new(a);
    let ncpu = vmarena_platform::cpu::count();
    let (round, finished) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let area = Arc::new(AtomicU64::new(0));
    let wait_for = |c: &AtomicUsize, n: usize| {
        let mut spins = 0u32;
        while c.load(Acquire) < n {
            spins += 1;
            if spins % 256 == 0 {
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
    };
    let racers: Vec<_> = (0..2)
        .map(|t| {
            let (a, round, finished, area) = (a.clone(), round.clone(), finished.clone(), area.clone());
            std::thread::spawn(move || {
                pin_current_thread(t % ncpu);
                let (mut won, mut broke) = (0, None);
                for r in 1..=ROUNDS {
                    wait_for(&round, r);
                    // A panic must not leave the main thread waiting for ever.
                    let x = area.load(Relaxed);
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.free(x))) {
                        Ok(res) => won += res.is_ok() as usize,
                        Err(e) => broke = broke.or(Some(format!("{e:?}"))),
                    }
                    finished.fetch_add(1, Release);
                }
                (won, broke)
            })
        })
        .collect();
    let mut broke = None;
    for r in 1..=ROUNDS {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.alloc(&AllocRequest::pages(2)))) {
            Ok(Ok(x)) => area.store(x.start, Relaxed),
            other => broke = broke.or(Some(format!("{other:?}"))),
        }
        round.store(r, Release);
        wait_for(&finished, 2 * r);
    }
    let results: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    assert_eq!(broke, None, "an allocation failed");
    assert!(results.iter().all(|r| r.1.is_none()), "a free panicked: {results:?}");
    let wins: usize = results.iter().map(|r| r.0).sum();
    assert_eq!(wins, ROUNDS, "one free of each area taken");
    let st = a.stats();
    assert_eq!(st.live_areas, 0, "{st:?}");
    assert_eq!(st.bad_frees, ROUNDS as u64, "{st:?}");
    a.check().unwrap();
    // Every cached area comes back once: no start twice among the next allocations.
    let mut again = std::collections::HashSet::new();
    for _ in 0..st.cached_areas + 4 {
        let s = a.alloc(&AllocRequest::pages(2)).unwrap().start;
        assert!(again.insert(s), "area {s:#x} handed out twice");
    }
}

#[test]
fn a_purge_drains_every_cpus_stacks_and_the_figures_add_up() {
    let Some(a) = arena_with(opts()) else { return };
    let a = Arc::new(a);
    let ncpu = vmarena_platform::cpu::count();
    let threads: Vec<_> = (0..ncpu.min(4))
        .map(|c| {
            let a = a.clone();
            std::thread::spawn(move || {
                assert!(pin_current_thread(c));
                let xs: Vec<_> = (0..5).map(|_| a.alloc(&AllocRequest::pages(4)).unwrap()).collect();
                for x in xs {
                    a.free(x.start).unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let n = 5 * ncpu.min(4) as u64;
    let st = a.stats();
    assert_eq!((st.cached_areas, st.cached_pages), (n, 4 * n), "{st:?}");
    assert_eq!(st.frees, n);
    a.check().unwrap();
    a.purge();
    let st = a.stats();
    assert_eq!((st.cached_areas, st.live_areas, st.cache_drained), (0, 0, n), "{st:?}");
    assert_eq!(st.cache_cpu_hits, 0, "a drain is not a hit");
    a.check().unwrap();
    // The stacks work again after the drain.
    assert!(pin_current_thread(0));
    let x = a.alloc(&AllocRequest::pages(4)).unwrap();
    a.free(x.start).unwrap();
    assert_eq!(a.alloc_cached(4, None), Some(x.start));
    assert_eq!(a.stats().cache_cpu_hits, 1);
}

#[test]
fn the_switch_and_a_budget_without_room_say_why() {
    let off = |o: ArenaOptions| {
        Arena::new("x", 0, 1 << 16, o, Box::new(NoBacking)).unwrap().cpu_cache_off().map(str::to_string)
    };
    assert!(off(ArenaOptions { cpu_cache: false, ..opts() }).unwrap().contains("cpu_cache"));
    assert!(off(ArenaOptions { cpu_cache_pages: 7, ..opts() }).unwrap().contains("cpu_cache_pages"));
    assert!(off(ArenaOptions { thread_cache: false, ..opts() }).unwrap().contains("thread_cache"));
    let a = Arena::new("x", 0, 1 << 16, ArenaOptions { cpu_cache_pages: 7, ..opts() }, Box::new(NoBacking))
        .unwrap();
    let x = a.alloc(&AllocRequest::pages(2)).unwrap();
    a.free(x.start).unwrap();
    let st = a.stats();
    assert_eq!((st.cached_areas, st.cache_cpu_hits), (1, 0), "the magazine holds it");
}

/// `n` threads that each hold a magazine of `a` (made by the miss of a 10-page area, which
/// each keeps live), parked until the returned closure is called, which lets them go (they
/// free their areas) and joins them. Called with twice the CPUs: with the test's own
/// magazine, more than twice as many threads hold magazines as there are CPUs.
fn crowd(a: &Arc<Arena>, n: usize) -> impl FnOnce() {
    let start = Arc::new(std::sync::Barrier::new(n + 1));
    let end = Arc::new(std::sync::Barrier::new(n + 1));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (a, start, end) = (a.clone(), start.clone(), end.clone());
            std::thread::spawn(move || {
                let x = a.alloc(&AllocRequest::pages(10)).unwrap();
                start.wait();
                end.wait();
                a.free(x.start).unwrap();
            })
        })
        .collect();
    start.wait();
    move || {
        end.wait();
        threads.into_iter().for_each(|t| t.join().unwrap());
    }
}

fn grown_opts() -> ArenaOptions {
    ArenaOptions { thread_cache_max_pages: 64, thread_cache_pages: 256, cpu_cache_grown_pages: 40, ..opts() }
}

#[test]
fn in_a_crowd_a_larger_free_grows_its_cpus_stack_within_the_budget() {
    let Some(a) = arena_with(grown_opts()) else { return };
    let a = Arc::new(a);
    assert!(pin_current_thread(0));
    let first = a.alloc(&AllocRequest::pages(16)).unwrap().start;
    a.free(first).unwrap();
    let release = crowd(&a, 2 * vmarena_platform::cpu::count());
    let xs: Vec<u64> = (0..3).map(|_| a.alloc(&AllocRequest::pages(16)).unwrap().start).collect();
    assert_eq!(xs[0], first, "the magazine's area, from before the crowd");
    for &x in &xs {
        a.free(x).unwrap();
    }
    // 16 + 16 pages within CPU 0's 40: two areas on its stack; the third passes the magazine
    // (and the depot) and is freed through the busy map, where any size can reuse it.
    let st = a.stats();
    assert_eq!((st.cache_cpu_grown_pages, st.cached_pages), (32, 32), "{st:?}");
    assert_eq!((st.pooled_areas, st.cache_flushes), (1, 1), "{st:?}");
    a.check().unwrap();
    let before = node_acquisitions(&a);
    assert_eq!(a.alloc_cached(16, None), Some(xs[1]), "the stack's top");
    assert_eq!(a.alloc_cached(16, None), Some(xs[0]));
    assert_eq!(node_acquisitions(&a), before, "no lock on the way");
    assert_eq!(a.alloc_cached(16, None), None, "nothing in the magazine");
    let st = a.stats();
    assert_eq!((st.cache_cpu_grown_hits, st.cache_cpu_grown_pages), (2, 0), "{st:?}");
    let again = a.alloc(&AllocRequest::pages(16)).unwrap().start;
    assert_eq!(again, xs[2], "the third, from its node's pool");
    // A second free of an area the grown stack held and gave out is fine; of one it holds, refused.
    a.free(xs[1]).unwrap();
    assert_eq!(a.free(xs[1]), Err(FreeError::NotLive { start: xs[1] }));
    assert_eq!(a.stats().cache_cpu_grown_pages, 16);
    a.check().unwrap();
    // A purge empties the stacks and sets their caps back: the budget is whole again.
    a.purge();
    let st = a.stats();
    assert_eq!((st.cache_cpu_grown_pages, st.cached_areas), (0, 0), "{st:?}");
    a.check().unwrap();
    for &x in &xs[..1] {
        a.free(x).unwrap();
    }
    a.free(xs[2]).unwrap();
    assert_eq!(a.stats().cache_cpu_grown_pages, 32, "both grew the stack again");
    a.check().unwrap();
    release();
}

#[test]
fn with_no_crowd_larger_areas_stay_in_the_magazines() {
    let Some(a) = arena_with(grown_opts()) else { return };
    let a = Arc::new(a);
    // Twice the CPUs with the test's own: not more than twice.
    let release = crowd(&a, 2 * vmarena_platform::cpu::count() - 1);
    assert!(pin_current_thread(0));
    let x = a.alloc(&AllocRequest::pages(16)).unwrap().start;
    a.free(x).unwrap();
    let st = a.stats();
    assert_eq!((st.cache_cpu_grown_pages, st.cached_pages), (0, 16), "{st:?}");
    assert_eq!(a.alloc_cached(16, None), Some(x));
    assert_eq!(a.stats().cache_cpu_grown_hits, 0);
    a.free(x).unwrap();
    a.check().unwrap();
    release();
}

#[test]
fn a_miss_takes_a_larger_area_from_the_grown_stacks_within_the_slack_whole() {
    let o = ArenaOptions { lazy_slack_percent: 50, ..grown_opts() };
    let Some(a) = arena_with(o) else { return };
    let a = Arc::new(a);
    assert!(pin_current_thread(0));
    let warm = a.alloc(&AllocRequest::pages(2)).unwrap().start;
    a.free(warm).unwrap();
    let release = crowd(&a, 2 * vmarena_platform::cpu::count());
    let x = a.alloc(&AllocRequest::pages(20)).unwrap().start;
    let y = a.alloc(&AllocRequest::pages(31)).unwrap().start;
    a.free(x).unwrap();
    a.free(y).unwrap();
    assert_eq!(a.stats().cache_cpu_grown_pages, 20, "31 more pages do not fit in 40");
    // 13 pages: 20 is more than half again as large, outside the slack.
    let z = a.alloc(&AllocRequest::pages(13)).unwrap();
    assert_ne!(z.start, x);
    // 16 pages: the 20-page area, whole, from CPU 0's stack (the 31 pages went through the
    // busy map).
    let w = a.alloc(&AllocRequest::pages(16)).unwrap();
    assert_eq!((w.start, w.pages), (x, 20));
    let st = a.stats();
    assert_eq!((st.cache_cpu_grown_hits, st.cache_cpu_grown_pages), (1, 0), "{st:?}");
    a.free(w.start).unwrap();
    a.free(z.start).unwrap();
    a.check().unwrap();
    release();
}
