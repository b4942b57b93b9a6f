//! Model tests (tier 2): random operation sequences on the free tree and the size pools, checked
//! after every step against the linear-scan oracle and a shadow model. Fixed seeds, so a
//! failure replays exactly; `VMARENA_MODEL_SEED` runs one other seed.

use vmarena_core::oracle::Oracle;
use vmarena_core::{FreeTree, PoolSide, Request, SizePools};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("VMARENA_MODEL_SEED") {
        Ok(s) => vec![s.parse().expect("VMARENA_MODEL_SEED must be an integer")],
        Err(_) => (1..=24).collect(),
    }
}

fn random_request(rng: &mut Rng, space: u64) -> Request {
    let size = match rng.below(10) {
        0 => 1 + rng.below(space / 4),
        1..=3 => 1 + rng.below(64),
        _ => 1 + rng.below(4),
    };
    let bits = if rng.below(4) == 0 { 10 } else { 1 };
    let align = 1u64 << rng.below(bits);
    let (lo, hi) = if rng.below(5) == 0 {
        let lo = rng.below(space);
        let hi = lo + size + rng.below(space - lo + 1);
        (lo, hi.min(space + 64))
    } else {
        (0, space)
    };
    let hi = hi.max(lo + size);
    match rng.below(6) {
        0 if align > 1 => {
            let phase = rng.below(align);
            Request::striped(size, align, phase, lo, hi).unwrap()
        }
        1 => {
            // A stripe period that is not a power of two (16 x 3 nodes).
            let phase = 16 * rng.below(3);
            Request::striped(size, 48, phase, lo, hi).unwrap()
        }
        _ => Request::new(size, align, lo, hi).unwrap(),
    }
}

#[test]
fn free_tree_matches_oracle_on_random_sequences() {
    const SPACE: u64 = 4096;
    for seed in seeds() {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut tree = FreeTree::with_range(0, SPACE);
        let mut oracle = Oracle::from_ranges(&[(0, SPACE)]);
        let mut live: Vec<(u64, u64)> = Vec::new();
        for step in 0..4000 {
            let op = rng.below(10);
            if op < 5 || live.is_empty() {
                let req = random_request(&mut rng, SPACE);
                let want = oracle.lowest_fit(&req, req.search_length());
                let want_exact = oracle.lowest_fit(&req, req.size_pages);
                assert_eq!(tree.peek_lowest(&req), want, "seed {seed} step {step}: {req:?}");
                let got = if want.is_some() { tree.alloc(&req) } else { tree.alloc_exact(&req) };
                let expect = want.or(want_exact);
                assert_eq!(got.map(|g| g.0), expect, "seed {seed} step {step}: {req:?}");
                if let Some((start, _)) = got {
                    assert!(oracle.take(start, req.size_pages));
                    assert_eq!(start % req.align_pages, req.phase_pages, "{req:?}");
                    assert!(start >= req.lo && start + req.size_pages <= req.hi);
                    live.push((start, req.size_pages));
                }
            } else if op < 9 {
                let i = rng.below(live.len() as u64) as usize;
                let (s, n) = live.swap_remove(i);
                tree.insert_merge(s, s + n).unwrap();
                assert!(oracle.give(s, s + n));
            } else {
                // A double free or an overlapping give-back must be refused with no change.
                let free = tree.ranges();
                if let Some(&(s, e)) = free.get(rng.below(free.len().max(1) as u64) as usize) {
                    let probe_start = s + rng.below(e - s);
                    assert!(tree.insert_merge(probe_start, probe_start + 1).is_err());
                    assert!(!oracle.give(probe_start, probe_start + 1));
                }
            }
            assert_eq!(tree.ranges(), oracle.ranges(), "seed {seed} step {step}");
            if step % 97 == 0 {
                tree.check().unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
            }
        }
        for (s, n) in live.drain(..) {
            tree.insert_merge(s, s + n).unwrap();
        }
        assert_eq!(tree.ranges(), vec![(0, SPACE)], "seed {seed}: everything merges back");
        tree.check().unwrap();
    }
}

#[test]
fn size_pools_match_shadow_model() {
    use std::collections::BTreeSet;
    for seed in seeds() {
        let mut rng = Rng(seed | 1);
        let mut pools = SizePools::new();
        let mut shadow: BTreeSet<(u64, u64)> = BTreeSet::new(); // (start, pages)
        let mut next_start = 0u64;
        for _ in 0..3000 {
            match rng.below(6) {
                0..=2 => {
                    let pages = 1 + rng.below(8);
                    let side = if rng.below(2) == 0 { PoolSide::Dirty } else { PoolSide::Clean };
                    pools.push(next_start, pages, side);
                    shadow.insert((next_start, pages));
                    next_start += 512;
                }
                3 | 4 => {
                    let pages = 1 + rng.below(8);
                    let align = 1 << rng.below(2);
                    if let Some((s, _)) = pools.pop(pages, align, PoolSide::Dirty) {
                        assert!(shadow.remove(&(s, pages)), "popped an area that was not pooled");
                        assert_eq!(s % align, 0);
                    }
                }
                _ => {
                    for a in pools.decay(1, 4) {
                        assert!(shadow.remove(&(a.start, a.pages)));
                    }
                }
            }
            pools.check().unwrap();
            assert_eq!(pools.len() as usize, shadow.len());
        }
        let mut rest: Vec<(u64, u64)> = pools.take_dirty().into_iter().map(|a| (a.start, a.pages)).collect();
        rest.extend(pools.decay(1, 1).into_iter().map(|a| (a.start, a.pages)));
        rest.sort_unstable();
        assert_eq!(rest, shadow.into_iter().collect::<Vec<_>>(), "nothing lost, nothing doubled");
    }
}

/// The buddy against a shadow owner table: no frame handed out twice, refused frees change
/// nothing, and after everything is freed the zone is whole again (merges complete).
#[test]
fn buddy_matches_a_shadow_owner_table() {
    use vmarena_core::{Buddy, BuddyError, MAX_ORDER};
    for seed in seeds() {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let frames = 1500 + rng.below(3000) as u32;
        let mut b = Buddy::new(frames);
        let initial = b.free_blocks();
        let mut owner: Vec<Option<usize>> = vec![None; frames as usize];
        let mut live: Vec<(u32, u32)> = Vec::new();
        for step in 0..4000 {
            match rng.below(10) {
                0..=4 => {
                    let order = match rng.below(8) {
                        0 => rng.below(MAX_ORDER as u64 + 1) as u32,
                        1..=2 => rng.below(4) as u32,
                        _ => 0,
                    };
                    let free_before = b.free_frames();
                    match b.alloc(order).unwrap() {
                        Some(p) => {
                            assert_eq!(p % (1 << order), 0, "seed {seed} step {step}: misaligned block");
                            for f in p..p + (1 << order) {
                                assert_eq!(
                                    owner[f as usize], None,
                                    "seed {seed} step {step}: frame {f} handed out twice"
                                );
                                owner[f as usize] = Some(step);
                            }
                            assert_eq!(b.free_frames(), free_before - (1 << order));
                            live.push((p, order));
                        }
                        None => {
                            // No free block of this order or larger may exist.
                            assert!(
                                b.free_blocks().iter().all(|&(_, o)| o < order),
                                "seed {seed}: refused with room"
                            );
                        }
                    }
                }
                5..=8 if !live.is_empty() => {
                    let (p, o) = live.swap_remove(rng.below(live.len() as u64) as usize);
                    b.free(p, o).unwrap();
                    for f in p..p + (1 << o) {
                        owner[f as usize] = None;
                    }
                }
                _ => {
                    // Bad frees: an interior frame, a wrong order, a frame never allocated.
                    let before = b.free_blocks();
                    if let Some(&(p, o)) = live.first() {
                        if o > 0 {
                            assert!(b.free(p + 1, 0).is_err());
                            assert_eq!(b.free(p, o - 1), Err(BuddyError::NotAllocated(p)));
                        }
                    }
                    if let Some(f) = (0..frames).find(|&f| owner[f as usize].is_none()) {
                        assert!(b.free(f, 0).is_err(), "seed {seed}: a free frame was accepted as allocated");
                    }
                    assert_eq!(b.free_blocks(), before, "seed {seed}: a refused free changed the zone");
                }
            }
            if step % 97 == 0 {
                b.check().unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
            }
        }
        for (p, o) in live.drain(..) {
            b.free(p, o).unwrap();
        }
        b.check().unwrap();
        assert_eq!(b.free_frames(), frames as u64);
        let mut now = b.free_blocks();
        let mut was = initial.clone();
        now.sort_unstable();
        was.sort_unstable();
        assert_eq!(now, was, "seed {seed}: merges did not restore the zone");
    }
}

/// Per-CPU lists in front of the buddy: frames are conserved across refills, drains, decay and
/// a final drain, and no frame is handed out twice.
#[test]
fn pcp_lists_over_the_buddy_conserve_frames() {
    use vmarena_core::{Buddy, Pcp, PcpConfig, PCP_ORDERS};
    for seed in seeds() {
        let mut rng = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
        let frames = 8192u32;
        let mut b = Buddy::new(frames);
        let cfg = PcpConfig::for_zone(frames as u64, b.watermarks().low, 2);
        let mut cpus = [Pcp::new(cfg), Pcp::new(cfg)];
        let mut owner = vec![false; frames as usize];
        let mut live: Vec<(u32, u32)> = Vec::new();
        for step in 0..6000 {
            let cpu = rng.below(2) as usize;
            let below = !b.watermark_ok(0, b.watermarks().high);
            if rng.below(100) < 55 {
                let order = PCP_ORDERS[[0, 0, 0, 0, 1, 2, 3, 4][rng.below(8) as usize]];
                let pcp = &mut cpus[cpu];
                let mut got = pcp.pop(order);
                if got.is_none() {
                    let n = pcp.refill_blocks(order, below);
                    let blocks: Vec<u32> = (0..n).map_while(|_| b.alloc(order).unwrap()).collect();
                    pcp.add_refilled(order, &blocks);
                    got = pcp.pop(order);
                }
                if let Some(p) = got {
                    for f in p..p + (1 << order) {
                        assert!(!owner[f as usize], "seed {seed} step {step}: frame {f} handed out twice");
                        owner[f as usize] = true;
                    }
                    live.push((p, order));
                }
            } else if !live.is_empty() {
                let (p, o) = live.swap_remove(rng.below(live.len() as u64) as usize);
                for f in p..p + (1 << o) {
                    owner[f as usize] = false;
                }
                let out = cpus[cpu].push(p, o, below);
                if out.drain_frames > 0 {
                    for (q, qo) in cpus[cpu].take_drain(out.drain_frames, o) {
                        b.free(q, qo).unwrap();
                    }
                }
            }
            if step % 500 == 0 {
                for pcp in cpus.iter_mut() {
                    let n = pcp.decay();
                    for (q, qo) in pcp.take_drain(n, 0) {
                        b.free(q, qo).unwrap();
                    }
                }
            }
            let cached: u64 = cpus.iter().map(|p| p.count()).sum();
            let held: u64 = live.iter().map(|&(_, o)| 1u64 << o).sum();
            assert_eq!(
                b.free_frames() + cached + held,
                frames as u64,
                "seed {seed} step {step}: frames lost"
            );
            for pcp in &cpus {
                pcp.check().unwrap();
            }
        }
        for (p, o) in live.drain(..) {
            b.free(p, o).unwrap();
        }
        for pcp in cpus.iter_mut() {
            for (q, qo) in pcp.take_all() {
                b.free(q, qo).unwrap();
            }
        }
        b.check().unwrap();
        assert_eq!(b.free_frames(), frames as u64);
        assert_eq!(b.nr_free()[10], 8, "seed {seed}: the zone did not merge back to 4 MiB blocks");
    }
}
