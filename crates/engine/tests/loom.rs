//! Model checking (tier 3) with loom: every interleaving of the engine's atomics and locks, on
//! tiny configurations, up to the preemption bound loom is run with.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p vmarena-engine --test loom --release`
//! (`.ci/loom` does this). Not part of the plain `cargo test` run.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use vmarena_engine::sync::set_cpu;
use vmarena_engine::*;

fn arena(strategy: Strategy, pages: u64) -> Arc<Arena> {
    let opts = ArenaOptions {
        strategy,
        nodes: 2,
        lazy_max_pages: 1 << 20,
        purge_thread: false,
        decay_interval_ms: 0,
        ..Default::default()
    };
    Arc::new(Arena::new("loom", 0, pages, opts, Box::new(NoBacking)).unwrap())
}

fn disjoint(a: &Allocation, b: &Allocation) -> bool {
    a.start + a.pages <= b.start || b.start + b.pages <= a.start
}

/// Two CPUs allocate and free concurrently; one frees an area the other allocated (a
/// cross-node free). No area is handed out twice, and the invariant checker accounts for every
/// page at the end.
#[test]
fn nodes_cross_node_free() {
    loom::model(|| {
        let a = arena(Strategy::Nodes, 96);
        let first = {
            set_cpu(1);
            a.alloc(&AllocRequest::pages(2)).unwrap()
        };
        let t = {
            let a = a.clone();
            thread::spawn(move || {
                set_cpu(0);
                let x = a.alloc(&AllocRequest::pages(2)).unwrap();
                a.free(first.start).unwrap();
                let y = a.alloc(&AllocRequest::pages(2)).unwrap();
                (x, y)
            })
        };
        set_cpu(1);
        let z = a.alloc(&AllocRequest::pages(2)).unwrap();
        let (x, y) = t.join().unwrap();
        assert!(disjoint(&x, &y) && disjoint(&x, &z) && disjoint(&y, &z), "{x:?} {y:?} {z:?}");
        for s in [x.start, y.start, z.start] {
            a.free(s).unwrap();
        }
        a.check().unwrap();
    });
}

/// A purge runs while another thread frees and allocates: pooled dirty areas are detached,
/// released and put back clean with no area lost or handed out while detached.
#[test]
fn nodes_purge_races_alloc_and_free() {
    loom::model(|| {
        let a = arena(Strategy::Nodes, 96);
        set_cpu(0);
        let x = a.alloc(&AllocRequest::pages(3)).unwrap();
        a.free(x.start).unwrap();
        let t = {
            let a = a.clone();
            thread::spawn(move || {
                set_cpu(0);
                let y = a.alloc(&AllocRequest::pages(3)).unwrap();
                a.free(y.start).unwrap();
                a.alloc(&AllocRequest::pages(3)).unwrap()
            })
        };
        set_cpu(1);
        a.purge();
        let z = t.join().unwrap();
        assert_eq!(a.stats().live_areas, 1);
        a.free(z.start).unwrap();
        a.check().unwrap();
    });
}

/// Two threads free the same area at once: exactly one succeeds, the other is refused.
#[test]
fn concurrent_double_free_is_refused_once() {
    for strategy in [Strategy::Nodes, Strategy::Split] {
        loom::model(move || {
            let a = arena(strategy, 64);
            set_cpu(0);
            let x = a.alloc(&AllocRequest::pages(2)).unwrap();
            let t = {
                let a = a.clone();
                thread::spawn(move || {
                    set_cpu(1);
                    a.free(x.start).is_ok()
                })
            };
            let mine = a.free(x.start).is_ok();
            let theirs = t.join().unwrap();
            assert!(mine ^ theirs, "exactly one free succeeds ({mine}, {theirs})");
            assert_eq!(a.stats().bad_frees, 1);
            a.check().unwrap();
        });
    }
}

/// The lock: two threads increment a pair of fields under a StatLock; a torn update would show.
#[test]
fn stat_lock_excludes() {
    loom::model(|| {
        let l = Arc::new(StatLock::new((0u32, 0u32)));
        let t = {
            let l = l.clone();
            thread::spawn(move || {
                let mut g = l.lock();
                g.0 += 1;
                g.1 += 1;
            })
        };
        {
            let mut g = l.lock();
            g.0 += 1;
            g.1 += 1;
        }
        t.join().unwrap();
        assert_eq!(*l.lock(), (2, 2));
        assert_eq!(l.stats().acquisitions, 3);
    });
}
