//! Frame allocator tests: bad input, exhaustion, compound retention, and a multi-thread stress
//! with an owner table per frame (a frame handed out twice shows as a failed claim) for every
//! combination of per-CPU lists, batch queues, the half-full rule and compound retention.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use vmarena_engine::{FrameAllocator, FrameError, FrameOptions};

fn opts(pcp: bool, queue: usize, half: bool, retention: bool) -> FrameOptions {
    FrameOptions {
        pcp,
        batch_queue: queue,
        batch_half_full: half,
        compound_retention: retention,
        cpus: 2,
        ..FrameOptions::default()
    }
}

#[test]
fn bad_frees_are_refused_and_change_nothing() {
    let f = FrameAllocator::new("t", 4096, opts(true, 63, true, false)).unwrap();
    let p = f.alloc(2).unwrap();
    let before = f.stats();
    assert_eq!(f.free(p + 1, 0), Err(FrameError::NotHeld(p + 1)), "tail frame");
    assert_eq!(f.free(p, 1), Err(FrameError::NotHeld(p)), "wrong order");
    assert_eq!(f.free(1 << 20, 0), Err(FrameError::NotHeld(1 << 20)), "outside the zone");
    assert!(matches!(f.free(p, 11), Err(FrameError::BadRequest(_))));
    assert!(matches!(f.alloc(11), Err(FrameError::BadRequest(_))));
    let after = f.stats();
    assert_eq!(after.user_frames, before.user_frames);
    assert_eq!(after.bad_frees, 3);
    f.free(p, 2).unwrap();
    assert_eq!(f.free(p, 2), Err(FrameError::NotHeld(p)), "double free while the block sits on a list");
    assert_eq!(f.held_order(p), None);
    f.check().unwrap();
    assert!(FrameAllocator::new("t", 0, FrameOptions::default()).is_err());
    let bad = FrameOptions { pcp_high_min: 100, pcp_high_max: 10, ..FrameOptions::default() };
    assert!(FrameAllocator::new("t", 4096, bad).is_err());
}

#[test]
fn exhaustion_drains_every_list_then_fails_with_the_figures() {
    for pcp in [true, false] {
        let f = FrameAllocator::new("small", 1024, opts(pcp, 7, true, false)).unwrap();
        let mut held = Vec::new();
        while let Ok(p) = f.alloc(0) {
            held.push(p);
        }
        assert_eq!(held.len(), 1024, "pcp {pcp}: every frame must be reachable");
        match f.alloc(0) {
            Err(FrameError::NoFrames(m)) => assert!(m.contains("small") && m.contains("1024 frames"), "{m}"),
            other => panic!("expected NoFrames, got {other:?}"),
        }
        // Free half: some go to lists and queues; an order-3 request must still find room
        // after the reclaim drain merges them.
        for p in held.drain(..512) {
            f.free(p, 0).unwrap();
        }
        let mut big = Vec::new();
        while let Ok(p) = f.alloc(3) {
            big.push(p);
        }
        assert!(!big.is_empty());
        for p in big {
            f.free(p, 3).unwrap();
        }
        for p in held {
            f.free(p, 0).unwrap();
        }
        f.drain_all();
        f.check().unwrap();
        let s = f.stats();
        assert_eq!(s.free_frames, 1024);
        assert_eq!(s.user_frames, 0);
    }
}

#[test]
fn bulk_allocation_fills_the_array() {
    let f = FrameAllocator::new("bulk", 8192, opts(true, 63, true, false)).unwrap();
    let mut v = Vec::new();
    assert_eq!(f.alloc_bulk(100, &mut v), 100);
    let mut sorted = v.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 100);
    assert_eq!(f.stats().user_frames, 100);
    for p in v {
        f.free(p, 0).unwrap();
    }
    f.check().unwrap();
}

#[test]
fn compound_retention_skips_preparation_on_list_hits() {
    let run = |retention: bool| {
        let f = FrameAllocator::new("c", 1 << 16, opts(true, 63, true, retention)).unwrap();
        for _ in 0..200 {
            let p = f.alloc(3).unwrap();
            f.free(p, 3).unwrap();
        }
        f.check().unwrap();
        f.stats()
    };
    let off = run(false);
    let on = run(true);
    assert_eq!(off.compound_preps, 200);
    assert_eq!(off.compound_dismantles, 200);
    assert!(on.compound_preps <= 2, "retained blocks are prepared once: {}", on.compound_preps);
    assert_eq!(on.compound_dismantles, 0);
}

/// Threads allocate random orders, free some themselves and hand the rest to the next thread;
/// every frame's owner word is claimed on allocation and released on free.
fn stress(o: FrameOptions, threads: usize, ops: usize) {
    let frames = 1u64 << 15;
    let f = Arc::new(FrameAllocator::new("stress", frames, o.clone()).unwrap());
    let owner: Arc<Vec<AtomicU32>> = Arc::new((0..frames).map(|_| AtomicU32::new(0)).collect());
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel::<(u32, u32)>()).unzip();
    let mut handles = Vec::new();
    for (t, rx) in rxs.into_iter().enumerate() {
        let (f, owner, tx) = (f.clone(), owner.clone(), txs[(t + 1) % threads].clone());
        handles.push(std::thread::spawn(move || {
            let me = t as u32 + 1;
            let mut rng = 0x9E37_79B9u64 * (t as u64 + 7);
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut live: Vec<(u32, u32)> = Vec::new();
            let release = |p: u32, o: u32| {
                for x in p..p + (1 << o) {
                    let was = owner[x as usize].swap(0, SeqCst);
                    assert_ne!(was, 0, "frame {x} freed while not owned");
                }
                f.free(p, o).unwrap();
            };
            for i in 0..ops {
                while let Ok((p, o)) = rx.try_recv() {
                    release(p, o);
                }
                let r = next();
                if r % 100 < 55 || live.is_empty() {
                    let order = [0, 0, 0, 0, 1, 2, 3, 9, 5][(r >> 8) as usize % 9];
                    if let Ok(p) = f.alloc(order) {
                        for x in p..p + (1 << order) {
                            let prev = owner[x as usize].swap(me, SeqCst);
                            assert_eq!(prev, 0, "frame {x} handed out twice (order {order}, op {i})");
                        }
                        live.push((p, order));
                    }
                } else {
                    let (p, o) = live.swap_remove((r >> 16) as usize % live.len());
                    if r % 3 == 0 {
                        for x in p..p + (1 << o) {
                            assert_eq!(owner[x as usize].swap(0, SeqCst), me);
                        }
                        for x in p..p + (1 << o) {
                            owner[x as usize].store(u32::MAX, SeqCst);
                        }
                        let _ = tx.send((p, o));
                    } else {
                        release(p, o);
                    }
                }
            }
            for (p, o) in live {
                release(p, o);
            }
            rx
        }));
    }
    drop(txs);
    let rxs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for rx in rxs {
        while let Ok((p, o)) = rx.try_recv() {
            for x in p..p + (1 << o) {
                owner[x as usize].store(0, SeqCst);
            }
            f.free(p, o).unwrap();
        }
    }
    f.check().unwrap();
    f.drain_all();
    let s = f.stats();
    assert_eq!(s.free_frames, frames, "{o:?}: frames lost");
    assert_eq!(s.bad_frees, 0);
    f.check().unwrap();
}

#[test]
fn stress_every_configuration_with_an_owner_table() {
    for pcp in [true, false] {
        for queue in [0, 7, 63] {
            for half in [true, false] {
                for retention in [false, true] {
                    if queue == 0 && !half {
                        continue;
                    }
                    stress(opts(pcp, queue, half, retention), 4, 20_000);
                }
            }
        }
    }
}
