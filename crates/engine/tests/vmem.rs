//! The integer arena (`Vmem`) against a brute-force oracle (tier 2), and under concurrency with
//! an ownership table (tier 3).
//!
//! The oracle keeps the live allocations and the spans, and for every request enumerates every
//! start a quantum apart: each answer must meet every constraint and overlap nothing; a
//! refusal must mean that no start exists (after the caches are flushed); with the global
//! strategy and no caches, lowest fit must give the lowest start when the request has no
//! alignment. Instant fit (segregated free lists, `SegFit`) is held to the first two.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use vmarena_engine::*;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const Q: u64 = 16;

/// Live allocations (start -> size) and spans, in integers.
#[derive(Default)]
struct Oracle {
    live: BTreeMap<u64, u64>,
    spans: Vec<(u64, u64)>,
}

impl Oracle {
    fn is_free(&self, s: u64, e: u64) -> bool {
        let inside = self.spans.iter().any(|&(b, end)| b <= s && e <= end);
        // The last allocation that starts below the end must end at or before the start.
        inside && self.live.range(..e).next_back().map_or(true, |(&ls, &lsize)| ls + lsize <= s)
    }

    fn meets(s: u64, size: u64, c: &Constraints) -> bool {
        let align = c.align.max(Q);
        let e = s + size;
        (s % align) == c.phase
            && (c.nocross == 0 || s / c.nocross == (e - 1) / c.nocross)
            && s >= c.min_addr
            && (c.max_addr == 0 || e <= c.max_addr)
    }

    /// Every start, lowest first, a quantum apart.
    fn starts(&self, size: u64, c: &Constraints) -> Vec<u64> {
        let mut out = Vec::new();
        for &(b, end) in &self.spans {
            let mut s = b;
            while s + size <= end {
                if Self::meets(s, size, c) && self.is_free(s, s + size) {
                    out.push(s);
                }
                s += Q;
            }
        }
        out
    }
}

fn random_constraints(rng: &mut Rng, size: u64) -> Constraints {
    let mut c = Constraints::default();
    if rng.below(3) == 0 {
        c.align = Q << rng.below(5);
        if rng.below(2) == 0 {
            c.phase = rng.below(c.align / Q) * Q;
        }
    }
    if rng.below(4) == 0 {
        let min_nc = size.next_power_of_two().max(Q);
        c.nocross = min_nc << rng.below(3);
    }
    if rng.below(5) == 0 {
        c.min_addr = rng.below(64) * Q * 8;
        if rng.below(2) == 0 {
            c.max_addr = c.min_addr + size.div_ceil(Q) * Q + rng.below(256) * Q;
        }
    }
    c
}

fn oracle_run(strategy: Strategy, caches: bool, fit: Fit, seed: u64) {
    oracle_run_striped(strategy, caches, fit, seed, 0)
}

fn oracle_run_striped(strategy: Strategy, caches: bool, fit: Fit, seed: u64, stripes: usize) {
    let arena = ArenaOptions {
        strategy,
        thread_cache: caches,
        cpu_cache: caches,
        purge_thread: false,
        lazy_max_pages: 64,
        ..ArenaOptions::default()
    };
    let vm =
        Vmem::new("oracle", VmemOptions { quantum: Q, fit, arena, stripes, ..VmemOptions::default() }, None)
            .unwrap();
    let mut o = Oracle::default();
    // Two spans with a gap, the second added later.
    vm.add_span(0x1000, 512 * Q).unwrap();
    o.spans.push((0x1000, 0x1000 + 512 * Q));
    let mut rng = Rng(seed);
    let exact = !caches && strategy == Strategy::Global;
    for step in 0..3000 {
        if step == 1000 {
            vm.add_span(0x10000, 256 * Q).unwrap();
            o.spans.push((0x10000, 0x10000 + 256 * Q));
        }
        if !o.live.is_empty() && rng.below(5) < 2 {
            let k = rng.below(o.live.len() as u64) as usize;
            let (&s, &size) = o.live.iter().nth(k).unwrap();
            assert_eq!(vm.free(s), Ok(size), "free {s:#x}");
            o.live.remove(&s);
            continue;
        }
        let bound = if rng.below(8) == 0 { 128 * Q } else { 8 * Q };
        let size = 1 + rng.below(bound);
        let rounded = size.div_ceil(Q) * Q;
        let c = random_constraints(&mut rng, rounded);
        if exact {
            // Every freed range in the free tree: the answer is determined.
            vm.shrink();
        }
        let got = vm.xalloc(size, &c);
        let starts = o.starts(rounded, &c);
        match got {
            Ok(s) => {
                assert!(Oracle::meets(s, rounded, &c), "step {step}: {s:#x} breaks {c:?}");
                assert!(
                    o.is_free(s, s + rounded),
                    "step {step}: {s:#x}+{rounded:#x} overlaps or leaves the spans"
                );
                if exact && fit == Fit::Lowest && c.align <= Q && c.nocross == 0 {
                    assert_eq!(s, starts[0], "step {step}: lowest fit of {rounded:#x} under {c:?}");
                }
                o.live.insert(s, rounded);
            }
            Err(VmemError::NoSpace { .. }) => {
                vm.shrink();
                match vm.xalloc(size, &c) {
                    Ok(s) => {
                        // Held by a cache until the shrink: now it must be a valid answer.
                        assert!(Oracle::meets(s, rounded, &c) && o.is_free(s, s + rounded));
                        o.live.insert(s, rounded);
                    }
                    Err(_) => {
                        assert!(starts.is_empty(), "step {step}: refused {rounded:#x} {c:?}, {starts:x?} fit")
                    }
                }
            }
            Err(e) => panic!("step {step}: {e} for {size} {c:?}"),
        }
        if step % 500 == 0 {
            vm.check().unwrap();
        }
    }
    let st = vm.stats();
    assert_eq!(st.live, o.live.len() as u64);
    assert_eq!(st.allocated, o.live.values().sum::<u64>());
    for &s in o.live.keys() {
        vm.free(s).unwrap();
    }
    vm.shrink();
    let st = vm.stats();
    assert_eq!((st.live, st.free_ranges, st.largest_free), (0, 2, 512 * Q), "all free, one range a span");
    vm.check().unwrap();
}

#[test]
fn lowest_fit_matches_the_oracle() {
    for seed in 1..=4 {
        oracle_run(Strategy::Global, false, Fit::Lowest, seed);
    }
}

#[test]
fn instant_fit_meets_the_oracle() {
    for seed in 5..=8 {
        oracle_run(Strategy::Global, false, Fit::Instant, seed);
    }
}

#[test]
fn best_fit_meets_the_oracle() {
    for seed in 31..=34 {
        oracle_run(Strategy::Global, false, Fit::Best, seed);
    }
    for seed in 35..=36 {
        oracle_run_striped(Strategy::Global, false, Fit::Best, seed, 3);
    }
}

/// Stripes of 171 and 86 quanta: requests of up to 128 quanta with alignment often fit only
/// across a boundary, where every stripe is locked and the parts carved.
#[test]
fn instant_fit_in_stripes_meets_the_oracle() {
    for seed in 21..=24 {
        oracle_run_striped(Strategy::Global, false, Fit::Instant, seed, 3);
    }
}

#[test]
fn every_strategy_with_caches_meets_every_constraint() {
    for s in Strategy::ALL {
        oracle_run(s, true, Fit::Lowest, 11);
        oracle_run(s, true, Fit::Instant, 12);
    }
}

#[test]
fn refusals_change_nothing() {
    let vm = Vmem::new("refuse", VmemOptions { quantum: Q, ..VmemOptions::default() }, None).unwrap();
    assert!(matches!(
        Vmem::new("q", VmemOptions { quantum: 24, ..VmemOptions::default() }, None),
        Err(VmemError::Invalid(_))
    ));
    assert!(matches!(vm.alloc(16), Err(VmemError::NoSpace { spans: 0, .. })), "no span yet");
    vm.add_span(0, 64 * Q).unwrap();
    assert!(matches!(vm.add_span(32 * Q, 64 * Q), Err(VmemError::Overlap { .. })));
    assert!(matches!(vm.add_span(u64::MAX - 15, 32), Err(VmemError::Overlap { .. })), "wraps");
    assert!(matches!(vm.add_span(64 * Q + 1, Q), Err(VmemError::Invalid(_))));
    assert!(matches!(vm.add_span(64 * Q, 0), Err(VmemError::Invalid(_))));
    for (size, c) in [
        (0, Constraints::default()),
        (16, Constraints { align: 48, ..Default::default() }),
        (16, Constraints { align: 64, phase: 64, ..Default::default() }),
        (100, Constraints { nocross: 64, ..Default::default() }),
        (16, Constraints { min_addr: 64, max_addr: 64, ..Default::default() }),
    ] {
        assert!(matches!(vm.xalloc(size, &c), Err(VmemError::Invalid(_))), "{size} {c:?}");
    }
    // A phase that every nocross segment refuses: no start exists anywhere.
    let never = Constraints { align: 4 * Q, phase: 3 * Q, nocross: 4 * Q, ..Default::default() };
    assert!(matches!(vm.xalloc(2 * Q, &never), Err(VmemError::NoSpace { .. })));
    let a = vm.alloc(100).unwrap();
    assert_eq!(vm.size_of(a), Some(112));
    assert_eq!(vm.free(a + Q), Err(VmemError::NotAllocated(a + Q)), "inside, not a start");
    assert_eq!(vm.free(a + 1), Err(VmemError::NotAllocated(a + 1)), "not a quantum multiple");
    assert_eq!(vm.free(1 << 40), Err(VmemError::NotAllocated(1 << 40)), "in no span");
    assert_eq!(vm.stats().live, 1, "nothing changed");
    let vm = match vm.destroy() {
        Err((vm, VmemError::Busy { live: 1 })) => vm,
        other => panic!("destroy with a live allocation: {:?}", other.err().map(|e| e.1)),
    };
    assert_eq!(vm.free(a), Ok(112));
    assert_eq!(vm.free(a), Err(VmemError::NotAllocated(a)), "double free");
    vm.check().unwrap();
    assert!(vm.destroy().is_ok());
}

#[test]
fn a_child_imports_from_its_parent_and_returns_empty_spans() {
    let parent = Vmem::new("parent", VmemOptions { quantum: 4096, ..VmemOptions::default() }, None).unwrap();
    parent.add_span(1 << 30, 1 << 24).unwrap();
    let child_opts = VmemOptions { quantum: 16, import_quantum: 1 << 16, ..VmemOptions::default() };
    let child = Vmem::new("child", child_opts, Some(parent.clone())).unwrap();
    let a = child.alloc(100).unwrap();
    let b = child.xalloc(3000, &Constraints { nocross: 4096, ..Default::default() }).unwrap();
    assert_eq!(a >> 16, b >> 16, "one import of 64 KiB holds both");
    let st = child.stats();
    assert_eq!((st.spans, st.imported_spans, st.imports, st.total), (1, 1, 1, 1 << 16));
    assert_eq!(parent.stats().live, 1);
    // Larger than the import quantum: a span of its own, rounded up.
    let big = child.xalloc(100_000, &Constraints { align: 1 << 16, ..Default::default() }).unwrap();
    assert_eq!(big % (1 << 16), 0);
    assert_eq!(child.stats().spans, 2);
    // min/max reach the parent: an import above 1 GiB + 8 MiB.
    let floor = (1 << 30) + (8 << 20);
    let high = child.xalloc(64, &Constraints { min_addr: floor, ..Default::default() }).unwrap();
    assert!(high >= floor);
    assert_eq!(child.stats().spans, 3);
    for x in [a, b, big, high] {
        child.free(x).unwrap();
    }
    let st = child.stats();
    assert_eq!((st.spans, st.returns), (0, 3), "every emptied span went back");
    assert_eq!(parent.stats().live, 0);
    // A request the parent cannot hold fails, and leaves nothing imported.
    assert!(matches!(child.alloc(1 << 25), Err(VmemError::NoSpace { .. })));
    assert_eq!((child.stats().spans, parent.stats().live), (0, 0));
    // Dropping a child returns what it still holds.
    let c = child.alloc(10).unwrap();
    assert_eq!(parent.stats().live, 1);
    assert!(child.size_of(c).is_some());
    drop(child);
    assert_eq!(parent.stats().live, 0);
    parent.check().unwrap();
}

/// Threads allocate under random constraints from a child that imports from a parent, stamp
/// every quantum of each allocation in an ownership table (a swap that must find it unowned),
/// hand some to another thread, and verify the stamps before freeing.
#[test]
fn concurrent_allocations_never_overlap() {
    concurrent(Fit::Lowest);
    concurrent(Fit::Instant);
    concurrent(Fit::Best);
}

fn concurrent(fit: Fit) {
    const THREADS: u64 = 4;
    const SPAN: u64 = 1 << 22; // integers; quanta of 16: 262,144 slots.
    let parent = Vmem::new("p", VmemOptions { quantum: Q, ..VmemOptions::default() }, None).unwrap();
    parent.add_span(0, SPAN).unwrap();
    // Imports of 4,096 quanta in 4 stripes each for instant fit.
    let stripes = if fit == Fit::Lowest { 0 } else { 4 };
    let child_opts =
        VmemOptions { quantum: Q, import_quantum: 1 << 16, fit, stripes, ..VmemOptions::default() };
    let child = Vmem::new("c", child_opts, Some(parent.clone())).unwrap();
    let owner: Arc<Vec<AtomicU64>> = Arc::new((0..SPAN / Q).map(|_| AtomicU64::new(0)).collect());
    let (tx, rx) = std::sync::mpsc::sync_channel::<(u64, u64, u64)>(1024);
    let rx = Arc::new(std::sync::Mutex::new(rx));
    let check_free = |vm: &Vmem, owner: &[AtomicU64], s: u64, size: u64, id: u64| {
        for q in s / Q..(s + size) / Q {
            assert_eq!(owner[q as usize].swap(0, SeqCst), id, "quantum {q} lost its owner");
        }
        assert_eq!(vm.free(s), Ok(size));
    };
    std::thread::scope(|sc| {
        for t in 1..=THREADS {
            let (vm, owner, tx, rx) = (child.clone(), owner.clone(), tx.clone(), rx.clone());
            sc.spawn(move || {
                let mut rng = Rng(t * 7919);
                let mut mine: Vec<(u64, u64, u64)> = Vec::new();
                for i in 0..20_000u64 {
                    let bound = if rng.below(16) == 0 { 4096 } else { 256 };
                    let size = 1 + rng.below(bound);
                    let rounded = size.div_ceil(Q) * Q;
                    let c = if rng.below(4) == 0 {
                        random_constraints(&mut rng, rounded)
                    } else {
                        Constraints::default()
                    };
                    if let Ok(s) = vm.xalloc(size, &c) {
                        assert!(Oracle::meets(s, rounded, &c), "{s:#x} breaks {c:?}");
                        let id = (t << 32) | i;
                        for q in s / Q..(s + rounded) / Q {
                            assert_eq!(owner[q as usize].swap(id, SeqCst), 0, "quantum {q} given twice");
                        }
                        mine.push((s, rounded, id));
                    }
                    if mine.len() > 200 || rng.below(3) == 0 {
                        if let Some(x) = mine.pop() {
                            if rng.below(4) == 0 {
                                if let Err(std::sync::mpsc::TrySendError::Full((s, size, id))) =
                                    tx.try_send(x)
                                {
                                    check_free(&vm, &owner, s, size, id);
                                }
                            } else {
                                check_free(&vm, &owner, x.0, x.1, x.2);
                            }
                        }
                    }
                    if let Ok(x) = rx.lock().unwrap().try_recv() {
                        check_free(&vm, &owner, x.0, x.1, x.2);
                    }
                }
                for (s, size, id) in mine {
                    check_free(&vm, &owner, s, size, id);
                }
            });
        }
    });
    drop(tx);
    while let Ok((s, size, id)) = rx.lock().unwrap().try_recv() {
        check_free(&child, &owner, s, size, id);
    }
    assert!(owner.iter().all(|o| o.load(SeqCst) == 0));
    let st = child.stats();
    assert_eq!(st.live, 0);
    assert!(st.imports > 0 && st.imports == st.returns + st.spans, "{st:?}");
    child.check().unwrap();
    drop(child);
    assert_eq!(parent.stats().live, 0, "every import went back");
    parent.check().unwrap();
}

/// An allocation larger than any stripe is carved across the boundary; its inner part is not
/// an allocation of its own.
#[test]
fn an_allocation_across_stripes_is_one_allocation() {
    let opts = VmemOptions { quantum: Q, fit: Fit::Instant, stripes: 2, ..VmemOptions::default() };
    let vm = Vmem::new("across", opts, None).unwrap();
    vm.add_span(0, 64 * Q).unwrap();
    let a = vm.alloc(40 * Q).unwrap();
    assert_eq!((a, vm.size_of(a)), (0, Some(40 * Q)));
    assert_eq!(vm.size_of(32 * Q), None, "the part in the second stripe");
    assert_eq!(vm.free(32 * Q), Err(VmemError::NotAllocated(32 * Q)));
    let b = vm.alloc(24 * Q).unwrap();
    assert_eq!(b, 40 * Q);
    assert!(matches!(vm.alloc(Q), Err(VmemError::NoSpace { .. })));
    assert_eq!(vm.stats().live, 2);
    vm.check().unwrap();
    assert_eq!(vm.free(a), Ok(40 * Q));
    assert_eq!(vm.free(a), Err(VmemError::NotAllocated(a)));
    assert_eq!(vm.free(b), Ok(24 * Q));
    let st = vm.stats();
    assert_eq!((st.live, st.free_ranges, st.largest_free), (0, 1, 64 * Q), "one range across the boundary");
    vm.check().unwrap();
}
