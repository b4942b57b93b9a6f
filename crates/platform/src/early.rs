//! What every form of the library does while the process still has one thread (its
//! constructor, the shim's first `malloc`, `VmAlloc`'s first allocation): the answers that cost
//! more, or stall, once the program has started threads.
//!
//! Owns nothing: each answer is cached where it is computed.
//!
//! - both `membarrier` registrations ([`crate::membarrier::register`] and
//!   [`crate::membarrier::register_rseq`]): in a process with several threads each waits for an
//!   RCU grace period;
//! - the possible CPU count ([`crate::cpu::possible`], a directory read under `/sys`), which the
//!   per-CPU stacks size themselves by when the default space is built, often on a worker
//!   thread's first call.

/// See the module documentation. Failures are remembered and reported by whoever needs the
/// answer later.
///
/// Nothing here allocates, and a call made while another is under way (the same thread
/// re-entering through an allocator that calls back into vmarena, or a second thread) returns
/// at once: nothing waits on `prepare`, whose answers are computed again on first need.
pub fn prepare() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static UNDER_WAY: AtomicBool = AtomicBool::new(false);
    if UNDER_WAY.swap(true, Ordering::Acquire) {
        return;
    }
    prepare_all();
    UNDER_WAY.store(false, Ordering::Release);
}

fn prepare_all() {
    let _ = crate::membarrier::register();
    let _ = crate::membarrier::register_rseq();
    let _ = crate::cpu::possible();
}
