//! `Arena`: a concurrent allocator of page ranges over any integer range `[lo, hi)`.
//!
//! Owns: the free tree, the busy areas, the pools and lazy lists of one range, under the locks
//! of its [`Strategy`]; the purge serialisation; the background purge worker.
//! Does not own: memory. What pages stand for is the [`Backing`]'s business.
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
//! step Move, `mover.rs`), full purge and retry, failure with an error that names the arena
//! and its limits.

use crate::area_state::Claim;
use crate::backing::Backing;
use crate::lock::{next_owner, LockRank, LockStats, StatGuard, StatLock};
use crate::magazine::{FreeFast, ThreadCaches};
use crate::node::{new_node, LazyArea, Node, NodeState, Padded, ZONE_PAGES};
use crate::options::ArenaOptions;
use crate::site;
use crate::stats::ArenaStats;
use crate::strategy::{BusyLazy, GlobalState, Strategy};
use crate::sync::Ordering::Relaxed;
use crate::sync::{Arc, AtomicBool, AtomicI64, AtomicU64, Mutex};
use crate::worker::Worker;
use std::panic::Location;
use vmarena_core::{BusyArea, FreeTree, PoolSide, Request, SizePools};

pub use crate::area::{
    AllocRequest, Allocation, AreaKind, AreaTag, PurgeKind, PurgeReport, SmallArea, Step, UNKNOWN_BYTES,
};
pub use crate::error::{AllocError, FreeError};

/// No allocating node (the kernel's `vn_id` 0).
pub const NO_NODE: u16 = u16::MAX;

/// Lazy runs (the largest) an allocation tries to grow into the free space around them (step
/// Extend).
const EXTEND_TRIES: usize = 3;

/// Within `lazy_slack_pages`, a lazy area may be handed out whole when it is at most this many
/// times the request larger (three times the request in all).
const SMALL_SLACK_FACTOR: u64 = 2;

/// Most possible starts for which a failed allocation tries step Reclaim before a full purge.
const RECLAIM_MAX_STARTS: usize = 16;

/// Full purges an allocation tries, while they make progress, before it fails.
const FULL_PURGE_RETRIES: usize = 4;

/// Lazy pages, as a multiple of `lazy_max_pages`, at which a freeing thread purges itself
/// because the worker has fallen behind (many more runnable threads than CPUs).
const LAZY_BACKPRESSURE: i64 = 2;

/// An area a node handed out from its pool or lazy list (see `Shared::node_take`).
struct Taken {
    start: u64,
    /// The request's pages, or the whole lazy area's within the slack.
    pages: u64,
    /// The memory reads as zero (a clean pool entry).
    fresh: bool,
    /// The area is the front of a larger lazy area and needs its guard prepared.
    split: bool,
}

/// One per arena, so the variants' sizes do not matter; boxing the larger ones would add a
/// pointer chase to every lock acquisition.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Kind {
    Global(Padded<StatLock<GlobalState>>),
    Split { free: Padded<StatLock<FreeTree>>, busy: Padded<StatLock<BusyLazy>> },
    Nodes { free: Padded<StatLock<FreeTree>>, nodes: Box<[Node]> },
}

pub(crate) struct Counters {
    pub(crate) tree_allocs: AtomicU64,
    pub(crate) tree_pages: AtomicU64,
    pub(crate) extend_pages: AtomicU64,
    pub(crate) purges: AtomicU64,
    pub(crate) full_purges: AtomicU64,
    pub(crate) range_reclaims: AtomicU64,
    pub(crate) areas_released: AtomicU64,
    pub(crate) pages_released: AtomicU64,
    pub(crate) release_calls: AtomicU64,
    pub(crate) alloc_failures: AtomicU64,
    pub(crate) bad_frees: AtomicU64,
    pub(crate) page_moves: AtomicU64,
    pub(crate) moved_pages: AtomicU64,
    pub(crate) move_failures: AtomicU64,
    pub(crate) heals: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        let z = || AtomicU64::new(0);
        Counters {
            tree_allocs: z(),
            tree_pages: z(),
            extend_pages: z(),
            purges: z(),
            full_purges: z(),
            range_reclaims: z(),
            areas_released: z(),
            pages_released: z(),
            release_calls: z(),
            alloc_failures: z(),
            bad_frees: z(),
            page_moves: z(),
            moved_pages: z(),
            move_failures: z(),
            heals: z(),
        }
    }
}

pub(crate) struct Shared {
    pub(crate) name: String,
    pub(crate) lo: u64,
    pub(crate) hi: u64,
    pub(crate) opts: ArenaOptions,
    pub(crate) nr_nodes: usize,
    pub(crate) node_mask: Option<usize>,
    pub(crate) lazy_max: u64,
    pub(crate) backing: Box<dyn Backing>,
    /// `backing.zeroes_on_release()`, asked once.
    pub(crate) zeroes_on_release: bool,
    pub(crate) kind: Kind,
    /// Lazy pages, arena-wide (exact for Global/Split; within nodes x `lazy_sync_pages` for
    /// Nodes). On lines of its own: the nodes write it, every free through the busy map reads
    /// it, and the fields above are read on every operation.
    pub(crate) lazy_approx: Padded<AtomicI64>,
    /// The step in which a node folds its lazy pages into `lazy_approx`.
    pub(crate) lazy_sync_pages: u64,
    /// Per node (Nodes), the pages on its lazy list as of its last change, each on lines of
    /// its own: step Move reads them without the node locks to pass over nodes with nothing to
    /// give.
    pub(crate) lazy_lists: Box<[Padded<AtomicU64>]>,
    /// Lazy pages above which a free starts a purge: `lazy_max`, plus, with `lazy_headroom`
    /// (Nodes), the live pages below their high-water mark as the last purge counted them.
    /// Written by tree allocations and purges; on lines of its own for the same reason.
    pub(crate) lazy_limit: Padded<AtomicU64>,
    /// The most live pages a purge has counted since the last purge that was not a threshold
    /// purge (Nodes, `lazy_headroom`).
    pub(crate) live_high: AtomicU64,
    pub(crate) purge_lock: Mutex<()>,
    pub(crate) purge_requested: AtomicBool,
    pub(crate) worker_started: AtomicBool,
    pub(crate) worker: Arc<Worker>,
    pub(crate) counters: Counters,
    /// Per-thread magazines (Nodes), or why there are none.
    pub(crate) cache: Option<ThreadCaches>,
    pub(crate) cache_off: Option<String>,
    /// Areas whose ranges page moves split into several mappings (step Move).
    pub(crate) mosaics: crate::mover::Mosaics,
    /// Step Move is on: `page_moves`, Nodes, and a backing that can move memory.
    pub(crate) moves: bool,
}

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
        let nr_nodes = opts.node_count();
        // This arena's place in the lock order (lock.rs, `LockRank`).
        let owner = next_owner();
        let free = || Padded(StatLock::ranked(LockRank::arena_free(owner), FreeTree::with_range(lo, hi)));
        let kind = match opts.strategy {
            Strategy::Global => Kind::Global(Padded(StatLock::ranked(
                LockRank::arena_global(owner),
                GlobalState { free: FreeTree::with_range(lo, hi), bl: BusyLazy::default() },
            ))),
            Strategy::Split => Kind::Split {
                free: free(),
                busy: Padded(StatLock::ranked(LockRank::arena_busy(owner), BusyLazy::default())),
            },
            Strategy::Nodes => {
                Kind::Nodes { free: free(), nodes: (0..nr_nodes).map(|i| new_node(owner, i)).collect() }
            }
        };
        let (cache, cache_off) = if !opts.thread_cache {
            (None, Some("switched off (thread_cache)".to_string()))
        } else if opts.strategy != Strategy::Nodes {
            (None, Some(format!("the {} strategy has none", opts.strategy)))
        } else {
            match ThreadCaches::new(
                lo,
                hi,
                opts.thread_cache_max_pages,
                crate::magazine::Budget {
                    base_pages: opts.thread_cache_pages,
                    max_pages: opts.thread_cache_pages_max,
                },
            ) {
                Ok(c) => (Some(c), None),
                Err(e) => (None, Some(e)),
            }
        };
        let lazy_max = opts.lazy_max();
        let moves = opts.page_moves && opts.strategy == Strategy::Nodes && backing.moves_pages();
        let shared = Arc::new(Shared {
            cache,
            cache_off,
            name: name.into(),
            lo,
            hi,
            lazy_max,
            node_mask: nr_nodes.is_power_of_two().then(|| nr_nodes - 1),
            nr_nodes,
            opts,
            zeroes_on_release: backing.zeroes_on_release(),
            backing,
            kind,
            lazy_approx: Padded(AtomicI64::new(0)),
            lazy_sync_pages: crate::node::lazy_sync_pages(lazy_max, nr_nodes),
            lazy_lists: (0..nr_nodes).map(|_| Padded(AtomicU64::new(0))).collect(),
            lazy_limit: Padded(AtomicU64::new(lazy_max)),
            live_high: AtomicU64::new(0),
            purge_lock: Mutex::new(()),
            purge_requested: AtomicBool::new(false),
            worker_started: AtomicBool::new(false),
            worker: Arc::new(Worker::default()),
            counters: Counters::default(),
            mosaics: Default::default(),
            moves,
        });
        #[cfg(not(loom))]
        {
            let s: Arc<dyn crate::pressure::Reclaim> = shared.clone();
            crate::pressure::register(Arc::downgrade(&s));
            let f: Arc<dyn crate::fork::ForkLocks> = shared.clone();
            crate::fork::register(crate::fork::Rank::Arena, Arc::downgrade(&f));
        }
        Ok(Arena { shared })
    }

    /// The arena's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The page range `[lo, hi)`.
    pub fn range(&self) -> (u64, u64) {
        (self.shared.lo, self.shared.hi)
    }

    /// The lock design in use.
    pub fn strategy(&self) -> Strategy {
        self.shared.opts.strategy
    }

    /// The options the arena was built with.
    pub fn options(&self) -> &ArenaOptions {
        &self.shared.opts
    }

    /// Nodes (1 for Global and Split).
    pub fn node_count(&self) -> usize {
        self.shared.nr_nodes
    }

    /// Lazy pages above which a purge runs.
    pub fn lazy_max_pages(&self) -> u64 {
        self.shared.lazy_max
    }

    /// For tests of what the fast paths write: the address ranges of the memory each
    /// registered thread-cache magazine owns, one list per magazine.
    #[doc(hidden)]
    pub fn thread_cache_spans(&self) -> Vec<Vec<std::ops::Range<usize>>> {
        self.shared.cache.as_ref().map_or_else(Vec::new, |c| c.spans())
    }

    /// For tests of what the fast paths write: the address of the state word of page `start`.
    #[doc(hidden)]
    pub fn state_word_addr(&self, start: u64) -> Option<usize> {
        self.shared.cache.as_ref()?.states.word_addr(start)
    }

    /// Why this arena has no thread caches (`None`: it has them).
    pub fn thread_cache_off(&self) -> Option<&str> {
        self.shared.cache_off.as_deref()
    }

    /// Allocate an area. See [`Step`] for the order in which sources are tried; before them,
    /// a small request anywhere in the arena (of any power-of-two alignment) is served from the
    /// thread's cache.
    pub fn alloc(&self, req: &AllocRequest) -> Result<Allocation, AllocError> {
        if req.window.is_none() && req.tag.kind == AreaKind::Vmalloc {
            if let Some(start) = self.alloc_cached_aligned(req.pages, req.align_pages, req.tag.caller) {
                return Ok(Allocation { start, pages: req.pages, fresh: false });
            }
        }
        self.alloc_uncached(req)
    }

    /// Allocate an area through the steps of [`Step`] only, without the thread's cache (for a
    /// caller that tried [`Arena::alloc_cached`] already).
    pub fn alloc_uncached(&self, req: &AllocRequest) -> Result<Allocation, AllocError> {
        let sh = &*self.shared;
        let (lo, hi) = req.window.unwrap_or((sh.lo, sh.hi));
        if lo < sh.lo || hi > sh.hi {
            return Err(AllocError::OutOfRange { window: (lo, hi), arena: (sh.lo, sh.hi) });
        }
        let r = Request::new(req.pages, req.align_pages, lo, hi).map_err(AllocError::Invalid)?;
        let default_window = (lo, hi) == (sh.lo, sh.hi);
        // A window with no suitably aligned start at all (align_shift's large alignments): no
        // purge can make room, so the request is refused before any search or purge.
        if r.candidate_in(lo, hi).is_none() {
            sh.counters.alloc_failures.fetch_add(1, Relaxed);
            return Err(AllocError::NoAlignedStart {
                pages: req.pages,
                align_pages: req.align_pages,
                window: (lo, hi),
            });
        }
        if let Some(a) = sh.try_alloc(&r, req, default_window) {
            return Ok(a);
        }
        if req.nonblocking {
            return Err(AllocError::WouldBlock);
        }
        // Step::Reclaim: a request with few possible starts (a large alignment) gets back only
        // what lies over them.
        if let Some(ranges) = r.start_ranges(lo, hi, RECLAIM_MAX_STARTS) {
            if sh.reclaim_ranges(&ranges) > 0 {
                if let Some(a) = sh.try_alloc(&r, req, default_window) {
                    return Ok(a);
                }
            }
        }
        // Step::FullPurge: every lazy area released, every pool back in the tree; then retry.
        // Other threads may take the space a purge gave back before this thread retries, so
        // repeat while purges still find something to give back (a bounded number of times).
        for _ in 0..FULL_PURGE_RETRIES {
            let progress = sh.purge(PurgeKind::Full).areas_to_tree > 0;
            if let Some(a) = sh.try_alloc(&r, req, default_window) {
                return Ok(a);
            }
            if !progress {
                break;
            }
        }
        sh.counters.alloc_failures.fetch_add(1, Relaxed);
        let (free_pages, largest_free) = sh.free_summary();
        let st = sh.stats();
        Err(AllocError::NoSpace {
            live_pages: st.live_pages,
            lazy_pages: st.lazy_pages,
            arena: sh.name.clone(),
            pages: req.pages,
            align_pages: req.align_pages,
            window: (lo, hi),
            free_pages,
            largest_free,
        })
    }

    /// Free the area that starts at `start`. Its memory stays resident until a purge. A small
    /// area goes to the thread's cache; its record then reports an unknown requested size.
    pub fn free(&self, start: u64) -> Result<BusyArea<AreaTag>, FreeError> {
        if let Some(r) = self.free_cached(start) {
            return r;
        }
        self.free_uncached(start)
    }

    /// Allocate `pages` pages (page aligned, anywhere, contents undefined) of the space's own
    /// memory from this thread's cache only: no lock, no syscall, no allocation but the
    /// thread's first (which registers its magazine). `None` on a miss or when the arena has no
    /// thread caches.
    #[inline]
    pub fn alloc_cached(&self, pages: u64, caller: Option<&'static Location<'static>>) -> Option<u64> {
        self.alloc_cached_aligned(pages, 1, caller)
    }

    /// [`Arena::alloc_cached`] for a start that is a multiple of `align_pages` (a power of
    /// two): the newest cached area of that size that happens to be aligned.
    #[inline]
    pub fn alloc_cached_aligned(
        &self,
        pages: u64,
        align_pages: u64,
        caller: Option<&'static Location<'static>>,
    ) -> Option<u64> {
        let c = self.shared.cache.as_ref()?;
        if pages == 0 || !align_pages.is_power_of_two() || !c.states.tracks(pages, AreaKind::Vmalloc) {
            return None;
        }
        c.alloc(&self.shared, pages, align_pages, caller)
    }

    /// A plain thread-cache hit for callers whose fast path must make no call (the C ABI):
    /// an area of `pages` pages from this thread's cache, or `None` with nothing changed and
    /// nothing counted (call [`Arena::alloc_cached`] or [`Arena::alloc`] then).
    #[inline(always)]
    pub fn alloc_hit(&self, pages: u64, caller: Option<&'static Location<'static>>) -> Option<u64> {
        let c = self.shared.cache.as_ref()?;
        if pages.wrapping_sub(1) >= c.states.max_pages() {
            return None;
        }
        c.alloc_hit(pages, caller)
    }

    /// A plain free into this thread's cache for callers whose fast path must make no call:
    /// true when the small live area at `start` is freed; false with nothing changed for
    /// anything else (call [`Arena::free`] then, which frees or refuses it).
    #[inline(always)]
    pub fn free_hit(&self, start: u64) -> bool {
        self.shared.cache.as_ref().is_some_and(|c| c.free_hit(start).is_some())
    }

    /// Free a small area into this thread's cache: `None` when `start` is not a small live
    /// area (nothing changed; call [`Arena::free_uncached`]). Takes no lock unless the cache is
    /// full.
    #[inline]
    pub fn free_cached(&self, start: u64) -> Option<Result<BusyArea<AreaTag>, FreeError>> {
        let sh = &*self.shared;
        let c = sh.cache.as_ref()?;
        match c.free(&self.shared, start) {
            FreeFast::Cached { pages, caller } => Some(Ok(BusyArea {
                pages,
                node: NO_NODE,
                tag: AreaTag { caller, requested_bytes: UNKNOWN_BYTES, kind: AreaKind::Vmalloc },
            })),
            FreeFast::Refused => Some(Err(self.refused_free(start))),
            FreeFast::Flush => Some(self.flush_claimed(start)),
            FreeFast::Untracked => None,
        }
    }

    /// A free the thread cache refused (a second free of a cached or retired area).
    #[cold]
    #[inline(never)]
    fn refused_free(&self, start: u64) -> FreeError {
        self.shared.counters.bad_frees.fetch_add(1, Relaxed);
        FreeError::NotLive { start }
    }

    /// A small area claimed by this thread (its word is cached) that its magazine could not
    /// take: finish the free through the busy map, which may allocate.
    #[cold]
    #[inline(never)]
    fn flush_claimed(&self, start: u64) -> Result<BusyArea<AreaTag>, FreeError> {
        let _inside = vmarena_platform::reentry::enter();
        self.free_uncached(start)
    }

    /// Free through the busy map only (the kernel's path), then start a purge if one is due:
    /// for a caller that tried [`Arena::free_cached`] already, or that must not put the area in
    /// a thread cache.
    #[inline(always)]
    pub fn free_uncached(&self, start: u64) -> Result<BusyArea<AreaTag>, FreeError> {
        self.free_uncached_as(start, None)
    }

    /// [`Arena::free_uncached`] of an area of `kind` only: an area of another kind is refused
    /// ([`FreeError::WrongKind`]) under the same lock that would have removed it, so the check
    /// costs no second lookup.
    #[inline(always)]
    pub fn free_uncached_of(&self, start: u64, kind: AreaKind) -> Result<BusyArea<AreaTag>, FreeError> {
        self.free_uncached_as(start, Some(kind))
    }

    #[inline(always)]
    fn free_uncached_as(&self, start: u64, kind: Option<AreaKind>) -> Result<BusyArea<AreaTag>, FreeError> {
        let sh = &*self.shared;
        let r = sh.free(start, kind);
        match r {
            Err(_) => {
                sh.counters.bad_frees.fetch_add(1, Relaxed);
            }
            Ok(_) => {
                Shared::start_decay_worker(&self.shared);
                let lazy = sh.lazy_approx.load(Relaxed);
                let limit = sh.lazy_limit.load(Relaxed) as i64;
                if lazy > limit && !sh.purge_requested.swap(true, Relaxed) {
                    sh.kick(&self.shared);
                } else if lazy > LAZY_BACKPRESSURE * limit {
                    sh.purge_unless_running();
                }
            }
        }
        r
    }

    /// The record of the live area that starts at `start`. For an area that went through a
    /// thread cache, the caller is the latest one and the requested size is [`UNKNOWN_BYTES`].
    pub fn lookup(&self, start: u64) -> Option<BusyArea<AreaTag>> {
        let sh = &*self.shared;
        let mut a = sh.with_busy(start, |b| b.get(start).copied())?;
        if !sh.patch_cached(start, &mut a) {
            return None;
        }
        Some(a)
    }

    /// Pages (guard pages included) of the live area that starts at `start`, or `None`. A small
    /// area of the space's own memory answers from its state word, without a lock; any other
    /// start is looked up in the busy map.
    #[inline]
    pub fn live_pages(&self, start: u64) -> Option<u64> {
        if let Some(w) = self.shared.cache.as_ref().and_then(|c| c.states.get(start)) {
            return (!w.cached).then_some(w.pages);
        }
        self.lookup(start).map(|a| a.pages)
    }

    /// A small area of the space's own memory, read from its state word without a lock:
    /// `None` when no word tracks `start` (ask [`Arena::lookup`]).
    #[inline]
    pub fn small_area(&self, start: u64) -> Option<SmallArea> {
        let w = self.shared.cache.as_ref()?.states.get(start)?;
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
        if let Some(c) = &sh.cache {
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
        self.shared.cache.as_ref().is_some_and(|c| c.states.mark_stale(start))
    }

    /// Change the tag of a live area; false if `start` is not live.
    pub fn update_tag(&self, start: u64, f: impl FnOnce(&mut AreaTag)) -> bool {
        let sh = &*self.shared;
        if let Some(c) = &sh.cache {
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

    /// The shrinker: release every lazy area and return every pooled area to the free tree.
    pub fn shrink(&self) -> PurgeReport {
        self.shared.purge(PurgeKind::Full)
    }

    /// Figures as of now (takes each lock briefly).
    pub fn stats(&self) -> ArenaStats {
        self.shared.stats()
    }

    /// Pooled areas per size class (index `i` for `i + 1` pages), summed over nodes.
    pub fn pool_lens(&self) -> Vec<u64> {
        let mut out = vec![0u64; vmarena_core::POOL_MAX_PAGES as usize];
        if let Kind::Nodes { nodes, .. } = &self.shared.kind {
            for n in nodes.iter() {
                for (o, l) in out.iter_mut().zip(n.lock().pools.class_lens()) {
                    *o += l;
                }
            }
        }
        out
    }

    /// Lock figures by lock class: `global`, or `free` and `busy`, or `free`, `busy` and `pool`
    /// (the last two summed over nodes).
    pub fn lock_stats(&self) -> Vec<(&'static str, LockStats)> {
        match &self.shared.kind {
            Kind::Global(g) => vec![("global", g.stats())],
            Kind::Split { free, busy } => vec![("free", free.stats()), ("busy", busy.stats())],
            Kind::Nodes { free, nodes } => {
                let mut node = LockStats::default();
                for n in nodes.iter() {
                    node.merge(&n.stats());
                }
                vec![("free", free.stats()), ("node", node)]
            }
        }
    }

    /// Live areas by busy shard (each in address order) and lazy areas, as `vmallocinfo`
    /// lists them: `(busy per node, lazy)`. Lazy entries are `(start, pages)`.
    #[allow(clippy::type_complexity)]
    pub fn areas(&self) -> (Vec<Vec<(u64, BusyArea<AreaTag>)>>, Vec<(u64, u64)>) {
        match &self.shared.kind {
            Kind::Global(g) => {
                let g = g.lock();
                (vec![g.bl.busy.sorted()], g.bl.lazy.clone())
            }
            Kind::Split { busy, .. } => {
                let b = busy.lock();
                (vec![b.busy.sorted()], b.lazy.clone())
            }
            Kind::Nodes { nodes, .. } => {
                let sh = &*self.shared;
                let mut lazy = Vec::new();
                let busy = nodes
                    .iter()
                    .map(|n| {
                        let mut v = n.lock().busy.sorted();
                        v.retain_mut(|(s, a)| {
                            let live = sh.patch_cached(*s, a);
                            if !live {
                                lazy.push((*s, a.pages));
                            }
                            live
                        });
                        v
                    })
                    .collect();
                for n in nodes.iter() {
                    let p = n.lock();
                    lazy.extend(
                        p.pools.entries().into_iter().filter(|e| e.2 == PoolSide::Dirty).map(|e| (e.0, e.1)),
                    );
                    lazy.extend(p.lazy_tree.iter().map(|l| (l.start, l.pages)));
                }
                (busy, lazy)
            }
        }
    }

    /// Check every invariant. Call it when no other thread is using the arena: an area in
    /// flight between two locks would otherwise look lost.
    pub fn check(&self) -> Result<(), String> {
        self.shared.check()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        self.shared.worker.shutdown();
    }
}

/// A low-memory event shrinks the arena: every lazy area released, every pool drained.
/// `fork()` takes every lock of the arena, in the order of fork.rs's module documentation.
#[cfg(not(loom))]
impl crate::fork::ForkLocks for Shared {
    fn lock_for_fork(&self) -> Vec<Box<dyn crate::fork::Held + '_>> {
        let mut held: Vec<Box<dyn crate::fork::Held + '_>> = Vec::with_capacity(8 + self.nr_nodes);
        if let Some(c) = &self.cache {
            held.extend(c.lock_for_fork());
        }
        held.push(Box::new(self.purge_lock.lock().unwrap_or_else(|e| e.into_inner())));
        // In the lock order (lock.rs, `LockRank`).
        match &self.kind {
            Kind::Global(g) => held.push(Box::new(g.lock())),
            Kind::Split { free, busy } => {
                held.push(Box::new(free.lock()));
                held.push(Box::new(busy.lock()));
            }
            Kind::Nodes { free, nodes } => {
                for n in nodes.iter() {
                    held.push(Box::new(n.lock()));
                }
                held.push(Box::new(free.lock()));
            }
        }
        held.push(self.worker.lock_for_fork());
        held.push(self.mosaics.lock_for_fork());
        held
    }
}

impl crate::pressure::Reclaim for Shared {
    fn reclaim_name(&self) -> String {
        format!("space {}", self.name)
    }

    fn reclaim(&self) -> u64 {
        self.purge(PurgeKind::Full).pages_released
    }
}

impl Shared {
    #[inline]
    fn node_index(&self, x: usize) -> usize {
        match self.node_mask {
            Some(m) => x & m,
            None => x % self.nr_nodes,
        }
    }

    /// Busy shard of an area: `(start / zone) % nodes`.
    #[inline]
    pub(crate) fn shard_of(&self, start: u64) -> usize {
        self.node_index((start / ZONE_PAGES) as usize)
    }

    fn with_busy<R>(&self, start: u64, f: impl FnOnce(&mut vmarena_core::BusyMap<AreaTag>) -> R) -> R {
        match &self.kind {
            Kind::Global(g) => f(&mut g.lock().bl.busy),
            Kind::Split { busy, .. } => f(&mut busy.lock().busy),
            Kind::Nodes { nodes, .. } => f(&mut nodes[self.shard_of(start)].lock().busy),
        }
    }

    /// One pass over the ladder's steps up to the exact tree search.
    fn try_alloc(&self, r: &Request, req: &AllocRequest, default_window: bool) -> Option<Allocation> {
        let fresh_from_tree = self.zeroes_on_release;
        let pages = r.size_pages;
        let from_tree = |start: u64| {
            self.counters.tree_allocs.fetch_add(1, Relaxed);
            self.counters.tree_pages.fetch_add(pages, Relaxed);
            self.backing.prepare(start, pages);
            Some(Allocation { start, pages, fresh: fresh_from_tree })
        };
        match &self.kind {
            Kind::Global(g) => {
                let mut g = g.lock_at(&site::ALLOC_GLOBAL);
                let start = tree_alloc(&mut g.free, r)?;
                let ok = g.bl.busy.insert(start, BusyArea { pages, node: NO_NODE, tag: req.tag });
                debug_assert!(ok, "tree handed out a live start");
                drop(g);
                from_tree(start)
            }
            Kind::Split { free, busy } => {
                let start = tree_alloc(&mut free.lock_at(&site::ALLOC_FREE_TREE), r)?;
                let ok = busy
                    .lock_at(&site::ALLOC_BUSY)
                    .busy
                    .insert(start, BusyArea { pages, node: NO_NODE, tag: req.tag });
                debug_assert!(ok, "tree handed out a live start");
                from_tree(start)
            }
            Kind::Nodes { free, nodes } => {
                if !default_window {
                    // Like the kernel's non-default ranges: no pools, no allocating node.
                    let start = tree_alloc(&mut free.lock_at(&site::ALLOC_FREE_TREE), r)?;
                    self.insert_busy(nodes, start, BusyArea { pages, node: NO_NODE, tag: req.tag });
                    return from_tree(start);
                }
                // Areas above the pools share node 0's lazy list (`shared_lazy`).
                let shared = self.opts.shared_lazy && !self.poolable(pages);
                let me = if shared { 0 } else { self.node_index(crate::sync::current_cpu()) };
                let area = BusyArea { pages, node: me as u16, tag: req.tag };
                let mut g = nodes[me].lock_at(&site::ALLOC_NODE);
                // Steps Pool and LazyReuse.
                if let Some(t) = self.node_take(&mut g, r, req.prefer_fresh, fresh_from_tree, false) {
                    let area = BusyArea { pages: t.pages, ..area };
                    self.finish_take(nodes, g, me, t.start, area, t.split);
                    return Some(Allocation { start: t.start, pages: t.pages, fresh: t.fresh });
                }
                // Step Chunk: small areas are carved from a zone of this node's stripe.
                let small = pages <= ZONE_PAGES && r.align_pages == 1;
                // Step Steal: a request above the pools' sizes that this node's lazy list cannot
                // serve looks at the other nodes' resident freed areas before taking fresh
                // pages. The area becomes this node's (it comes back here when freed). A
                // pool-sized miss takes fresh pages of this node's stripe instead: a stolen
                // area keeps its busy record on the other node, whose lock every later reuse
                // and free of it would take while that node's own threads use it.
                let mut g = g;
                if !small && !shared && self.opts.node_steal && self.nr_nodes > 1 && !self.poolable(pages) {
                    drop(g);
                    if let Some(a) = self.node_steal(nodes, r, me, area) {
                        return Some(a);
                    }
                    g = nodes[me].lock_at(&site::ALLOC_NODE);
                }
                if small {
                    if let Some(start) = g.carve(pages) {
                        let ok = g.busy.insert(start, area);
                        debug_assert!(ok, "chunk handed out a live start");
                        self.track(start, &area);
                        g.chunk_allocs += 1;
                        drop(g);
                        self.backing.prepare(start, pages);
                        return Some(Allocation { start, pages, fresh: fresh_from_tree });
                    }
                }
                // Step Extend: a run of this node's lazy areas grown into the free space on
                // either side of it, so only the growth takes fresh pages.
                if r.align_pages == 1 && !self.poolable(pages) && self.opts.lazy_split {
                    let runs = Self::node_lazy_runs(&g, pages, EXTEND_TRIES);
                    if !runs.is_empty() {
                        drop(g);
                        if let Some(a) = self.node_extend(nodes, free, me, &runs, area) {
                            return Some(a);
                        }
                        g = nodes[me].lock_at(&site::ALLOC_NODE);
                    }
                }
                let rest = if small { std::mem::take(&mut g.chunk) } else { (0, 0) };
                drop(g);
                // Steps Tree and TreeExact: a zone start of this node's stripe for poolable
                // sizes (so this node is the area's busy home), else the lowest fit.
                let (start, new_chunk) = {
                    let mut f = free.lock_at(&site::ALLOC_FREE_TREE);
                    if rest.0 < rest.1 {
                        f.insert_merge(rest.0, rest.1).expect("chunk remainder overlaps free space");
                    }
                    self.node_tree_alloc(&mut f, r, me, small)?
                };
                if self.shard_of(start) == me {
                    let mut g = nodes[me].lock_at(&site::ALLOC_NODE);
                    let ok = g.busy.insert(start, area);
                    debug_assert!(ok, "tree handed out a live start");
                    self.track(start, &area);
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
                        free.lock_at(&site::ALLOC_FREE_TREE)
                            .insert_merge(s, e)
                            .expect("chunk remainder overlaps free space");
                    }
                } else {
                    debug_assert!(new_chunk.is_none());
                    self.insert_busy(nodes, start, area);
                }
                self.backing.prepare(start, pages);
                let mut moved = 0;
                if new_chunk.is_none() {
                    self.counters.tree_allocs.fetch_add(1, Relaxed);
                    self.counters.tree_pages.fetch_add(pages, Relaxed);
                    // Step Move: the oldest lazy memory instead of fresh pages.
                    if self.moves {
                        let data = pages.saturating_sub(self.backing.guard_pages());
                        moved = self.move_into(nodes, me, start, data);
                    }
                    self.took_fresh(pages - moved);
                }
                Some(Allocation { start, pages, fresh: fresh_from_tree && moved == 0 })
            }
        }
    }

    /// True when areas of `pages` go to the size pools (`pool_max_pages`).
    #[inline]
    fn poolable(&self, pages: u64) -> bool {
        pages <= self.opts.pool_max_pages && SizePools::class_of(pages).is_some()
    }

    /// After a change to node `g`'s lazy pages: fold it into `lazy_approx` in steps (at once
    /// with `force`) and publish its lazy-list pages.
    #[inline]
    pub(crate) fn sync_node(&self, g: &mut NodeState, force: bool) {
        g.sync(&self.lazy_approx, self.lazy_sync_pages, force);
        let pages = g.lazy_tree.pages();
        if pages != g.list_published {
            g.list_published = pages;
            self.lazy_lists[g.index].store(pages, Relaxed);
        }
    }

    /// Fresh pages went live: the headroom above `lazy_max` shrinks by as many, so that live
    /// and lazy pages together stay near the high-water mark plus `lazy_max` until the next
    /// purge counts the live pages again.
    #[inline]
    fn took_fresh(&self, pages: u64) {
        if self.opts.lazy_headroom {
            let floor = self.lazy_max;
            let _ = self
                .lazy_limit
                .fetch_update(Relaxed, Relaxed, |l| (l > floor).then(|| l.saturating_sub(pages).max(floor)));
        }
    }

    /// Step Steal: the other nodes in turn (one node lock at a time, none held on entry), each
    /// asked for a resident area (a dirty pool entry, or a lazy area alone, split or joined).
    fn node_steal(
        &self,
        nodes: &[Node],
        r: &Request,
        me: usize,
        area: BusyArea<AreaTag>,
    ) -> Option<Allocation> {
        for k in 1..self.nr_nodes {
            let other = (me + k) % self.nr_nodes;
            let mut o = nodes[other].lock_at(&site::ALLOC_STEAL);
            let Some(t) = self.node_take(&mut o, r, false, false, true) else {
                continue;
            };
            o.steals += 1;
            let area = BusyArea { pages: t.pages, ..area };
            self.finish_take(nodes, o, other, t.start, area, t.split);
            return Some(Allocation { start: t.start, pages: t.pages, fresh: t.fresh });
        }
        None
    }

    /// Record an area that node `locked` (held in `g`) handed out from resident memory: into
    /// its busy shard (under `g` when `locked` is the shard), then, with no lock held, retire
    /// the guards a join or an extension left inside the area's data and prepare the guard of
    /// a split front or of an area that grew up.
    #[inline]
    fn finish_take(
        &self,
        nodes: &[Node],
        mut g: StatGuard<'_, NodeState>,
        locked: usize,
        start: u64,
        area: BusyArea<AreaTag>,
        split: bool,
    ) {
        let joined = std::mem::take(&mut g.joined_guards);
        if self.shard_of(start) == locked {
            let ok = g.busy.insert(start, area);
            debug_assert!(ok, "a node handed out a live start");
            self.track(start, &area);
            drop(g);
        } else {
            drop(g);
            self.insert_busy(nodes, start, area);
        }
        if !joined.is_empty() {
            self.backing.retire(&joined);
        }
        if split {
            self.backing.prepare(start, area.pages);
        }
    }

    /// The tree steps for node `me`: a fresh chunk for small areas (returns the chunk's
    /// remainder after the area), a zone start of the stripe for other poolable sizes, the
    /// lowest fit otherwise or when the stripe has no room.
    fn node_tree_alloc(
        &self,
        f: &mut FreeTree,
        r: &Request,
        me: usize,
        small: bool,
    ) -> Option<(u64, Option<(u64, u64)>)> {
        let stripe = ZONE_PAGES * self.nr_nodes as u64;
        let phase = me as u64 * ZONE_PAGES;
        let phased = |size: u64| Request::striped(size, stripe, phase, r.lo, r.hi).ok();
        if small {
            if let Some(q) = phased(ZONE_PAGES) {
                if let Some((s, _)) = f.alloc(&q) {
                    return Some((s, Some((s + r.size_pages, s + ZONE_PAGES))));
                }
            }
        } else if self.poolable(r.size_pages) && r.align_pages <= ZONE_PAGES {
            if let Some(q) = phased(r.size_pages) {
                if let Some((s, _)) = f.alloc(&q) {
                    return Some((s, None));
                }
            }
        }
        tree_alloc(f, r).map(|s| (s, None))
    }

    #[inline]
    pub(crate) fn insert_busy(&self, nodes: &[Node], start: u64, area: BusyArea<AreaTag>) {
        let mut g = nodes[self.shard_of(start)].lock_at(&site::ALLOC_HOME_NODE);
        let ok = g.busy.insert(start, area);
        debug_assert!(ok, "allocator handed out a live start");
        self.track(start, &area);
    }

    /// A Nodes area entered the busy map: its state word goes live (under the shard lock).
    #[inline]
    fn track(&self, start: u64, area: &BusyArea<AreaTag>) {
        if let Some(c) = &self.cache {
            c.states.track(start, area.pages, &area.tag);
        }
    }

    /// Fix up a busy record from the state words: false when the area sits in a thread cache
    /// (free for its user); otherwise the latest caller, and an unknown requested size when
    /// the area went through a cache.
    pub(crate) fn patch_cached(&self, start: u64, a: &mut BusyArea<AreaTag>) -> bool {
        let Some(c) = &self.cache else { return true };
        match c.states.get(start) {
            Some(w) if w.cached => false,
            Some(w) => {
                if w.reused {
                    a.tag.caller = w.caller;
                    a.tag.requested_bytes = UNKNOWN_BYTES;
                }
                true
            }
            None => true,
        }
    }

    /// Give cached areas back to the nodes (see [`ThreadCaches::drain_all`]).
    pub(crate) fn drain_caches(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.drain_all(self))
    }

    /// Steps Pool and LazyReuse on the locked node.
    #[inline]
    fn node_take(
        &self,
        g: &mut NodeState,
        r: &Request,
        prefer_fresh: bool,
        zeroes: bool,
        resident_only: bool,
    ) -> Option<Taken> {
        let pages = r.size_pages;
        if self.poolable(pages) {
            let got = if resident_only {
                g.pools.pop_dirty(pages, r.align_pages).map(|s| (s, PoolSide::Dirty))
            } else {
                let prefer = if prefer_fresh { PoolSide::Clean } else { PoolSide::Dirty };
                g.pools.pop(pages, r.align_pages, prefer)
            };
            return match got {
                Some((start, side)) => {
                    g.hits += 1;
                    if side == PoolSide::Dirty {
                        self.sync_node(g, false);
                    } else {
                        g.clean_hit_pages += pages;
                    }
                    Some(Taken { start, pages, fresh: side == PoolSide::Clean && zeroes, split: false })
                }
                None => {
                    // Another node's probe is not a miss of this node's pool.
                    if !resident_only {
                        g.misses += 1;
                    }
                    None
                }
            };
        }
        // A large area freed by this node and not purged yet: the smallest that fits. Its
        // pages are resident, so reuse saves the faults of fresh memory. An area within the
        // slack of the request is handed out whole; a larger one is split: the front is
        // handed out (the caller installs its new guard), the rest stays lazy and reusable
        // with the old guard at its end.
        let Some((fit, whole)) = g
            .lazy_tree
            .best_fit_slot(pages, r.align_pages)
            .map(|f| (f, self.within_slack(pages, f.area.pages)))
            .filter(|&(_, whole)| whole || self.opts.lazy_split)
        else {
            return self.node_join(g, r);
        };
        let l = fit.area;
        let take = if whole { l.pages } else { pages };
        // The list keeps the order of the frees (a purge keeps the newest): the rest of a
        // split area takes the area's place.
        g.lazy_tree.take_fit(fit, take);
        g.lazy_reuses += 1;
        g.slack_pages += take - pages;
        let split = l.pages > take;
        if split {
            g.lazy_splits += 1;
        }
        self.sync_node(g, false);
        Some(Taken { start: l.start, pages: take, fresh: false, split })
    }

    /// True when a lazy area of `area_pages` may serve a request of `pages` whole: it is that
    /// size, or at most `lazy_slack_percent` larger, or at most `lazy_slack_pages` and at most
    /// `SMALL_SLACK_FACTOR` times the request larger. Splitting it would install a guard page
    /// inside resident memory, which costs a TLB shootdown while other threads run (DESIGN.md,
    /// sections 2 and 14).
    #[inline]
    fn within_slack(&self, pages: u64, area_pages: u64) -> bool {
        if area_pages < pages {
            return false;
        }
        let extra = area_pages - pages;
        extra.saturating_mul(100) <= pages.saturating_mul(self.opts.lazy_slack_percent)
            || (extra <= self.opts.lazy_slack_pages && extra <= pages.saturating_mul(SMALL_SLACK_FACTOR))
    }

    /// No single lazy area fits: take a run of address-adjacent reusable lazy areas that does,
    /// the one with the smallest total. The areas before the last one are consumed whole; their
    /// guards (now inside the new area) are left in `g.joined_guards` for the caller to remove
    /// after it drops the lock; the rest of the last area stays lazy with its own guard.
    fn node_join(&self, g: &mut NodeState, r: &Request) -> Option<Taken> {
        let pages = r.size_pages;
        if !self.opts.lazy_split || g.lazy_tree.len() < 2 {
            return None;
        }
        // From each aligned area, the areas that follow it without a gap until they cover the
        // request: the run with the fewest pages, the lowest start among equals.
        let lazy = &g.lazy_tree;
        let mut best: Option<(u64, u64)> = None;
        for first in lazy.reusable().filter(|a| a.start & (r.align_pages - 1) == 0) {
            let (mut total, mut members) = (first.pages, 1);
            while total < pages {
                let Some(next) = lazy.reusable_at(first.start + total) else { break };
                total += next.pages;
                members += 1;
            }
            if total >= pages && members >= 2 && best.is_none_or(|(s, t)| (total, first.start) < (t, s)) {
                best = Some((first.start, total));
            }
        }
        let (start, total) = best?;
        let taken = lazy.run_from(start, start + total);
        let last = taken[taken.len() - 1];
        // The rest of the last area keeps that area's place in the list; the others leave it.
        for l in &taken[..taken.len() - 1] {
            g.lazy_tree.take_front(l.start, l.pages);
        }
        // Within the slack, the last area goes whole too.
        let take = if self.within_slack(pages, total) { total } else { pages };
        g.lazy_tree.take_front(last.start, start + take - last.start);
        g.joined_guards = taken[..taken.len() - 1].iter().map(|l| (l.start, l.pages)).collect();
        debug_assert!(last.start + last.pages == start + total);
        g.lazy_reuses += 1;
        g.lazy_joins += 1;
        g.slack_pages += take - pages;
        self.sync_node(g, false);
        Some(Taken { start, pages: take, fresh: false, split: total > take })
    }

    /// Runs of address-adjacent reusable lazy areas of a node, each smaller than `pages`, as
    /// `[start, end)`: the `max` runs with the most pages, most first.
    fn node_lazy_runs(g: &NodeState, pages: u64, max: usize) -> Vec<(u64, u64)> {
        let lazy = &g.lazy_tree;
        // Each run from its first area (none ends where it starts) to its end.
        let mut runs: Vec<(u64, u64)> = lazy
            .reusable()
            .filter(|a| !lazy.reusable_ends_at(a.start))
            .map(|a| {
                let mut end = a.start + a.pages;
                while let Some(next) = lazy.reusable_at(end) {
                    end += next.pages;
                }
                (a.start, end)
            })
            .filter(|&(s, e)| e - s < pages)
            .collect();
        runs.sort_unstable_by_key(|&(s, e)| (std::cmp::Reverse(e - s), s));
        runs.truncate(max);
        runs
    }

    /// Step Extend with no lock held on entry: the first of `runs` (lazy runs of node `me`,
    /// see [`Shared::node_lazy_runs`]) that the free space touching it can grow to the request
    /// becomes the area, growing upward first. The free space is taken under the free lock;
    /// then, under the node lock, the run must still be on the lazy list whole (a purge or
    /// another thread of the node may have taken part of it meanwhile), else the free space
    /// goes back and the step fails.
    fn node_extend(
        &self,
        nodes: &[Node],
        free: &StatLock<FreeTree>,
        me: usize,
        runs: &[(u64, u64)],
        area: BusyArea<AreaTag>,
    ) -> Option<Allocation> {
        let pages = area.pages;
        let (s, e, below, above) = {
            let mut f = free.lock_at(&site::ALLOC_FREE_TREE);
            runs.iter().find_map(|&(s, e)| {
                let extra = pages - (e - s);
                let (b, a) = f.free_around(s, e);
                if b + a < extra {
                    return None;
                }
                let above = a.min(extra);
                let below = extra - above;
                if below > 0 {
                    f.take(s - below, s).expect("free range touching the run");
                }
                if above > 0 {
                    f.take(e, e + above).expect("free range touching the run");
                }
                Some((s, e, below, above))
            })?
        };
        let mut g = nodes[me].lock_at(&site::ALLOC_NODE);
        let members = g.lazy_tree.run_from(s, e);
        let covered: u64 = members.iter().map(|l| l.pages).sum();
        let whole = covered == e - s && members.iter().all(|l| l.start + l.pages <= e);
        if !whole {
            drop(g);
            let mut f = free.lock_at(&site::ALLOC_FREE_TREE);
            for (rs, re) in [(s - below, s), (e, e + above)] {
                if rs < re {
                    f.insert_merge(rs, re).expect("growth overlaps free space");
                }
            }
            return None;
        }
        // Guards inside the new area: every member's, and the last one's too when it grew up.
        let mut inside: Vec<(u64, u64)> = Vec::with_capacity(members.len());
        for l in members {
            g.lazy_tree.take_front(l.start, l.pages);
            if l.start + l.pages < e || above > 0 {
                inside.push((l.start, l.pages));
            }
        }
        g.lazy_reuses += 1;
        g.lazy_extends += 1;
        self.counters.extend_pages.fetch_add(pages - (e - s), Relaxed);
        self.sync_node(&mut g, false);
        let start = s - below;
        g.joined_guards = inside;
        self.finish_take(nodes, g, me, start, area, above > 0);
        // Step Move for the growth: the oldest lazy memory instead of fresh pages, below the
        // run and above it (less the area's guard, which `finish_take` prepared).
        let mut moved = 0;
        if self.moves {
            moved += self.move_into(nodes, me, start, below);
            moved += self.move_into(nodes, me, e, above.saturating_sub(self.backing.guard_pages()));
        }
        self.took_fresh(pages - (e - s) - moved);
        Some(Allocation { start, pages, fresh: false })
    }

    /// Put a freed area on its home node (locked): its pool, or the lazy list.
    #[inline]
    fn node_push(&self, g: &mut NodeState, start: u64, pages: u64, tagged: bool) {
        if tagged && self.poolable(pages) {
            g.pools.push(start, pages, PoolSide::Dirty);
        } else {
            g.lazy_tree.push(LazyArea { start, pages, reusable: tagged });
        }
        g.frees += 1;
        self.sync_node(g, false);
    }

    #[inline]
    pub(crate) fn free(&self, start: u64, kind: Option<AreaKind>) -> Result<BusyArea<AreaTag>, FreeError> {
        // The record is removed only when its kind is the one asked for (any, for `None`).
        let take = |busy: &mut vmarena_core::BusyMap<AreaTag>| match busy
            .remove_if(start, |a| kind.is_none_or(|k| a.tag.kind == k))
        {
            None => Err(FreeError::NotLive { start }),
            Some(Err(a)) => Err(FreeError::WrongKind { start, kind: a.tag.kind }),
            Some(Ok(a)) => Ok(a),
        };
        match &self.kind {
            Kind::Global(g) => {
                let mut g = g.lock_at(&site::FREE_GLOBAL);
                let a = take(&mut g.bl.busy)?;
                g.bl.lazy.push((start, a.pages));
                g.bl.lazy_pages += a.pages;
                g.bl.frees += 1;
                drop(g);
                self.lazy_approx.fetch_add(a.pages as i64, Relaxed);
                Ok(a)
            }
            Kind::Split { busy, .. } => {
                let mut b = busy.lock_at(&site::FREE_BUSY);
                let a = take(&mut b.busy)?;
                b.lazy.push((start, a.pages));
                b.lazy_pages += a.pages;
                b.frees += 1;
                drop(b);
                self.lazy_approx.fetch_add(a.pages as i64, Relaxed);
                Ok(a)
            }
            Kind::Nodes { nodes, .. } => {
                let shard = self.shard_of(start);
                let mut g = nodes[shard].lock_at(&site::FREE_SHARD_NODE);
                let a = take(&mut g.busy)?;
                if let Some(c) = &self.cache {
                    c.states.clear(start, a.pages);
                }
                // Back to the node that allocated it; untagged areas wait on the shard's node.
                let (home, tagged) = if a.node == NO_NODE { (shard, false) } else { (a.node as usize, true) };
                if home == shard {
                    self.node_push(&mut g, start, a.pages, tagged);
                } else {
                    drop(g);
                    self.node_push(&mut nodes[home].lock_at(&site::FREE_HOME_NODE), start, a.pages, tagged);
                }
                Ok(a)
            }
        }
    }

    /// Start the worker for the decay interval (which needs it even below the threshold), once.
    #[inline]
    pub(crate) fn start_decay_worker(me: &Arc<Shared>) {
        if !me.worker_started.load(Relaxed) && me.opts.purge_thread && me.opts.decay_interval_ms > 0 {
            me.worker_started.store(true, Relaxed);
            me.worker.start(me);
        }
    }

    /// Start the purge: wake the worker, or purge on this thread when there is none.
    pub(crate) fn kick(&self, me: &Arc<Shared>) {
        if self.opts.purge_thread {
            self.worker.wake(me);
        } else {
            self.purge(PurgeKind::Threshold);
        }
    }

    /// Purge on this thread unless a purge is already running.
    #[cold]
    fn purge_unless_running(&self) {
        if let Ok(guard) = self.purge_lock.try_lock() {
            drop(guard);
            self.purge(PurgeKind::Threshold);
        }
    }

    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn decay_interval_ms(&self) -> u64 {
        self.opts.decay_interval_ms
    }

    /// Exact lazy pages (takes each node's pool lock briefly).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn lazy_pages_exact(&self) -> u64 {
        match &self.kind {
            Kind::Global(g) => g.lock().bl.lazy_pages,
            Kind::Split { busy, .. } => busy.lock().lazy_pages,
            Kind::Nodes { nodes, .. } => nodes.iter().map(|n| n.lock().lazy_pages()).sum(),
        }
    }

    pub(crate) fn free_summary(&self) -> (u64, u64) {
        match &self.kind {
            Kind::Global(g) => {
                let g = g.lock();
                (g.free.free_pages(), g.free.largest())
            }
            Kind::Split { free, .. } | Kind::Nodes { free, .. } => {
                let f = free.lock();
                (f.free_pages(), f.largest())
            }
        }
    }

    pub(crate) fn stats(&self) -> ArenaStats {
        let c = &self.counters;
        let cf = self.cache.as_ref().map(|c| c.figures()).unwrap_or_default();
        let mut s = ArenaStats {
            cached_areas: cf.areas,
            cached_pages: cf.pages,
            cache_hits: cf.hits,
            cache_misses: cf.misses,
            cache_flushes: cf.flushes,
            cache_drained: cf.drained,
            cache_grows: cf.grows,
            cache_budget_pages: cf.budget_pages,
            tree_allocs: c.tree_allocs.load(Relaxed),
            tree_pages: c.tree_pages.load(Relaxed),
            extend_pages: c.extend_pages.load(Relaxed),
            purges: c.purges.load(Relaxed),
            full_purges: c.full_purges.load(Relaxed),
            range_reclaims: c.range_reclaims.load(Relaxed),
            areas_released: c.areas_released.load(Relaxed),
            pages_released: c.pages_released.load(Relaxed),
            release_calls: c.release_calls.load(Relaxed),
            alloc_failures: c.alloc_failures.load(Relaxed),
            bad_frees: c.bad_frees.load(Relaxed),
            page_moves: c.page_moves.load(Relaxed),
            moved_pages: c.moved_pages.load(Relaxed),
            move_failures: c.move_failures.load(Relaxed),
            heals: c.heals.load(Relaxed),
            moved_maps: self.mosaics.maps(),
            lazy_limit: self.lazy_limit.load(Relaxed),
            ..Default::default()
        };
        let add_bl = |s: &mut ArenaStats, bl: &BusyLazy| {
            s.live_areas += bl.busy.len() as u64;
            s.live_pages += bl.busy.pages();
            s.lazy_pages += bl.lazy_pages;
            s.frees += bl.frees;
        };
        match &self.kind {
            Kind::Global(g) => {
                let g = g.lock();
                add_bl(&mut s, &g.bl);
                s.free_pages = g.free.free_pages();
                s.free_ranges = g.free.len() as u64;
            }
            Kind::Split { free, busy } => {
                add_bl(&mut s, &busy.lock());
                let f = free.lock();
                s.free_pages = f.free_pages();
                s.free_ranges = f.len() as u64;
            }
            Kind::Nodes { free, nodes } => {
                for n in nodes.iter() {
                    let p = n.lock();
                    s.live_areas += p.busy.len() as u64;
                    s.live_pages += p.busy.pages();
                    s.chunk_pages += p.chunk.1 - p.chunk.0;
                    s.chunk_allocs += p.chunk_allocs;
                    s.lazy_pages += p.lazy_pages();
                    s.pooled_areas += p.pools.len();
                    s.pooled_pages += p.pools.entries().iter().map(|e| e.1).sum::<u64>();
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
                let f = free.lock();
                s.free_pages = f.free_pages();
                s.free_ranges = f.len() as u64;
            }
        }
        // Cached areas are in the busy map but free for their users.
        s.live_areas = s.live_areas.saturating_sub(cf.areas);
        s.live_pages = s.live_pages.saturating_sub(cf.pages);
        s.frees += cf.pushes;
        s
    }
}

/// Steps Tree and TreeExact.
#[inline]
fn tree_alloc(t: &mut FreeTree, r: &Request) -> Option<u64> {
    if let Some((s, _)) = t.alloc(r) {
        return Some(s);
    }
    if r.search_length() != r.size_pages {
        return t.alloc_exact(r).map(|(s, _)| s);
    }
    None
}
