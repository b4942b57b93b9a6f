//! `Shared`: one arena's state, shared by its handle, its thread caches and its purge worker:
//! the [`Context`] and the [`StrategyState`] side by side.
//!
//! Owns both halves. The operations of the arena (`alloc.rs`, `free.rs`, `purge.rs`,
//! `check.rs`, `congruent.rs`) are `impl Shared` blocks above this file: each works on the
//! context and runs the strategy's part through [`with_strategy!`], handing it the context.
//! A strategy holds neither `Shared` nor the operations: what it needs is in the context.
//!
//! Locks: the strategy's spin locks (ranked in sync/lock_rank.rs, `LockRank`) and the context's mutexes
//! (the purge mutex before them, never under them; the thread-cache registry mutex before
//! both).

use super::context::Context;
use super::strategy_ops::StrategyOps;
use super::strategy_state::{with_strategy, StrategyState};
use crate::area::{AreaTag, PurgeKind};
use crate::arena::backing::Backing;
use crate::arena::options::ArenaOptions;
use crate::arena::stats::ArenaStats;
use crate::caches::thread_caches::{CacheOwner, DepotDrain, ThreadCaches};
use crate::sync::lock_rank::next_owner;
use crate::sync::Arc;
use crate::sync::Ordering::Relaxed;
use vmarena_core::{BusyMap, Span};

/// See the module documentation.
pub(crate) struct Shared {
    /// Everything but the strategy's locks.
    pub(crate) ctx: Context,
    /// The strategy's locks and what is under them.
    pub(crate) state: StrategyState,
}

impl Shared {
    /// The state of an arena over pages `[lo, hi)` whose part `[lo, usable_hi)` is usable now
    /// (options checked by the caller).
    pub(crate) fn new(
        name: String,
        lo: u64,
        hi: u64,
        usable_hi: u64,
        opts: ArenaOptions,
        backing: Box<dyn Backing>,
    ) -> Shared {
        // This arena's place in the lock order (sync/lock_rank.rs, `LockRank`).
        let owner = next_owner();
        let state = StrategyState::new(opts.strategy, owner, lo, usable_hi, opts.node_count());
        Shared { ctx: Context::new(name, lo, hi, usable_hi, opts, backing), state }
    }

    /// Run `f` on the busy map (or shard) that holds `start`, under its lock.
    pub(crate) fn with_busy<R>(&self, start: u64, f: impl FnOnce(&mut BusyMap<AreaTag>) -> R) -> R {
        with_strategy!(&self.state, s => s.with_busy(&self.ctx, start, f))
    }

    /// Give cached areas back to the nodes, the depot's too (see [`ThreadCaches::drain_all`]).
    pub(crate) fn drain_caches(&self) -> u64 {
        self.ctx.cache.as_ref().map_or(0, |c| c.drain_all(self, DepotDrain::All))
    }

    /// Exact lazy pages (takes each lock briefly).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn lazy_pages_exact(&self) -> u64 {
        with_strategy!(&self.state, s => s.lazy_pages_exact())
    }

    /// Free pages of the tree and its largest range.
    pub(crate) fn free_summary(&self) -> (u64, u64) {
        with_strategy!(&self.state, s => s.free_summary())
    }

    /// Figures as of now: the counters, the thread caches' figures, then the strategy's.
    pub(crate) fn stats(&self) -> ArenaStats {
        let cf = self.ctx.cache.as_ref().map(|c| c.figures()).unwrap_or_default();
        let mut s = ArenaStats {
            cached_areas: cf.areas,
            cached_pages: cf.pages,
            cache_hits: cf.hits,
            cache_cpu_hits: cf.cpu_hits,
            cache_slack_hits: cf.slack_hits,
            cache_misses: cf.misses,
            cache_flushes: cf.flushes,
            cache_drained: cf.drained,
            cache_grows: cf.grows,
            cache_sheds: cf.sheds,
            depot_pages: cf.depot_pages,
            depot_puts: cf.depot_puts,
            depot_takes: cf.depot_takes,
            cache_cpu_grown_hits: cf.cpu_grown_hits,
            cache_cpu_grown_pages: cf.cpu_grown_pages,
            decay_keep_ticks: self.ctx.decay.keep_ticks() as u64,
            decay_refault_pages: self.ctx.decay.refault_pages.load(Relaxed),
            cache_budget_pages: cf.budget_pages,
            moved_maps: self.ctx.moves.mosaics.maps(),
            lazy_limit: self.ctx.lazy.limit(self.ctx.opts.lazy_headroom),
            lazy_over_limit_peak: self.ctx.lazy.over_peak.load(Relaxed),
            ..Default::default()
        };
        self.ctx.counters.add_to(&mut s);
        with_strategy!(&self.state, st => st.add_stats(&self.ctx, &mut s));
        // Cached areas are in the busy map but free for their users.
        s.live_areas = s.live_areas.saturating_sub(cf.areas);
        s.live_pages = s.live_pages.saturating_sub(cf.pages);
        s.frees += cf.pushes;
        s
    }
}

/// `fork()` takes every lock of the arena, in the order of `LockRank` (sync/lock_rank.rs).
#[cfg(not(loom))]
impl crate::sync::fork::ForkLocks for Shared {
    fn lock_for_fork(&self) -> Vec<Box<dyn crate::sync::fork::Held + '_>> {
        let mut held: Vec<Box<dyn crate::sync::fork::Held + '_>> = Vec::with_capacity(8 + self.ctx.nr_nodes);
        if let Some(c) = &self.ctx.cache {
            held.extend(c.lock_for_fork());
        }
        held.push(Box::new(self.ctx.purging.lock.lock().unwrap_or_else(|e| e.into_inner())));
        with_strategy!(&self.state, s => s.lock_for_fork(&mut held));
        held.push(self.ctx.purging.worker.lock_for_fork());
        held.push(self.ctx.moves.mosaics.lock_for_fork());
        held
    }
}

/// What the thread caches see of their arena.
impl CacheOwner for Shared {
    fn caches(&self) -> Option<&ThreadCaches> {
        self.ctx.cache.as_ref()
    }

    fn free_from_cache(&self, areas: &mut [Span]) {
        if let Err(e) = with_strategy!(&self.state, s => s.free_many(&self.ctx, areas)) {
            panic!("{}: a cached area was not busy: {e}", self.ctx.name);
        }
    }

    fn try_free_passed(&self, start: u64) -> bool {
        if !self.ctx.opts.lazy_free || self.lazy_backlogged() {
            return false;
        }
        // The busy-map path may allocate (a lazy list's growth): served by the inner allocator.
        let _inside = vmarena_platform::reentry::enter();
        match with_strategy!(&self.state, s => s.try_free(&self.ctx, start)) {
            None => false,
            Some(Ok(_)) => true,
            Some(Err(e)) => panic!("{}: a cached area was not busy: {e}", self.ctx.name),
        }
    }

    fn lazy_room(&self) -> u64 {
        let (lazy, limit) = self.lazy_and_limit();
        limit.saturating_sub(lazy).max(0) as u64
    }

    fn spilled(me: &Arc<Self>) {
        Shared::freed(me);
    }

    fn registered(me: &Arc<Self>) {
        Shared::start_decay_worker(me);
    }
}

/// What the purge worker sees of its arena.
impl crate::arena::worker::Purged for Shared {
    fn decay_interval_ms(&self) -> u64 {
        self.ctx.opts.decay_interval_ms
    }

    fn threshold_purge(&self) {
        self.purge(PurgeKind::Threshold);
    }

    fn idle_purge(&self) -> bool {
        // Of the depot, what the previous tick saw there: a bulk free under way keeps its
        // spills for the misses that follow it.
        if let Some(c) = self.ctx.cache.as_ref() {
            c.drain_all(self, DepotDrain::Aged);
        }
        // Fresh pages carved so far, less what moves filled with resident memory: taken
        // right after a release, they are the released memory asked for again.
        let c = &self.ctx.counters;
        let fresh = (c.tree_pages.load(Relaxed) + c.extend_pages.load(Relaxed))
            .saturating_sub(c.moved_pages.load(Relaxed));
        self.ctx.decay.before_tick(fresh);
        if self.ctx.purging.requested.load(Relaxed) || self.lazy_pages_exact() > 0 {
            let released = self.purge(PurgeKind::Decay).pages_released;
            self.ctx.decay.after_tick(released);
            let idle = released > 0 && self.lazy_pages_exact() == 0;
            if idle {
                // Nothing was freed for a tick: the live pages of now are the program's peak.
                self.ctx.lazy.restart_mark();
            }
            return idle;
        }
        false
    }
}

/// A low-memory event shrinks the arena: every lazy area released, every pool drained.
impl crate::pressure::Reclaim for Shared {
    fn reclaim_name(&self) -> String {
        format!("space {}", self.ctx.name)
    }

    fn reclaim(&self) -> u64 {
        self.purge(PurgeKind::Full).pages_released
    }
}
