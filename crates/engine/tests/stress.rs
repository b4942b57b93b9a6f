//! Concurrency stress (tier 3). Not a benchmark: it checks correctness under contention.
//!
//! 8 threads allocate areas of 1..=1024 pages (as a 4 KiB-page space: 1 byte to 4 MiB), stamp
//! every page of each area with an owner tag in a shared ownership table (an atomic swap that
//! must find the page unowned, so overlap shows at once), hand half of their areas to another
//! thread to free, and verify every page still carries the owner tag before freeing. Purges run
//! concurrently on the worker thread (small lazy threshold) and from a purging thread. At the
//! end the invariant checker must find every page accounted for.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{mpsc, Arc};
use vmarena_engine::*;

const PAGES: u64 = 1 << 19;
const THREADS: usize = 8;

fn run(strategy: Strategy) {
    run_nodes(strategy, 0)
}

fn run_nodes(strategy: Strategy, nodes: usize) {
    let opts = ArenaOptions {
        strategy,
        nodes,
        lazy_max_pages: 4096,
        purge_thread: true,
        decay_interval_ms: 5,
        ..Default::default()
    };
    let arena =
        Arc::new(Arena::new(format!("stress-{strategy}"), 0, PAGES, opts, Box::new(NoBacking)).unwrap());
    let owner: Arc<Vec<AtomicU64>> = Arc::new((0..PAGES).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let (txs, rxs): (Vec<_>, Vec<_>) =
        (0..THREADS).map(|_| mpsc::sync_channel::<(u64, u64, u64)>(64)).unzip();
    let purger = {
        let (a, stop) = (arena.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                a.purge();
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let workers: Vec<_> = rxs
        .into_iter()
        .enumerate()
        .map(|(t, rx)| {
            let (a, owner) = (arena.clone(), owner.clone());
            let peer = txs[(t + 1) % THREADS].clone();
            std::thread::spawn(move || {
                let verify_free = |start: u64, pages: u64, tag: u64| {
                    for p in start..start + pages {
                        let was = owner[p as usize].swap(0, AcqRel);
                        assert_eq!(was, tag, "{strategy}: page {p:#x} changed owner while live");
                    }
                    a.free(start).unwrap();
                };
                let mut seed = 0x9E37_79B9u64 * (t as u64 + 1);
                let mut mine: Vec<(u64, u64, u64)> = Vec::new();
                for i in 0..20_000u64 {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let pages = match seed % 16 {
                        0 => 1 + (seed >> 8) % 1024,
                        1..=4 => 1 + (seed >> 8) % 64,
                        _ => 1 + (seed >> 8) % 4,
                    };
                    let align = if seed % 7 == 0 { 1 << ((seed >> 20) % 6) } else { 1 };
                    let req = AllocRequest { align_pages: align, ..AllocRequest::pages(pages) };
                    let x = a.alloc(&req).unwrap_or_else(|e| panic!("{strategy}: {e}"));
                    assert_eq!(x.start % align, 0);
                    let tag = ((t as u64 + 1) << 32) | i;
                    for p in x.start..x.start + pages {
                        let was = owner[p as usize].swap(tag, AcqRel);
                        assert_eq!(was, 0, "{strategy}: page {p:#x} handed to two owners");
                    }
                    mine.push((x.start, pages, tag));
                    if mine.len() > 24 {
                        let k = (seed >> 3) as usize % mine.len();
                        let victim = mine.swap_remove(k);
                        // Hand it to the next thread, unless its inbox is full (it may be done).
                        let local = if i % 2 == 0 {
                            peer.try_send(victim).err().map(|e| match e {
                                mpsc::TrySendError::Full(v) | mpsc::TrySendError::Disconnected(v) => v,
                            })
                        } else {
                            Some(victim)
                        };
                        if let Some(v) = local {
                            verify_free(v.0, v.1, v.2);
                        }
                    }
                    while let Ok((s, p, tg)) = rx.try_recv() {
                        verify_free(s, p, tg);
                    }
                }
                for (s, p, tg) in mine {
                    verify_free(s, p, tg);
                }
                drop(peer);
                rx
            })
        })
        .collect();
    drop(txs);
    let rxs: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    // Areas still in flight between threads.
    for rx in rxs {
        while let Ok((s, p, tg)) = rx.try_recv() {
            for pg in s..s + p {
                assert_eq!(owner[pg as usize].swap(0, AcqRel), tg);
            }
            arena.free(s).unwrap();
        }
    }
    stop.store(true, Relaxed);
    purger.join().unwrap();
    arena.check().unwrap_or_else(|e| panic!("{strategy}: {e}"));
    let st = arena.stats();
    assert_eq!(st.live_areas, 0, "{strategy}");
    assert!(st.purges > 0, "{strategy}: purges ran during the test");
    assert!(owner.iter().all(|o| o.load(Relaxed) == 0));
    arena.shrink();
    arena.check().unwrap();
    assert_eq!((arena.stats().free_pages, arena.stats().free_ranges), (PAGES, 1), "{strategy}: nothing lost");
}

#[test]
fn stress_global() {
    run(Strategy::Global);
}

#[test]
fn stress_split() {
    run(Strategy::Split);
}

#[test]
fn stress_nodes() {
    run(Strategy::Nodes);
}

#[test]
fn stress_nodes_five_nodes_on_two_cpus() {
    run_nodes(Strategy::Nodes, 5);
}
