//! The synchronisation primitives the engine uses, from `std` or, under `--cfg loom`, from
//! [loom](https://docs.rs/loom), so that the same code is model-checked (as crossbeam does).
//!
//! Under loom the current CPU is a per-thread value the model sets with `set_cpu`, so that node
//! choice is deterministic across the executions loom explores; the purge worker is not built
//! (models run with `purge_thread = false` and purge inline or from a model thread).

#[cfg(not(loom))]
pub mod fork;
pub mod lock;
pub mod lock_rank;
pub mod lock_stats;
pub(crate) mod padded;

#[cfg(not(loom))]
mod imp {
    pub use std::hint::spin_loop;
    pub use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
    pub use std::sync::{Arc, Condvar, Mutex};
    pub use std::thread::yield_now;

    /// The CPU this thread runs on now.
    #[inline]
    pub fn current_cpu() -> usize {
        vmarena_platform::cpu::current()
    }

    /// Between a `SeqCst` write and a `SeqCst` read of another location (the store-load
    /// pattern of Dekker's algorithm). Nothing to do here: all `SeqCst` operations are in one
    /// total order, so one side always sees the other's write. loom treats `SeqCst` accesses
    /// as acquire/release only, and needs a `SeqCst` fence to see the same guarantee.
    #[inline(always)]
    pub fn store_load_fence() {}
}

#[cfg(loom)]
mod imp {
    pub use loom::hint::spin_loop;
    pub use loom::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
    pub use loom::sync::{Arc, Condvar, Mutex};
    pub use loom::thread::yield_now;
    use std::cell::Cell;

    loom::thread_local! {
        static CPU: Cell<usize> = Cell::new(0);
    }

    /// The CPU the model says this thread runs on.
    pub fn current_cpu() -> usize {
        CPU.with(|c| c.get())
    }

    /// loom models `SeqCst` accesses as acquire/release; a `SeqCst` fence restores the
    /// store-load ordering that `std` gives the same code without one.
    pub fn store_load_fence() {
        loom::sync::atomic::fence(Ordering::SeqCst)
    }

    /// Set the CPU this model thread runs on.
    pub fn set_cpu(cpu: usize) {
        CPU.with(|c| c.set(cpu))
    }
}

pub use imp::*;
