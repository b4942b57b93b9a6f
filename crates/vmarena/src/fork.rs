//! The process's `fork()` handlers: every vmarena lock held across the fork, registered by
//! every form of the library itself (`libvmarena.so`, `libvmarena.a`, the preload shim, the
//! Rust crate).
//!
//! Registration happens when the library is loaded (the constructor of [`crate::load`]), and again
//! before any space or pool is built (also for a program linked with the Rust crate, where a
//! linker may leave the constructor out; the reason for two copies is below). So the handlers
//! exist before the first lock or the first space, and a fork during the first call finds them.
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
//!
//! Registered twice. `pthread_atfork` runs `prepare` handlers in the reverse order of their
//! registration and `parent`/`child` handlers in that order, and an allocator after the shim
//! (jemalloc, tcmalloc) registers its own handlers when it starts, which may come after
//! vmarena's load: its `prepare` then takes its locks before vmarena's `prepare`, whose
//! allocations (the guards) go to that allocator and wait for ever, and its `parent` releases
//! them only after vmarena's `parent` has freed the guards into it. So the handlers are
//! registered at load and again when the first space or pool is built, after an allocation
//! through the global allocator has started the allocator behind it. Of the copies, the first
//! `prepare` to run in a fork (the last registered) takes the locks and the last `parent` or
//! `child` to run (the same copy) releases them; the others see the forking thread already
//! holding them and do nothing.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use vmarena_engine::sync::fork::{lock_everything_for_fork, ProcessForkGuard};
use vmarena_platform::reentry::{self, Inside};

struct Slot(UnsafeCell<Option<(ProcessForkGuard, Inside)>>);
// SAFETY: only the forking thread touches the slot, from its `prepare` handler to its
// `parent`/`child` handler, and forks are serialised by the guard's first lock (module doc).
unsafe impl Sync for Slot {}

static HELD: Slot = Slot(UnsafeCell::new(None));
/// The load-time registration is made; the builders' one is made.
static AT_LOAD: AtomicBool = AtomicBool::new(false);
static LATE: AtomicBool = AtomicBool::new(false);
/// The thread (`pthread_self`) whose fork holds the locks, 0 when none; and how many copies'
/// `prepare` ran in that fork, so how many `parent` (or `child`) handlers it has still to run
/// (glibc holds its handler list from the first `prepare` to the last `parent`/`child`, so
/// no registration comes between).
static OWNER: AtomicUsize = AtomicUsize::new(0);
static PENDING: AtomicUsize = AtomicUsize::new(0);

fn me() -> usize {
    // SAFETY: no preconditions; the same value in the child for the thread that forked.
    unsafe { libc::pthread_self() as usize }
}

extern "C" fn prepare() {
    if OWNER.load(Ordering::Acquire) == me() {
        // A later copy's handler in the same fork: the locks are held already.
        PENDING.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let inside = reentry::enter();
    if let Ok(g) = std::panic::catch_unwind(lock_everything_for_fork) {
        // SAFETY: see `Slot`; this thread now holds the serialising lock.
        unsafe { *HELD.0.get() = Some((g, inside)) };
        PENDING.store(1, Ordering::Relaxed);
        OWNER.store(me(), Ordering::Release);
    }
}

/// Release the locks at the last copy's handler of this fork: true when this call did.
fn release_last() -> bool {
    if OWNER.load(Ordering::Acquire) != me() || PENDING.fetch_sub(1, Ordering::Relaxed) > 1 {
        return false;
    }
    OWNER.store(0, Ordering::Release);
    // SAFETY: see `Slot`; taken out before the locks (the serialising one among them) drop.
    let held = unsafe { (*HELD.0.get()).take() };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(held)));
    true
}

extern "C" fn release() {
    release_last();
}

/// The child's handler: release, then let each holder forget the parent's other threads (a
/// grace-period domain unpins their read-side sections).
extern "C" fn child() {
    if release_last() {
        let _inside = reentry::enter();
        let _ = std::panic::catch_unwind(vmarena_engine::sync::fork::after_fork_in_child);
    }
}

fn add_copy() {
    // SAFETY: registers three plain functions; they take no arguments and catch panics.
    unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(child)) };
}

/// Register the handlers when the library is loaded (later calls return at once).
pub(crate) fn register_at_load() {
    if !AT_LOAD.swap(true, Ordering::AcqRel) {
        add_copy();
    }
}

/// Register the handlers again before the first space or pool is built, once per process
/// (later calls return at once): after the allocator behind vmarena's own allocations has
/// started and registered its handlers (module doc).
pub fn register() {
    if LATE.swap(true, Ordering::AcqRel) {
        return;
    }
    // Starts the allocator behind the global one, if nothing had yet.
    drop(std::hint::black_box(Box::new(0u64)));
    add_copy();
}
