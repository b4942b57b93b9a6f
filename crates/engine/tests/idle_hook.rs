//! The process's idle hook (`set_idle_hook`): a purge worker calls it after the purge at the end
//! of an idle interval that found lazy memory, and not while nothing is lazy. In its own test
//! program, since the hook is process-wide and set once.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};
use vmarena_engine::*;

static CALLS: AtomicU64 = AtomicU64::new(0);

fn count() {
    CALLS.fetch_add(1, SeqCst);
}

fn wait_until(f: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}

#[test]
fn the_hook_runs_after_an_idle_purge_only() {
    assert!(set_idle_hook(count));
    assert!(!set_idle_hook(count), "set once per process");
    let o = ArenaOptions {
        strategy: Strategy::Nodes,
        purge_thread: true,
        decay_interval_ms: 50,
        thread_cache: false,
        ..Default::default()
    };
    // An arena that freed nothing: no idle purge, no call.
    let idle = Arena::new("idle", 0, 1 << 20, o.clone(), Box::new(NoBacking)).unwrap();
    let _live = idle.alloc(&AllocRequest::pages(300)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(CALLS.load(SeqCst), 0, "no lazy memory, no idle purge");
    // Lazy memory below the threshold: the decay purge releases it, then calls the hook.
    let a = Arena::new("decay", 0, 1 << 20, o, Box::new(NoBacking)).unwrap();
    let x = a.alloc(&AllocRequest::pages(300)).unwrap();
    a.free(x.start).unwrap();
    assert!(wait_until(|| a.stats().lazy_pages == 0 && CALLS.load(SeqCst) >= 1), "idle purge and hook");
    // Once the memory is gone, later idle intervals purge nothing and call nothing.
    let after = CALLS.load(SeqCst);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(CALLS.load(SeqCst), after, "nothing lazy, no further calls");
}
