//! The C ABI's deferred frees (`vmarena_read_lock`, `vmarena_kvfree_rcu`, ...): one
//! process-wide grace-period domain ([`Rcu`]) over the default space.
//!
//! Owns: the domain, built on first use (a `ForkOnce`; its locks are in the fork registry, so
//! a `fork()` finds them free); each thread's reader and its nesting depth (a thread-local,
//! first touched with the inside-vmarena flag raised, as its destructor list may allocate).
//! Retired areas are marked in the default space itself (a state word or the record's kind,
//! [`VmSpace`](crate::VmSpace)'s retired state), not in a set of this module's.
//!
//! Refusals, as the Rust API's and beyond: an address that is not the start of a live `vmalloc`
//! area (interior, foreign, freed, a fixed slot, a mapping of frames), or one already retired
//! and not yet freed, gets -EINVAL and nothing changes; `vmarena_vfree` and `vmarena_vrealloc`
//! refuse a retired area the same way, through the same check that refuses a freed one (no
//! cost on their paths). A retirement inside a read-side section never waits for a grace
//! period (it would wait for its own section); `vmarena_synchronize` inside one is refused with
//! -EDEADLK. A program that releases one area from two threads at once (a `vmarena_vfree`
//! racing a `vmarena_kvfree_rcu` of the same address) gets one of them refused, as with two
//! racing `vmarena_vfree` calls.

use crate::default_space::default_space;
use crate::rcu::{Rcu, Reader};
use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::Arc;
use vmarena_platform::fork_once::ForkOnce;
use vmarena_platform::reentry;

fn domain() -> Option<&'static Arc<Rcu>> {
    static D: ForkOnce<Option<Arc<Rcu>>> = ForkOnce::new();
    D.get_or_init_shared(|| Some(Rcu::over_space(default_space().ok()?))).as_ref()
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
            let (reader, depth) = r.get_or_insert_with(|| (d.register_reader(), 0));
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
/// Err(EINVAL), nothing changed, when the domain refuses it.
pub(crate) fn kvfree_rcu(p: *mut u8, embedded: bool) -> Result<(), i32> {
    let Some(p) = NonNull::new(p) else { return Ok(()) };
    let d = domain().ok_or(libc::EINVAL)?;
    let retired = if embedded { d.kvfree_rcu_embedded(p) } else { d.retire(p, depth() == 0) };
    if retired {
        Ok(())
    } else {
        Err(libc::EINVAL)
    }
}

/// Wait until every area retired before the call is freed. Err(EDEADLK) inside a read-side
/// section of this thread.
pub(crate) fn synchronize() -> Result<(), i32> {
    if depth() > 0 {
        return Err(libc::EDEADLK);
    }
    if let Some(d) = domain() {
        d.synchronize();
    }
    Ok(())
}
