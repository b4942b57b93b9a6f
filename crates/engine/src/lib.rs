//! vmarena layer 3: the concurrent engine.
//!
//! An [`Arena`] allocates page ranges from any integer range `[lo, hi)` under one of three lock
//! designs ([`Strategy`]): the single global lock of the kernel before 2019, the 2019 split of a
//! free-space lock and a busy lock, and the per-CPU nodes of Linux 6.9 (address-striped busy
//! shards, per-node size pools, the global free-space lock taken only on a pool miss). Lazy
//! freeing, batched purging with pool decay, the shrinker and lock statistics are common to all
//! three.
//!
//! The engine never touches memory: a [`Backing`] says what pages stand for.
//!
//! Folders, one subsystem each: [`arena`] (the arena, its strategies and nodes, the purge and
//! its worker), [`caches`] (thread caches, magazines, per-CPU stacks, state words, hit paths),
//! [`frames`] (the buddy frame allocator with per-CPU page lists and batch queues), [`sync`]
//! (the primitives, the spin lock apart from its ranks and statistics, `fork()` handling);
//! beside them the fixed cache ([`fixed_cache`]), the low-memory event ([`pressure`]), the
//! vocabulary the layers share ([`area`], [`error`]) and the declaration macros of the options
//! and statistics tables ([`table`]).
//!
//! `unsafe` is allowed only in the spin lock ([`sync::lock`]), the caller packed into the thread
//! caches' state words (`caches/area_state.rs`), the hit paths' raw copies of an arena's
//! addresses ([`caches::hit_path`]), the thread caches' reach into the thread's magazine and
//! the lifetime of the process-wide fork guard ([`sync::fork`]).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod area;
pub mod arena;
pub mod caches;
pub mod error;
pub mod fixed_cache;
pub mod frames;
pub mod pressure;
pub mod sync;
pub mod table;
#[cfg(not(loom))]
pub mod vmem;

pub use arena::backing::{Backing, Moved, NoBacking};
pub use arena::mosaics::MOVE_MIN_PAGES;
pub use arena::nodes::node::ZONE_PAGES;
pub use arena::options::ArenaOptions;
pub use arena::stats::ArenaStats;
pub use arena::strategy::Strategy;
pub use arena::worker::{set_idle_hook, set_start_hook};
pub use arena::{
    AllocError, AllocRequest, Allocation, AreaKind, AreaTag, Arena, FreeError, PurgeKind, PurgeReport,
    SmallArea, Step, NO_NODE, UNKNOWN_BYTES,
};
pub use fixed_cache::{FixedCache, FixedError, FixedStats, GetPath};
pub use frames::options::{FrameOptions, FrameStats};
pub use frames::{FrameAllocator, FrameError};
#[cfg(not(loom))]
pub use sync::fork::{ForkLocks, ProcessForkGuard};
pub use sync::lock::StatLock;
pub use sync::lock_stats::LockStats;
#[cfg(not(loom))]
pub use vmem::{Constraints, Fit, Vmem, VmemError, VmemOptions, VmemStats};
