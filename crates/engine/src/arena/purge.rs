//! The purge: the batch step that releases the memory of lazily freed areas, refills or decays
//! the pools and returns areas to the free tree (the kernel's `__purge_vmap_area_lazy` with
//! `decay_va_pool_node`).
//!
//! Owns: [`PurgeBatch`], one purge's lists in flight. It works on the arena's lists under
//! their locks, serialised by the arena's purge mutex, taking each spin lock only to detach or
//! attach lists (DESIGN.md, section 6): the strategy detaches (`detach` of its file), this file
//! releases and merges, the strategy refills. The background thread that calls it is the
//! [`worker`](crate::arena::worker).

use super::release::{merge_batch_claiming, merge_into_tree, release_batch};
use super::shared::Shared;
use super::strategy_ops::PurgeBatch;
use super::strategy_ops::StrategyOps;
use super::strategy_state::with_strategy;
use crate::area::{Allocation, AreaTag, PurgeKind, PurgeReport};
use crate::sync::Ordering::Relaxed;
use vmarena_core::{Request, Span};

/// Purges in a row a failed allocation runs under one hold of the purge mutex while its carve
/// fails and other threads keep making areas lazy.
const CLAIM_ROUNDS: usize = 8;

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
        let _serial = self.ctx.purging.lock.lock().unwrap_or_else(|e| e.into_inner());
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
        self.ctx.purging.requested.store(false, Relaxed);
        let mut batch = PurgeBatch {
            kind,
            release: Vec::new(),
            to_tree: Vec::new(),
            refill: Vec::new(),
            chunks: Vec::new(),
        };
        with_strategy!(&self.state, s => s.detach(&self.ctx, &mut batch));
        let (mut calls, spill) =
            with_strategy!(&self.state, s => release_batch(&self.ctx, s, &batch.release));
        with_strategy!(&self.state, s => s.refill(&mut batch));
        let (merge_calls, carved) = with_strategy!(&self.state, s => merge_batch_claiming(&self.ctx, s, &batch.to_tree, &batch.chunks, &spill, claim.map(|(r, _)| r)));
        calls += merge_calls;
        let got = carved.zip(claim).map(|(start, (r, tag))| {
            let span = Span::new(start, r.size_pages);
            with_strategy!(&self.state, s => s.insert_parts(&self.ctx, &[span], tag));
            self.ctx.carved(start, r.size_pages)
        });
        calls += with_strategy!(&self.state, s => s.heal_mosaics(&self.ctx));
        calls += self.renew_free_blocks(&[&batch.to_tree, &batch.chunks, &spill]);
        let pages_released = Span::total_pages(&batch.release);
        let c = &self.ctx.counters;
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
}

/// Pages of a block a purge may leave free: one page of the thread caches' state table holds
/// their words, and on x86-64 one page-table page maps them (2 MiB of 4 KiB pages).
const FREE_BLOCK_PAGES: u64 = 512;

impl Shared {
    /// The blocks of [`FREE_BLOCK_PAGES`] the areas just merged into the free tree left wholly
    /// free, taken out of the tree (so nothing is carved there meanwhile), renewed, and merged
    /// back: their state-table page dropped (their words are all zero; 600 KiB of table stayed
    /// resident after a program freed 2 GiB), and with a backing that heals free blocks, the
    /// block mapped fresh, which frees its page tables (`MADV_DONTNEED` keeps them: 3.2 MB after
    /// the same 2 GiB; docs/bench-log/realloc-growth.md). No lock is held while they are
    /// renewed. Returns the syscalls made.
    fn renew_free_blocks(&self, merged: &[&Vec<Span>]) -> u64 {
        let ctx = &self.ctx;
        let heal = ctx.backing.heals_free_blocks();
        if ctx.cache.is_none() && !heal {
            return 0;
        }
        let (lo, hi) = (ctx.lo, ctx.grown_hi.load(Relaxed));
        let mut blocks: Vec<u64> = merged
            .iter()
            .flat_map(|v| v.iter())
            .filter(|a| a.pages > 0)
            .flat_map(|a| (a.start - lo) / FREE_BLOCK_PAGES..=(a.start + a.pages - 1 - lo) / FREE_BLOCK_PAGES)
            .collect();
        blocks.sort_unstable();
        blocks.dedup();
        let mut runs: Vec<Span> = Vec::new();
        with_strategy!(&self.state, s => s.with_free_tree(&super::site::PURGE_TABLE, |t| {
            for &b in &blocks {
                let start = lo + b * FREE_BLOCK_PAGES;
                let end = start + FREE_BLOCK_PAGES;
                if end > hi || !t.covers(start, end) {
                    continue;
                }
                t.take(start, end).expect("a block the free tree holds whole");
                match runs.last_mut() {
                    Some(r) if r.start + r.pages == start => r.pages += FREE_BLOCK_PAGES,
                    _ => runs.push(Span::new(start, FREE_BLOCK_PAGES)),
                }
            }
        }));
        if runs.is_empty() {
            return 0;
        }
        let mut calls = 0;
        if let Some(c) = ctx.cache.as_ref() {
            let (bytes, n) = c.discard_table(&runs);
            ctx.counters.table_pages_dropped.fetch_add(bytes / vmarena_platform::page_size() as u64, Relaxed);
            calls += n;
        }
        if heal {
            calls += ctx.backing.heal(&runs) as u64;
            ctx.counters.blocks_renewed.fetch_add(Span::total_pages(&runs) / FREE_BLOCK_PAGES, Relaxed);
        }
        with_strategy!(&self.state, s => merge_into_tree(ctx, s, &runs));
        calls
    }
}

#[cfg(test)]
mod tests {
    use crate::arena::backing::NoBacking;
    use crate::arena::options::ArenaOptions;
    use crate::arena::strategy::Strategy;
    use crate::arena::strategy_state::StrategyState;
    use crate::arena::{AllocRequest, Arena};

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
        let capacity = |a: &Arena| match &a.shared.state {
            StrategyState::Nodes(n) => n.nodes[0].lock().lazy_list.map_capacity(),
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
