//! The C ABI's deferred frees (`vmarena_read_lock`, `vmarena_kvfree_rcu`, ...): one
//! process-wide grace-period domain ([`Rcu`]) over the default space.
//!
//! Owns: the domain, built on first use (a `ForkOnce`; its locks and the set below are in the
//! fork registry, so a `fork()` finds them free); the set of areas retired and not yet
//! freed (`pending`, 64 mutexes sharded by address, one held at a time, never while the
//! domain's own locks are taken); each thread's reader and its nesting depth
//! (a thread-local, first touched with the inside-vmarena flag raised, as its destructor list
//! may allocate).
//!
//! Refusals, as the Rust API's and beyond: an address that is not the start of a live `vmalloc`
//! area (interior, foreign, freed, a fixed slot, a mapping of frames), or one already retired
//! and not yet freed, gets -EINVAL and nothing changes; `vmarena_vfree` and `vmarena_vrealloc`
//! refuse a retired area the same way (a count of pending areas keeps that check to one load
//! when nothing is pending). A retirement inside a read-side section never waits for a grace
//! period (it would wait for its own section); `vmarena_synchronize` inside one is refused with
//! -EDEADLK. A program that releases one area from two threads at once (a `vmarena_vfree`
//! racing a `vmarena_kvfree_rcu` of the same address) has a double free the check cannot
//! always see, as with two racing `vmarena_vfree` calls.

use crate::default_space::default_space;
use crate::rcu::{Rcu, Reader};
use std::cell::RefCell;
use std::collections::HashSet;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use vmarena_engine::fork::{ForkLocks, Held, Rank};
use vmarena_platform::fork_once::ForkOnce;
use vmarena_platform::reentry;

struct Domain {
    rcu: Arc<Rcu>,
    /// Registered with the fork registry (after the domain's own locks, same rank).
    _pending_locks: Arc<PendingLocks>,
}

/// `fork()` takes the set of retired areas too.
struct PendingLocks;

impl ForkLocks for PendingLocks {
    fn lock_for_fork(&self) -> Vec<Box<dyn Held + '_>> {
        (0..SHARDS).map(|i| Box::new(shard(i)) as Box<dyn Held>).collect()
    }
}

/// Retired areas not yet freed, by address.
/// Sharded by address, so that the check `vmarena_vfree` makes while areas are pending takes
/// one of many locks, mostly not the one another thread holds.
static PENDING: [Mutex<Option<HashSet<usize>>>; SHARDS] = [const { Mutex::new(None) }; SHARDS];
const SHARDS: usize = 64;
/// Their number: the vfree path's check is one load while it is 0.
static PENDING_COUNT: AtomicUsize = AtomicUsize::new(0);

fn shard(i: usize) -> MutexGuard<'static, Option<HashSet<usize>>> {
    PENDING[i].lock().unwrap_or_else(|e| e.into_inner())
}

/// The set that holds `p`, if it is pending.
fn pending(p: usize) -> MutexGuard<'static, Option<HashSet<usize>>> {
    shard((p >> 12) % SHARDS)
}

fn domain() -> Option<&'static Domain> {
    static D: ForkOnce<Option<Domain>> = ForkOnce::new();
    D.get_or_init(|| {
        let space = default_space().ok()?;
        let rcu = Rcu::with_free(
            Box::new(move |p| {
                if pending(p.as_ptr() as usize)
                    .get_or_insert_with(HashSet::new)
                    .remove(&(p.as_ptr() as usize))
                {
                    PENDING_COUNT.fetch_sub(1, Relaxed);
                }
                // Retired areas were checked live and nothing else frees them (vfree refuses
                // them while they are pending): this cannot fail.
                let _ = space.vfree(p.as_ptr());
            }),
            Box::new(move |p| space.size(p.as_ptr())),
        );
        let locks = Arc::new(PendingLocks);
        let weak: std::sync::Weak<dyn ForkLocks> = Arc::downgrade(&locks) as std::sync::Weak<dyn ForkLocks>;
        vmarena_engine::fork::register(Rank::DeferredFree, weak);
        Some(Domain { rcu, _pending_locks: locks })
    })
    .as_ref()
}

thread_local! {
    /// This thread's reader and how deeply it is nested in read-side sections.
    static READER: RefCell<Option<(Reader, u32)>> = const { RefCell::new(None) };
}

fn depth() -> u32 {
    READER.try_with(|r| r.borrow().as_ref().map_or(0, |(_, d)| *d)).unwrap_or(0)
}

/// Enter a read-side section (nesting allowed). Err when the default space cannot be built.
pub(crate) fn read_lock() -> Result<(), i32> {
    let d = domain().ok_or(libc::ENOMEM)?;
    let _inside = reentry::enter();
    READER
        .try_with(|r| {
            let mut r = r.borrow_mut();
            let (reader, depth) = r.get_or_insert_with(|| (d.rcu.register_reader(), 0));
            if *depth == 0 {
                reader.enter();
            }
            *depth += 1;
        })
        .map_err(|_| libc::EINVAL)
}

/// Leave a read-side section. Err(EINVAL) without a matching `read_lock`.
pub(crate) fn read_unlock() -> Result<(), i32> {
    READER
        .try_with(|r| {
            let mut r = r.borrow_mut();
            match r.as_mut() {
                Some((reader, depth)) if *depth > 0 => {
                    *depth -= 1;
                    if *depth == 0 {
                        reader.leave();
                    }
                    Ok(())
                }
                _ => Err(libc::EINVAL),
            }
        })
        .unwrap_or(Err(libc::EINVAL))
}

/// Retire `p` (one-argument form, or `embedded`: its first 16 bytes become the link).
pub(crate) fn kvfree_rcu(p: *mut u8, embedded: bool) -> Result<(), i32> {
    let Some(p) = NonNull::new(p) else { return Ok(()) };
    let d = domain().ok_or(libc::EINVAL)?;
    let space = default_space().map_err(|_| libc::EINVAL)?;
    {
        let mut set = pending(p.as_ptr() as usize);
        let set = set.get_or_insert_with(HashSet::new);
        if !space.is_vmalloc_area(p.as_ptr()) || set.contains(&(p.as_ptr() as usize)) {
            return Err(libc::EINVAL);
        }
        set.insert(p.as_ptr() as usize);
        PENDING_COUNT.fetch_add(1, Relaxed);
    }
    if embedded {
        if !d.rcu.kvfree_rcu_embedded(p) {
            // Not live after all (freed by another thread meanwhile): undo.
            if pending(p.as_ptr() as usize).get_or_insert_with(HashSet::new).remove(&(p.as_ptr() as usize)) {
                PENDING_COUNT.fetch_sub(1, Relaxed);
            }
            return Err(libc::EINVAL);
        }
    } else {
        d.rcu.retire(p, depth() == 0);
    }
    Ok(())
}

/// Wait until every area retired before the call is freed. Err(EDEADLK) inside a read-side
/// section of this thread.
pub(crate) fn synchronize() -> Result<(), i32> {
    if depth() > 0 {
        return Err(libc::EDEADLK);
    }
    if let Some(d) = domain() {
        d.rcu.synchronize();
    }
    Ok(())
}

/// True when `p` was retired and is not freed yet (`vfree` and `vrealloc` refuse it).
#[inline]
pub(crate) fn is_pending(p: *const u8) -> bool {
    PENDING_COUNT.load(Relaxed) != 0
        && pending(p as usize).as_ref().is_some_and(|s| s.contains(&(p as usize)))
}
