//! `fork()` support: the default space's locks held across the fork (see
//! `vmarena_engine::fork`), so the child finds none of them taken by a thread it does not have.
//!
//! Owns: the guard between the `prepare` handler and the `parent`/`child` handlers, in a
//! thread-local of the forking thread (two threads forking at once are serialised by the locks
//! themselves: the second one's `prepare` waits until the first one's `parent` released them).

use std::cell::RefCell;
use vmarena_engine::ForkGuard;

thread_local! {
    static HELD: RefCell<Option<ForkGuard<'static>>> = const { RefCell::new(None) };
}

extern "C" fn prepare() {
    let Some(s) = vmarena::existing_default_space() else { return };
    // AssertUnwindSafe: a panic here takes no lock it leaves half-held (guards drop on unwind).
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let g = s.arena().lock_for_fork();
        HELD.with(|h| *h.borrow_mut() = Some(g));
    }));
}

extern "C" fn release() {
    let _ = std::panic::catch_unwind(|| HELD.with(|h| drop(h.borrow_mut().take())));
}

/// Register the handlers (once, when the shim becomes ready).
pub(crate) fn register() {
    // SAFETY: registers three plain functions; they take no arguments and catch panics.
    unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(release)) };
}
