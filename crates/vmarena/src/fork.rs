//! The process's `fork()` handlers: every vmarena lock held across the fork, registered by
//! every form of the library itself (`libvmarena.so`, `libvmarena.a`, the preload shim, the
//! Rust crate).
//!
//! Registration happens when the library is loaded (the constructor of [`crate::load`]), and again,
//! as a no-op, before any space or pool is built (for a program linked with the Rust crate,
//! where a linker may leave the constructor out). So the handlers exist before the first lock
//! or the first space, and a fork during the first call finds them.
//!
//! Owns: the guard between the `prepare` handler and the `parent`/`child` handlers, in a
//! static slot (not a thread-local: a thread-local with a destructor allocates on first touch,
//! and under the shim that allocation could come back into vmarena while every lock is held).
//! Two threads forking at once are serialised by the first lock the guard takes (the engine's
//! fork registry): the second `prepare` waits there until the first one's `parent` handler has
//! taken the guard out of the slot and dropped it.
//!
//! What `prepare` holds is the engine's [`lock_everything_for_fork`]: every arena (every space,
//! the default one included), every fixed pool's cache and every frame pool, in the engine's
//! lock order. The inside-vmarena flag is raised from `prepare` to `parent`/`child`, so an
//! allocation made meanwhile goes to the inner allocator.
//!
//! Values computed once per process (the default space, the `membarrier` registration, the
//! low-memory monitor) are `ForkOnce` cells: a fork in the middle of their computation leaves
//! the child free to compute its own.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};
use vmarena_engine::sync::fork::{lock_everything_for_fork, ProcessForkGuard};
use vmarena_platform::reentry::{self, Inside};

struct Slot(UnsafeCell<Option<(ProcessForkGuard, Inside)>>);
// SAFETY: only the forking thread touches the slot, from its `prepare` handler to its
// `parent`/`child` handler, and forks are serialised by the guard's first lock (module doc).
unsafe impl Sync for Slot {}

static HELD: Slot = Slot(UnsafeCell::new(None));
static REGISTERED: AtomicBool = AtomicBool::new(false);

extern "C" fn prepare() {
    let inside = reentry::enter();
    if let Ok(g) = std::panic::catch_unwind(lock_everything_for_fork) {
        // SAFETY: see `Slot`; this thread now holds the serialising lock.
        unsafe { *HELD.0.get() = Some((g, inside)) };
    }
}

extern "C" fn release() {
    // SAFETY: see `Slot`; taken out before the locks (the serialising one among them) drop.
    let held = unsafe { (*HELD.0.get()).take() };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(held)));
}

/// The child's handler: release, then let each holder forget the parent's other threads (a
/// grace-period domain unpins their read-side sections).
extern "C" fn child() {
    release();
    let _inside = reentry::enter();
    let _ = std::panic::catch_unwind(vmarena_engine::sync::fork::after_fork_in_child);
}

/// Register the handlers, once per process (later calls return at once).
pub fn register() {
    if REGISTERED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: registers three plain functions; they take no arguments and catch panics.
    unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(child)) };
}
