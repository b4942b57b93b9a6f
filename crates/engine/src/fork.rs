//! Fork safety: every lock of an arena held across `fork()`, so the child finds none of them
//! taken by a thread it does not have.
//!
//! `fork()` copies only the calling thread. A lock that another thread held at that moment
//! stays held in the child for ever, and the child's next allocation would spin on it. The
//! remedy is the one glibc applies to its own arenas: before the fork the forking thread takes
//! every lock (the `prepare` handler of `pthread_atfork`), and after it releases them in the
//! parent and in the child (the `parent` and `child` handlers). In between no other thread is
//! inside the arena, so its structures are consistent in both processes.
//!
//! Lock order (DESIGN.md, "Locks"): the low-memory registry, the purge mutex, the `StatLock`s
//! in the checker's order (nodes by index, then the free lock; Global: the one lock; Split:
//! free, then busy), the worker's state mutex last. Every other path holds at most one
//! `StatLock` at a time and takes the purge mutex and the registry before any `StatLock`, and
//! takes nothing while holding the worker's mutex, so this order cannot deadlock with them.
//!
//! The purge worker does not exist in the child; the worker notices the new process id and
//! starts a new thread on its next wake-up (see `worker`).

use crate::arena::{Arena, Kind};
use crate::lock::with_nesting_allowed;

/// Anything held until dropped (a lock guard of any type).
pub(crate) trait Held {}
impl<T> Held for T {}

/// Every lock of one arena, held. Dropping it releases them (in the parent, or in the child,
/// where the forking thread is the only thread and holds them all).
#[must_use = "the locks are released when the guard drops"]
pub struct ForkGuard<'a> {
    // Dropped in reverse order of acquisition: fields drop first to last, so `held` is stored
    // last-taken first.
    held: Vec<Box<dyn Held + 'a>>,
}

impl Arena {
    /// Take every lock of the arena, for a `fork()` (see the module documentation). Call it
    /// from the `prepare` handler of `pthread_atfork`, drop the guard in both `parent` and
    /// `child`. The thread must hold no lock of this arena.
    pub fn lock_for_fork(&self) -> ForkGuard<'_> {
        let sh = &self.shared;
        let mut held: Vec<Box<dyn Held + '_>> = Vec::with_capacity(8 + sh.nr_nodes);
        held.push(Box::new(crate::pressure::lock_registry()));
        if let Some(c) = &sh.cache {
            held.push(c.lock_for_fork());
        }
        held.push(Box::new(sh.purge_lock.lock().unwrap_or_else(|e| e.into_inner())));
        with_nesting_allowed(|| match &sh.kind {
            Kind::Global(g) => held.push(Box::new(g.lock())),
            Kind::Split { free, busy } => {
                held.push(Box::new(free.lock()));
                held.push(Box::new(busy.lock()));
            }
            Kind::Nodes { free, nodes } => {
                for n in nodes.iter() {
                    held.push(Box::new(n.lock()));
                }
                held.push(Box::new(free.lock()));
            }
        });
        held.push(sh.worker.lock_for_fork());
        held.reverse();
        ForkGuard { held }
    }
}

impl Drop for ForkGuard<'_> {
    fn drop(&mut self) {
        // Release the last-taken first; the nesting allowance covers the debug lock counter.
        with_nesting_allowed(|| self.held.clear());
    }
}
