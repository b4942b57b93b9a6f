//! What a strategy is: [`StrategyOps`], the operations each strategy implements under its own
//! locks, and the few helpers every strategy uses on the structures they all have (a busy map's
//! record removal, the tree steps, the free tree's check, one purge's lists).
//!
//! Owns: [`PurgeBatch`], one purge's lists in flight between the strategy's detach and refill.
//!
//! Below the strategies (`global.rs`, `split.rs`, `nodes/`) and above the arena's
//! [`Context`]: a strategy receives the context with every operation and returns what it did
//! (an allocation, a record, a filled batch); it never calls the operations above it
//! (`alloc.rs`, `free.rs`, `purge.rs`), which reach it through
//! [`with_strategy!`](super::strategy_state::with_strategy).

use super::context::Context;
use crate::area::{AllocRequest, Allocation, AreaKind, AreaTag, Contents, PurgeKind};
use crate::error::FreeError;
use crate::sync::lock_stats::{LockSite, LockStats};
use vmarena_core::{BusyArea, BusyMap, FreeTree, Request, Span};

/// Live areas by busy shard (each in address order, as `(start, record)`) and lazy areas: what
/// [`Arena::areas`](super::Arena::areas) returns.
pub type AreaLists = (Vec<Vec<(u64, BusyArea<AreaTag>)>>, Vec<Span>);

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

/// Remove the record of the live area at `start` from `busy` when its kind is `kind` (any, for
/// `None`); nothing changes otherwise.
#[inline]
pub(crate) fn remove_record(
    busy: &mut BusyMap<AreaTag>,
    start: u64,
    kind: Option<AreaKind>,
) -> Result<BusyArea<AreaTag>, FreeError> {
    match busy.remove_if(start, |a| kind.map_or(true, |k| a.tag.kind == k)) {
        None => Err(FreeError::NotLive { start }),
        Some(Err(a)) => Err(FreeError::WrongKind { start, kind: a.tag.kind }),
        Some(Ok(a)) => Ok(a),
    }
}

/// Steps Tree and TreeExact.
#[inline]
pub(crate) fn tree_alloc(t: &mut FreeTree, r: &Request) -> Option<u64> {
    if let Some((s, _)) = t.alloc(r) {
        return Some(s);
    }
    if r.search_length() != r.size_pages {
        return t.alloc_exact(r).map(|(s, _)| s);
    }
    None
}

/// Check the free tree and add its ranges to `all` (every strategy's check does this under the
/// lock that guards its tree).
pub(crate) fn check_free_tree(f: &FreeTree, all: &mut Vec<(u64, u64, &'static str)>) -> Result<(), String> {
    f.check()?;
    all.extend(f.ranges().iter().map(|&(s, e)| (s, e - s, "free")));
    Ok(())
}

/// The operations of one strategy, each under that strategy's locks. `ctx` is the rest of the
/// arena the state belongs to (options, counters, backing, lazy accounting).
pub(crate) trait StrategyOps {
    /// One pass of the allocation ladder's steps up to the exact tree search (see
    /// [`Step`](crate::area::Step)); `None` when none of them has room.
    fn try_alloc(
        &self,
        ctx: &Context,
        r: &Request,
        req: &AllocRequest,
        default_window: bool,
    ) -> Option<Allocation>;

    /// Remove the record of the live area at `start` (of `kind`, or any kind for `None`) and
    /// make the area lazy: on a lazy list, or in a pool (Nodes).
    fn free(&self, ctx: &Context, start: u64, kind: Option<AreaKind>)
        -> Result<BusyArea<AreaTag>, FreeError>;

    /// [`StrategyOps::free`] of the live area at `start`, of any kind, only when every lock
    /// it needs is free now: `None`, nothing changed, when one is held (or the strategy has
    /// no such path: the default). For a free that has somewhere else to go meanwhile.
    fn try_free(&self, _ctx: &Context, _start: u64) -> Option<Result<BusyArea<AreaTag>, FreeError>> {
        None
    }

    /// [`StrategyOps::free`] for a free made while lazy pages stand past twice their limit
    /// ([`Contents::Resident`]) or of an area a resize's page move emptied
    /// ([`Contents::Emptied`]): where the strategy can, the area's memory is released (when
    /// it holds any) and the area returned to the free tree at once instead of going lazy.
    /// By default, the plain free.
    fn free_released(
        &self,
        ctx: &Context,
        start: u64,
        kind: Option<AreaKind>,
        _contents: Contents,
    ) -> Result<BusyArea<AreaTag>, FreeError> {
        self.free(ctx, start, kind)
    }

    /// [`StrategyOps::free`] of every area in `areas` (any kind; their order may change), in
    /// one batch where the strategy can take each lock once for several. Stops at the first
    /// area that is not live.
    fn free_many(&self, ctx: &Context, areas: &mut [Span]) -> Result<(), FreeError> {
        for a in areas.iter() {
            self.free(ctx, a.start, None)?;
        }
        Ok(())
    }

    /// Grow the live area at `start` to at least `new_pages` pages (guard included) without
    /// moving it, from the free pages right after it: true when it grew (Nodes, areas above
    /// the pools), its record's requested size then `requested_bytes`. By default, never.
    fn grow_in_place(&self, _ctx: &Context, _start: u64, _new_pages: u64, _requested_bytes: u64) -> bool {
        false
    }

    /// Run `f` on the busy map (or shard) that holds `start`, under its lock.
    fn with_busy<R>(&self, ctx: &Context, start: u64, f: impl FnOnce(&mut BusyMap<AreaTag>) -> R) -> R;

    /// Run `f` on the free tree under its lock, taken at `site`.
    fn with_free_tree<R>(&self, site: &'static LockSite, f: impl FnOnce(&mut FreeTree) -> R) -> R;

    /// Enter `parts` (just taken from the free tree) in the busy map as
    /// areas of their own with `tag`.
    fn insert_parts(&self, ctx: &Context, parts: &[Span], tag: AreaTag);

    /// The purge's first step: detach what this purge of `batch.kind` releases, returns to
    /// the tree or refills into pools.
    fn detach(&self, ctx: &Context, batch: &mut PurgeBatch);

    /// The purge's step after the release: refill the pools with the areas it released
    /// (Nodes).
    fn refill(&self, _batch: &mut PurgeBatch) {}

    /// Step Reclaim (Nodes): release and return to the tree only what lies over `ranges`.
    /// Returns the areas and chunks moved to the tree.
    fn reclaim_ranges(&self, _ctx: &Context, _ranges: &[(u64, u64)]) -> u64 {
        0
    }

    /// Heal the mappings that step Move split, where their ranges are free again (Nodes; under
    /// the purge mutex). Returns the syscalls made.
    fn heal_mosaics(&self, _ctx: &Context) -> u64 {
        0
    }

    /// Add the pooled areas per size class (index `i` for `i + 1` pages) to `out` (Nodes).
    fn add_pool_lens(&self, _out: &mut [u64]) {}

    /// Exact lazy pages (takes each lock briefly).
    fn lazy_pages_exact(&self) -> u64;

    /// Free pages of the tree and its largest range.
    fn free_summary(&self) -> (u64, u64);

    /// Add the strategy's figures (live, lazy, free, pools) to `s`.
    fn add_stats(&self, ctx: &Context, s: &mut crate::arena::stats::ArenaStats);

    /// Lock figures by lock class.
    fn lock_stats(&self) -> Vec<(&'static str, LockStats)>;

    /// Live areas by busy shard (each in address order) and lazy areas.
    fn areas(&self, ctx: &Context) -> AreaLists;

    /// Every lock of the strategy, taken in the lock order, for `fork()`.
    #[cfg(not(loom))]
    fn lock_for_fork<'a>(&'a self, held: &mut Vec<Box<dyn crate::sync::fork::Held + 'a>>);

    /// Check the strategy's structures and add every range they hold to `all` as `(start,
    /// pages, what)`. `cached` lists the starts that sit in thread caches (sorted).
    fn check(
        &self,
        ctx: &Context,
        cached: &[u64],
        all: &mut Vec<(u64, u64, &'static str)>,
    ) -> Result<(), String>;
}
