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
                    for (s, p) in pools.decay(1, 4) {
                        assert!(shadow.remove(&(s, p)));
                    }
                }
            }
            pools.check().unwrap();
            assert_eq!(pools.len() as usize, shadow.len());
        }
        let mut rest: Vec<_> = pools.take_dirty().into_iter().collect();
        rest.extend(pools.decay(1, 1));
        rest.sort_unstable();
        assert_eq!(rest, shadow.into_iter().collect::<Vec<_>>(), "nothing lost, nothing doubled");
    }
}
