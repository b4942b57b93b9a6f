//! What a strategy owns: the locks of one [`Strategy`] and every operation that takes them.
//!
//! Owns: [`Locks`], the arena's one value of its strategy's state (`global.rs`, `split.rs`,
//! `nodes.rs`), and [`StrategyLocks`], the operations each strategy implements in its own file:
//! one pass of the allocation ladder, free, the purge's detach and refill, statistics, the
//! areas list, lock figures, the `fork()` locks and the invariant check.
//!
//! The rest of the arena (the ladder's retries, the purge's batch, the checker's tiling, the
//! congruent search) is common to the strategies and reaches them through [`with_strategy!`],
//! the one place that dispatches on the strategy. Dispatch is a `match`, so every call is
//! static and inlined as before the split.

use super::purge::PurgeBatch;
use super::shared::Shared;
use super::AreaLists;
use crate::area::{AllocRequest, Allocation, AreaKind, AreaTag};
use crate::error::FreeError;
use crate::lock::{LockSite, LockStats};
use crate::strategy::Strategy;
use vmarena_core::{BusyArea, BusyMap, FreeTree, Request, Span};

/// The arena's strategy state. One per arena, so the variants' sizes do not matter; boxing the
/// larger ones would add a pointer chase to every lock acquisition.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Locks {
    Global(super::global::Global),
    Split(super::split::Split),
    Nodes(super::nodes::Nodes),
}

/// Evaluate `$body` with `$s` bound to the arena's strategy state (`&Global`, `&Split` or
/// `&Nodes`), whichever it is: the one dispatch on the strategy outside the strategy files.
macro_rules! with_strategy {
    ($locks:expr, $s:ident => $body:expr) => {
        match $locks {
            $crate::arena::locks::Locks::Global($s) => $body,
            $crate::arena::locks::Locks::Split($s) => $body,
            $crate::arena::locks::Locks::Nodes($s) => $body,
        }
    };
}
pub(crate) use with_strategy;

impl Locks {
    /// The state of `strategy` over pages `[lo, hi)`, its locks ranked for arena `owner`
    /// (lock.rs, `LockRank`).
    pub(crate) fn new(strategy: Strategy, owner: u64, lo: u64, hi: u64, nr_nodes: usize) -> Locks {
        match strategy {
            Strategy::Global => Locks::Global(super::global::Global::new(owner, lo, hi)),
            Strategy::Split => Locks::Split(super::split::Split::new(owner, lo, hi)),
            Strategy::Nodes => Locks::Nodes(super::nodes::Nodes::new(owner, lo, hi, nr_nodes)),
        }
    }
}

/// The operations of one strategy, each under that strategy's locks. `sh` is the arena the
/// state belongs to (options, counters, backing, lazy accounting).
pub(crate) trait StrategyLocks {
    /// One pass of the allocation ladder's steps up to the exact tree search (see
    /// [`Step`](crate::area::Step)); `None` when none of them has room.
    fn try_alloc(
        &self,
        sh: &Shared,
        r: &Request,
        req: &AllocRequest,
        default_window: bool,
    ) -> Option<Allocation>;

    /// Remove the record of the live area at `start` (of `kind`, or any kind for `None`) and
    /// make the area lazy: on a lazy list, or in a pool (Nodes).
    fn free(&self, sh: &Shared, start: u64, kind: Option<AreaKind>) -> Result<BusyArea<AreaTag>, FreeError>;

    /// [`StrategyLocks::free`] for a free made while lazy pages stand past twice their limit:
    /// where the strategy can, the area's memory is released and the area returned to the free
    /// tree at once instead of going lazy. By default, the plain free.
    fn free_released(
        &self,
        sh: &Shared,
        start: u64,
        kind: Option<AreaKind>,
    ) -> Result<BusyArea<AreaTag>, FreeError> {
        self.free(sh, start, kind)
    }

    /// [`StrategyLocks::free`] of every area in `areas` (any kind; their order may change), in
    /// one batch where the strategy can take each lock once for several. Stops at the first
    /// area that is not live.
    fn free_many(&self, sh: &Shared, areas: &mut [Span]) -> Result<(), FreeError> {
        for a in areas.iter() {
            self.free(sh, a.start, None)?;
        }
        Ok(())
    }

    /// Run `f` on the busy map (or shard) that holds `start`, under its lock.
    fn with_busy<R>(&self, sh: &Shared, start: u64, f: impl FnOnce(&mut BusyMap<AreaTag>) -> R) -> R;

    /// Run `f` on the free tree under its lock, taken at `site`.
    fn with_free_tree<R>(&self, site: &'static LockSite, f: impl FnOnce(&mut FreeTree) -> R) -> R;

    /// Enter `parts` (just taken from the free tree) in the busy map as
    /// areas of their own with `tag`.
    fn insert_parts(&self, sh: &Shared, parts: &[Span], tag: AreaTag);

    /// The purge's first step: detach what this purge of `batch.kind` releases, returns to
    /// the tree or refills into pools.
    fn detach(&self, sh: &Shared, batch: &mut PurgeBatch);

    /// The purge's step after the release: refill the pools with the areas it released
    /// (Nodes).
    fn refill(&self, _batch: &mut PurgeBatch) {}

    /// Step Reclaim (Nodes): release and return to the tree only what lies over `ranges`.
    /// Returns the areas and chunks moved to the tree.
    fn reclaim_ranges(&self, _sh: &Shared, _ranges: &[(u64, u64)]) -> u64 {
        0
    }

    /// Add the pooled areas per size class (index `i` for `i + 1` pages) to `out` (Nodes).
    fn add_pool_lens(&self, _out: &mut [u64]) {}

    /// Exact lazy pages (takes each lock briefly).
    fn lazy_pages_exact(&self) -> u64;

    /// Free pages of the tree and its largest range.
    fn free_summary(&self) -> (u64, u64);

    /// Add the strategy's figures (live, lazy, free, pools) to `s`.
    fn add_stats(&self, sh: &Shared, s: &mut crate::stats::ArenaStats);

    /// Lock figures by lock class.
    fn lock_stats(&self) -> Vec<(&'static str, LockStats)>;

    /// Live areas by busy shard (each in address order) and lazy areas.
    fn areas(&self, sh: &Shared) -> AreaLists;

    /// Every lock of the strategy, taken in the lock order, for `fork()`.
    #[cfg(not(loom))]
    fn lock_for_fork<'a>(&'a self, held: &mut Vec<Box<dyn crate::fork::Held + 'a>>);

    /// Check the strategy's structures and add every range they hold to `all` as `(start,
    /// pages, what)`. `cached` lists the starts that sit in thread caches (sorted).
    fn check(
        &self,
        sh: &Shared,
        cached: &[u64],
        all: &mut Vec<(u64, u64, &'static str)>,
    ) -> Result<(), String>;
}
