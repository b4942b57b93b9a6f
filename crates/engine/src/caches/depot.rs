//! `Depot`: the areas full magazines spilled, kept for the magazines that miss, in front of the
//! busy-map path (the depot layer of Bonwick and Adams' magazines, between the per-CPU
//! magazines and the vmem arena).
//!
//! A spill of a full stack used to go down the busy-map path at once: each area's record
//! removed from its busy shard and the area pushed on its node's pool, and a later miss of the
//! same size carved it back with a record inserted again. Both ends of that trip are a hash
//! table update and a lock per shard for every area. The depot keeps the spilled areas as they
//! are in a magazine, with their words `cached` and their busy records in place, so a spill is
//! a copy of starts under one mutex, and a miss takes up to a stack's spill back the same way
//! (docs/bench-log/many-workers.md, "the depot"). A push the magazine's budget refuses comes
//! here too, and a miss that finds no area of its size here takes one within the slack (the
//! smallest size held up to `lazy_slack_percent` larger), as a magazine's own miss does: with
//! more threads than CPUs, the areas one thread's magazine cannot hold are the next miss's of
//! any thread on the CPU, instead of one thread's each (docs/bench-log/many-workers.md,
//! "the depot as the shared layer").
//!
//! Owns: starts of cached areas, a stack per size (the newest taken first), and the pages they
//! hold. Does not own the areas' words (the thread caches') or their records (the busy map's).
//!
//! Bound: a put of more pages than the lazy limit leaves above the lazy pages
//! ([`crate::caches::thread_caches::CacheOwner::lazy_room`]) takes nothing, and the spill goes
//! down the busy-map path as before. Depot areas still count as live, so the limit's headroom
//! (the live pages below their peak) does not grow by them: freed memory kept resident, lazy
//! and in the depot, stays within what the lazy limit allows without the depot. The depot is
//! emptied down the busy-map path by every full drain of the thread caches (an explicit purge,
//! the shrinker, a low-memory event, a failed allocation); the decay tick's drain takes only
//! what the previous tick saw there ([`Depot::take_aged`]), so a bulk free under way is not
//! undone, and no area stays past the second tick after its put.
//!
//! Locks: one mutex per CPU's part, taken by a magazine's owner at a spill or a miss (a miss
//! may go on to the other parts, one at a time) and by a drain under the registry mutex;
//! nothing is taken under it. Invariant: `pages` is the sum over the stacks of
//! their lengths times their sizes, and no start is in two places (the checker sees the depot's
//! starts with the magazines').

use crate::caches::block_stack::BlockStack;
use crate::sync::padded::Padded;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Mutex, MutexGuard};
use vmarena_core::Span;

/// Shards at most: CPUs above share them by index.
const MAX_SHARDS: usize = 64;

/// The stacks of one shard, under its mutex.
struct Stacks {
    /// Starts by size: index `pages - 1`. Empty (no stack at all) until the shard's first put,
    /// so that an arena's idle CPUs' shards cost no memory. In fixed blocks, which a bulk
    /// free's growth does not reallocate (`block_stack.rs`).
    by_size: Vec<BlockStack>,
    /// By size, how many of the stack's bottom entries were there at the last aged drain
    /// and have been there since (takes pop the top): the next aged drain takes those.
    aged: Vec<usize>,
    pages: u64,
    areas: u64,
    puts: u64,
    takes: u64,
}

impl Stacks {
    /// Count `got` areas just popped from the stack at index `i` (of `i + 1` pages): the
    /// aged mark stays within what is left.
    fn took(&mut self, i: usize, got: usize) {
        self.aged[i] = self.aged[i].min(self.by_size[i].len());
        self.pages -= got as u64 * (i as u64 + 1);
        self.areas -= got as u64;
        self.takes += got as u64;
    }
}

/// One CPU's part of the depot: its stacks, and whether they hold anything (read without the
/// mutex by a miss, written under it).
struct Shard {
    stacks: Mutex<Stacks>,
    areas: AtomicU64,
}

/// What the depot holds and has done, summed over its shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DepotFigures {
    pub(crate) areas: u64,
    pub(crate) pages: u64,
    /// Areas spills put here instead of down the busy-map path.
    pub(crate) puts: u64,
    /// Areas misses took back.
    pub(crate) takes: u64,
}

/// See the module documentation.
pub(crate) struct Depot {
    /// One per CPU (up to [`MAX_SHARDS`]), each on cache lines of its own: a spill and a miss
    /// use their CPU's, so the threads of different CPUs do not pass a line back and forth.
    shards: Box<[Padded<Shard>]>,
    /// The largest size held, in pages.
    max_pages: usize,
}

impl Depot {
    /// An empty depot for areas of 1 to `max_pages` pages, with `shards` shards (at least one,
    /// at most [`MAX_SHARDS`]).
    pub(crate) fn new(max_pages: u64, shards: usize) -> Depot {
        let shard = || {
            Padded(Shard {
                stacks: Mutex::new(Stacks {
                    by_size: Vec::new(),
                    aged: Vec::new(),
                    pages: 0,
                    areas: 0,
                    puts: 0,
                    takes: 0,
                }),
                areas: AtomicU64::new(0),
            })
        };
        Depot {
            shards: (0..shards.clamp(1, MAX_SHARDS)).map(|_| shard()).collect(),
            max_pages: max_pages as usize,
        }
    }

    fn lock(shard: &Shard) -> MutexGuard<'_, Stacks> {
        shard.stacks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This CPU's shard.
    fn here(&self) -> &Shard {
        &self.shards[vmarena_platform::cpu::current() % self.shards.len()]
    }

    /// Keep every area of `spans` (cached areas of sizes the depot has stacks for) in this
    /// CPU's shard when their pages are at most `room_pages`: true. False, with nothing taken,
    /// when they are more or their stacks cannot grow (no memory).
    pub(crate) fn put(&self, spans: &[Span], room_pages: u64) -> bool {
        let add: u64 = spans.iter().map(|s| s.pages).sum();
        if add > room_pages {
            return false;
        }
        let shard = self.here();
        let mut st = Self::lock(shard);
        if st.by_size.is_empty() {
            if st.by_size.try_reserve_exact(self.max_pages).is_err()
                || st.aged.try_reserve_exact(self.max_pages).is_err()
            {
                return false;
            }
            st.by_size.resize_with(self.max_pages, BlockStack::default);
            st.aged.resize(self.max_pages, 0);
        }
        // Room first, for every stack, so that a refusal changes nothing: once per run of one
        // size (a spill is one size, but for the area it may evict from a larger one).
        let mut last = 0;
        for s in spans {
            if s.pages == last {
                continue;
            }
            last = s.pages;
            let Some(v) = st.by_size.get_mut((s.pages as usize).wrapping_sub(1)) else { return false };
            if !v.try_reserve(spans.len()) {
                return false;
            }
        }
        for s in spans {
            st.by_size[s.pages as usize - 1].push(s.start);
        }
        st.pages += add;
        st.areas += spans.len() as u64;
        st.puts += spans.len() as u64;
        shard.areas.store(st.areas, Relaxed);
        true
    }

    /// Take up to `out.len()` areas of `pages` pages, the newest first, into `out`: how many.
    /// This CPU's shard first, then the others in turn.
    pub(crate) fn take(&self, pages: u64, out: &mut [u64]) -> usize {
        let n = self.shards.len();
        let first = vmarena_platform::cpu::current() % n;
        for i in (0..n).map(|k| (first + k) % n) {
            let shard = &self.shards[i];
            if shard.areas.load(Relaxed) == 0 {
                continue;
            }
            let mut st = Self::lock(shard);
            let i = (pages as usize).wrapping_sub(1);
            let Some(v) = st.by_size.get_mut(i) else { continue };
            let mut got = 0;
            for o in out.iter_mut() {
                let Some(s) = v.pop() else { break };
                *o = s;
                got += 1;
            }
            if got == 0 {
                continue;
            }
            st.took(i, got);
            shard.areas.store(st.areas, Relaxed);
            return got;
        }
        0
    }

    /// Take one area of `lo_pages` to `hi_pages` pages, the smallest size held first: `(start,
    /// pages)`. This CPU's shard first, then the others in turn.
    pub(crate) fn take_within(&self, lo_pages: u64, hi_pages: u64) -> Option<(u64, u64)> {
        let n = self.shards.len();
        let first = vmarena_platform::cpu::current() % n;
        for k in (0..n).map(|k| (first + k) % n) {
            let shard = &self.shards[k];
            if shard.areas.load(Relaxed) == 0 {
                continue;
            }
            let mut st = Self::lock(shard);
            let hi = (hi_pages as usize).min(st.by_size.len());
            let lo = (lo_pages as usize).max(1) - 1;
            let Some(i) = (lo..hi).find(|&i| st.by_size[i].len() > 0) else { continue };
            let Some(s) = st.by_size[i].pop() else { continue };
            st.took(i, 1);
            shard.areas.store(st.areas, Relaxed);
            return Some((s, i as u64 + 1));
        }
        None
    }

    /// Empty the depot into `out`.
    pub(crate) fn take_all(&self, out: &mut Vec<Span>) {
        self.take_where(out, |_, len| len);
    }

    /// Take into `out` what was in the depot at the previous aged drain and is still there
    /// (the bottom of each stack), and mark what is left as aged: an area a spill put here is
    /// taken at the second aged drain after its put at the latest. The decay tick's drain,
    /// which must not undo a bulk free that is going on (its spills refill the next misses),
    /// yet must not keep memory a program stopped using for more than two ticks.
    pub(crate) fn take_aged(&self, out: &mut Vec<Span>) {
        self.take_where(out, |aged, _| aged);
    }

    /// Take the bottom `count(aged, len)` entries of every stack into `out`, then mark every
    /// entry left as aged.
    fn take_where(&self, out: &mut Vec<Span>, count: impl Fn(usize, usize) -> usize) {
        for shard in self.shards.iter().filter(|s| s.areas.load(Relaxed) > 0) {
            let mut st = Self::lock(shard);
            let Stacks { by_size, aged, pages, areas, .. } = &mut *st;
            for (i, v) in by_size.iter_mut().enumerate() {
                let n = count(aged[i], v.len()).min(v.len());
                v.drain_bottom(n, |s| out.push(Span::new(s, i as u64 + 1)));
                *pages -= n as u64 * (i as u64 + 1);
                *areas -= n as u64;
                aged[i] = v.len();
            }
            shard.areas.store(*areas, Relaxed);
        }
    }

    /// The figures, summed over the shards.
    pub(crate) fn figures(&self) -> DepotFigures {
        self.shards.iter().fold(DepotFigures::default(), |f, shard| {
            let st = Self::lock(shard);
            DepotFigures {
                areas: f.areas + st.areas,
                pages: f.pages + st.pages,
                puts: f.puts + st.puts,
                takes: f.takes + st.takes,
            }
        })
    }

    /// Every start held, for the checker.
    pub(crate) fn starts(&self, out: &mut Vec<u64>) {
        for shard in self.shards.iter() {
            out.extend(Self::lock(shard).by_size.iter().flat_map(BlockStack::iter));
        }
    }

    /// Check that each shard's counts are its stacks'.
    pub(crate) fn check(&self) -> Result<(), String> {
        for (i, shard) in self.shards.iter().enumerate() {
            let st = Self::lock(shard);
            let (areas, pages) = st.by_size.iter().enumerate().fold((0u64, 0u64), |(a, p), (k, v)| {
                (a + v.len() as u64, p + v.len() as u64 * (k as u64 + 1))
            });
            if let Some((k, e)) =
                st.by_size.iter().enumerate().find_map(|(k, v)| v.check().err().map(|e| (k, e)))
            {
                return Err(format!("depot shard {i}, stack of {} pages: {e}", k + 1));
            }
            if let Some(k) = (0..st.aged.len()).find(|&k| st.aged[k] > st.by_size[k].len()) {
                return Err(format!(
                    "depot shard {i}: {} aged areas of {} pages, {} held",
                    st.aged[k],
                    k + 1,
                    st.by_size[k].len()
                ));
            }
            if (areas, pages) != (st.areas, st.pages) || areas != shard.areas.load(Relaxed) {
                return Err(format!(
                    "depot shard {i}: {areas} areas of {pages} pages held, counted {} areas of {} ({} outside its mutex)",
                    st.areas,
                    st.pages,
                    shard.areas.load(Relaxed)
                ));
            }
        }
        Ok(())
    }

    /// Every shard's mutex, for `fork()`.
    #[cfg(not(loom))]
    pub(crate) fn lock_for_fork(&self) -> Vec<Box<dyn crate::sync::fork::Held + '_>> {
        self.shards.iter().map(|s| Box::new(Self::lock(s)) as Box<dyn crate::sync::fork::Held + '_>).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_take_and_the_bound() {
        let d = Depot::new(8, 1);
        let spill: Vec<Span> = (0..4).map(|i| Span::new(100 + i * 2, 2)).chain([Span::new(300, 5)]).collect();
        assert!(!d.put(&spill, 12), "13 pages into a room of 12: refused");
        assert_eq!(d.figures(), DepotFigures::default(), "a refusal takes nothing");
        assert!(d.put(&spill, 13));
        assert_eq!(d.figures(), DepotFigures { areas: 5, pages: 13, puts: 5, takes: 0 });
        assert!(!d.put(&[Span::new(400, 9)], 100), "no stack for 9 pages");
        let mut out = [0u64; 3];
        assert_eq!(d.take(2, &mut out), 3);
        assert_eq!(out, [106, 104, 102], "newest first");
        assert_eq!(d.take(3, &mut out), 0, "nothing of 3 pages");
        assert_eq!(d.figures(), DepotFigures { areas: 2, pages: 7, puts: 5, takes: 3 });
        d.check().unwrap();
        let mut starts = Vec::new();
        d.starts(&mut starts);
        starts.sort_unstable();
        assert_eq!(starts, [100, 300]);
        let mut all = Vec::new();
        d.take_all(&mut all);
        assert_eq!(all, [Span::new(100, 2), Span::new(300, 5)]);
        assert_eq!(d.figures().areas + d.figures().pages, 0);
        d.check().unwrap();
    }

    /// An aged drain takes what the previous one saw and takes nothing newer; a take of the
    /// newest leaves the aged bottom in place.
    #[test]
    fn an_aged_drain_takes_what_was_there_at_the_previous_one() {
        let d = Depot::new(4, 1);
        assert!(d.put(&[Span::new(10, 1), Span::new(11, 1)], 100));
        let mut out = Vec::new();
        d.take_aged(&mut out);
        assert!(out.is_empty(), "nothing was there at a previous drain");
        assert!(d.put(&[Span::new(12, 1), Span::new(20, 2)], 100));
        let mut one = [0u64; 1];
        assert_eq!((d.take(1, &mut one), one[0]), (1, 12), "the newest, above the aged two");
        d.check().unwrap();
        d.take_aged(&mut out);
        assert_eq!(out, [Span::new(10, 1), Span::new(11, 1)], "the two seen last time");
        assert_eq!(d.figures(), DepotFigures { areas: 1, pages: 2, puts: 4, takes: 1 });
        // A take that reaches into the aged bottom lowers the mark.
        assert!(d.put(&[Span::new(30, 2)], 100));
        let mut two = [0u64; 2];
        assert_eq!(d.take(2, &mut two), 2);
        out.clear();
        d.take_aged(&mut out);
        assert!(out.is_empty(), "{out:?}");
        d.check().unwrap();
    }

    /// A take within a range of sizes takes the smallest size held in it, and nothing outside.
    #[test]
    fn a_take_within_takes_the_smallest_size_in_its_range() {
        let d = Depot::new(8, 1);
        assert!(d.put(&[Span::new(100, 7), Span::new(200, 5), Span::new(300, 2)], 100));
        assert_eq!(d.take_within(6, 6), None, "no area of 6 pages");
        assert_eq!(d.take_within(3, 8), Some((200, 5)), "5 pages before 7");
        assert_eq!(d.take_within(3, 8), Some((100, 7)));
        assert_eq!(d.take_within(3, 8), None, "the 2-page area is below the range");
        assert_eq!(d.take_within(0, 8), Some((300, 2)), "a range from 0 starts at 1 page");
        assert_eq!(d.take_within(9, 20), None, "above the largest size");
        assert_eq!(d.figures(), DepotFigures { areas: 0, pages: 0, puts: 3, takes: 3 });
        d.check().unwrap();
    }

    /// A miss finds the areas another CPU's shard holds when its own has none.
    #[test]
    fn a_take_looks_past_its_own_shard() {
        let d = Depot::new(4, 3);
        // One area in each shard (which one a put picks depends on the CPU, so by hand).
        for (i, shard) in d.shards.iter().enumerate() {
            let mut st = Depot::lock(shard);
            st.by_size.resize_with(4, BlockStack::default);
            st.aged.resize(4, 0);
            st.by_size[0].push(1000 + i as u64);
            st.pages += 1;
            st.areas += 1;
            shard.areas.store(1, Relaxed);
        }
        d.check().unwrap();
        let mut out = [0u64; 4];
        let mut got: Vec<u64> = (0..3)
            .map(|_| {
                assert_eq!(d.take(1, &mut out), 1);
                out[0]
            })
            .collect();
        got.sort_unstable();
        assert_eq!(got, [1000, 1001, 1002], "every shard's area found");
        assert_eq!(d.take(1, &mut out), 0);
        d.check().unwrap();
    }
}
