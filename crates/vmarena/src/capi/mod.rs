//! The C ABI (`include/vmarena.h`), over the default space.
//!
//! Every function catches panics: no unwind crosses into C. Failures return NULL (or -EINVAL)
//! and set errno: EINVAL for bad input (size 0, alignment not a power of two, a pointer that is
//! not the start of a live area), ENOMEM when the space is exhausted after a full purge or the
//! size overflows, EAGAIN never for these calls.
//!
//! One file per section of the header: `vmalloc.rs`, `fixed.rs`, `frames.rs`, `rcu.rs`,
//! `percpu.rs`, `pressure.rs`, `space.rs`, `stats.rs`, `version.rs`, `vmem.rs`; `ffi.rs` holds the failure rules they share. This
//! file only gathers them, so that `vmarena::capi::vmarena_vmalloc` names every function.

mod ffi;
pub mod fixed;
pub mod frames;
pub mod percpu;
pub mod pressure;
pub mod rcu;
pub mod space;
pub mod stats;
pub mod version;
pub mod vmalloc;
pub mod vmem;

pub use fixed::*;
pub use frames::*;
pub use percpu::*;
pub use pressure::*;
pub use rcu::*;
pub use space::*;
pub use stats::*;
pub use version::*;
pub use vmalloc::*;
pub use vmem::*;
