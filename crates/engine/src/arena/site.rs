//! The engine's lock sites: one static per code path that takes an engine lock, so that lock
//! figures can be read per call site (see [`LockSite`]).
//!
//! Paths not listed here (statistics, `vmallocinfo`, the checker) take their locks without a
//! site; they are not on any hot path.

use crate::sync::lock_stats::LockSite;

/// Global: the one lock, in alloc.
pub static ALLOC_GLOBAL: LockSite = LockSite::new("alloc: global");
/// Global: the one lock, in free.
pub static FREE_GLOBAL: LockSite = LockSite::new("free: global");
/// Split and Nodes: the free-space lock, carving an area from the tree (or a new chunk).
pub static ALLOC_FREE_TREE: LockSite = LockSite::new("alloc: free tree");
/// Split: the busy lock, recording a new area.
pub static ALLOC_BUSY: LockSite = LockSite::new("alloc: busy");
/// Split: the busy lock, in free.
pub static FREE_BUSY: LockSite = LockSite::new("free: busy");
/// Nodes: this CPU's node, for its pool, chunk and (when the area is homed here) busy shard.
pub static ALLOC_NODE: LockSite = LockSite::new("alloc: node");
/// Nodes: another node, when the new area's busy home is not the allocating node.
pub static ALLOC_HOME_NODE: LockSite = LockSite::new("alloc: home node");
/// Nodes: another node, whose resident freed areas a miss looks at before fresh pages.
pub static ALLOC_STEAL: LockSite = LockSite::new("alloc: steal");
/// Nodes: the busy shard of the area being freed (and its pool when it is also the home).
pub static FREE_SHARD_NODE: LockSite = LockSite::new("free: shard node");
/// Nodes: the allocating node, when it is not the busy shard.
pub static FREE_HOME_NODE: LockSite = LockSite::new("free: home node");
/// Purge: detaching lazy lists and pools.
pub static PURGE_DETACH: LockSite = LockSite::new("purge: detach");
/// Purge: putting released areas back in their pools.
pub static PURGE_REFILL: LockSite = LockSite::new("purge: refill");
/// Purge: merging areas into the free tree.
pub static PURGE_MERGE: LockSite = LockSite::new("purge: merge");

/// Purge: claiming the free pages that share a huge page with a released area.
pub static PURGE_SPILL: LockSite = LockSite::new("purge: spill");

/// Nodes: a node whose oldest lazy areas give their memory to a new area (step Move).
pub static ALLOC_MOVE: LockSite = LockSite::new("alloc: move");
/// Purge: taking ranges that page moves left in several mappings out of the tree to heal them.
pub static PURGE_HEAL: LockSite = LockSite::new("purge: heal");

/// Purge: taking the 2 MiB blocks a purge left wholly free out of the tree, to renew them.
pub static PURGE_TABLE: LockSite = LockSite::new("purge: table");

/// Step Grow: merging the pages the backing just made usable into the free tree.
pub static ALLOC_GROW: LockSite = LockSite::new("alloc: grow");

/// Nodes: a resize growing an area in place (node 0, the area's shard node, the free tree).
pub static ALLOC_RESIZE: LockSite = LockSite::new("alloc: resize");

/// Every site, for reports.
pub static ALL: [&LockSite; 19] = [
    &ALLOC_GLOBAL,
    &FREE_GLOBAL,
    &ALLOC_FREE_TREE,
    &ALLOC_BUSY,
    &FREE_BUSY,
    &ALLOC_NODE,
    &ALLOC_HOME_NODE,
    &ALLOC_STEAL,
    &FREE_SHARD_NODE,
    &FREE_HOME_NODE,
    &PURGE_DETACH,
    &PURGE_REFILL,
    &PURGE_MERGE,
    &PURGE_SPILL,
    &ALLOC_MOVE,
    &PURGE_HEAL,
    &PURGE_TABLE,
    &ALLOC_GROW,
    &ALLOC_RESIZE,
];

/// `(site, figures)` for every site, process-wide.
pub fn snapshot() -> Vec<(&'static str, crate::sync::lock_stats::LockStats)> {
    ALL.iter().map(|s| (s.name, s.stats())).collect()
}
