//! Low-memory events on real memory: RSS falls for pooled space memory and for fixed-pool
//! memory. A test binary of its own, because an event reaches every cache in the process.

use std::time::Duration;
use vmarena::*;

const MIB: usize = 1 << 20;

fn touch(p: *mut u8, len: usize) {
    // SAFETY: `len` bytes at `p` belong to the caller.
    unsafe { std::ptr::write_bytes(p, 0x5A, len) };
}

#[test]
fn low_memory_event_releases_pooled_and_fixed_memory() {
    let so = SpaceOptions { space_bytes: 4 << 30, ..Default::default() };
    // No idle decay and a high purge threshold: freed areas stay pooled and resident until
    // the event.
    let ao = ArenaOptions { decay_interval_ms: 0, lazy_max_pages: 1 << 20, ..Default::default() };
    let space = VmSpace::new("pressure", so, ao).unwrap();
    // The pool first: its slots would otherwise reuse the pooled areas.
    let pool = FixedPool::new(
        &space,
        "pressure",
        &FixedOptions { slot_bytes: 256 << 10, slots: 16, ..Default::default() },
    )
    .unwrap();
    let areas: Vec<_> = (0..64).map(|_| space.vmalloc(256 << 10).unwrap()).collect();
    for p in &areas {
        touch(p.as_ptr(), 256 << 10);
    }
    for p in areas {
        space.vfree(p.as_ptr()).unwrap();
    }
    let slots: Vec<_> = (0..16).map(|_| pool.get()).collect();
    for p in &slots {
        touch(p.as_ptr(), 256 << 10);
    }
    let held = slots[0];
    for p in &slots[1..] {
        pool.put(p.as_ptr()).unwrap();
    }
    // 16 MiB pooled in the space (some of it in this thread's cache), 4 MiB in slots (256 KiB
    // of it held).
    let resident_before = space.resident_bytes() as usize;
    let rss_before = vmarena_platform::process::rss_bytes() as usize;
    assert!(resident_before >= 20 * MIB, "{resident_before}");
    let st = space.stats(false).arena;
    assert!(st.pooled_areas + st.cached_areas >= 64, "{st:?}");

    let report = pressure();
    let mine: u64 = report.released.iter().filter(|r| r.0.contains("pressure")).map(|r| r.1).sum();
    assert!(mine as usize * 4096 >= 19 * MIB, "{report:?}");
    let resident_after = space.resident_bytes() as usize;
    let rss_after = vmarena_platform::process::rss_bytes() as usize;
    assert_eq!(resident_after, 256 << 10, "only the held slot stays resident");
    assert!(rss_before - rss_after >= 18 * MIB, "process RSS fell from {rss_before} to {rss_after}");
    assert_eq!(pool.resident_bytes(), 256 << 10);
    let st = space.stats(false).arena;
    assert_eq!((st.pooled_areas, st.cached_areas), (0, 0), "the space's pools and caches were drained");

    // The held slot is released when it is put back (its generation is stale).
    pool.put(held.as_ptr()).unwrap();
    assert_eq!(pool.resident_bytes(), 0);
    let st = pool.cache_stats();
    assert_eq!((st.releases, st.reclaims), (16, 1));
    space.check().unwrap();
}

/// The PSI monitor is watching a memory.pressure file, or says why it cannot.
#[test]
fn psi_monitor_watches_or_explains() {
    match pressure::start_monitor() {
        MonitorStatus::Watching { path, rule } => {
            assert!(path.ends_with("memory.pressure") || path == "/proc/pressure/memory", "{path}");
            assert_eq!(rule, "some 100000 2000000");
            // The thread is alive and asleep until its first read: give it a moment; no event
            // fires on an idle machine.
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(pressure::events().1, 0);
        }
        MonitorStatus::Disabled => panic!("VMARENA_PSI is not set in tests"),
        MonitorStatus::Unavailable(why) => assert!(!why.is_empty()),
    }
}
