//! The Global strategy (the kernel before 2019): one lock over the free tree, the busy map and
//! the lazy list.
//!
//! Owns: [`GlobalState`] under the one lock (`LockRank::arena_global`), and [`BusyLazy`], the
//! busy map and lazy list that Split keeps under its busy lock too.
//!
//! A freed area waits on the lazy list until a purge releases its memory and merges it into the
//! free tree; it is not reused before. Every step of the ladder but Tree and TreeExact is a
//! Nodes step, so one pass is a tree search and an insert under the one lock.

use super::context::Context;
use super::release::free_released_via_busy;
use super::strategy_ops::{check_free_tree, remove_record, tree_alloc, AreaLists, PurgeBatch, StrategyOps};
use crate::area::{AllocRequest, Allocation, AreaKind, AreaTag, Contents, PurgeKind, NO_NODE};
use crate::arena::site;
use crate::arena::stats::ArenaStats;
use crate::error::FreeError;
use crate::sync::lock::StatLock;
use crate::sync::lock_rank::LockRank;
use crate::sync::lock_stats::{LockSite, LockStats};
use crate::sync::padded::Padded;
use crate::sync::Ordering::Relaxed;
use vmarena_core::{BusyArea, BusyMap, FreeTree, Request, Span};

/// Busy areas and the lazy list (under the global lock, or the Split busy lock).
#[derive(Default)]
pub(crate) struct BusyLazy {
    pub busy: BusyMap<AreaTag>,
    /// Freed areas awaiting a purge.
    pub lazy: Vec<Span>,
    pub lazy_pages: u64,
    pub frees: u64,
}

impl BusyLazy {
    /// Enter a new area, just taken from the free tree, with no allocating node.
    #[inline]
    pub(super) fn insert_new(&mut self, start: u64, pages: u64, tag: AreaTag) {
        let ok = self.busy.insert(start, BusyArea { pages, node: NO_NODE, tag });
        debug_assert!(ok, "the tree handed out a live start");
    }

    /// Remove the record at `start` (of `kind`, any for `None`) and put the area on the lazy
    /// list.
    #[inline]
    pub(super) fn free(
        &mut self,
        start: u64,
        kind: Option<AreaKind>,
    ) -> Result<BusyArea<AreaTag>, FreeError> {
        let a = remove_record(&mut self.busy, start, kind)?;
        self.lazy.push(Span::new(start, a.pages));
        self.lazy_pages += a.pages;
        self.frees += 1;
        Ok(a)
    }

    /// The purge's detach: the whole lazy list goes to be released and merged into the tree.
    /// A purge that is not a threshold purge also shrinks the busy map (`BusyMap::compact`).
    pub(super) fn detach(&mut self, ctx: &Context, batch: &mut PurgeBatch) {
        if batch.kind != PurgeKind::Threshold {
            self.busy.compact();
        }
        let lazy = std::mem::take(&mut self.lazy);
        let pages = std::mem::take(&mut self.lazy_pages);
        ctx.lazy.approx.fetch_sub(pages as i64, Relaxed);
        batch.release.extend_from_slice(&lazy);
        batch.to_tree = lazy;
    }

    pub(super) fn add_stats(&self, s: &mut ArenaStats) {
        s.live_areas += self.busy.len() as u64;
        s.live_pages += self.busy.pages();
        s.lazy_pages += self.lazy_pages;
        s.frees += self.frees;
    }

    pub(super) fn check(&self, all: &mut Vec<(u64, u64, &'static str)>) -> Result<(), String> {
        all.extend(self.busy.sorted().iter().map(|(s, a)| (*s, a.pages, "busy")));
        all.extend(self.lazy.iter().map(|l| (l.start, l.pages, "lazy")));
        let lp = Span::total_pages(&self.lazy);
        if lp != self.lazy_pages {
            return Err(format!("lazy_pages {} but lazy list holds {lp}", self.lazy_pages));
        }
        Ok(())
    }

    pub(super) fn areas(&self) -> AreaLists {
        (vec![self.busy.sorted()], self.lazy.clone())
    }
}

/// Everything of the Global strategy, under its one lock.
pub(crate) struct GlobalState {
    pub free: FreeTree,
    pub bl: BusyLazy,
}

/// The Global strategy's one lock.
pub(crate) struct Global(Padded<StatLock<GlobalState>>);

impl Global {
    pub(super) fn new(owner: u64, lo: u64, hi: u64) -> Global {
        Global(Padded(StatLock::ranked(
            LockRank::arena_global(owner),
            GlobalState { free: FreeTree::with_range(lo, hi), bl: BusyLazy::default() },
        )))
    }
}

impl StrategyOps for Global {
    #[inline]
    fn try_alloc(
        &self,
        ctx: &Context,
        r: &Request,
        req: &AllocRequest,
        _default_window: bool,
    ) -> Option<Allocation> {
        let pages = r.size_pages;
        let mut g = self.0.lock_at(&site::ALLOC_GLOBAL);
        let start = tree_alloc(&mut g.free, r)?;
        g.bl.insert_new(start, pages, req.tag);
        drop(g);
        Some(ctx.carved(start, pages))
    }

    #[inline]
    fn free(
        &self,
        ctx: &Context,
        start: u64,
        kind: Option<AreaKind>,
    ) -> Result<BusyArea<AreaTag>, FreeError> {
        let a = self.0.lock_at(&site::FREE_GLOBAL).bl.free(start, kind)?;
        ctx.lazy.approx.fetch_add(a.pages as i64, Relaxed);
        Ok(a)
    }

    /// The record removed under the busy lock, then the area released and merged into the
    /// free tree by this thread, as a purge would.
    fn free_released(
        &self,
        ctx: &Context,
        start: u64,
        kind: Option<AreaKind>,
        contents: Contents,
    ) -> Result<BusyArea<AreaTag>, FreeError> {
        free_released_via_busy(ctx, self, start, kind, contents)
    }

    fn with_busy<R>(&self, _ctx: &Context, _start: u64, f: impl FnOnce(&mut BusyMap<AreaTag>) -> R) -> R {
        f(&mut self.0.lock().bl.busy)
    }

    fn with_free_tree<R>(&self, site: &'static LockSite, f: impl FnOnce(&mut FreeTree) -> R) -> R {
        f(&mut self.0.lock_at(site).free)
    }

    fn insert_parts(&self, _ctx: &Context, parts: &[Span], tag: AreaTag) {
        let mut g = self.0.lock_at(&site::ALLOC_GLOBAL);
        for p in parts {
            g.bl.insert_new(p.start, p.pages, tag);
        }
    }

    fn detach(&self, ctx: &Context, batch: &mut PurgeBatch) {
        self.0.lock_at(&site::PURGE_DETACH).bl.detach(ctx, batch);
    }

    fn lazy_pages_exact(&self) -> u64 {
        self.0.lock().bl.lazy_pages
    }

    fn free_summary(&self) -> (u64, u64) {
        let g = self.0.lock();
        (g.free.free_pages(), g.free.largest())
    }

    fn add_stats(&self, _ctx: &Context, s: &mut ArenaStats) {
        let g = self.0.lock();
        g.bl.add_stats(s);
        s.free_pages = g.free.free_pages();
        s.free_ranges = g.free.len() as u64;
    }

    fn lock_stats(&self) -> Vec<(&'static str, LockStats)> {
        vec![("global", self.0.stats())]
    }

    fn areas(&self, _ctx: &Context) -> AreaLists {
        self.0.lock().bl.areas()
    }

    #[cfg(not(loom))]
    fn lock_for_fork<'a>(&'a self, held: &mut Vec<Box<dyn crate::sync::fork::Held + 'a>>) {
        held.push(Box::new(self.0.lock()));
    }

    fn check(
        &self,
        _ctx: &Context,
        _cached: &[u64],
        all: &mut Vec<(u64, u64, &'static str)>,
    ) -> Result<(), String> {
        let g = self.0.lock();
        check_free_tree(&g.free, all)?;
        g.bl.check(all)
    }
}
