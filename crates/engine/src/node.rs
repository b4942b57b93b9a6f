//! A node of the Nodes strategy: one busy shard and one set of size pools.
//!
//! Owns, under `busy` (the node's busy lock): the live areas whose start lies in a zone of this
//! node, `(start / 16) % N == id`. Owns, under `pool` (the node's pool lock): the freed areas
//! this node allocated: poolable ones (1..=256 pages) in [`SizePools`], others (larger, or
//! allocated in a caller's window) on `lazy_tree` until a purge returns them to the free tree.
//!
//! Lazy pages of the node (pooled dirty pages plus `lazy_tree` pages) are counted exactly under
//! the pool lock and folded into the arena-wide approximate counter in steps of
//! [`LAZY_SYNC_PAGES`], as a kernel `percpu_counter` does: the free path touches no shared
//! counter in the common case.

use crate::lock::StatLock;
use crate::AreaTag;
use vmarena_core::{BusyMap, SizePools};

/// Pages of lazy change a node accumulates before it updates the arena-wide counter.
pub const LAZY_SYNC_PAGES: u64 = 64;

/// Zone size of the busy striping, in pages (the kernel's `vmap_zone_size`).
pub const ZONE_PAGES: u64 = 16;

/// A lazily freed area that is not in a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LazyArea {
    pub start: u64,
    pub pages: u64,
    /// Allocated by this node in the default window, so it may be handed out again before a
    /// purge; otherwise it only waits for the purge.
    pub reusable: bool,
}

#[derive(Default)]
pub(crate) struct NodePool {
    pub pools: SizePools,
    pub lazy_tree: Vec<LazyArea>,
    pub lazy_tree_pages: u64,
    /// Lazy pages already added to the arena-wide counter.
    pub synced: u64,
    pub hits: u64,
    pub misses: u64,
    pub lazy_reuses: u64,
    pub frees: u64,
}

impl NodePool {
    /// Exact lazy pages of this node.
    #[inline]
    pub fn lazy_pages(&self) -> u64 {
        self.pools.dirty_pages() + self.lazy_tree_pages
    }

    /// Fold the change since the last sync into `global` when it is large enough (or `force`).
    /// Returns the new approximate global value when it synced.
    #[inline]
    pub fn sync(&mut self, global: &std::sync::atomic::AtomicI64, force: bool) -> Option<i64> {
        let now = self.lazy_pages();
        let d = now as i64 - self.synced as i64;
        if d.unsigned_abs() >= LAZY_SYNC_PAGES || (force && d != 0) {
            self.synced = now;
            Some(global.fetch_add(d, std::sync::atomic::Ordering::Relaxed) + d)
        } else {
            None
        }
    }
}

/// Keeps a value on cache lines of its own (two 64-byte lines, for the adjacent-line
/// prefetcher), so locks of different nodes never share a line.
#[repr(align(128))]
pub(crate) struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

pub(crate) struct Node {
    pub busy: Padded<StatLock<BusyMap<AreaTag>>>,
    pub pool: Padded<StatLock<NodePool>>,
}

impl Node {
    pub fn new() -> Self {
        Node {
            busy: Padded(StatLock::new(BusyMap::default())),
            pool: Padded(StatLock::new(NodePool::default())),
        }
    }
}
