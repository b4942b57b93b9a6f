//! Concurrency stress on real memory (tier 3). Not a benchmark: it checks correctness.
//!
//! 8 threads allocate areas from 1 byte to 4 MiB, fill every usable byte with a pattern derived
//! from an owner tag, pass some areas to another thread to free, and verify the whole pattern before
//! each free: two owners sharing memory, or an area handed out while live, corrupts a pattern.
//! Runs for each strategy with purges on the worker thread; the invariant checker runs at the
//! end and every page must be back in the space after the shrinker. With Nodes, areas of 4 MiB
//! and less take the memory of lazy areas moved (step Move), so a move of the wrong range would
//! corrupt a pattern too; after the shrinker the reservation must be one mapping again. Nodes
//! runs with moves by `UFFDIO_MOVE` (where the kernel has it) and by `mremap`, and with a lazy
//! threshold so low that frees find the purges behind and release their own areas at once.
//! The space commits its reservation in steps as it grows (step Grow), and once more with a
//! thread running the shrinker all along, which gives the free top back while the others
//! allocate (a growth or a give-back of the wrong range would corrupt a pattern or fault).

mod common;

use common::{fill, verify};
use std::sync::{mpsc, Arc};
use vmarena::*;
use vmarena_platform::page_move::mappings_over;

const THREADS: usize = 8;
const ITERS: u64 = 1500;

#[derive(Clone, Copy)]
struct Owned(usize, usize, u64);

/// `slack`: the arena's `lazy_slack_percent` (lazy areas handed out whole, larger than asked);
/// `uffd_moves`: moves by userfaultfd where the kernel allows (else `mremap`).
fn run(strategy: Strategy, slack: u64, uffd_moves: bool) {
    run_with(strategy, slack, uffd_moves, 8192, false);
}

/// [`run`] with the arena's `lazy_max_pages`, and with a thread that runs the shrinker every
/// millisecond while the others work (`shrinker`).
fn run_with(strategy: Strategy, slack: u64, uffd_moves: bool, lazy_max_pages: u64, shrinker: bool) {
    let so = SpaceOptions { space_bytes: 8 << 30, uffd_moves, ..Default::default() };
    let ao = ArenaOptions {
        strategy,
        lazy_max_pages,
        // A threshold of a few pages is the kernel's, with no headroom below the live peak:
        // with it, frees that lower the live pages as they go would never pass the threshold.
        lazy_headroom: lazy_max_pages >= 256,
        decay_interval_ms: 10,
        // Ticks of 5 ms release what the workers free soon, so that areas carved from the tree
        // take moved memory (a keep lengthened by refaults would serve them from lazy areas).
        decay_keep_ticks_max: 1,
        lazy_slack_percent: slack,
        ..Default::default()
    };
    let space = Arc::new(VmSpace::new(&format!("stress-{strategy}"), so, ao).unwrap());
    // One area larger than the first committed step: the space grows past it in every run,
    // whatever the workers' sizes come to (and with the shrinker on, has a top to give back).
    let big = space.vmalloc(80 << 20).unwrap();
    fill(big.as_ptr(), 80 << 20, u64::MAX);
    verify(big.as_ptr(), 80 << 20, u64::MAX);
    space.vfree(big.as_ptr()).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let shrinks = shrinker.then(|| {
        let (s, stop) = (space.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                s.shrink();
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
    });
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::sync_channel::<Owned>(32)).unzip();
    let handles: Vec<_> = rxs
        .into_iter()
        .enumerate()
        .map(|(t, rx)| {
            let s = space.clone();
            let peer = txs[(t + 3) % THREADS].clone();
            std::thread::spawn(move || {
                let free = |o: Owned| {
                    verify(o.0 as *const u8, o.1, o.2);
                    s.vfree(o.0 as *mut u8).unwrap();
                };
                let mut seed = 0xDEAD_BEEF ^ (t as u64 * 0x1234_5678_9ABC);
                let mut mine = Vec::new();
                for i in 0..ITERS {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let requested = match seed % 32 {
                        0 => 1 + (seed >> 8) as usize % (4 << 20),
                        1..=8 => 1 + (seed >> 8) as usize % (64 << 10),
                        _ => 1 + (seed >> 8) as usize % (8 << 10),
                    };
                    let p = if seed % 5 == 0 { s.vzalloc(requested) } else { s.vmalloc(requested) }.unwrap();
                    // The whole usable size: an area reused whole within the slack is larger
                    // than asked, and all of it is the owner's.
                    let bytes = s.size(p.as_ptr()).unwrap();
                    assert!(bytes >= requested, "{strategy}: {bytes} usable bytes for {requested}");
                    let tag = ((t as u64) << 48) | i;
                    fill(p.as_ptr(), bytes, tag);
                    mine.push(Owned(p.as_ptr() as usize, bytes, tag));
                    if mine.len() > 16 {
                        let o = mine.swap_remove((seed >> 5) as usize % mine.len());
                        if i % 2 == 0 {
                            if let Err(e) = peer.try_send(o) {
                                free(match e {
                                    mpsc::TrySendError::Full(o) | mpsc::TrySendError::Disconnected(o) => o,
                                });
                            }
                        } else {
                            free(o);
                        }
                    }
                    while let Ok(o) = rx.try_recv() {
                        free(o);
                    }
                }
                mine.into_iter().for_each(free);
                drop(peer);
                rx
            })
        })
        .collect();
    drop(txs);
    // Every worker first, then what is left in their channels: a worker still running sends to
    // the channel of one already joined, and what it sent after that channel was emptied and
    // before it was dropped went with the channel, an area no one freed (under load, one run in
    // fifteen ended with one live area).
    let rxs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for rx in rxs {
        while let Ok(o) = rx.try_recv() {
            verify(o.0 as *const u8, o.1, o.2);
            space.vfree(o.0 as *mut u8).unwrap();
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(h) = shrinks {
        h.join().unwrap();
    }
    space.check().unwrap_or_else(|e| panic!("{strategy}: {e}"));
    let st = space.stats(false).arena;
    assert_eq!(st.live_areas, 0, "{strategy}: live areas after every worker freed its own");
    assert!(st.grows > 0, "{strategy}: the space grew past its first step");
    assert!(st.purges > 0, "{strategy}: purges ran during the test");
    space.shrink();
    space.check().unwrap();
    assert_eq!(space.stats(false).arena.free_ranges, 1, "{strategy}: every page back, merged");
    assert_eq!(space.resident_bytes(), 0, "{strategy}: every page released");
    assert_eq!(space.committed_bytes(), 64 << 20, "{strategy}: all but the first step given back");
    if shrinker {
        let st = space.stats(false).arena;
        eprintln!("{strategy}: {} growths, {} give-backs", st.grows, st.shrinks);
        assert!(st.shrinks >= 1, "{strategy}: the free top went back");
    }
    let (lo, _) = space.bounds();
    assert_eq!(mappings_over(lo, space.committed_bytes()), 1, "{strategy}: the moves' mappings all healed");
    if strategy == Strategy::Nodes {
        let st = space.stats(false).arena;
        assert!(st.moved_pages > 0, "{strategy}: areas took moved memory");
        assert_eq!(st.moved_maps, 0);
        if slack > 0 {
            assert!(st.slack_pages > 0, "{strategy}: some areas were handed out whole, larger");
        }
        // Eight workers on fewer than four CPUs: the per-CPU stacks of the larger sizes served
        // some areas, every pattern checked before each free.
        if space.arena().cpu_cache_off().is_none() && 2 * vmarena_platform::cpu::count() < THREADS {
            assert!(st.cache_cpu_grown_hits > 0, "{strategy}: the grown stacks served areas: {st:?}");
        }
        if lazy_max_pages < 256 {
            assert!(st.released_on_free > 0, "{strategy}: some frees found the purges behind");
        }
    }
}

#[test]
fn stress_global() {
    run(Strategy::Global, 0, true);
}

#[test]
fn stress_split() {
    run(Strategy::Split, 0, true);
}

#[test]
fn stress_nodes() {
    run(Strategy::Nodes, 0, true);
}

/// Nodes with every move an `mremap`, whose moved ranges are mappings of their own until healed.
#[test]
fn stress_nodes_mremap() {
    run(Strategy::Nodes, 0, false);
}

/// Nodes with a lazy threshold of 32 pages: every large free passes twice the threshold, so
/// the frees that follow it before a purge release their own areas and return them to the
/// free tree while other threads allocate from it and move pages into new areas.
#[test]
fn stress_nodes_backlog() {
    run_with(Strategy::Nodes, 0, true, 32, false);
}

/// Nodes with the default space's slack: the slack pages are filled and checked too.
#[test]
fn stress_nodes_slack() {
    run(Strategy::Nodes, DEFAULT_SPACE_LAZY_SLACK_PERCENT, true);
}

/// The shrinker all along: the free top of the committed part goes back while eight threads
/// allocate, grow the space again and free (Nodes and Global).
#[test]
fn stress_with_the_shrinker_all_along() {
    run_with(Strategy::Nodes, 0, true, 8192, true);
    run_with(Strategy::Global, 0, true, 8192, true);
}
