//! vmarena layer 3: the concurrent engine.
//!
//! An [`Arena`] allocates page ranges from any integer range `[lo, hi)` under one of three lock
//! designs ([`Strategy`]): the single global lock of the kernel before 2019, the 2019 split of a
//! free-space lock and a busy lock, and the per-CPU nodes of Linux 6.9 (address-striped busy
//! shards, per-node size pools, the global free-space lock taken only on a pool miss). Lazy
//! freeing, batched purging with pool decay, the shrinker and lock statistics are common to all
//! three.
//!
//! The engine never touches memory: a [`Backing`] says what pages stand for. This crate holds
//! no `unsafe` except the lock primitive in [`lock`], the caller packed into the thread
//! caches' state words (`area_state`) and the lifetime of the process-wide fork guard
//! ([`fork`]).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod area;
mod area_state;
pub mod arena;
pub mod backing;
mod cache_interface;
#[cfg(not(loom))]
mod cpu_cache;
pub mod error;
pub mod fixed_cache;
#[cfg(not(loom))]
pub mod fork;
pub mod frame_allocator;
pub mod frame_options;
pub mod handshake;
pub mod hit_path;
pub mod lock;
#[cfg(not(loom))]
mod magazine;
mod node;
pub mod options;
pub mod pressure;
pub mod site;
pub mod stats;
pub mod strategy;
pub mod sync;
pub mod table;
#[cfg(not(loom))]
mod thread_caches;
#[cfg(loom)]
#[path = "thread_caches_loom.rs"]
mod thread_caches;
mod worker;

pub use arena::{
    AllocError, AllocRequest, Allocation, AreaKind, AreaTag, Arena, FreeError, PurgeKind, PurgeReport,
    SmallArea, Step, NO_NODE, UNKNOWN_BYTES,
};
pub use backing::{Backing, Moved, NoBacking};
pub use fixed_cache::{FixedCache, FixedError, FixedStats, GetPath};
#[cfg(not(loom))]
pub use fork::{ForkLocks, ProcessForkGuard};
pub use frame_allocator::{FrameAllocator, FrameError};
pub use frame_options::{FrameOptions, FrameStats};
pub use lock::{LockStats, StatLock};
pub use node::ZONE_PAGES;
pub use options::ArenaOptions;
pub use stats::ArenaStats;
pub use strategy::Strategy;
pub use worker::{set_idle_hook, set_start_hook};
