//! The purge: the batch step that releases the memory of lazily freed areas, refills or decays
//! the pools and returns areas to the free tree (the kernel's `__purge_vmap_area_lazy` with
//! `decay_va_pool_node`).
//!
//! Owns: [`PurgeBatch`], one purge's lists in flight. It works on the arena's lists under
//! their locks, serialised by the arena's purge mutex, taking each spin lock only to detach or
//! attach lists (DESIGN.md, section 5): the strategy detaches (`detach` of its file), this file
//! releases and merges, the strategy refills. The background thread that calls it is the
//! [`worker`](crate::worker).

use super::locks::{with_strategy, StrategyLocks};
use super::shared::{tree_alloc, Shared};
use crate::area::{Allocation, AreaTag, PurgeKind, PurgeReport};
use crate::lock::LockSite;
use crate::site;
use crate::sync::Ordering::Relaxed;
use vmarena_core::{FreeTree, Request, Span};

/// Most areas merged into the free tree in one hold of its lock, so that pool misses on other
/// threads are not held up for a whole batch.
const MERGE_CHUNK: usize = 256;

/// Purges in a row a failed allocation runs under one hold of the purge mutex while its carve
/// fails and other threads keep making areas lazy.
const CLAIM_ROUNDS: usize = 8;

/// One purge's lists, filled by the strategy's `detach`.
pub(crate) struct PurgeBatch {
    pub(crate) kind: PurgeKind,
    /// Areas whose memory is released.
    pub(crate) release: Vec<Span>,
    /// Areas returned to the free tree (their guards retired).
    pub(crate) to_tree: Vec<Span>,
    /// Per node, the released areas that go back to its pools clean.
    pub(crate) refill: Vec<(usize, Vec<Span>)>,
    /// Chunk remainders: free space that never was an area (no guard to retire).
    pub(crate) chunks: Vec<Span>,
}

impl Shared {
    /// Release lazy memory in one batch, refill or decay pools, return areas to the tree.
    /// Serialised by the purge mutex; holds each spin lock only to detach or attach lists.
    pub(crate) fn purge(&self, kind: PurgeKind) -> PurgeReport {
        self.purge_claiming(kind, None).0
    }

    /// [`Shared::purge`] for an allocation that failed: `claim`'s area is carved from the free
    /// tree in the same hold of the tree's lock as the purge's last merge, and entered in the
    /// busy map before the purge mutex is let go. While the carve fails and other threads made
    /// areas lazy meanwhile, the purge runs again, up to [`CLAIM_ROUNDS`] times, without
    /// letting the mutex go: the other threads that fail meanwhile wait for it instead of
    /// purging for themselves, so the lazy areas pile up for this thread's next round.
    ///
    /// Carving after the purge had returned let the others take back every page it gave back
    /// first, and the request failed with the arena nearly empty: eight threads that allocate
    /// and free large areas in a small arena on two CPUs did, several times a run
    /// (`tests/purge_race.rs`).
    pub(crate) fn purge_claiming(
        &self,
        kind: PurgeKind,
        claim: Option<(&Request, AreaTag)>,
    ) -> (PurgeReport, Option<Allocation>) {
        if kind == PurgeKind::Full {
            // Failure path, shrinker, low memory: cached areas count as well.
            self.drain_caches();
        }
        let _serial = self.purging.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut total = PurgeReport::default();
        for _ in 0..CLAIM_ROUNDS {
            let (report, got) = self.purge_locked(kind, claim);
            total.areas_released += report.areas_released;
            total.pages_released += report.pages_released;
            total.areas_to_tree += report.areas_to_tree;
            total.syscalls += report.syscalls;
            if got.is_some() || claim.is_none() || self.lazy_pages_exact() == 0 {
                // The shrinker, a low-memory event or an explicit full purge (not a failed
                // allocation's) also gives back the free top of a usable part that grew.
                if kind == PurgeKind::Full && claim.is_none() && self.shrink_usable() > 0 {
                    total.syscalls += 1;
                }
                return (total, got);
            }
        }
        (total, None)
    }

    /// One purge, under the purge mutex: detach, release, refill, merge (carving `claim`).
    fn purge_locked(
        &self,
        kind: PurgeKind,
        claim: Option<(&Request, AreaTag)>,
    ) -> (PurgeReport, Option<Allocation>) {
        self.purging.requested.store(false, Relaxed);
        let mut batch = PurgeBatch {
            kind,
            release: Vec::new(),
            to_tree: Vec::new(),
            refill: Vec::new(),
            chunks: Vec::new(),
        };
        with_strategy!(&self.locks, s => s.detach(self, &mut batch));
        let (mut calls, spill) = self.release_batch(&batch.release);
        with_strategy!(&self.locks, s => s.refill(&mut batch));
        let (merge_calls, carved) =
            self.merge_batch_claiming(&batch.to_tree, &batch.chunks, &spill, claim.map(|(r, _)| r));
        calls += merge_calls;
        let got = carved.zip(claim).map(|(start, (r, tag))| {
            let span = Span::new(start, r.size_pages);
            with_strategy!(&self.locks, s => s.insert_parts(self, &[span], tag));
            self.carved(start, r.size_pages)
        });
        calls += self.heal_mosaics();
        let pages_released = Span::total_pages(&batch.release);
        let c = &self.counters;
        c.purges.fetch_add(1, Relaxed);
        if kind == PurgeKind::Full {
            c.full_purges.fetch_add(1, Relaxed);
        }
        c.areas_released.fetch_add(batch.release.len() as u64, Relaxed);
        c.pages_released.fetch_add(pages_released, Relaxed);
        c.release_calls.fetch_add(calls, Relaxed);
        let report = PurgeReport {
            areas_released: batch.release.len() as u64,
            pages_released,
            areas_to_tree: batch.to_tree.len() as u64,
            syscalls: calls,
        };
        (report, got)
    }

    /// Release the memory of `release` in one batch, with the free pages that share a huge
    /// page with one of them (the spill, held out of the tree meanwhile and returned for
    /// [`Shared::merge_batch`]). Returns the syscalls made and the spill.
    pub(crate) fn release_batch(&self, release: &[Span]) -> (u64, Vec<Span>) {
        let spill = self.claim_spill(release);
        let mut calls = self.backing.release(release) as u64;
        if !spill.is_empty() {
            calls += self.backing.release_free(&spill) as u64;
        }
        (calls, spill)
    }

    /// Release the memory of one area that is in no list and no map, retire its guard and merge
    /// it into the free tree: a purge of one area, made by a freeing thread
    /// ([`StrategyLocks::free_released`](super::locks::StrategyLocks::free_released)), without
    /// the purge mutex.
    pub(crate) fn release_now(&self, area: Span) {
        let (calls, spill) = self.release_batch(&[area]);
        let calls = calls + self.merge_batch(&[area], &[], &spill);
        let c = &self.counters;
        c.released_on_free.fetch_add(1, Relaxed);
        c.release_calls.fetch_add(calls, Relaxed);
    }

    /// Retire the guards of `to_tree` and merge it, the `chunks` and the `spill` into the free
    /// tree. Returns the syscalls made.
    pub(crate) fn merge_batch(&self, to_tree: &[Span], chunks: &[Span], spill: &[Span]) -> u64 {
        self.merge_batch_claiming(to_tree, chunks, spill, None).0
    }

    /// [`Shared::merge_batch`], carving `claim` from the tree in the last merge's hold of its
    /// lock ([`Shared::merge_lists`]): the syscalls made and the carved start.
    fn merge_batch_claiming(
        &self,
        to_tree: &[Span],
        chunks: &[Span],
        spill: &[Span],
        claim: Option<&Request>,
    ) -> (u64, Option<u64>) {
        let calls = self.backing.retire(to_tree) as u64;
        (calls, self.merge_lists([to_tree, chunks, spill], claim))
    }

    /// Merge `lists` into the free tree in holds of at most [`MERGE_CHUNK`] areas; in the last
    /// hold (the only one when the lists are empty; none when they are and there is no
    /// `claim`), carve `claim` from the tree: its start.
    pub(crate) fn merge_lists(&self, lists: [&[Span]; 3], claim: Option<&Request>) -> Option<u64> {
        let mut areas = lists.into_iter().flatten().peekable();
        if claim.is_none() && areas.peek().is_none() {
            return None;
        }
        loop {
            let carved = self.with_free_tree(&site::PURGE_MERGE, |t| {
                for &Span { start: s, pages } in areas.by_ref().take(MERGE_CHUNK) {
                    if let Err(e) = t.insert_merge(s, s + pages) {
                        panic!(
                            "{}: area [{s:#x}, +{pages}) returned twice to the free tree: {e:?}",
                            self.name
                        );
                    }
                }
                if areas.peek().is_some() {
                    return None;
                }
                Some(claim.and_then(|r| tree_alloc(t, r)))
            });
            if let Some(c) = carved {
                return c;
            }
        }
    }

    /// The free pages around the released areas that lie in the same release granule (a
    /// huge page) as an area's first or last page, taken out of the free tree: `(start,
    /// pages)`. A huge page made by the first touch of an area may reach into free space
    /// below or above it; releasing the area splits that huge page and would leave the free
    /// part resident for good, with nothing to release it later.
    pub(crate) fn claim_spill(&self, released: &[Span]) -> Vec<Span> {
        let gran = self.backing.release_granule_pages();
        if gran <= 1 || released.is_empty() {
            return Vec::new();
        }
        let mut spill = Vec::new();
        self.with_free_tree(&site::PURGE_SPILL, |t| {
            for &Span { start: s, pages } in released {
                let e = s + pages;
                let (below, above) = t.free_around(s, e);
                let head = below.min(s % gran);
                let tail = above.min((gran - e % gran) % gran);
                if head > 0 {
                    t.take(s - head, s).expect("free range touching a released area");
                    spill.push(Span::new(s - head, head));
                }
                if tail > 0 {
                    t.take(e, e + tail).expect("free range touching a released area");
                    spill.push(Span::new(e, tail));
                }
            }
        });
        spill
    }

    /// Merge areas into the free tree, re-taking the lock every few hundred merges so that pool
    /// misses on other threads are not held up for the whole batch.
    pub(crate) fn merge_into_tree(&self, areas: &[Span]) {
        self.merge_lists([areas, &[], &[]], None);
    }

    /// Run `f` on the free tree under its lock (the global lock for Global), taken at `site`.
    pub(crate) fn with_free_tree<R>(&self, site: &'static LockSite, f: impl FnOnce(&mut FreeTree) -> R) -> R {
        with_strategy!(&self.locks, s => s.with_free_tree(site, f))
    }
}

#[cfg(test)]
mod tests {
    use crate::arena::locks::Locks;
    use crate::arena::{AllocRequest, Arena};
    use crate::backing::NoBacking;
    use crate::options::ArenaOptions;
    use crate::strategy::Strategy;

    /// One node, no worker, no thread cache and no threshold purge: only explicit purges.
    fn explicit_purges_only(strategy: Strategy) -> Arena {
        let o = ArenaOptions {
            strategy,
            nodes: 1,
            purge_thread: false,
            decay_interval_ms: 0,
            thread_cache: false,
            lazy_max_pages: 1 << 40,
            ..Default::default()
        };
        Arena::new("compact", 0, 1 << 22, o, Box::new(NoBacking)).unwrap()
    }

    /// A lazy list that grew to 3,000 areas and was then mostly reused keeps its address maps
    /// until a purge that is not a threshold purge (here the explicit one) shrinks them.
    #[test]
    fn an_explicit_purge_shrinks_the_lazy_lists_address_maps() {
        let a = explicit_purges_only(Strategy::Nodes);
        let capacity = |a: &Arena| match &a.shared.locks {
            Locks::Nodes(n) => n.nodes[0].lock().lazy_list.map_capacity(),
            _ => unreachable!(),
        };
        let areas: Vec<_> = (0..3000).map(|_| a.alloc(&AllocRequest::pages(300)).unwrap()).collect();
        for x in &areas {
            a.free(x.start).unwrap();
        }
        let big = capacity(&a);
        assert!(big >= 8192, "{big} entries for 3,000 areas");
        let again: Vec<_> = (0..2990).map(|_| a.alloc(&AllocRequest::pages(300)).unwrap()).collect();
        assert!(again.iter().all(|x| !x.fresh), "reused from the lazy list");
        assert_eq!(capacity(&a), big, "reuse does not shrink the maps");
        a.purge();
        assert!(capacity(&a) <= 64, "{} entries after the purge", capacity(&a));
        for x in again {
            a.free(x.start).unwrap();
        }
        a.check().unwrap();
    }

    /// A busy map that held 3,000 areas keeps its table through their frees (no rebuild while
    /// frees go on) until a purge that is not a threshold purge compacts it; for each strategy.
    #[test]
    fn an_explicit_purge_shrinks_the_busy_maps_and_frees_do_not() {
        for strategy in [Strategy::Nodes, Strategy::Global, Strategy::Split] {
            let a = explicit_purges_only(strategy);
            let capacity = |a: &Arena| a.shared.with_busy(0, |b| b.capacity());
            let areas: Vec<_> = (0..3000).map(|_| a.alloc(&AllocRequest::pages(2)).unwrap()).collect();
            let big = capacity(&a);
            assert!(big >= 8192, "{strategy:?}: {big} slots for 3,000 areas");
            for x in &areas {
                a.free(x.start).unwrap();
            }
            assert_eq!(capacity(&a), big, "{strategy:?}: frees do not rebuild the table");
            a.purge();
            assert!(capacity(&a) <= 64, "{strategy:?}: {} slots after the purge", capacity(&a));
            a.check().unwrap();
        }
    }
}
