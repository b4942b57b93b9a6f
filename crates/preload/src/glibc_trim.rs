//! At idle, glibc's free memory goes back to the kernel with vmarena's.
//!
//! The default space's purge worker releases, at each tick (half of `decay_interval_ms`, 500
//! ms), the lazy memory freed before its previous tick. The blocks under the shim's threshold are glibc's,
//! and glibc gives back only the top of a heap, and only above its trim threshold, which the
//! shim raises as glibc would ([`crate::glibc_thresholds`]): the free memory inside glibc's
//! heaps, and any top below the threshold, stays resident however long the program idles.
//! So after such a purge the worker calls glibc's `malloc_trim(0)`, which releases the whole
//! free pages inside every arena's free chunks and the top of the main arena (a thread
//! arena's top stays until glibc's own free trims it). It runs on the worker's thread, after
//! a decay purge that released memory and kept none (no large free since the tick before):
//! after the large frees of a burst stop, not while they go on.
//!
//! Only when the next allocator is glibc (`malloc` and `malloc_trim` both from the C library);
//! `VMARENA_EXPERIMENTS=1 VMARENA_PRELOAD_GLIBC_TRIM=0` turns it off.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

/// glibc's `malloc_trim`.
pub type MallocTrim = unsafe extern "C" fn(usize) -> c_int;

/// glibc's `malloc_trim`, stored by [`enable`] (0 before).
static TRIM: AtomicUsize = AtomicUsize::new(0);

/// Call `trim` after every idle purge of the default space (the next allocator is glibc).
pub(crate) fn enable(trim: MallocTrim) {
    TRIM.store(trim as usize, Ordering::Release);
    vmarena_engine::set_idle_hook(trim_now);
}

/// The idle hook: glibc's `malloc_trim(0)`.
fn trim_now() {
    let t = TRIM.load(Ordering::Acquire);
    if t != 0 {
        // SAFETY: `t` is glibc's `malloc_trim`, stored by `enable` from `dlsym` with this
        // signature; it takes a pad in bytes and touches no memory of ours.
        let trim: MallocTrim = unsafe { std::mem::transmute::<usize, MallocTrim>(t) };
        // SAFETY: as above; 0 asks for everything above the minimum.
        unsafe { trim(0) };
    }
}
