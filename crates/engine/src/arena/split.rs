//! The Split strategy (the kernel's 2019 design): one lock for the free tree, one for the busy
//! map and the lazy list.
//!
//! Owns: the free tree under the free lock (`LockRank::arena_free`) and a [`BusyLazy`] under
//! the busy lock (`LockRank::arena_busy`). An allocation takes the free lock, then the busy
//! lock, one after the other (never both); a free takes the busy lock only. Lazy areas wait for
//! a purge as under Global.

use super::context::Context;
use super::global::BusyLazy;
use super::release::free_released_via_busy;
use super::strategy_ops::{check_free_tree, tree_alloc, AreaLists, PurgeBatch, StrategyOps};
use crate::area::{AllocRequest, Allocation, AreaKind, AreaTag, Contents};
use crate::arena::site;
use crate::arena::stats::ArenaStats;
use crate::error::FreeError;
use crate::sync::lock::StatLock;
use crate::sync::lock_rank::LockRank;
use crate::sync::lock_stats::{LockSite, LockStats};
use crate::sync::padded::Padded;
use crate::sync::Ordering::Relaxed;
use vmarena_core::{BusyArea, BusyMap, FreeTree, Request, Span};

/// The Split strategy's two locks.
pub(crate) struct Split {
    free: Padded<StatLock<FreeTree>>,
    busy: Padded<StatLock<BusyLazy>>,
}

impl Split {
    pub(super) fn new(owner: u64, lo: u64, hi: u64) -> Split {
        Split {
            free: Padded(StatLock::ranked(LockRank::arena_free(owner), FreeTree::with_range(lo, hi))),
            busy: Padded(StatLock::ranked(LockRank::arena_busy(owner), BusyLazy::default())),
        }
    }
}

impl StrategyOps for Split {
    #[inline]
    fn try_alloc(
        &self,
        ctx: &Context,
        r: &Request,
        req: &AllocRequest,
        _default_window: bool,
    ) -> Option<Allocation> {
        let pages = r.size_pages;
        let start = tree_alloc(&mut self.free.lock_at(&site::ALLOC_FREE_TREE), r)?;
        self.busy.lock_at(&site::ALLOC_BUSY).insert_new(start, pages, req.tag);
        Some(ctx.carved(start, pages))
    }

    #[inline]
    fn free(
        &self,
        ctx: &Context,
        start: u64,
        kind: Option<AreaKind>,
    ) -> Result<BusyArea<AreaTag>, FreeError> {
        let a = self.busy.lock_at(&site::FREE_BUSY).free(start, kind)?;
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
        f(&mut self.busy.lock().busy)
    }

    fn with_free_tree<R>(&self, site: &'static LockSite, f: impl FnOnce(&mut FreeTree) -> R) -> R {
        f(&mut self.free.lock_at(site))
    }

    fn insert_parts(&self, _ctx: &Context, parts: &[Span], tag: AreaTag) {
        let mut b = self.busy.lock_at(&site::ALLOC_BUSY);
        for p in parts {
            b.insert_new(p.start, p.pages, tag);
        }
    }

    fn detach(&self, ctx: &Context, batch: &mut PurgeBatch) {
        self.busy.lock_at(&site::PURGE_DETACH).detach(ctx, batch);
    }

    fn lazy_pages_exact(&self) -> u64 {
        self.busy.lock().lazy_pages
    }

    fn free_summary(&self) -> (u64, u64) {
        let f = self.free.lock();
        (f.free_pages(), f.largest())
    }

    fn add_stats(&self, _ctx: &Context, s: &mut ArenaStats) {
        self.busy.lock().add_stats(s);
        let f = self.free.lock();
        s.free_pages = f.free_pages();
        s.free_ranges = f.len() as u64;
    }

    fn lock_stats(&self) -> Vec<(&'static str, LockStats)> {
        vec![("free", self.free.stats()), ("busy", self.busy.stats())]
    }

    fn areas(&self, _ctx: &Context) -> AreaLists {
        self.busy.lock().areas()
    }

    #[cfg(not(loom))]
    fn lock_for_fork<'a>(&'a self, held: &mut Vec<Box<dyn crate::sync::fork::Held + 'a>>) {
        held.push(Box::new(self.free.lock()));
        held.push(Box::new(self.busy.lock()));
    }

    fn check(
        &self,
        _ctx: &Context,
        _cached: &[u64],
        all: &mut Vec<(u64, u64, &'static str)>,
    ) -> Result<(), String> {
        let f = self.free.lock();
        let b = self.busy.lock();
        check_free_tree(&f, all)?;
        b.check(all)
    }
}
