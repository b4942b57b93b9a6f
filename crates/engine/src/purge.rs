//! The purge: the batch step that releases the memory of lazily freed areas, refills or decays
//! the pools and returns areas to the free tree (the kernel's `__purge_vmap_area_lazy` with
//! `decay_va_pool_node`).
//!
//! Owns no state of its own: it works on the arena's lists under their locks, serialised by the
//! arena's purge mutex, taking each spin lock only to detach or attach lists (DESIGN.md,
//! section 5). The background thread that calls it is the [`worker`](crate::worker).

use crate::arena::{Kind, PurgeKind, PurgeReport, Shared};
use crate::lock::LockSite;
use crate::node::{LazyArea, NodeState};
use crate::site;
use crate::sync::Ordering::Relaxed;
use vmarena_core::fit::overlaps_any;
use vmarena_core::{FreeTree, PoolSide};

impl Shared {
    /// Release lazy memory in one batch, refill or decay pools, return areas to the tree.
    /// Serialised by the purge mutex; holds each spin lock only to detach or attach lists.
    pub(crate) fn purge(&self, kind: PurgeKind) -> PurgeReport {
        if kind == PurgeKind::Full {
            // Failure path, shrinker, low memory: cached areas count as well.
            self.drain_caches();
        }
        let _serial = self.purge_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.purge_requested.store(false, Relaxed);
        let full = kind == PurgeKind::Full;
        let mut release: Vec<(u64, u64)> = Vec::new();
        let mut to_tree: Vec<(u64, u64)> = Vec::new();
        let mut refill: Vec<(usize, Vec<(u64, u64)>)> = Vec::new();
        // Chunk remainders: free space that never was an area (no guard to retire).
        let mut chunks: Vec<(u64, u64)> = Vec::new();
        match &self.kind {
            Kind::Global(g) => {
                let mut g = g.lock_at(&site::PURGE_DETACH);
                let lazy = std::mem::take(&mut g.bl.lazy);
                let pages = std::mem::take(&mut g.bl.lazy_pages);
                drop(g);
                self.lazy_approx.fetch_sub(pages as i64, Relaxed);
                release.extend_from_slice(&lazy);
                to_tree = lazy;
            }
            Kind::Split { busy, .. } => {
                let mut b = busy.lock_at(&site::PURGE_DETACH);
                let lazy = std::mem::take(&mut b.lazy);
                let pages = std::mem::take(&mut b.lazy_pages);
                drop(b);
                self.lazy_approx.fetch_sub(pages as i64, Relaxed);
                release.extend_from_slice(&lazy);
                to_tree = lazy;
            }
            Kind::Nodes { nodes, .. } => {
                let (num, den) = if full { (1, 1) } else { (self.opts.pool_decay_percent, 100) };
                let limit = self.next_lazy_limit(nodes, kind);
                // A threshold purge keeps this many of the most recently freed pages, shared
                // among the nodes in proportion to their lazy pages.
                let keep_total = match kind {
                    PurgeKind::Threshold => limit * self.opts.purge_keep_percent / 100,
                    _ => 0,
                };
                let total = self.lazy_approx.load(Relaxed).max(1) as u64;
                for (i, n) in nodes.iter().enumerate() {
                    let mut p = n.lock_at(&site::PURGE_DETACH);
                    let decayed = p.pools.decay(num, den);
                    let node_lazy = p.lazy_pages();
                    let keep = if keep_total == 0 || node_lazy == 0 {
                        0
                    } else {
                        (keep_total as u128 * node_lazy as u128 / total.max(node_lazy) as u128) as u64
                    };
                    // Pools and the lazy list give up the same share, oldest first.
                    let pool_keep = (keep as u128 * p.pools.dirty_pages() as u128)
                        .checked_div(node_lazy as u128)
                        .unwrap_or(0) as u64;
                    let dirty = p.pools.take_dirty_keeping(pool_keep);
                    let lazy = Self::take_lazy_keeping(&mut p, keep - pool_keep);
                    if kind != PurgeKind::Threshold {
                        // Not while frees go on: the maps would shrink and grow again.
                        p.lazy_tree.compact();
                    }
                    self.sync_node(&mut p, true);
                    if full {
                        // The failure path and the shrinker take the chunks back too.
                        let (cs, ce) = std::mem::take(&mut p.chunk);
                        if cs < ce {
                            chunks.push((cs, ce - cs));
                        }
                    }
                    drop(p);
                    // Decayed areas are clean: their memory was released by an earlier purge.
                    to_tree.extend_from_slice(&decayed);
                    release.extend_from_slice(&dirty);
                    release.extend(lazy.iter().map(|l| (l.start, l.pages)));
                    to_tree.extend(lazy.iter().map(|l| (l.start, l.pages)));
                    if full {
                        to_tree.extend_from_slice(&dirty);
                    } else if !dirty.is_empty() {
                        refill.push((i, dirty));
                    }
                }
            }
        }
        let (mut calls, spill) = self.release_batch(&release);
        if let Kind::Nodes { nodes, .. } = &self.kind {
            for (i, areas) in refill {
                let mut p = nodes[i].lock_at(&site::PURGE_REFILL);
                for (s, pages) in areas {
                    p.pools.push(s, pages, PoolSide::Clean);
                }
            }
        }
        calls += self.merge_batch(&to_tree, &chunks, &spill);
        calls += self.heal_mosaics();
        let pages_released: u64 = release.iter().map(|a| a.1).sum();
        let c = &self.counters;
        c.purges.fetch_add(1, Relaxed);
        if full {
            c.full_purges.fetch_add(1, Relaxed);
        }
        c.areas_released.fetch_add(release.len() as u64, Relaxed);
        c.pages_released.fetch_add(pages_released, Relaxed);
        c.release_calls.fetch_add(calls, Relaxed);
        PurgeReport {
            areas_released: release.len() as u64,
            pages_released,
            areas_to_tree: to_tree.len() as u64,
            syscalls: calls,
        }
    }

    /// Release the memory of `release` in one batch, with the free pages that share a huge
    /// page with one of them (the spill, held out of the tree meanwhile and returned for
    /// [`Shared::merge_batch`]). Returns the syscalls made and the spill.
    fn release_batch(&self, release: &[(u64, u64)]) -> (u64, Vec<(u64, u64)>) {
        let spill = self.claim_spill(release);
        let mut calls = self.backing.release(release) as u64;
        if !spill.is_empty() {
            calls += self.backing.release_free(&spill) as u64;
        }
        (calls, spill)
    }

    /// Retire the guards of `to_tree` and merge it, the `chunks` and the `spill` into the free
    /// tree. Returns the syscalls made.
    pub(crate) fn merge_batch(
        &self,
        to_tree: &[(u64, u64)],
        chunks: &[(u64, u64)],
        spill: &[(u64, u64)],
    ) -> u64 {
        let calls = self.backing.retire(to_tree) as u64;
        self.merge_into_tree(to_tree);
        self.merge_into_tree(chunks);
        self.merge_into_tree(spill);
        calls
    }

    /// Step Reclaim (Nodes; DESIGN.md, section 4): the pooled and lazy areas and the node
    /// chunks that overlap one of `ranges` (the few starts a largely aligned request may take),
    /// released and merged into the free tree, and nothing else. A full purge would give those
    /// starts the same room, but it also releases, retires and merges every other lazy and
    /// pooled area of the arena: milliseconds when tens of thousands are pooled. Serialised
    /// with purges by the purge mutex. Returns the areas and chunks moved to the tree.
    pub(crate) fn reclaim_ranges(&self, ranges: &[(u64, u64)]) -> u64 {
        let Kind::Nodes { nodes, .. } = &self.kind else { return 0 };
        if ranges.is_empty() {
            return 0;
        }
        let _serial = self.purge_lock.lock().unwrap_or_else(|e| e.into_inner());
        let (mut release, mut to_tree, mut chunks) = (Vec::new(), Vec::new(), Vec::new());
        for n in nodes.iter() {
            let mut p = n.lock_at(&site::PURGE_DETACH);
            for (s, pages, side) in p.pools.take_overlapping(ranges) {
                if side == PoolSide::Dirty {
                    release.push((s, pages));
                }
                to_tree.push((s, pages));
            }
            p.lazy_tree.retain_mut(|l| {
                let h = overlaps_any(ranges, l.start, l.pages);
                if h {
                    release.push((l.start, l.pages));
                    to_tree.push((l.start, l.pages));
                }
                !h
            });
            let (cs, ce) = p.chunk;
            if cs < ce && overlaps_any(ranges, cs, ce - cs) {
                p.chunk = (0, 0);
                chunks.push((cs, ce - cs));
            }
            self.sync_node(&mut p, true);
        }
        let (mut calls, spill) = self.release_batch(&release);
        calls += self.merge_batch(&to_tree, &chunks, &spill);
        let c = &self.counters;
        c.range_reclaims.fetch_add(1, Relaxed);
        c.areas_released.fetch_add(release.len() as u64, Relaxed);
        c.pages_released.fetch_add(release.iter().map(|a| a.1).sum(), Relaxed);
        c.release_calls.fetch_add(calls, Relaxed);
        (to_tree.len() + chunks.len()) as u64
    }

    /// The lazy threshold from this purge on (Nodes): `lazy_max`, plus, with `lazy_headroom`,
    /// the live pages below their high-water mark. Memory freed while the live pages are below
    /// their peak can stay resident up to that peak, where the next requests are likely to
    /// reuse it; resident pages (live and lazy) then stay within the peak plus `lazy_max`. A
    /// purge that is not a threshold purge (idle decay, `purge()`, the shrinker, a failure)
    /// starts a new high-water mark at the live pages of the moment.
    fn next_lazy_limit(&self, nodes: &[crate::node::Node], kind: PurgeKind) -> u64 {
        if !self.opts.lazy_headroom {
            return self.lazy_max;
        }
        let live: u64 = nodes.iter().map(|n| n.lock_at(&site::PURGE_DETACH).busy.pages()).sum();
        let high = if kind == PurgeKind::Threshold {
            self.live_high.fetch_max(live, Relaxed).max(live)
        } else {
            self.live_high.store(live, Relaxed);
            live
        };
        let limit = self.lazy_max + (high - live);
        self.lazy_limit.store(limit, Relaxed);
        limit
    }

    /// Detach the node's oldest lazy areas until at most `keep_pages` of them stay; areas that
    /// are not reusable (allocated in a caller's window) go whatever the budget.
    fn take_lazy_keeping(p: &mut NodeState, keep_pages: u64) -> Vec<LazyArea> {
        let mut left = p.lazy_tree.pages();
        let mut out = Vec::new();
        p.lazy_tree.retain_mut(|l| {
            if !l.reusable || left > keep_pages {
                left -= l.pages;
                out.push(*l);
                false
            } else {
                true
            }
        });
        out
    }

    /// The free pages around the released areas that lie in the same release granule (a
    /// huge page) as an area's first or last page, taken out of the free tree: `(start,
    /// pages)`. A huge page made by the first touch of an area may reach into free space
    /// below or above it; releasing the area splits that huge page and would leave the free
    /// part resident for good, with nothing to release it later.
    pub(crate) fn claim_spill(&self, released: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let gran = self.backing.release_granule_pages();
        if gran <= 1 || released.is_empty() {
            return Vec::new();
        }
        let mut spill = Vec::new();
        self.with_free_tree(&site::PURGE_SPILL, |t| {
            for &(s, pages) in released {
                let e = s + pages;
                let (below, above) = t.free_around(s, e);
                let head = below.min(s % gran);
                let tail = above.min((gran - e % gran) % gran);
                if head > 0 {
                    t.take(s - head, s).expect("free range touching a released area");
                    spill.push((s - head, head));
                }
                if tail > 0 {
                    t.take(e, e + tail).expect("free range touching a released area");
                    spill.push((e, tail));
                }
            }
        });
        spill
    }

    /// Merge areas into the free tree, re-taking the lock every few hundred merges so that pool
    /// misses on other threads are not held up for the whole batch.
    pub(crate) fn merge_into_tree(&self, areas: &[(u64, u64)]) {
        const CHUNK: usize = 256;
        for chunk in areas.chunks(CHUNK) {
            self.with_free_tree(&site::PURGE_MERGE, |t| {
                for &(s, pages) in chunk {
                    if let Err(e) = t.insert_merge(s, s + pages) {
                        panic!(
                            "{}: area [{s:#x}, +{pages}) returned twice to the free tree: {e:?}",
                            self.name
                        );
                    }
                }
            });
        }
    }

    /// Run `f` on the free tree under its lock (the global lock for Global), taken at `site`.
    pub(crate) fn with_free_tree<R>(&self, site: &'static LockSite, f: impl FnOnce(&mut FreeTree) -> R) -> R {
        match &self.kind {
            Kind::Global(g) => f(&mut g.lock_at(site).free),
            Kind::Split { free, .. } | Kind::Nodes { free, .. } => f(&mut free.lock_at(site)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::arena::{AllocRequest, Arena, Kind};
    use crate::backing::NoBacking;
    use crate::options::ArenaOptions;
    use crate::strategy::Strategy;

    /// A lazy list that grew to 3,000 areas and was then mostly reused keeps its address maps
    /// until a purge that is not a threshold purge (here the explicit one) shrinks them.
    #[test]
    fn an_explicit_purge_shrinks_the_lazy_lists_address_maps() {
        let o = ArenaOptions {
            strategy: Strategy::Nodes,
            nodes: 1,
            purge_thread: false,
            decay_interval_ms: 0,
            thread_cache: false,
            lazy_max_pages: 1 << 40,
            ..Default::default()
        };
        let a = Arena::new("compact", 0, 1 << 22, o, Box::new(NoBacking)).unwrap();
        let capacity = |a: &Arena| match &a.shared.kind {
            Kind::Nodes { nodes, .. } => nodes[0].lock().lazy_tree.map_capacity(),
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
}
