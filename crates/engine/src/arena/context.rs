//! `Context`: what an arena is and accounts for apart from its strategy, the part every
//! strategy is handed with each operation.
//!
//! Owns, for one arena: what it is (name, range, options, nodes, backing); the lazy accounting
//! ([`LazyAccount`]); the purge control ([`PurgeControl`]); the event counters; the thread
//! caches' state; step Move's record of split mappings ([`Moves`]). Not the strategy's locks
//! and what is under them: [`Shared`](super::shared::Shared) holds those beside this, so a
//! strategy cannot reach the operations above it.
//!
//! Locks: the purge mutex (taken before the strategy's spin locks, never under them) and the
//! thread-cache registry mutex (before both). Everything else here is atomics, read and
//! written without a lock.
//!
//! Invariant: `lazy.approx` is within `nodes × lazy.sync_pages` of the exact lazy pages
//! (Nodes), exact for Global and Split; `lazy.list_pages[i]` is node `i`'s lazy-list pages as
//! of its last change ([`Context::sync_node`]). `Arena::check` verifies both.

use super::backing::Moved;
use super::counters::Counters;
use super::decay::Decay;
use super::mosaics::{move_max_maps, Moves, MOVE_MIN_PAGES};
use crate::area::{Allocation, AreaTag, UNKNOWN_BYTES};
use crate::arena::backing::Backing;
use crate::arena::nodes::node::{NodeState, ZONE_PAGES};
use crate::arena::options::ArenaOptions;
use crate::arena::strategy::Strategy;
use crate::arena::worker::Worker;
use crate::caches::thread_caches::ThreadCaches;
use crate::sync::padded::Padded;
use crate::sync::Ordering::Relaxed;
use crate::sync::{Arc, AtomicBool, AtomicI64, AtomicU64, Mutex};
use vmarena_core::{BusyArea, SizePools};

/// The lazy pages of an arena: how many there are, and when a purge is due.
pub(crate) struct LazyAccount {
    /// Lazy pages above which a purge runs (the resolved `lazy_max_pages`).
    pub(crate) max_pages: u64,
    /// Lazy pages, arena-wide (exact for Global/Split; within nodes × `sync_pages` for Nodes).
    /// On lines of its own: the nodes write it, every free through the busy map reads it.
    pub(crate) approx: Padded<AtomicI64>,
    /// The step in which a node folds its lazy pages into `approx`.
    pub(crate) sync_pages: u64,
    /// Per node (Nodes), the pages on its lazy list as of its last change, each on lines of
    /// its own: step Move reads them without the node locks to pass over nodes with nothing to
    /// give.
    pub(crate) list_pages: Box<[Padded<AtomicU64>]>,
    /// Live pages (busy-map records, thread caches' areas included), arena-wide, folded in by
    /// the nodes in the same steps as `approx` (Nodes; zero for Global and Split). On lines
    /// of its own.
    pub(crate) live_approx: Padded<AtomicI64>,
    /// The most live pages `live_approx` has shown since the last purge that was not a
    /// threshold purge (Nodes, `lazy_headroom`): raised by every fold that raises
    /// `live_approx`, so the peak a program reached while allocating is known when its frees
    /// begin, before any purge counted it.
    pub(crate) live_high: AtomicU64,
    /// The most lazy pages beyond the limit a free has seen (written only then).
    pub(crate) over_peak: AtomicU64,
}

impl LazyAccount {
    /// Start a new high-water mark of live pages at the live pages of the moment.
    pub(crate) fn restart_mark(&self) {
        let live = || self.live_approx.load(Relaxed).max(0) as u64;
        self.live_high.store(live(), Relaxed);
        // A fold between the load and the store raised the mark in vain: raise it again.
        self.live_high.fetch_max(live(), Relaxed);
    }

    /// Lazy pages above which a free starts a purge: `max_pages`, plus, with `headroom`, the
    /// live pages below their high-water mark (both as folded, so within a quarter of
    /// `max_pages` of the exact figure). Memory freed below the peak may stay resident up to
    /// it: a program that frees what it held keeps it until the next idle decay instead of
    /// releasing it while it frees, and live and lazy pages together stay within the peak
    /// plus `max_pages`.
    #[inline]
    pub(crate) fn limit(&self, headroom: bool) -> u64 {
        if !headroom {
            return self.max_pages;
        }
        let live = self.live_approx.load(Relaxed).max(0) as u64;
        self.max_pages + self.live_high.load(Relaxed).saturating_sub(live)
    }
}

/// Who purges and when.
pub(crate) struct PurgeControl {
    /// Serialises purges, step Reclaim and the invariant check.
    pub(crate) lock: Mutex<()>,
    /// A free passed the lazy limit and woke the worker; the next purge clears it.
    pub(crate) requested: AtomicBool,
    /// The worker was started (for the decay interval) once.
    pub(crate) worker_started: AtomicBool,
    pub(crate) worker: Arc<Worker>,
}

/// See the module documentation.
pub(crate) struct Context {
    pub(crate) name: String,
    pub(crate) lo: u64,
    pub(crate) hi: u64,
    /// The end of the usable part `[lo, grown_hi)`: `hi` unless the backing grows in steps
    /// (step Grow). Only rises, under the purge mutex.
    pub(crate) grown_hi: AtomicU64,
    /// The backing's growth step in pages, `None` when the whole range is usable.
    pub(crate) grow_step: Option<u64>,
    pub(crate) opts: ArenaOptions,
    /// Nodes (1 for Global and Split).
    pub(crate) nr_nodes: usize,
    /// `nr_nodes - 1` when it is a power of two (a mask instead of a division).
    pub(crate) node_mask: Option<usize>,
    pub(crate) backing: Box<dyn Backing>,
    /// `backing.zeroes_on_release()`, asked once.
    pub(crate) zeroes_on_release: bool,
    pub(crate) lazy: LazyAccount,
    pub(crate) purging: PurgeControl,
    pub(crate) counters: Counters,
    /// Per-thread magazines (Nodes), or why there are none.
    pub(crate) cache: Option<ThreadCaches>,
    pub(crate) cache_off: Option<String>,
    pub(crate) moves: Moves,
    /// How many ticks a decay purge keeps freed memory, learned from refaults.
    pub(crate) decay: Decay,
}

impl Context {
    /// The context of an arena over pages `[lo, hi)` whose part `[lo, usable_hi)` is usable now
    /// (options checked by the caller).
    pub(crate) fn new(
        name: String,
        lo: u64,
        hi: u64,
        usable_hi: u64,
        opts: ArenaOptions,
        backing: Box<dyn Backing>,
    ) -> Context {
        let nr_nodes = opts.node_count();
        let (cache, cache_off) = if !opts.thread_cache {
            (None, Some("switched off (thread_cache)".to_string()))
        } else if opts.strategy != Strategy::Nodes {
            // Thread caches sit in front of node pools: the older strategies have none.
            (None, Some(format!("the {} strategy has none", opts.strategy)))
        } else {
            let budget = crate::caches::thread_caches::Budget {
                base_pages: opts.thread_cache_pages,
                max_pages: opts.thread_cache_pages_max,
                total_pages: opts
                    .thread_cache_cpu_pages
                    .saturating_mul(vmarena_platform::cpu::count().clamp(1, 1024) as u64),
                slack_percent: opts.lazy_slack_percent,
                depot: opts.thread_cache_depot,
            };
            let cpu_pages = opts.cpu_cache.then_some((opts.cpu_cache_pages, opts.cpu_cache_grown_pages));
            match ThreadCaches::new(lo, hi, opts.thread_cache_max_pages, budget, cpu_pages) {
                Ok(c) if c.commit(usable_hi - lo) => (Some(c), None),
                Ok(_) => (None, Some("the state table could not be committed".to_string())),
                Err(e) => (None, Some(e)),
            }
        };
        let max_pages = opts.lazy_max();
        let moves = opts.moves_pages() && backing.moves_pages();
        Context {
            cache,
            cache_off,
            name,
            lo,
            hi,
            grown_hi: AtomicU64::new(usable_hi),
            grow_step: backing.grow_step_pages(),
            lazy: LazyAccount {
                max_pages,
                approx: Padded(AtomicI64::new(0)),
                sync_pages: crate::arena::nodes::node::lazy_sync_pages(max_pages, nr_nodes),
                list_pages: (0..nr_nodes).map(|_| Padded(AtomicU64::new(0))).collect(),
                live_approx: Padded(AtomicI64::new(0)),
                live_high: AtomicU64::new(0),
                over_peak: AtomicU64::new(0),
            },
            purging: PurgeControl {
                lock: Mutex::new(()),
                requested: AtomicBool::new(false),
                worker_started: AtomicBool::new(false),
                worker: Arc::new(Worker::default()),
            },
            node_mask: nr_nodes.is_power_of_two().then(|| nr_nodes - 1),
            nr_nodes,
            decay: Decay::new(opts.decay_keep_ticks_max),
            opts,
            zeroes_on_release: backing.zeroes_on_release(),
            backing,
            counters: Counters::default(),
            moves: Moves { on: moves, ..Default::default() },
        }
    }

    #[inline]
    pub(crate) fn node_index(&self, x: usize) -> usize {
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

    /// An area of `pages` at `start` carved from the free tree: counted, prepared.
    #[inline]
    pub(crate) fn carved(&self, start: u64, pages: u64) -> Allocation {
        self.counters.tree_allocs.fetch_add(1, Relaxed);
        self.counters.tree_pages.fetch_add(pages, Relaxed);
        self.backing.prepare(start, pages);
        Allocation { start, pages, fresh: self.zeroes_on_release }
    }

    /// True when areas of `pages` go to the size pools (`pool_max_pages`).
    #[inline]
    pub(crate) fn poolable(&self, pages: u64) -> bool {
        pages <= self.opts.pool_max_pages && SizePools::class_of(pages).is_some()
    }

    /// After a change to node `g`'s lazy or live pages: fold each into its arena-wide counter
    /// in steps (at once with `force`), raising the live high-water mark with a fold that
    /// raised the live pages, and publish the node's lazy-list pages.
    #[inline]
    pub(crate) fn sync_node(&self, g: &mut NodeState, force: bool) {
        g.sync(&self.lazy.approx, self.lazy.sync_pages, force);
        if let Some(live) = g.sync_live(&self.lazy.live_approx, self.lazy.sync_pages, force) {
            // A plain load first: the free path reads the mark's line, so write it only when
            // the mark rises.
            if live > self.lazy.live_high.load(Relaxed) {
                self.lazy.live_high.fetch_max(live, Relaxed);
            }
        }
        let pages = g.lazy_list.pages();
        if pages != g.list_published {
            g.list_published = pages;
            self.lazy.list_pages[g.index].store(pages, Relaxed);
        }
    }

    /// Move the memory of up to `pages` data pages at `from` to `to`, both in live areas the
    /// caller owns ([`Arena::move_data`](super::Arena::move_data)): the pages moved, from the
    /// front. The target's range is recorded for healing when the move made it a mapping of
    /// its own.
    pub(crate) fn move_data(&self, from: u64, to: u64, pages: u64) -> u64 {
        if !self.moves.on || pages < MOVE_MIN_PAGES || self.moves.mosaics.maps() >= move_max_maps() {
            return 0;
        }
        let (moved, how) = self.backing.move_prefix(from, to, pages);
        let c = &self.counters;
        c.page_moves.fetch_add(1, Relaxed);
        if moved < pages {
            c.move_failures.fetch_add(1, Relaxed);
        }
        if how == Moved::Remapped {
            self.moves.mosaics.add(to, moved, 2);
        }
        c.moved_pages.fetch_add(moved, Relaxed);
        moved
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
}
