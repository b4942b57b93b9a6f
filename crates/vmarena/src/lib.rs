//! vmarena: the Linux vmalloc design for user space.
//!
//! Layers 4 and 5: [`VmSpace`], the vmalloc family over one large reservation, the
//! process-wide [`default_space`], [`FixedPool`] (preallocated fixed-size slots with a per-CPU
//! cache), [`PercpuPool`] (per-CPU objects on congruent areas), [`FramePool`] (frames of a memory file, mapped with [`VmSpace::vmap`] and
//! [`VmSpace::vm_map_ram`]), low-memory events ([`pressure`](mod@pressure)), a Rust global allocator for large layouts
//! ([`VmAlloc`]), and the C ABI of `include/vmarena.h`. The algorithms live in
//! `vmarena-core`, the concurrency in `vmarena-engine`, the OS calls in `vmarena-platform`; this
//! crate re-exports what a user needs.
//!
//! ```
//! use vmarena::{VmSpace, SpaceOptions, ArenaOptions};
//! let space = VmSpace::new("example", SpaceOptions { space_bytes: 1 << 30, ..Default::default() },
//!                          ArenaOptions::default()).unwrap();
//! let p = space.vzalloc(10_000).unwrap();
//! assert_eq!(space.size(p.as_ptr()), Some(12_288));
//! space.vfree(p.as_ptr()).unwrap();
//! assert!(space.vfree(p.as_ptr()).is_err(), "a second free is refused");
//! ```
#![warn(missing_docs)]
// `unsafe` only in the modules that say why (`#![allow(unsafe_code)]` there).
#![deny(unsafe_code)]

mod abi_hit;
#[cfg(feature = "allocator-api2")]
mod allocator_trait;
mod backing;
pub mod capi;
mod default_space;
mod deferred_free;
mod error;
mod exhaustion;
pub mod fixed_pool;
pub mod fork;
pub mod frames;
mod global_alloc;
pub mod load;
pub mod options;
pub mod percpu_pool;
pub mod pressure;
pub mod rcu;
pub mod size_class;
pub mod space;
mod vmallocinfo;

pub use default_space::{
    default_space, default_space_options, default_space_space_options, existing_default_space,
    DEFAULT_SPACE_DIFFERENCES, DEFAULT_SPACE_LAZY_MAX_FACTOR, DEFAULT_SPACE_LAZY_SLACK_PAGES,
    DEFAULT_SPACE_LAZY_SLACK_PERCENT, DEFAULT_SPACE_POOL_MAX_PAGES, DEFAULT_SPACE_THREAD_CACHE_MAX_PAGES,
};
pub use fixed_pool::{FixedOptions, FixedPool, FixedPoolStats, PutRelease};
pub use frames::pool::FramePool;
pub use frames::vmap::{VMAP_BLOCK_PAGES, VMAP_MAX_ALLOC_PAGES};
pub use global_alloc::{VmAlloc, DEFAULT_THRESHOLD_BYTES};
pub use options::{ReleaseAdvice, SpaceOptions};
pub use percpu_pool::{PercpuPool, PercpuStats};
pub use pressure::{pressure, MonitorStatus, PressureOptions};
pub use size_class::size_class_bytes;
pub use space::{SpaceStats, VmError, VmSpace};
pub use vmarena_engine::pressure::PressureReport;
pub use vmarena_engine::table::{OptionDoc, StatDoc};
pub use vmarena_engine::{
    ArenaOptions, ArenaStats, Constraints, Fit, FixedStats, FrameOptions, FrameStats, LockStats, Strategy,
    Vmem, VmemError, VmemOptions, VmemStats, UNKNOWN_BYTES,
};
pub use vmarena_platform::Advice;

/// Switch lock hold-time measurement on or off for the whole process (the kernel's lockstat).
pub fn set_lock_timing(on: bool) {
    vmarena_engine::sync::lock_stats::set_timing(on)
}
