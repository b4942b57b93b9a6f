//! A node of the Nodes strategy: one busy shard, one set of size pools, one chunk, one lock.
//!
//! Owns, under the node lock:
//! - `busy`: the live areas whose start lies in a zone of this node's stripe,
//!   `(start / ZONE_PAGES) % N == id` (the kernel's `addr_to_node`);
//! - `pools`: freed areas this node allocated, 1..=256 pages, memory still resident (dirty) or
//!   released (clean);
//! - `lazy_list`: other freed areas homed here (larger than `pool_max_pages`, or allocated in
//!   a caller's window) until a purge releases them and returns them to the free tree, indexed
//!   by free order, size and address ([`LazyList`]);
//! - `chunk`: one zone of this node's stripe, taken from the free tree, from which the node
//!   carves small areas on pool misses.
//!
//! Why one lock for the shard and the pools: the kernel keeps `busy.lock` and `pool_lock`
//! apart because the busy home of an area (by address) is unrelated to the CPU that allocates
//! it. Here a node places the areas it allocates in its own stripe (the chunk for areas of at
//! most one zone; a zone start of its stripe for larger poolable areas), so the node that pops
//! an area from its pool is also the area's busy home. One acquisition then covers pop and
//! insert, and one covers remove and push; the lines are touched by one CPU in the steady
//! state. `docs/bench-log/design-notes.md`, section 3, records the measurement that
//! led here.
//!
//! Lazy pages of the node are counted exactly under the lock and folded into the arena-wide
//! approximate counter in steps of [`lazy_sync_pages`], as a kernel `percpu_counter` does.

use crate::arena::decay::DECAY_KEEP_TICKS_MAX;
use crate::sync::lock::StatLock;
use crate::sync::lock_rank::LockRank;
use crate::sync::padded::Padded;
use crate::AreaTag;
pub(crate) use vmarena_core::lazy_list::{LazyArea, LazyList};
use vmarena_core::{BusyMap, SizePools};

/// The smallest step of the arena-wide lazy counter, in pages.
pub const LAZY_SYNC_MIN_PAGES: u64 = 64;

/// Pages of lazy change a node accumulates before it updates the arena-wide counter: a
/// quarter of `lazy_max` shared out over the nodes, so the counter lags the exact sum by less
/// than a quarter of the purge threshold (or by `nodes x LAZY_SYNC_MIN_PAGES` when that is
/// larger). A step much smaller than one free's pages would make nearly every free of a
/// pool-sized area write the counter's line, which every node's frees read.
pub fn lazy_sync_pages(lazy_max: u64, nr_nodes: usize) -> u64 {
    (lazy_max / (4 * nr_nodes.max(1) as u64)).max(LAZY_SYNC_MIN_PAGES)
}

/// Zone size of the busy striping, in pages (the kernel's `vmap_zone_size`). Also the size of
/// a node's chunk and the largest area carved from it.
pub const ZONE_PAGES: u64 = 16;

#[derive(Default)]
pub(crate) struct NodeState {
    /// This node's place in the arena's node array.
    pub index: usize,
    pub busy: BusyMap<AreaTag>,
    pub pools: SizePools,
    pub lazy_list: LazyList,
    /// `[start, end)` not yet carved; empty when `start == end`.
    pub chunk: (u64, u64),
    /// Lazy pages already added to the arena-wide counter.
    pub synced: u64,
    /// Live pages (of `busy`) already added to the arena-wide live counter.
    pub live_synced: u64,
    /// Pages made lazy here since the last purge that was not a threshold purge: what a decay
    /// purge keeps (the newest lazy pages, as many).
    pub freed_since_tick: u64,
    /// Pages made lazy here in each of the last decay ticks, the newest first: a decay purge
    /// keeps the sum of the first `Decay::keep_ticks` (the newest lazy pages, as many).
    pub freed_ticks: [u64; DECAY_KEEP_TICKS_MAX],
    /// The lazy list's pages as last published for readers without the lock.
    pub list_published: u64,
    pub hits: u64,
    /// Pages of pool hits on the clean side (memory a purge released; a write faults it in).
    pub clean_hit_pages: u64,
    pub misses: u64,
    pub lazy_reuses: u64,
    pub lazy_splits: u64,
    pub lazy_joins: u64,
    pub lazy_extends: u64,
    /// Pages handed out beyond requests: lazy areas taken whole within the slack.
    pub slack_pages: u64,
    /// Allocations of other nodes served here (see `node_steal`).
    pub steals: u64,
    /// Guards of lazy areas the last `node_join` consumed whole, for the caller to remove.
    pub joined_guards: Vec<vmarena_core::Span>,
    pub chunk_allocs: u64,
    pub frees: u64,
}

impl NodeState {
    /// Exact lazy pages of this node.
    #[inline]
    pub fn lazy_pages(&self) -> u64 {
        self.pools.dirty_pages() + self.lazy_list.pages()
    }

    /// Fold the change since the last sync into `global` when it reaches `step` pages (or
    /// `force`).
    #[inline]
    pub fn sync(&mut self, global: &crate::sync::AtomicI64, step: u64, force: bool) {
        let now = self.lazy_pages();
        let d = now as i64 - self.synced as i64;
        if d.unsigned_abs() >= step || (force && d != 0) {
            self.synced = now;
            global.fetch_add(d, crate::sync::Ordering::Relaxed);
        }
    }

    /// Fold the change of the busy shard's pages since the last fold into `global` when it
    /// reaches `step` pages (or `force`): the new arena-wide figure when the fold raised it.
    #[inline]
    pub fn sync_live(&mut self, global: &crate::sync::AtomicI64, step: u64, force: bool) -> Option<u64> {
        let now = self.busy.pages();
        let d = now as i64 - self.live_synced as i64;
        if d.unsigned_abs() >= step || (force && d != 0) {
            self.live_synced = now;
            let total = global.fetch_add(d, crate::sync::Ordering::Relaxed) + d;
            return (d > 0).then_some(total.max(0) as u64);
        }
        None
    }

    /// Carve `pages` from the front of the chunk.
    #[inline]
    pub fn carve(&mut self, pages: u64) -> Option<u64> {
        let (s, e) = self.chunk;
        (e - s >= pages).then(|| {
            self.chunk.0 = s + pages;
            s
        })
    }
}

pub(crate) type Node = Padded<StatLock<NodeState>>;

pub(crate) fn new_node(owner: u64, index: usize) -> Node {
    Padded(StatLock::ranked(LockRank::arena_node(owner, index), NodeState { index, ..Default::default() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lazy_counter_lags_by_less_than_a_quarter_of_lazy_max() {
        // The kernel's lazy_max_pages on two CPUs, two nodes: 2,048 pages each.
        assert_eq!(lazy_sync_pages(16_384, 2), 2_048);
        assert!(lazy_sync_pages(16_384, 2) * 2 <= 16_384 / 4);
        // A small lazy_max keeps the smallest step.
        assert_eq!(lazy_sync_pages(100, 2), LAZY_SYNC_MIN_PAGES);
        assert_eq!(lazy_sync_pages(1 << 20, 0), 1 << 18);
    }

    #[test]
    fn a_node_folds_its_change_in_steps() {
        let global = crate::sync::AtomicI64::new(0);
        let mut n = NodeState::default();
        n.lazy_list.push(LazyArea { start: 0, pages: 100, reusable: true });
        n.sync(&global, 128, false);
        assert_eq!(global.load(crate::sync::Ordering::Relaxed), 0, "below the step");
        n.lazy_list.push(LazyArea { start: 1000, pages: 100, reusable: true });
        n.sync(&global, 128, false);
        assert_eq!((global.load(crate::sync::Ordering::Relaxed), n.synced), (200, 200));
        n.lazy_list.take_front(1000, 50);
        n.sync(&global, 128, true);
        assert_eq!(global.load(crate::sync::Ordering::Relaxed), 150, "forced");
    }
}
