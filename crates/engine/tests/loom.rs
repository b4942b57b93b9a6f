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

/// Owner cells of a fixed-cache model: a slot's cell holds the id of its owner or 0.
fn own(cells: &[loom::sync::atomic::AtomicUsize], slot: u32, me: usize) {
    let was = cells[slot as usize].swap(me, loom::sync::atomic::Ordering::SeqCst);
    assert_eq!(was, 0, "slot {slot} taken by {me} while owned by {was}");
}

fn disown(cells: &[loom::sync::atomic::AtomicUsize], slot: u32, me: usize) {
    let was = cells[slot as usize].swap(0, loom::sync::atomic::Ordering::SeqCst);
    assert_eq!(was, me, "slot {slot} given back by {me} but owned by {was}");
}

/// One slot, two CPUs: a getter on CPU 1 blocks while the slot is held on CPU 0; the holder
/// puts it back into CPU 0's entry (not the list). The getter must still get it (by the
/// waiter count and the steal); loom reports a deadlock if a wake-up can be lost.
#[test]
fn fixed_cache_parked_slot_reaches_a_sleeping_getter() {
    loom::model(|| {
        let c = Arc::new(FixedCache::new(1, 2).unwrap());
        let cells = Arc::new([loom::sync::atomic::AtomicUsize::new(0)]);
        set_cpu(0);
        let (s, _) = c.get();
        own(&cells[..], s, 1);
        let t = {
            let (c, cells) = (c.clone(), cells.clone());
            thread::spawn(move || {
                set_cpu(1);
                let (s, _) = c.get();
                own(&cells[..], s, 2);
                disown(&cells[..], s, 2);
                c.put(s, false, |_| {}).unwrap();
            })
        };
        disown(&cells[..], s, 1);
        c.put(s, false, |_| {}).unwrap();
        t.join().unwrap();
        c.check().unwrap();
    });
}

/// Two threads on two CPUs cycle one of two slots each while a third reclaims: no slot is
/// ever owned twice, a reclaim releases only slots nobody holds, and every slot is accounted
/// for at the end.
#[test]
fn fixed_cache_reclaim_races_get_and_put() {
    loom::model(|| {
        let c = Arc::new(FixedCache::new(2, 2).unwrap());
        let cells =
            Arc::new([loom::sync::atomic::AtomicUsize::new(0), loom::sync::atomic::AtomicUsize::new(0)]);
        let workers: Vec<_> = (0..2)
            .map(|cpu| {
                let (c, cells) = (c.clone(), cells.clone());
                thread::spawn(move || {
                    set_cpu(cpu);
                    let me = cpu + 1;
                    let (s, _) = c.get();
                    own(&cells[..], s, me);
                    disown(&cells[..], s, me);
                    c.put(s, false, |r| {
                        own(&cells[..], r, 9);
                        disown(&cells[..], r, 9);
                    })
                    .unwrap();
                })
            })
            .collect();
        c.reclaim(|slots| {
            for &s in slots {
                own(&cells[..], s, 3);
            }
            for &s in slots {
                disown(&cells[..], s, 3);
            }
        });
        for w in workers {
            w.join().unwrap();
        }
        c.check().unwrap();
        assert_eq!(c.stats().held, 0);
    });
}

/// The thread caches' owner/drainer handshake (src/caches/handshake.rs, with `SeqCst` fences standing
/// in for the compiler fence and `membarrier`): an owner doing two operations on its magazine
/// and a drainer emptying it never touch the magazine at the same time (loom's cell checks
/// every access for a happens-before edge), and no entry is lost or duplicated.
#[test]
fn thread_cache_handshake_keeps_owner_and_drainer_apart() {
    use loom::cell::UnsafeCell;
    use vmarena_engine::caches::handshake::{heavy_fence, Enter, Handshake};

    struct Magazine {
        hs: Handshake,
        items: UnsafeCell<Vec<u32>>,
    }
    // SAFETY: `items` is only touched under the handshake, which is what the model checks.
    unsafe impl Sync for Magazine {}

    loom::model(|| {
        let m = Arc::new(Magazine { hs: Handshake::default(), items: UnsafeCell::new(vec![1]) });
        let drainer = {
            let m = m.clone();
            thread::spawn(move || {
                let mut taken = Vec::new();
                if m.hs.mark() {
                    let fenced = heavy_fence();
                    if m.hs.settle(fenced) {
                        // SAFETY: the handshake gave the magazine to this thread.
                        m.items.with_mut(|v| taken.append(unsafe { &mut *v }));
                        m.hs.release();
                    }
                }
                taken
            })
        };
        // The owner frees entry 2 into its magazine, then allocates one entry from it; when it
        // cannot use the magazine, entry 2 goes elsewhere (the nodes).
        let (mut popped, mut elsewhere) = (Vec::new(), Vec::new());
        for op in 0..2 {
            match m.hs.enter() {
                Enter::Go => {
                    // SAFETY: between `Go` and `leave` the magazine is the owner's.
                    m.items.with_mut(|v| unsafe {
                        if op == 0 {
                            (*v).push(2)
                        } else {
                            popped.extend((*v).pop())
                        }
                    });
                    m.hs.leave();
                }
                e => {
                    if e == Enter::Drain && m.hs.claim_drain() {
                        // SAFETY: the claim gave the magazine to the owner outside an operation.
                        m.items.with_mut(|v| popped.append(unsafe { &mut *v }));
                        m.hs.release();
                    }
                    if op == 0 {
                        elsewhere.push(2);
                    }
                }
            }
        }
        let taken = drainer.join().unwrap();
        // SAFETY: both threads are done.
        let rest = m.items.with(|v| unsafe { (*v).clone() });
        let mut all = [taken, popped, elsewhere, rest].concat();
        all.sort_unstable();
        assert_eq!(all, vec![1, 2], "an entry was lost or duplicated");
    });
}
