//! Thread caches on real memory: contents across reuse and drains, callers, vrealloc (in place
//! without a lock), memory back to the OS.

mod common;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use vmarena::*;

/// Areas handed to a worker to check and free: `(address, length, tag)`.
type Mailboxes = Arc<Vec<Mutex<Vec<(usize, usize, u64)>>>>;

fn space(decay_interval_ms: u64) -> VmSpace {
    let so = SpaceOptions { space_bytes: 1 << 30, ..Default::default() };
    let ao = ArenaOptions { purge_thread: decay_interval_ms > 0, decay_interval_ms, ..Default::default() };
    let s = VmSpace::new("tc", so, ao).unwrap();
    assert_eq!(s.arena().thread_cache_off(), None);
    s
}

#[test]
fn vrealloc_of_a_reused_area_keeps_every_byte_the_user_wrote() {
    let s = space(0);
    let p = s.vmalloc(100).unwrap();
    s.vfree(p.as_ptr()).unwrap();
    // Same size class: the cached area comes back, and its record still says 100 bytes.
    let q = s.vmalloc(4000).unwrap();
    assert_eq!(q, p);
    common::fill(q.as_ptr(), 4000, 7);
    let r = s.vrealloc(Some(q), 3 * 4096).unwrap();
    assert_ne!(r, q);
    common::verify(r.as_ptr(), 4000, 7);
    s.vfree(r.as_ptr()).unwrap();
    s.check().unwrap();
}

/// Node-lock acquisitions so far (counted with timing off too).
fn node_acquisitions(s: &VmSpace) -> u64 {
    s.lock_stats().iter().filter(|(name, _)| *name == "node").map(|(_, l)| l.acquisitions).sum()
}

#[test]
fn vrealloc_of_a_small_area_in_place_takes_no_lock_and_a_later_move_keeps_the_whole_area() {
    let s = space(0);
    let p = s.vmalloc(3 * 4096).unwrap();
    let start = (p.as_ptr() as usize >> 12) as u64;
    assert_eq!(s.arena().lookup(start).unwrap().tag.requested_bytes, 3 * 4096);
    common::fill(p.as_ptr(), 3 * 4096, 5);
    let before = node_acquisitions(&s);
    for bytes in [100, 3 * 4096, 4096 + 1, 10] {
        assert_eq!(s.vrealloc(Some(p), bytes), Ok(p), "{bytes} bytes fit the area's pages");
    }
    assert_eq!(node_acquisitions(&s), before, "a resize in place took a node lock");
    // The busy record no longer knows the requested size: it says so.
    assert_eq!(s.arena().lookup(start).unwrap().tag.requested_bytes, UNKNOWN_BYTES);
    assert_eq!(s.size(p.as_ptr()), Some(3 * 4096));
    // A move now copies the whole area, so the bytes past the last requested size survive.
    let q = s.vrealloc(Some(p), 8 * 4096).unwrap();
    assert_ne!(q, p);
    common::verify(q.as_ptr(), 3 * 4096, 5);
    assert_eq!(s.vrealloc(Some(p), 10), Err(VmError::NotLive(p.as_ptr() as usize)), "moved away");
    s.vfree(q.as_ptr()).unwrap();
    s.check().unwrap();
}

#[test]
fn vrealloc_of_a_freed_small_area_is_refused_and_changes_nothing() {
    let s = space(0);
    let p = s.vmalloc(2 * 4096).unwrap();
    s.vfree(p.as_ptr()).unwrap();
    let addr = p.as_ptr() as usize;
    for bytes in [10, 2 * 4096, 5 * 4096] {
        assert_eq!(s.vrealloc(Some(p), bytes), Err(VmError::NotLive(addr)), "{bytes} bytes");
    }
    assert_eq!(s.vfree(p.as_ptr()), Err(VmError::NotLive(addr)), "still free, once");
    // The cached area is still there for the next allocation of its class.
    assert_eq!(s.vmalloc(2 * 4096), Ok(p));
    s.vfree(p.as_ptr()).unwrap();
    s.check().unwrap();
}

#[test]
fn vmallocinfo_names_the_latest_caller_and_lists_cached_areas_as_unpurged() {
    let s = space(0);
    let p = s.vmalloc(4096).unwrap();
    s.vfree(p.as_ptr()).unwrap();
    let line = line!() + 1;
    let q = s.vmalloc(4096).unwrap();
    assert_eq!(q, p);
    let info = s.vmallocinfo();
    let mine = info.lines().find(|l| l.starts_with(&format!("0x{:016x}", q.as_ptr() as usize))).unwrap();
    assert!(mine.contains(&format!("thread_cache.rs:{line}:")), "{mine}");
    s.vfree(q.as_ptr()).unwrap();
    let info = s.vmallocinfo();
    let mine = info.lines().find(|l| l.starts_with(&format!("0x{:016x}", q.as_ptr() as usize))).unwrap();
    assert!(mine.ends_with("unpurged vm_area"), "{mine}");
    assert_eq!(s.vfree(q.as_ptr()), Err(VmError::NotLive(q.as_ptr() as usize)), "double free");
    assert_eq!(s.size(q.as_ptr()), None);
}

/// A hit of the C ABI's `vmarena_vmalloc` (the plain hit inlined in it, which packs its own
/// caller into the area's state word) names the C ABI in `vmallocinfo`, as the miss that carved
/// the area did.
#[test]
fn an_area_reused_through_the_c_abi_names_the_c_abi() {
    use vmarena::capi::{vmarena_vfree, vmarena_vmalloc};
    let line_of = |p: *mut std::ffi::c_void| {
        let info = vmarena::default_space().unwrap().vmallocinfo();
        info.lines().find(|l| l.starts_with(&format!("0x{:016x}", p as usize))).map(str::to_string)
    };
    let p = vmarena_vmalloc(4096);
    assert!(!p.is_null());
    assert!(line_of(p).unwrap().contains(" vmarena_c_abi "), "the miss: {:?}", line_of(p));
    assert_eq!(vmarena_vfree(p), 0);
    let q = vmarena_vmalloc(4096);
    assert_eq!(q, p, "the thread's cache served the second call");
    let mine = line_of(q).unwrap();
    assert!(mine.contains(" vmarena_c_abi ") && mine.contains("vmalloc"), "the hit: {mine}");
    assert_eq!(vmarena_vfree(q), 0);
    assert_eq!(vmarena_vfree(q), -libc::EINVAL, "double free");
}

/// A cached area within the slack (`lazy_slack_percent`, on in the default space) serves a
/// smaller request whole: `size` reports all of it, `vzalloc` clears all of it, and its free
/// caches it whole again.
#[test]
fn a_cached_area_reused_within_the_slack_is_usable_and_zeroed_whole() {
    let so = SpaceOptions { space_bytes: 1 << 30, ..Default::default() };
    let ao = ArenaOptions {
        purge_thread: false,
        decay_interval_ms: 0,
        lazy_slack_percent: DEFAULT_SPACE_LAZY_SLACK_PERCENT,
        ..Default::default()
    };
    let s = VmSpace::new("tc-slack", so, ao).unwrap();
    let page = 4096;
    let p = s.vmalloc(12 * page).unwrap();
    common::fill(p.as_ptr(), 12 * page, 5);
    s.vfree(p.as_ptr()).unwrap();
    // 9 data pages and a guard against 13 pages: within 50%.
    let z = s.vzalloc(9 * page).unwrap();
    assert_eq!(z, p, "the cached 12-page area, whole");
    assert_eq!(s.size(z.as_ptr()), Some(12 * page));
    // SAFETY: 12 pages usable.
    let bytes = unsafe { std::slice::from_raw_parts(z.as_ptr(), 12 * page) };
    assert!(bytes.iter().all(|&b| b == 0), "the slack pages read zero too");
    assert_eq!(s.stats(false).arena.cache_slack_hits, 1);
    common::fill(z.as_ptr(), 12 * page, 6);
    s.vfree(z.as_ptr()).unwrap();
    let again = s.vmalloc(12 * page).unwrap();
    assert_eq!(again, p, "cached whole, taken again at its own size");
    common::verify(again.as_ptr(), 12 * page, 6);
    s.vfree(again.as_ptr()).unwrap();
    s.check().unwrap();
}

#[test]
fn vzalloc_from_the_cache_is_zeroed() {
    let s = space(0);
    let p = s.vmalloc(8192).unwrap();
    common::fill(p.as_ptr(), 8192, 3);
    s.vfree(p.as_ptr()).unwrap();
    let z = s.vzalloc(8192).unwrap();
    assert_eq!(z, p, "the dirty cached area is reused");
    // SAFETY: 8192 usable bytes.
    assert!(unsafe { std::slice::from_raw_parts(z.as_ptr(), 8192) }.iter().all(|&b| b == 0));
    s.vfree(z.as_ptr()).unwrap();
}

#[test]
fn memory_of_cached_areas_goes_back_to_the_os_with_no_further_calls() {
    let s = Arc::new(space(100));
    let s2 = s.clone();
    // A thread that stays alive and idle after filling its magazine.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        let ps: Vec<_> = (0..16).map(|_| s2.vmalloc(3 * 4096).unwrap()).collect();
        for p in &ps {
            common::fill(p.as_ptr(), 3 * 4096, 9);
        }
        for p in ps {
            s2.vfree(p.as_ptr()).unwrap();
        }
        rx.recv().unwrap();
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while s.stats(false).arena.cached_areas == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut resident = s.resident_bytes();
    while resident > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        resident = s.resident_bytes();
    }
    assert_eq!(resident, 0, "the idle drain and purge gave the cached memory back");
    assert!(s.stats(false).arena.cache_drained > 0);
    tx.send(()).unwrap();
    t.join().unwrap();
    s.check().unwrap();
}

/// Owners write their pattern over every byte, hand half of their areas to another thread to
/// check and free, and a drainer purges all along: a page given to two owners, or released
/// while owned, shows as a broken pattern.
#[test]
fn patterns_survive_cross_thread_frees_and_concurrent_drains() {
    const WORKERS: u64 = 4;
    let s = Arc::new(space(0));
    let mail: Mailboxes = Arc::new((0..WORKERS).map(|_| Mutex::default()).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let drainer = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                s.purge();
                std::thread::yield_now();
            }
        })
    };
    let ws: Vec<_> = (0..WORKERS)
        .map(|me| {
            let (s, mail) = (s.clone(), mail.clone());
            std::thread::spawn(move || {
                let check_free = |p: usize, len: usize, tag: u64| {
                    common::verify(p as *const u8, len, tag);
                    // A third of the areas are resized first (mostly by a thread that did not
                    // allocate them): in place while their pages suffice, else moved.
                    let p = if tag % 3 == 0 {
                        let new_len = 1 + (tag as usize).wrapping_mul(31) % (8 * 4096);
                        let q = s.vrealloc(NonNull::new(p as *mut u8), new_len).unwrap();
                        // A shorter prefix is checked in whole words (the pattern's tail
                        // bytes differ from its words).
                        let kept = if new_len < len { new_len & !7 } else { len };
                        common::verify(q.as_ptr(), kept, tag);
                        q.as_ptr() as usize
                    } else {
                        p
                    };
                    s.vfree(p as *mut u8).unwrap();
                };
                let mut mine = Vec::new();
                for i in 0..4000u64 {
                    let len = 1 + (i * 7919 + me * 104_729) as usize % (6 * 4096);
                    let tag = (me << 32) | i;
                    let p = s.vmalloc(len).unwrap();
                    common::fill(p.as_ptr(), len, tag);
                    mine.push((p.as_ptr() as usize, len, tag));
                    if mine.len() > 6 {
                        let a = mine.remove((i % 6) as usize);
                        if i % 2 == 0 {
                            mail[((me + 1) % WORKERS) as usize].lock().unwrap().push(a);
                        } else {
                            check_free(a.0, a.1, a.2);
                        }
                    }
                    for a in std::mem::take(&mut *mail[me as usize].lock().unwrap()) {
                        check_free(a.0, a.1, a.2);
                    }
                }
                for a in mine {
                    check_free(a.0, a.1, a.2);
                }
            })
        })
        .collect();
    for w in ws {
        w.join().unwrap();
    }
    for m in mail.iter() {
        for (p, len, tag) in std::mem::take(&mut *m.lock().unwrap()) {
            common::verify(p as *const u8, len, tag);
            s.vfree(p as *mut u8).unwrap();
        }
    }
    stop.store(true, Relaxed);
    drainer.join().unwrap();
    let st = s.stats(false).arena;
    assert_eq!(st.live_areas, 0);
    assert!(st.cache_hits > 0, "{st:?}");
    s.check().unwrap();
}

/// The default space's options cache every exact size of the kernel's pool range: a request
/// of 17 to 256 pages freed and asked for again comes back from the thread's cache without a
/// lock, with its contents; 257 pages does not.
#[test]
fn the_default_options_reuse_pool_range_sizes_from_the_thread_cache() {
    let so = SpaceOptions { space_bytes: 1 << 32, ..Default::default() };
    let ao = ArenaOptions { purge_thread: false, decay_interval_ms: 0, ..default_space_options() };
    assert_eq!(ao.thread_cache_max_pages, DEFAULT_SPACE_THREAD_CACHE_MAX_PAGES);
    let s = VmSpace::new("tc-default", so, ao).unwrap();
    // One thread per size: each starts with an empty magazine at the base budget (a magazine
    // that already holds other sizes makes room by its eviction and growth rules, tested in
    // the engine). A low-memory event (the PSI monitor, when other test processes load the
    // machine) may drain the caches between the free and the allocation: such a round is
    // repeated, at most three times.
    for pages in [17usize, 100, 128, 200, 256] {
        let mut rounds = 0;
        let drained = || s.stats(false).arena.cache_drained;
        while std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let bytes = pages * 4096;
                    let p = s.vmalloc(bytes).unwrap();
                    common::fill(p.as_ptr(), bytes, pages as u64);
                    let before = drained();
                    s.vfree(p.as_ptr()).unwrap();
                    // (Reading the statistics takes node locks: read them around the locks' count.)
                    let hits = s.stats(false).arena.cache_hits;
                    let locks = node_acquisitions(&s);
                    let q = s.vmalloc(bytes).unwrap();
                    let locks_after = node_acquisitions(&s);
                    if drained() != before && rounds < 3 {
                        s.vfree(q.as_ptr()).unwrap();
                        return true;
                    }
                    assert_eq!(locks_after, locks, "{pages} pages: no lock");
                    assert_eq!(q, p, "{pages} pages: the cached area");
                    assert_eq!(s.stats(false).arena.cache_hits, hits + 1, "{pages} pages: a cache hit");
                    common::verify(q.as_ptr(), bytes, pages as u64);
                    s.vfree(q.as_ptr()).unwrap();
                    false
                })
                .join()
                .unwrap()
        }) {
            rounds += 1;
        }
    }
    let big = s.vmalloc(257 * 4096).unwrap();
    s.vfree(big.as_ptr()).unwrap();
    let hits = s.stats(false).arena.cache_hits;
    let again = s.vmalloc(257 * 4096).unwrap();
    assert_eq!(s.stats(false).arena.cache_hits, hits, "257 pages are not cached");
    s.vfree(again.as_ptr()).unwrap();
    s.check().unwrap();
}
