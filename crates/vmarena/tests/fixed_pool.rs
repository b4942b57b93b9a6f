//! FixedPool on real memory: ownership under concurrency (patterns per owner), blocking and
//! timed gets, release policies and refused input. Low-memory events are in `pressure.rs`
//! (their own process: an event reaches every cache of the process).

mod common;

use common::{fill, verify};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};
use vmarena::*;

fn space(name: &str) -> VmSpace {
    let so = SpaceOptions { space_bytes: 1 << 30, ..Default::default() };
    let ao = ArenaOptions { decay_interval_ms: 0, ..Default::default() };
    VmSpace::new(name, so, ao).unwrap()
}

fn opts(slot_bytes: u64, slots: u64, put_release: PutRelease) -> FixedOptions {
    FixedOptions { slot_bytes, slots, put_release }
}

fn words(p: *mut u8, len: usize) -> &'static mut [u64] {
    // SAFETY: `p` is a slot of `len` bytes held by the caller for the duration of the use.
    unsafe { std::slice::from_raw_parts_mut(p.cast::<u64>(), len / 8) }
}

/// 8 threads share 4 slots of 64 KiB (so getters block and steal), a ninth thread reclaims
/// the free slots' memory all along. Each holder fills its whole slot with its own pattern,
/// sometimes sleeps holding it, and verifies it before the put: a slot handed to two owners,
/// or released while held, breaks a pattern. An owner table catches a double hand-out at once.
#[test]
fn eight_threads_four_slots_patterns_per_owner() {
    const THREADS: u64 = 8;
    const ITERS: u64 = 4000;
    // A worker that fails dies holding its slot, and the others would wait for it forever:
    // make any failure end the process at once instead.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::abort();
    }));
    let s = space("fixed-stress");
    let pool = FixedPool::new(&s, "stress", &opts(64 << 10, 4, PutRelease::Pressure)).unwrap();
    let len = pool.slot_bytes();
    let owners: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
    let index: HashMap<usize, usize> = {
        let mut held: Vec<_> = (0..4).map(|_| pool.try_get().unwrap().as_ptr() as usize).collect();
        held.sort();
        for &p in &held {
            pool.put(p as *mut u8).unwrap();
        }
        held.into_iter().enumerate().map(|(i, p)| (p, i)).collect()
    };
    let stop = AtomicBool::new(false);
    let reclaims = AtomicU64::new(0);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            while !stop.load(SeqCst) {
                pool.reclaim();
                reclaims.fetch_add(1, SeqCst);
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (pool, owners, index) = (&pool, &owners, &index);
                sc.spawn(move || {
                    for it in 0..ITERS {
                        let p = match it % 3 {
                            0 => pool.get(),
                            1 => match pool.try_get() {
                                Some(p) => p,
                                None => pool.get(),
                            },
                            _ => pool.get_timeout(Duration::from_secs(30)).expect("a slot within 30 s"),
                        };
                        let tag = (t + 1) << 32 | it;
                        let o = &owners[index[&(p.as_ptr() as usize)]];
                        assert_eq!(o.swap(tag, SeqCst), 0, "slot {p:?} handed to two owners");
                        fill(p.as_ptr(), len, tag);
                        if it % 64 == 0 {
                            std::thread::sleep(Duration::from_micros(100));
                        }
                        verify(p.as_ptr(), len, tag);
                        assert_eq!(o.swap(0, SeqCst), tag);
                        pool.put(p.as_ptr()).unwrap();
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, SeqCst);
    });
    pool.check().unwrap();
    let st = pool.cache_stats();
    assert_eq!(st.held, 0);
    assert_eq!(st.cache_hits + st.list_pops + st.steals, THREADS * ITERS + 4, "{st:?}");
    assert!(st.cache_parks + st.list_pushes >= THREADS * ITERS + 4, "every put parked or listed: {st:?}");
    assert!(st.sleeps > 0, "8 holders on 4 slots must block sometimes: {st:?}");
    assert!(reclaims.load(SeqCst) > 0 && st.releases > 0, "{st:?}");
}

#[test]
fn blocked_get_is_woken_by_put_and_timeouts_expire() {
    let s = space("fixed-block");
    let pool = FixedPool::new(&s, "block", &opts(4096, 2, PutRelease::Pressure)).unwrap();
    let a = pool.get();
    let b = pool.get();
    assert!(pool.try_get().is_none());
    let t0 = Instant::now();
    assert!(pool.get_timeout(Duration::from_millis(30)).is_none());
    assert!(t0.elapsed() >= Duration::from_millis(30));
    std::thread::scope(|sc| {
        let w = sc.spawn(|| pool.get().as_ptr() as usize);
        while pool.cache_stats().sleeps < 2 {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(!w.is_finished(), "the getter sleeps while both slots are held");
        pool.put(a.as_ptr()).unwrap();
        assert_eq!(w.join().unwrap(), a.as_ptr() as usize);
    });
    let st = pool.cache_stats();
    assert_eq!((st.timeouts, st.empty_tries, st.held), (1, 1, 2));
    pool.put(b.as_ptr()).unwrap();
}

#[test]
fn refused_input_changes_nothing() {
    let s = space("fixed-bad");
    assert_eq!(FixedPool::new(&s, "zero", &opts(0, 4, PutRelease::Pressure)).err(), Some(VmError::ZeroSize));
    assert!(matches!(
        FixedPool::new(&s, "huge", &opts(u64::MAX, 4, PutRelease::Pressure)),
        Err(VmError::Overflow(_))
    ));
    let live = s.stats(false).arena.live_areas;
    let t0 = std::time::Instant::now();
    assert!(matches!(
        FixedPool::new(&s, "larger-than-space", &opts(4096, 1 << 31, PutRelease::Pressure)),
        Err(VmError::NoSpace(_))
    ));
    assert!(t0.elapsed() < Duration::from_secs(1), "refused before any table is built");
    // Room for some slots only: the ones allocated are given back.
    let half = s.vmalloc(512 << 20).unwrap();
    assert!(matches!(
        FixedPool::new(&s, "too-many", &opts(1 << 20, 600, PutRelease::Pressure)),
        Err(VmError::NoSpace(_))
    ));
    s.vfree(half.as_ptr()).unwrap();
    assert_eq!(s.stats(false).arena.live_areas, live, "a failed create gives every slot back");
    let pool = FixedPool::new(&s, "bad", &opts(10_000, 3, PutRelease::Pressure)).unwrap();
    assert_eq!(pool.slot_bytes(), 12_288);
    let p = pool.get();
    let other = s.vmalloc(4096).unwrap();
    let before = pool.cache_stats();
    for bad in [unsafe { p.as_ptr().add(4096) }, other.as_ptr(), std::ptr::null_mut(), 8 as *mut u8] {
        assert_eq!(pool.put(bad), Err(VmError::NotHeld(bad as usize)));
    }
    assert_eq!(pool.cache_stats(), before);
    pool.put(p.as_ptr()).unwrap();
    assert_eq!(pool.put(p.as_ptr()), Err(VmError::NotHeld(p.as_ptr() as usize)), "a second put is refused");
    pool.check().unwrap();
    s.vfree(other.as_ptr()).unwrap();
    assert!(s.size(p.as_ptr()).is_some(), "slots are live areas of the space");
    drop(pool);
    assert!(s.size(p.as_ptr()).is_none(), "dropping the pool gives its slots back");
    s.check().unwrap();
}

/// The two release policies: pressure-only keeps a free slot's memory (a reused slot still
/// holds its contents), dontneed-on-put releases it at once (it reads as zero).
#[test]
fn release_policies_keep_or_release_memory_at_put() {
    let s = space("fixed-policy");
    let keep = FixedPool::new(&s, "keep", &opts(64 << 10, 1, PutRelease::Pressure)).unwrap();
    let drop_ = FixedPool::new(&s, "dontneed", &opts(64 << 10, 1, PutRelease::DontNeed)).unwrap();
    for pool in [&keep, &drop_] {
        let p = pool.get();
        words(p.as_ptr(), 64 << 10).fill(0xABCD);
        pool.put(p.as_ptr()).unwrap();
    }
    assert_eq!(keep.resident_bytes(), 64 << 10);
    assert_eq!(drop_.resident_bytes(), 0);
    assert_eq!(drop_.stats(false).release_calls, 1);
    let (k, d) = (keep.get(), drop_.get());
    assert!(words(k.as_ptr(), 64 << 10).iter().all(|&w| w == 0xABCD));
    assert!(words(d.as_ptr(), 64 << 10).iter().all(|&w| w == 0));
    keep.put(k.as_ptr()).unwrap();
    drop_.put(d.as_ptr()).unwrap();
    assert_eq!(keep.reclaim(), 16);
    assert_eq!(keep.resident_bytes(), 0);
}
