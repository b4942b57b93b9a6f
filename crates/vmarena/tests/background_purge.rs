//! Memory returns to the OS with no further calls (tier 1): the purge worker's decay interval
//! releases lazily freed memory of an idle space within a few seconds.

use std::time::{Duration, Instant};
use vmarena::*;

#[test]
fn idle_space_gives_memory_back_without_calls() {
    for strategy in Strategy::ALL {
        let so = SpaceOptions { space_bytes: 1 << 30, ..Default::default() };
        let ao = ArenaOptions { strategy, ..Default::default() }; // worker on, 1 s interval
        let s = VmSpace::new("bg", so, ao).unwrap();
        let rss0 = vmarena_platform_rss();
        let ptrs: Vec<_> = (0..48).map(|_| s.vmalloc(1 << 20).unwrap()).collect();
        for p in &ptrs {
            // SAFETY: 1 MiB usable.
            unsafe { std::ptr::write_bytes(p.as_ptr(), 7, 1 << 20) };
        }
        for p in ptrs {
            s.vfree(p.as_ptr()).unwrap();
        }
        let freed_at = Instant::now();
        // 48 MiB is below lazy_max_pages on this machine, so only the idle decay can purge.
        // The purge counts itself after its release calls (and its merges into the tree):
        // wait for both.
        while (s.resident_bytes() > 0 || s.stats(false).arena.purges == 0)
            && freed_at.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(s.resident_bytes(), 0, "{strategy}: memory still resident 5 s after the last free");
        eprintln!(
            "{strategy}: resident memory gone {} ms after the last free; process RSS {} -> {} MiB",
            freed_at.elapsed().as_millis(),
            rss0 >> 20,
            vmarena_platform_rss() >> 20
        );
        assert!(s.stats(false).arena.purges >= 1);
    }
}

fn vmarena_platform_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0u64)
        * 1024
}
