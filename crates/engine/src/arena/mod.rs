//! `Arena`: a concurrent allocator of page ranges over any integer range `[lo, hi)`.
//!
//! Owns: the free tree, the busy areas, the pools and lazy lists of one range, under the locks
//! of its [`Strategy`]; the purge serialisation; the background purge worker.
//! Does not own: memory. What pages stand for is the [`Backing`]'s business.
//!
//! Files, from the bottom up (each imports only from files below it):
//!
//! | layer | files |
//! |---|---|
//! | what an arena is apart from its strategy | `context.rs` (with `counters.rs`, `mosaics.rs`; options, statistics, backing, worker) |
//! | what a strategy is | `strategy_ops.rs` (the interface and its shared helpers), `release.rs` |
//! | the strategies | `global.rs`, `split.rs`, `nodes/` (node state, reuse, step Move, purge, check) |
//! | the one dispatch | `strategy_state.rs` |
//! | the arena's state | `shared.rs` (context + strategy state) |
//! | the operations | `alloc.rs`, `free.rs`, `purge.rs`, `check.rs`, `congruent.rs` |
//! | the handle | this file |
//!
//! Area life cycle (every page of the arena is in exactly one of these states):
//!
//! ```text
//!            alloc: pool hit (Nodes)          alloc: lazy reuse (Nodes, large)
//!        +--------------------------------+ +--------------------------------+
//!        |                                | |                                |
//!        v      free                      | v       free                     |
//!  +------------+ ---------> +-------------------+ ---------------------> +------------+
//!  |   busy     |            | pooled dirty      |                        | lazy list  |
//!  | (busy map) |            | (Nodes, <=256 pg) |                        | (all other |
//!  +------------+            +-------------------+                        |  frees)    |
//!        ^                         | purge: release memory                +------------+
//!        |                         v                                            |
//!        |                   +-------------------+                              |
//!        +-------------------| pooled clean      |                              |
//!        | alloc: pool hit   +-------------------+                              |
//!        |                         | decay 25% (100% on full purge)             |
//!        |                         v                                            |
//!        |                   +-------------------+   purge: release, retire,   |
//!        +-------------------|  free tree        |<-----------------------------+
//!        | alloc: tree       +-------------------+          merge
//!        |                         | a zone of the node's stripe (Nodes)
//!        |                         v                 (back to the tree on a full purge)
//!        |                   +-------------------+
//!        +-------------------|  node chunk       |
//!          alloc: chunk      +-------------------+
//! ```
//!
//! Invariant (checked by [`Arena::check`]): busy ∪ pooled ∪ lazy ∪ chunk ∪ free = `[lo, hi)`,
//! disjoint.
//!
//! Allocation is a ladder of named steps ([`Step`]): pool, lazy reuse, chunk, tree, exact tree
//! search (an area carved from the tree may take the memory of the oldest lazy areas, moved:
//! step Move, `mover.rs`), then reclaim or full purge and another pass, then a failure with an
//! error that names the arena and its limits (`alloc.rs`).

// Layered as the module documentation's table says; the layout test holds it.
mod alloc;
pub mod backing;
mod check;
mod congruent;
mod context;
mod counters;
pub(crate) mod decay;
mod free;
mod global;
pub(crate) mod mosaics;
pub(crate) mod nodes;
pub mod options;
mod purge;
mod release;
mod shared;
pub mod site;
mod split;
pub mod stats;
pub mod strategy;
mod strategy_ops;
mod strategy_state;
pub(crate) mod worker;

use crate::arena::backing::Backing;
use crate::arena::options::ArenaOptions;
use crate::arena::stats::ArenaStats;
use crate::arena::strategy::Strategy;
use crate::caches::area_state::Claim;
use crate::sync::lock_stats::LockStats;
use crate::sync::Arc;
use shared::Shared;
pub use strategy_ops::AreaLists;
use strategy_ops::StrategyOps;
use strategy_state::with_strategy;
use vmarena_core::BusyArea;

pub use crate::area::{
    AllocRequest, Allocation, AreaKind, AreaTag, PurgeKind, PurgeReport, SmallArea, Step, NO_NODE,
    UNKNOWN_BYTES,
};
pub use crate::error::{AllocError, FreeError};

/// A concurrent page-range allocator. Cheap to share: all methods take `&self`.
pub struct Arena {
    pub(crate) shared: Arc<Shared>,
}

impl Arena {
    /// An arena over pages `[lo, hi)`, named `name` in errors and reports.
    pub fn new(
        name: impl Into<String>,
        lo: u64,
        hi: u64,
        opts: ArenaOptions,
        backing: Box<dyn Backing>,
    ) -> Result<Arena, String> {
        if lo >= hi {
            return Err(format!("arena range [{lo:#x}, {hi:#x}) is empty"));
        }
        if opts.pool_decay_percent > 100 {
            return Err("pool_decay_percent must be at most 100".into());
        }
        if opts.purge_keep_percent > 100 {
            return Err("purge_keep_percent must be at most 100".into());
        }
        if opts.pool_max_pages > vmarena_core::POOL_MAX_PAGES {
            return Err(format!("pool_max_pages must be at most {}", vmarena_core::POOL_MAX_PAGES));
        }
        let name = name.into();
        // A backing that grows in steps starts with one (step Grow).
        let usable_hi = match backing.grow_step_pages() {
            None => hi,
            Some(step) => {
                let end = lo.saturating_add(step.max(1)).min(hi);
                if !backing.grow(lo, end - lo) {
                    return Err(format!(
                        "{name}: the first {} pages of the range could not be made usable",
                        end - lo
                    ));
                }
                end
            }
        };
        let shared = Arc::new(Shared::new(name, lo, hi, usable_hi, opts, backing));
        #[cfg(not(loom))]
        {
            let s: Arc<dyn crate::pressure::Reclaim> = shared.clone();
            crate::pressure::register(Arc::downgrade(&s));
            let f: Arc<dyn crate::sync::fork::ForkLocks> = shared.clone();
            crate::sync::fork::register(crate::sync::fork::Rank::Arena, Arc::downgrade(&f));
        }
        Ok(Arena { shared })
    }

    /// The arena's name.
    pub fn name(&self) -> &str {
        &self.shared.ctx.name
    }

    /// The page range `[lo, hi)`.
    pub fn range(&self) -> (u64, u64) {
        (self.shared.ctx.lo, self.shared.ctx.hi)
    }

    /// The usable part `[lo, grown_hi)` of the range: all of it, unless the backing grows in
    /// steps (step Grow).
    pub fn usable_range(&self) -> (u64, u64) {
        (self.shared.ctx.lo, self.shared.ctx.grown_hi.load(crate::sync::Ordering::Relaxed))
    }

    /// The lock design in use.
    pub fn strategy(&self) -> Strategy {
        self.shared.ctx.opts.strategy
    }

    /// The options the arena was built with.
    pub fn options(&self) -> &ArenaOptions {
        &self.shared.ctx.opts
    }

    /// Nodes (1 for Global and Split).
    pub fn node_count(&self) -> usize {
        self.shared.ctx.nr_nodes
    }

    /// Lazy pages above which a purge runs.
    pub fn lazy_max_pages(&self) -> u64 {
        self.shared.ctx.lazy.max_pages
    }

    /// For tests of what the fast paths write: the address ranges of the memory each
    /// registered thread-cache magazine owns, one list per magazine.
    #[doc(hidden)]
    pub fn thread_cache_spans(&self) -> Vec<Vec<std::ops::Range<usize>>> {
        self.shared.ctx.cache.as_ref().map_or_else(Vec::new, |c| c.spans())
    }

    /// For tests of what the fast paths write: the address of the state word of page `start`.
    #[doc(hidden)]
    pub fn state_word_addr(&self, start: u64) -> Option<usize> {
        self.shared.ctx.cache.as_ref()?.states.word_addr(start)
    }

    /// Why this arena has no thread caches (`None`: it has them).
    pub fn thread_cache_off(&self) -> Option<&str> {
        self.shared.ctx.cache_off.as_deref()
    }

    /// Bytes of the thread caches' state table resident now (`mincore`; 0 without thread
    /// caches): what a program that freed its areas still holds of it.
    pub fn state_table_resident_bytes(&self) -> u64 {
        self.shared.ctx.cache.as_ref().map_or(0, |c| c.table_resident_bytes())
    }

    /// Why this arena's thread caches have no per-CPU stacks in front of their magazines
    /// (`None`: they have them; the reason for no thread caches at all, when there are none).
    pub fn cpu_cache_off(&self) -> Option<&str> {
        match &self.shared.ctx.cache {
            Some(c) => c.cpu_off(),
            None => self.shared.ctx.cache_off.as_deref(),
        }
    }

    /// The record of the live area that starts at `start`. For an area that went through a
    /// thread cache, the caller is the latest one and the requested size is [`UNKNOWN_BYTES`].
    pub fn lookup(&self, start: u64) -> Option<BusyArea<AreaTag>> {
        let sh = &*self.shared;
        let mut a = sh.with_busy(start, |b| b.get(start).copied())?;
        if !sh.ctx.patch_cached(start, &mut a) {
            return None;
        }
        Some(a)
    }

    /// Pages (guard pages included) of the live area that starts at `start`, or `None`. A small
    /// area of the space's own memory answers from its state word, without a lock; any other
    /// start is looked up in the busy map.
    #[inline]
    pub fn live_pages(&self, start: u64) -> Option<u64> {
        if let Some(w) = self.shared.ctx.cache.as_ref().and_then(|c| c.states.get(start)) {
            return (!w.cached).then_some(w.pages);
        }
        self.lookup(start).map(|a| a.pages)
    }

    /// A small area of the space's own memory, read from its state word without a lock:
    /// `None` when no word tracks `start` (ask [`Arena::lookup`]).
    #[inline]
    pub fn small_area(&self, start: u64) -> Option<SmallArea> {
        let w = self.shared.ctx.cache.as_ref()?.states.get(start)?;
        Some(SmallArea { pages: w.pages, free: w.cached, retired: w.retired, record_current: !w.reused })
    }

    /// Hand the live `Vmalloc` area at `start` to a deferred free: from now on every free and
    /// resize refuses it, until [`Arena::unretire`]. A small area changes its state word (one
    /// compare-and-swap, no lock); any other changes its record's kind to
    /// [`AreaKind::Retired`] under its busy lock. Refused (nothing changed) when `start` is not
    /// a live `Vmalloc` area, or is retired already.
    pub fn retire(&self, start: u64) -> Result<(), FreeError> {
        self.swap_kind(start, AreaKind::Vmalloc, AreaKind::Retired)
    }

    /// The deferred free's grace period has passed: the retired area at `start` is a live
    /// `Vmalloc` area again, for the deferred free to release. Refused when it is not retired.
    pub fn unretire(&self, start: u64) -> Result<(), FreeError> {
        self.swap_kind(start, AreaKind::Retired, AreaKind::Vmalloc)
    }

    /// Change the kind of the live area at `start` from `from` to `to` under its busy lock (for
    /// a small `Vmalloc` area, through its state word: only `Vmalloc` <-> `Retired`). Refused,
    /// nothing changed, when the area is not live or not of kind `from`: of two racing calls
    /// exactly one succeeds.
    pub fn swap_kind(&self, start: u64, from: AreaKind, to: AreaKind) -> Result<(), FreeError> {
        let sh = &*self.shared;
        if let Some(c) = &sh.ctx.cache {
            let claim =
                if to == AreaKind::Retired { c.states.retire(start) } else { c.states.unretire(start) };
            match claim {
                Claim::Won { .. } => return Ok(()),
                Claim::AlreadyFree => return Err(FreeError::NotLive { start }),
                Claim::Untracked => {}
            }
        }
        sh.with_busy(start, |b| match b.get_mut(start) {
            None => Err(FreeError::NotLive { start }),
            Some(a) if a.tag.kind != from => Err(FreeError::WrongKind { start, kind: a.tag.kind }),
            Some(a) => {
                a.tag.kind = to;
                Ok(())
            }
        })
    }

    /// A resize in place of a small live area that takes no lock: from now on the busy record
    /// reports [`UNKNOWN_BYTES`] as the requested size. False when `start` is not a small live
    /// area (freed, or not tracked by a state word; nothing changed).
    #[inline]
    pub fn resized_in_place(&self, start: u64) -> bool {
        self.shared.ctx.cache.as_ref().is_some_and(|c| c.states.mark_stale(start))
    }

    /// Grow the live area at `start` to at least `new_pages` pages (guard included) where it
    /// lies, from the lazy area or the free space right after it: true when it grew (then
    /// [`Arena::lookup`] reports its new size; a lazy area within the slack is taken whole),
    /// false with nothing changed otherwise. Only the Nodes strategy grows areas in place,
    /// and only areas above the pools (`pool_max_pages`) with no state word (larger than a
    /// thread cache holds), with `shared_lazy` on. The caller owns the area; the grown pages
    /// hold whatever the lazy area held, or zeros. The record's requested size becomes
    /// `requested_bytes` (what `vmallocinfo` prints).
    pub fn grow_in_place(&self, start: u64, new_pages: u64, requested_bytes: u64) -> bool {
        let sh = &*self.shared;
        with_strategy!(&sh.state, s => s.grow_in_place(&sh.ctx, start, new_pages, requested_bytes))
    }

    /// Move the memory of up to `pages` pages at `from` to `to`, the data pages of two live
    /// areas the caller owns, as step Move moves lazy areas' memory: the pages moved, from the
    /// front. `[from, from + moved)` then reads as zero and its bytes are at `to`; the rest of
    /// `from` is as it was, and the caller copies it. For a resize that moves an area without
    /// copying its bytes. 0 when this arena does not move pages (Nodes with `page_moves` and
    /// a backing that moves), `pages` is below [`MOVE_MIN_PAGES`](crate::MOVE_MIN_PAGES), or
    /// moves have added as many mappings as the process allows; fewer than `pages` when the
    /// kernel refused the rest.
    pub fn move_data(&self, from: u64, to: u64, pages: u64) -> u64 {
        self.shared.ctx.move_data(from, to, pages)
    }

    /// Change the tag of a live area; false if `start` is not live.
    pub fn update_tag(&self, start: u64, f: impl FnOnce(&mut AreaTag)) -> bool {
        let sh = &*self.shared;
        if let Some(c) = &sh.ctx.cache {
            if c.states.get(start).is_some_and(|w| w.cached) {
                return false;
            }
        }
        sh.with_busy(start, |b| b.get_mut(start).map(|a| f(&mut a.tag)).is_some())
    }

    /// Release the memory of every lazy area now and decay pools as a background purge would.
    /// Thread caches are drained first (a magazine whose owner is inside a call is left to its
    /// owner, which drains it at its next call).
    pub fn purge(&self) -> PurgeReport {
        self.shared.drain_caches();
        self.shared.purge(PurgeKind::Normal)
    }

    /// What the purge worker does at each tick of its decay interval: drain the thread caches
    /// and release the lazy memory freed before the previous tick (Nodes; the other strategies
    /// release all of it). True on an idle tick: it released memory and left nothing lazy.
    pub fn decay_purge(&self) -> bool {
        crate::arena::worker::Purged::idle_purge(&*self.shared)
    }

    /// The longest free range of the free tree (free ranges held by caches, pools and lazy
    /// lists not counted), in pages.
    pub fn largest_free(&self) -> u64 {
        self.shared.free_summary().1
    }

    /// The shrinker: release every lazy area and return every pooled area to the free tree.
    pub fn shrink(&self) -> PurgeReport {
        self.shared.purge(PurgeKind::Full)
    }

    /// Figures as of now (takes each lock briefly).
    pub fn stats(&self) -> ArenaStats {
        self.shared.stats()
    }

    /// Pooled areas per size class (index `i` for `i + 1` pages), summed over nodes (empty
    /// classes for Global and Split, which have no pools).
    pub fn pool_lens(&self) -> Vec<u64> {
        let mut out = vec![0u64; vmarena_core::POOL_MAX_PAGES as usize];
        with_strategy!(&self.shared.state, s => s.add_pool_lens(&mut out));
        out
    }

    /// Lock figures by lock class: `global`; `free` and `busy`; or `free` and `node` (summed
    /// over nodes).
    pub fn lock_stats(&self) -> Vec<(&'static str, LockStats)> {
        with_strategy!(&self.shared.state, s => s.lock_stats())
    }

    /// Live areas by busy shard (each in address order) and lazy areas, as `vmallocinfo`
    /// lists them: `(busy per node, lazy)`.
    pub fn areas(&self) -> AreaLists {
        with_strategy!(&self.shared.state, s => s.areas(&self.shared.ctx))
    }

    /// Check every invariant. Call it when no other thread is using the arena: an area in
    /// flight between two locks would otherwise look lost.
    pub fn check(&self) -> Result<(), String> {
        self.shared.check()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        self.shared.ctx.purging.worker.shutdown();
    }
}
