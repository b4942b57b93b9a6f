//! The caches in front of an arena's nodes: each thread's magazines (`thread_caches/`), the
//! per-CPU stacks in front of them (`cpu_cache.rs`), the depot behind them that keeps what full
//! magazines spill for the magazines that miss (`depot.rs`) in stacks of fixed blocks
//! (`block_stack.rs`), the state word of every small area that tells a free which of them may
//! take it (`area_state.rs`), the handshake between a magazine's owner and a drainer
//! ([`handshake`]) and the hit paths a front end keeps beside its own fields ([`hit_path`]).
//!
//! Owns nothing itself: the arena's context holds one `ThreadCaches`, which owns the rest.
//! Under `--cfg loom` the thread caches are a stand-in that is never built
//! (`thread_caches_loom.rs`), so the models see the arena without them.

pub(crate) mod area_state;
#[cfg(not(loom))]
mod block_stack;
pub(crate) mod cache_interface;
#[cfg(not(loom))]
mod cpu_cache;
#[cfg(not(loom))]
mod depot;
pub mod handshake;
pub mod hit_path;
#[cfg(not(loom))]
mod magazine;
#[cfg(not(loom))]
pub(crate) mod thread_caches;
#[cfg(loom)]
#[path = "thread_caches_loom.rs"]
pub(crate) mod thread_caches;
