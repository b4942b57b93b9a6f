//! The Nodes strategy (Linux 6.9): per-CPU nodes, each one lock over a busy shard (by address
//! stripe), size pools, a lazy list and a chunk; the free tree under its own lock, taken on
//! misses only.
//!
//! Owns: [`Nodes`], the node array and the free lock (lock order: node locks in index order,
//! then the free lock; sync/lock_rank.rs, `LockRank`). A node's contents are described in node.rs.
//!
//! One pass of the ladder (the steps of [`Step`](crate::area::Step), in order): Pool and
//! LazyReuse on the allocating node (`reuse.rs`), Steal (`reuse.rs`), Chunk, Extend
//! (`reuse.rs`), Tree and TreeExact with Move (`mover.rs`). A free takes the lock of the area's
//! shard and, when another node allocated it, then that node's lock, to put it back in the
//! allocating node's pool or lazy list. The purge's part (decay, keep, refill, Reclaim) is in
//! `purge.rs`, the invariant check in `check.rs`.

mod check;
mod grow;
mod mover;
pub(crate) mod node;
mod purge;
mod reuse;

use super::context::Context;
use super::release::release_now;
use super::strategy_ops::{remove_record, tree_alloc, AreaLists, PurgeBatch, StrategyOps};
use crate::area::{AllocRequest, Allocation, AreaKind, AreaTag, Contents, NO_NODE};
use crate::arena::nodes::node::{new_node, LazyArea, Node, NodeState, ZONE_PAGES};
use crate::arena::site;
use crate::arena::stats::ArenaStats;
use crate::error::FreeError;
use crate::sync::lock::StatLock;
use crate::sync::lock_rank::LockRank;
use crate::sync::lock_stats::{LockSite, LockStats};
use crate::sync::padded::Padded;
use crate::sync::Ordering::Relaxed;
use vmarena_core::{BusyArea, BusyMap, FreeTree, PoolSide, Request, Span};

/// Remove the record of the live area at `start` (of `kind`, any for `None`) from the busy
/// shard `g` (its node's state, locked) and clear the area's state word, as one free does.
#[inline(always)]
fn unbusy(
    ctx: &Context,
    g: &mut NodeState,
    start: u64,
    kind: Option<AreaKind>,
) -> Result<BusyArea<AreaTag>, FreeError> {
    let a = remove_record(&mut g.busy, start, kind)?;
    if let Some(c) = &ctx.cache {
        c.states.clear(start, a.pages);
    }
    Ok(a)
}

/// The Nodes strategy's locks: the free tree's, and one per node.
pub(crate) struct Nodes {
    pub(crate) free: Padded<StatLock<FreeTree>>,
    pub(crate) nodes: Box<[Node]>,
}

impl Nodes {
    pub(super) fn new(owner: u64, lo: u64, hi: u64, nr_nodes: usize) -> Nodes {
        Nodes {
            free: Padded(StatLock::ranked(LockRank::arena_free(owner), FreeTree::with_range(lo, hi))),
            nodes: (0..nr_nodes).map(|i| new_node(owner, i)).collect(),
        }
    }
}

impl StrategyOps for Nodes {
    #[inline]
    fn try_alloc(
        &self,
        ctx: &Context,
        r: &Request,
        req: &AllocRequest,
        default_window: bool,
    ) -> Option<Allocation> {
        if !default_window {
            // Like the kernel's non-default ranges: no pools, no allocating node.
            let start = tree_alloc(&mut self.free.lock_at(&site::ALLOC_FREE_TREE), r)?;
            self.insert_busy(ctx, start, BusyArea { pages: r.size_pages, node: NO_NODE, tag: req.tag });
            return Some(ctx.carved(start, r.size_pages));
        }
        self.node_alloc(ctx, r, req)
    }

    #[inline]
    fn free(
        &self,
        ctx: &Context,
        start: u64,
        kind: Option<AreaKind>,
    ) -> Result<BusyArea<AreaTag>, FreeError> {
        let shard = ctx.shard_of(start);
        let mut g = self.nodes[shard].lock_at(&site::FREE_SHARD_NODE);
        let a = unbusy(ctx, &mut g, start, kind)?;
        // Back to the node that allocated it; untagged areas wait on the shard's node.
        let (home, tagged) = if a.node == NO_NODE { (shard, false) } else { (a.node as usize, true) };
        if home == shard {
            self.node_push(ctx, &mut g, start, a.pages, tagged);
        } else {
            ctx.sync_node(&mut g, false);
            drop(g);
            self.node_push(ctx, &mut self.nodes[home].lock_at(&site::FREE_HOME_NODE), start, a.pages, tagged);
        }
        Ok(a)
    }

    /// [`StrategyOps::free`] with try-locks: the shard's node and, for an area another node
    /// allocated, its home node, both taken before anything changes (a try-lock never waits,
    /// so holding the first while trying the second cannot deadlock).
    fn try_free(&self, ctx: &Context, start: u64) -> Option<Result<BusyArea<AreaTag>, FreeError>> {
        let shard = ctx.shard_of(start);
        let mut g = self.nodes[shard].try_lock()?;
        let home = match g.busy.get(start) {
            Some(a) if a.node != NO_NODE => a.node as usize,
            _ => shard,
        };
        let mut away = if home == shard { None } else { Some(self.nodes[home].try_lock()?) };
        let a = match unbusy(ctx, &mut g, start, None) {
            Ok(a) => a,
            Err(e) => return Some(Err(e)),
        };
        let tagged = a.node != NO_NODE;
        match away.as_mut() {
            None => self.node_push(ctx, &mut g, start, a.pages, tagged),
            Some(h) => {
                self.node_push(ctx, h, start, a.pages, tagged);
                ctx.sync_node(&mut g, false);
            }
        }
        Some(Ok(a))
    }

    /// The record removed under the shard's lock; then, with no lock held, the memory released
    /// and the guard retired (the area is in flight, as a cross-node free's is between its two
    /// locks: no other thread can reach it), and the area merged into the free tree, as a
    /// purge would do with it. The freeing thread does the work the purge has not got to.
    fn free_released(
        &self,
        ctx: &Context,
        start: u64,
        kind: Option<AreaKind>,
        contents: Contents,
    ) -> Result<BusyArea<AreaTag>, FreeError> {
        let a = {
            let mut g = self.nodes[ctx.shard_of(start)].lock_at(&site::FREE_SHARD_NODE);
            let a = unbusy(ctx, &mut g, start, kind)?;
            g.frees += 1;
            ctx.sync_node(&mut g, false);
            a
        };
        release_now(ctx, self, Span::new(start, a.pages), contents);
        Ok(a)
    }

    /// Areas sorted by busy shard: each shard's lock is taken once for its areas, and each
    /// home node's once for those of its areas that another shard held.
    fn free_many(&self, ctx: &Context, areas: &mut [Span]) -> Result<(), FreeError> {
        let first = areas.first().map(|a| ctx.shard_of(a.start));
        if areas.iter().any(|a| Some(ctx.shard_of(a.start)) != first) {
            areas.sort_unstable_by_key(|a| ctx.shard_of(a.start));
        }
        for run in areas.chunk_by(|a, b| ctx.shard_of(a.start) == ctx.shard_of(b.start)) {
            let shard = ctx.shard_of(run[0].start);
            // Areas another node allocated, pushed there after the shard's lock is dropped.
            let mut away: Vec<(usize, u64, u64)> = Vec::new();
            {
                // Each area's busy-map home slot is far from the others' and rarely cached in
                // a bulk free: ask for all of them first, so that the misses overlap (under
                // the lock: the table may be resized), then for their records (whose places
                // the slots name) and the slots after theirs. The areas' words were read by
                // their frees a few dozen frees ago and are still cached.
                let mut g = self.nodes[shard].lock_at(&site::FREE_SHARD_NODE);
                for a in run {
                    for line in g.busy.home_lines(a.start) {
                        vmarena_platform::prefetch::prefetch_line(line);
                    }
                }
                for a in run {
                    for line in g.busy.removal_lines(a.start).into_iter().flatten() {
                        vmarena_platform::prefetch::prefetch_line(line);
                    }
                }
                for a in run {
                    let r = unbusy(ctx, &mut g, a.start, None)?;
                    match r.node {
                        NO_NODE => self.node_put(ctx, &mut g, a.start, r.pages, false),
                        n if n as usize == shard => self.node_put(ctx, &mut g, a.start, r.pages, true),
                        n => away.push((n as usize, a.start, r.pages)),
                    }
                }
                ctx.sync_node(&mut g, false);
            }
            away.sort_unstable();
            for same in away.chunk_by(|a, b| a.0 == b.0) {
                let mut g = self.nodes[same[0].0].lock_at(&site::FREE_HOME_NODE);
                for &(_, start, pages) in same {
                    self.node_put(ctx, &mut g, start, pages, true);
                }
                ctx.sync_node(&mut g, false);
            }
        }
        Ok(())
    }

    fn with_busy<R>(&self, ctx: &Context, start: u64, f: impl FnOnce(&mut BusyMap<AreaTag>) -> R) -> R {
        f(&mut self.nodes[ctx.shard_of(start)].lock().busy)
    }

    fn with_free_tree<R>(&self, site: &'static LockSite, f: impl FnOnce(&mut FreeTree) -> R) -> R {
        f(&mut self.free.lock_at(site))
    }

    fn insert_parts(&self, ctx: &Context, parts: &[Span], tag: AreaTag) {
        for &Span { start, pages } in parts {
            self.insert_busy(ctx, start, BusyArea { pages, node: NO_NODE, tag });
        }
    }

    fn detach(&self, ctx: &Context, batch: &mut PurgeBatch) {
        self.nodes_detach(ctx, batch);
    }

    fn refill(&self, batch: &mut PurgeBatch) {
        for (i, areas) in std::mem::take(&mut batch.refill) {
            let mut p = self.nodes[i].lock_at(&site::PURGE_REFILL);
            for a in areas {
                p.pools.push(a.start, a.pages, PoolSide::Clean);
            }
        }
    }

    fn reclaim_ranges(&self, ctx: &Context, ranges: &[(u64, u64)]) -> u64 {
        self.nodes_reclaim(ctx, ranges)
    }

    fn grow_in_place(&self, ctx: &Context, start: u64, new_pages: u64, requested_bytes: u64) -> bool {
        self.grow_area(ctx, start, new_pages, requested_bytes)
    }

    fn heal_mosaics(&self, ctx: &Context) -> u64 {
        self.heal(ctx)
    }

    fn add_pool_lens(&self, out: &mut [u64]) {
        for n in self.nodes.iter() {
            for (o, l) in out.iter_mut().zip(n.lock().pools.class_lens()) {
                *o += l;
            }
        }
    }

    fn lazy_pages_exact(&self) -> u64 {
        self.nodes.iter().map(|n| n.lock().lazy_pages()).sum()
    }

    fn free_summary(&self) -> (u64, u64) {
        let f = self.free.lock();
        (f.free_pages(), f.largest())
    }

    fn add_stats(&self, _ctx: &Context, s: &mut ArenaStats) {
        for n in self.nodes.iter() {
            let p = n.lock();
            s.live_areas += p.busy.len() as u64;
            s.live_pages += p.busy.pages();
            s.chunk_pages += p.chunk.1 - p.chunk.0;
            s.chunk_allocs += p.chunk_allocs;
            s.lazy_pages += p.lazy_pages();
            s.pooled_areas += p.pools.len();
            s.pooled_pages += p.pools.class_lens().zip(1..).map(|(n, pages)| n * pages).sum::<u64>();
            s.pool_hits += p.hits;
            s.clean_hit_pages += p.clean_hit_pages;
            s.pool_misses += p.misses;
            s.lazy_reuses += p.lazy_reuses;
            s.lazy_splits += p.lazy_splits;
            s.lazy_joins += p.lazy_joins;
            s.lazy_extends += p.lazy_extends;
            s.slack_pages += p.slack_pages;
            s.node_steals += p.steals;
            s.frees += p.frees;
        }
        let f = self.free.lock();
        s.free_pages = f.free_pages();
        s.free_ranges = f.len() as u64;
    }

    fn lock_stats(&self) -> Vec<(&'static str, LockStats)> {
        let mut node = LockStats::default();
        for n in self.nodes.iter() {
            node.merge(&n.stats());
        }
        vec![("free", self.free.stats()), ("node", node)]
    }

    fn areas(&self, ctx: &Context) -> AreaLists {
        let mut lazy = Vec::new();
        let busy = self
            .nodes
            .iter()
            .map(|n| {
                let mut v = n.lock().busy.sorted();
                v.retain_mut(|(s, a)| {
                    let live = ctx.patch_cached(*s, a);
                    if !live {
                        lazy.push(Span::new(*s, a.pages));
                    }
                    live
                });
                v
            })
            .collect();
        for n in self.nodes.iter() {
            let p = n.lock();
            lazy.extend(p.pools.entries().into_iter().filter(|e| e.1 == PoolSide::Dirty).map(|e| e.0));
            lazy.extend(p.lazy_list.iter().map(LazyArea::span));
        }
        (busy, lazy)
    }

    #[cfg(not(loom))]
    fn lock_for_fork<'a>(&'a self, held: &mut Vec<Box<dyn crate::sync::fork::Held + 'a>>) {
        for n in self.nodes.iter() {
            held.push(Box::new(n.lock()));
        }
        held.push(Box::new(self.free.lock()));
    }

    fn check(
        &self,
        ctx: &Context,
        cached: &[u64],
        all: &mut Vec<(u64, u64, &'static str)>,
    ) -> Result<(), String> {
        self.nodes_check(ctx, cached, all)
    }
}

impl Nodes {
    /// One pass of the ladder in the default window: the steps on this CPU's node, then the
    /// tree.
    #[inline]
    fn node_alloc(&self, ctx: &Context, r: &Request, req: &AllocRequest) -> Option<Allocation> {
        let pages = r.size_pages;
        // Areas above the pools share node 0's lazy list (`shared_lazy`).
        let shared = ctx.opts.shared_lazy && !ctx.poolable(pages);
        let me = if shared { 0 } else { ctx.node_index(crate::sync::current_cpu()) };
        let area = BusyArea { pages, node: me as u16, tag: req.tag };
        let mut g = self.nodes[me].lock_at(&site::ALLOC_NODE);
        // Steps Pool and LazyReuse.
        if let Some(t) = self.node_take(ctx, &mut g, r, req.prefer_fresh, ctx.zeroes_on_release, false) {
            let area = BusyArea { pages: t.pages, ..area };
            self.finish_take(ctx, g, me, t.start, area, t.split);
            return Some(Allocation { start: t.start, pages: t.pages, fresh: t.fresh });
        }
        let small = pages <= ZONE_PAGES && r.align_pages == 1;
        // Step Steal: a request above the pools' sizes that this node's lazy list cannot
        // serve looks at the other nodes' resident freed areas before taking fresh pages. The
        // area becomes this node's (it comes back here when freed). A pool-sized miss takes
        // fresh pages of this node's stripe instead: a stolen area keeps its busy record on the
        // other node, whose lock every later reuse and free of it would take while that node's
        // own threads use it.
        if !small && !shared && ctx.opts.node_steal && ctx.nr_nodes > 1 && !ctx.poolable(pages) {
            drop(g);
            if let Some(a) = self.node_steal(ctx, r, me, area) {
                return Some(a);
            }
            g = self.nodes[me].lock_at(&site::ALLOC_NODE);
        }
        // Step Chunk: small areas are carved from a zone of this node's stripe.
        if small {
            if let Some(start) = g.carve(pages) {
                let ok = g.busy.insert(start, area);
                debug_assert!(ok, "chunk handed out a live start");
                self.track(ctx, start, &area);
                g.chunk_allocs += 1;
                ctx.sync_node(&mut g, false);
                drop(g);
                ctx.backing.prepare(start, pages);
                return Some(Allocation { start, pages, fresh: ctx.zeroes_on_release });
            }
        }
        // Step Extend: a run of this node's lazy areas grown into the free space on either
        // side of it, so only the growth takes fresh pages.
        if r.align_pages == 1 && !ctx.poolable(pages) && ctx.opts.lazy_split {
            let runs = Self::extend_runs(&g, pages);
            if !runs.is_empty() {
                drop(g);
                if let Some(a) = self.node_extend(ctx, me, &runs, area) {
                    return Some(a);
                }
                g = self.nodes[me].lock_at(&site::ALLOC_NODE);
            }
        }
        let rest = if small { std::mem::take(&mut g.chunk) } else { (0, 0) };
        drop(g);
        self.node_tree_step(ctx, r, me, small, rest, area)
    }

    /// Steps Tree and TreeExact for node `me` (no lock held), with the remainder `rest` of
    /// its old chunk to return to the tree, then step Move.
    fn node_tree_step(
        &self,
        ctx: &Context,
        r: &Request,
        me: usize,
        small: bool,
        rest: (u64, u64),
        area: BusyArea<AreaTag>,
    ) -> Option<Allocation> {
        let pages = r.size_pages;
        // A zone start of this node's stripe for poolable sizes (so this node is the area's
        // busy home), else the lowest fit.
        let (start, new_chunk) = {
            let mut f = self.free.lock_at(&site::ALLOC_FREE_TREE);
            if rest.0 < rest.1 {
                f.insert_merge(rest.0, rest.1).expect("chunk remainder overlaps free space");
            }
            self.node_tree_alloc(ctx, &mut f, r, me, small)?
        };
        if ctx.shard_of(start) == me {
            let mut g = self.nodes[me].lock_at(&site::ALLOC_NODE);
            let ok = g.busy.insert(start, area);
            debug_assert!(ok, "tree handed out a live start");
            self.track(ctx, start, &area);
            ctx.sync_node(&mut g, false);
            let mut leftover = new_chunk;
            if let Some(c) = new_chunk {
                g.chunk_allocs += 1;
                if g.chunk.0 == g.chunk.1 {
                    g.chunk = c;
                    leftover = None;
                }
            }
            drop(g);
            if let Some((s, e)) = leftover.filter(|c| c.0 < c.1) {
                // Another thread on this node installed a chunk meanwhile.
                self.free
                    .lock_at(&site::ALLOC_FREE_TREE)
                    .insert_merge(s, e)
                    .expect("chunk remainder overlaps free space");
            }
        } else {
            debug_assert!(new_chunk.is_none());
            self.insert_busy(ctx, start, area);
        }
        ctx.backing.prepare(start, pages);
        let mut moved = 0;
        if new_chunk.is_none() {
            ctx.counters.tree_allocs.fetch_add(1, Relaxed);
            ctx.counters.tree_pages.fetch_add(pages, Relaxed);
            // Step Move: the oldest lazy memory instead of fresh pages.
            if ctx.moves.on {
                let data = pages.saturating_sub(ctx.backing.guard_pages());
                moved = self.move_into(ctx, me, start, data);
            }
        }
        Some(Allocation { start, pages, fresh: ctx.zeroes_on_release && moved == 0 })
    }

    /// The tree steps for node `me`: a fresh chunk for small areas (returns the chunk's
    /// remainder after the area), a zone start of the stripe for other poolable sizes, the
    /// lowest fit otherwise or when the stripe has no room.
    fn node_tree_alloc(
        &self,
        ctx: &Context,
        f: &mut FreeTree,
        r: &Request,
        me: usize,
        small: bool,
    ) -> Option<(u64, Option<(u64, u64)>)> {
        let stripe = ZONE_PAGES * ctx.nr_nodes as u64;
        let phase = me as u64 * ZONE_PAGES;
        let phased = |size: u64| Request::striped(size, stripe, phase, r.lo, r.hi).ok();
        if small {
            if let Some(q) = phased(ZONE_PAGES) {
                if let Some((s, _)) = f.alloc(&q) {
                    return Some((s, Some((s + r.size_pages, s + ZONE_PAGES))));
                }
            }
        } else if ctx.poolable(r.size_pages) && r.align_pages <= ZONE_PAGES {
            if let Some(q) = phased(r.size_pages) {
                if let Some((s, _)) = f.alloc(&q) {
                    return Some((s, None));
                }
            }
        }
        tree_alloc(f, r).map(|s| (s, None))
    }

    /// Enter a new area in its busy shard (no node lock held on entry).
    #[inline]
    pub(crate) fn insert_busy(&self, ctx: &Context, start: u64, area: BusyArea<AreaTag>) {
        let mut g = self.nodes[ctx.shard_of(start)].lock_at(&site::ALLOC_HOME_NODE);
        let ok = g.busy.insert(start, area);
        debug_assert!(ok, "allocator handed out a live start");
        self.track(ctx, start, &area);
        ctx.sync_node(&mut g, false);
    }

    /// A Nodes area entered the busy map: its state word goes live (under the shard lock).
    #[inline]
    fn track(&self, ctx: &Context, start: u64, area: &BusyArea<AreaTag>) {
        if let Some(c) = &ctx.cache {
            c.states.track(start, area.pages, &area.tag);
        }
    }

    /// Put a freed area on its home node (locked): its pool, or the lazy list.
    #[inline]
    fn node_push(&self, ctx: &Context, g: &mut NodeState, start: u64, pages: u64, tagged: bool) {
        self.node_put(ctx, g, start, pages, tagged);
        ctx.sync_node(g, false);
    }

    /// [`Nodes::node_push`] without the lazy pages' publication: for a batch, which publishes
    /// once at its end, before the lock is dropped.
    #[inline]
    fn node_put(&self, ctx: &Context, g: &mut NodeState, start: u64, pages: u64, tagged: bool) {
        if tagged && ctx.poolable(pages) {
            g.pools.push(start, pages, PoolSide::Dirty);
        } else {
            g.lazy_list.push(LazyArea { start, pages, reusable: tagged });
        }
        g.frees += 1;
        g.freed_since_tick += pages;
    }
}
