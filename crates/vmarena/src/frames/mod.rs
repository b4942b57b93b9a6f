//! The frame front end: pages of a memory file handed out by the engine's frame allocator and
//! mapped into spaces.
//!
//! Files: `pool.rs` ([`FramePool`](pool::FramePool): the memory file and its
//! `FrameAllocator`, with the pool's options and statistics), `map.rs` (a space's record of the
//! frames mapped at each of its pages, which `vmalloc_to_frame` reads), `vmap.rs` (`vmap`,
//! `vm_map_ram` and their inverses on a `VmSpace`), `vmap_blocks.rs` (the per-CPU vmap blocks
//! behind `vm_map_ram`), `backing.rs` (the `Backing` of a frames-backed space).
//!
//! Owns nothing itself; each file says what it owns and which locks it takes.

pub(crate) mod backing;
pub(crate) mod map;
pub mod pool;
pub mod vmap;
pub(crate) mod vmap_blocks;
