//! Whether this thread is inside vmarena: the flag a global allocator built on vmarena reads so
//! that vmarena's own allocations never come back into vmarena.
//!
//! Owns: one thread-local counter (const-initialised, no destructor, so reading it never
//! allocates). [`enter`] raises it for the life of the returned guard; [`mark_thread`] raises
//! it for good on threads that vmarena starts (the purge worker, the low-memory monitor).
//!
//! Why: vmarena's code allocates (vectors of ranges in a purge, the busy maps, the space
//! itself on first use). Under a global allocator that routes large layouts to vmarena, such
//! an allocation made while an engine lock is held would try to take the same lock again. With
//! the flag raised, the allocator sends the request to its inner allocator instead.

use std::cell::Cell;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// The flag raised for as long as this guard lives.
#[must_use = "the flag drops with the guard"]
pub struct Inside(());

/// Raise the flag until the guard drops (nests).
#[inline]
pub fn enter() -> Inside {
    DEPTH.with(|d| d.set(d.get() + 1));
    Inside(())
}

impl Drop for Inside {
    #[inline]
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get() - 1));
    }
}

/// True while this thread runs vmarena code.
#[inline]
pub fn inside() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// Raise the flag for the rest of this thread's life (threads vmarena starts).
pub fn mark_thread() {
    std::mem::forget(enter());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nests_and_drops() {
        assert!(!inside());
        let a = enter();
        let b = enter();
        assert!(inside());
        drop(a);
        assert!(inside());
        drop(b);
        assert!(!inside());
        std::thread::spawn(|| {
            mark_thread();
            assert!(inside());
        })
        .join()
        .unwrap();
        assert!(!inside(), "another thread's mark does not leak here");
    }
}
