//! Fork safety: every lock of every arena, fixed cache and frame allocator of the process held
//! across `fork()`, so the child finds none of them taken by a thread it does not have.
//!
//! `fork()` copies only the calling thread. A lock that another thread held at that moment
//! stays held in the child for ever, and the child's next allocation would spin on it. The
//! remedy is the one glibc applies to its own arenas: before the fork the forking thread takes
//! every lock (the `prepare` handler of `pthread_atfork`), and after it releases them in the
//! parent and in the child (the `parent` and `child` handlers). In between no other thread is
//! inside vmarena, so its structures are consistent in both processes.
//!
//! Owns: the process-wide registry of lock holders ([`ForkLocks`]), as weak references by
//! rank, under one mutex (std's; registration is not on any hot path). The front end registers
//! the handlers (the `vmarena` crate does it when it is loaded).
//!
//! Lock order, which [`lock_everything_for_fork`] follows and every other path respects:
//!
//! 1. the registry mutex, then the low-memory registry;
//! 2. grace-period domains ([`Rank::DeferredFree`]): the reader list and every shard (never
//!    nested with each other or held while freeing);
//! 3. per-CPU object pools ([`Rank::PercpuObjects`]): the pool's mutex, which is held while
//!    it makes a chunk in an arena;
//! 4. integer arenas' span lists ([`Rank::Vmem`]), never nested with each other;
//! 5. arenas ([`Rank::Arena`]) in creation order; within one: the thread caches' registry and
//!    the figures of given-back magazines, the purge mutex, the `StatLock`s in their rank order
//!    (sync/lock_rank.rs, `LockRank`), the worker's state mutex, the list of areas that moves split;
//! 6. spaces' own mutexes ([`Rank::SpaceMaps`]): vmap free lists, index shards and blocks,
//!    then the frame maps;
//! 7. fixed caches ([`Rank::FixedCache`]): the reclaim mutex, then the list mutex;
//! 8. frame allocators ([`Rank::Frames`]): every CPU's page list, every CPU's batch queue,
//!    then the zone.
//!
//! Every other path holds at most one `StatLock` of an arena at a time, takes the purge mutex
//! and the registries before any of them, and takes nothing while holding the worker's mutex.
//! No path holds locks of two arenas at once. A purge may free frames (rank 7) under its purge
//! mutex (rank 4), never the reverse; a fixed cache releases memory with `madvise` only.
//!
//! In the child, [`after_fork_in_child`] lets each holder forget the threads the child does not
//! have (a grace-period domain unpins their read-side sections, which would otherwise hold
//! every grace period back for ever). The purge worker does not exist in the child; the worker notices the new process id and
//! starts a new thread on its next wake-up (see `worker`).
//!
//! `unsafe`: one lifetime widening. The process-wide guard keeps the holders' `Arc`s next to
//! the guards that borrow from them, and drops the guards first.
#![allow(unsafe_code)]

use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Anything held until dropped (a lock guard of any type).
pub trait Held {}
impl<T> Held for T {}

/// Where a lock holder sits in the lock order (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    /// A grace-period domain's locks (the `vmarena` crate's deferred frees), which free into
    /// arenas after releasing them.
    DeferredFree,
    /// A per-CPU object pool's lock (the `vmarena` crate's `PercpuPool`), held while it makes
    /// chunks in an arena.
    PercpuObjects,
    /// An integer arena's list of spans ([`crate::vmem`]), held while it allocates from the
    /// arenas of its spans; never held while it imports from or returns to its parent.
    Vmem,
    /// An arena's locks.
    Arena,
    /// A space's own mutexes (the `vmarena` crate's vmap blocks and frames-backed block maps):
    /// taken under an arena's purge mutex (a purge gives a frames-backed area's frames back),
    /// never holding an arena's lock themselves.
    SpaceMaps,
    /// A fixed cache's locks.
    FixedCache,
    /// A frame allocator's locks.
    Frames,
}

/// Something whose locks a `fork()` must find free: it takes them all, in its own order.
pub trait ForkLocks: Send + Sync {
    /// Take every lock (the caller holds the ones of earlier ranks), returned as guards that
    /// release them when dropped, last-taken first.
    fn lock_for_fork(&self) -> Vec<Box<dyn Held + '_>>;

    /// Called in the child after the locks are released: forget what belonged to threads the
    /// child does not have. Nothing by default.
    fn child_after_fork(&self) {}
}

/// In the child of a `fork()`, after [`lock_everything_for_fork`]'s guard is dropped: every
/// live holder's [`ForkLocks::child_after_fork`].
pub fn after_fork_in_child() {
    let live: Vec<Arc<dyn ForkLocks>> = registry().iter().filter_map(|(_, w)| w.upgrade()).collect();
    for h in live {
        h.child_after_fork();
    }
}

type Entry = (Rank, Weak<dyn ForkLocks>);

static REGISTRY: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn registry() -> MutexGuard<'static, Vec<Entry>> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Have every later `fork()` handler take `holder`'s locks, for as long as it lives.
pub fn register(rank: Rank, holder: Weak<dyn ForkLocks>) {
    let mut g = registry();
    g.retain(|(_, w)| w.strong_count() > 0);
    g.push((rank, holder));
}

/// Every lock vmarena has in this process, held (see [`lock_everything_for_fork`]).
#[must_use = "the locks are released when the guard drops"]
pub struct ProcessForkGuard {
    // Fields drop in declaration order: the guards (last-taken first), then the holders they
    // borrow from, then the registries.
    held: Vec<Box<dyn Held + 'static>>,
    _holders: Vec<Arc<dyn ForkLocks>>,
    _pressure: Box<dyn Held + 'static>,
    _registry: MutexGuard<'static, Vec<Entry>>,
}

/// Take every registered lock in the order of the module documentation: the `prepare` handler
/// of `pthread_atfork`. Drop the guard in both the `parent` and the `child` handler. The thread
/// must hold no vmarena lock.
pub fn lock_everything_for_fork() -> ProcessForkGuard {
    let registry = registry();
    let pressure: Box<dyn Held + 'static> = Box::new(crate::pressure::lock_registry());
    let mut live: Vec<(Rank, Arc<dyn ForkLocks>)> =
        registry.iter().filter_map(|(r, w)| w.upgrade().map(|a| (*r, a))).collect();
    // Stable: creation order within a rank.
    live.sort_by_key(|(r, _)| *r);
    let holders: Vec<Arc<dyn ForkLocks>> = live.into_iter().map(|(_, a)| a).collect();
    let mut held: Vec<Box<dyn Held + 'static>> = Vec::new();
    for h in &holders {
        for g in h.lock_for_fork() {
            // SAFETY: the guard borrows from the holder behind `h`, an `Arc` that the returned
            // guard keeps in `_holders`, which drops after `held` (field order), so the borrow
            // never outlives its referent. The lifetime is only widened, not the type changed.
            held.push(unsafe { std::mem::transmute::<Box<dyn Held + '_>, Box<dyn Held + 'static>>(g) });
        }
    }
    held.reverse();
    ProcessForkGuard { held, _holders: holders, _pressure: pressure, _registry: registry }
}

impl Drop for ProcessForkGuard {
    fn drop(&mut self) {
        // Release the last-taken first.
        self.held.clear();
    }
}
