//! Where a call goes: the routing threshold, the default space's bounds (its own reservation,
//! and its further ones once it grew) and the pass-through bounds that send most calls to the
//! next allocator with one compare.
//!
//! Owns: the atomics below, written once each at start-up (the threshold and the pass-through
//! when the next allocator is known, `next.rs`; the space's bounds when it is built, `space`)
//! and read on every interposed call without a lock, so a fork at any moment leaves nothing
//! held.

use crate::bootstrap;
use std::sync::atomic::{
    AtomicUsize,
    Ordering::{Acquire, Relaxed, SeqCst},
};

/// Requests of this many bytes and more go to vmarena.
static THRESHOLD: AtomicUsize = AtomicUsize::new(64 << 10);
/// Requests below this many bytes, and frees outside the default space and the bootstrap heap,
/// go straight to the next allocator ([`fast_below`]): the threshold once the next allocator
/// is known and statistics are off, 0 before and with statistics on (every call then takes the
/// full path, which counts, and serves from the bootstrap heap while the next allocator is
/// looked up). Stored with release after the next allocator's pointers.
static FAST_BELOW: AtomicUsize = AtomicUsize::new(0);
/// The default space's reservation once it exists, as its start and length (0, 0 before).
static SPACE_LO: AtomicUsize = AtomicUsize::new(0);
static SPACE_LEN: AtomicUsize = AtomicUsize::new(0);
/// The lowest start of the default space's further reservations (it grew past its own:
/// `vmarena::space`'s extensions), `usize::MAX` before the first. Set by [`on_growth`] before
/// an extension hands out its first area.
static GROWN_LO: AtomicUsize = AtomicUsize::new(usize::MAX);
/// A free (or resize) of an address below this goes straight to the next allocator with one
/// compare ([`pass_below`]): the lower of the bootstrap heap's start and the default space's,
/// once the next allocator is known and statistics are off; 0 otherwise. glibc's main heap
/// lies below both (`brk` memory), so a single-threaded program's frees take one compare.
/// Only ever lowered once set ([`lower_pass_below`]), by the first `malloc` and by the space's
/// construction, before the space hands out its first area; no lock, so a fork at any moment
/// leaves nothing held.
static PASS_BELOW: AtomicUsize = AtomicUsize::new(0);

/// The routing threshold in bytes.
#[inline]
pub fn threshold() -> usize {
    THRESHOLD.load(Relaxed)
}

/// True when `p` lies in the default space (it is vmarena's, live or not): one compare. The
/// length is loaded first, with acquire (a plain load on x86), so that a length seen non-zero
/// comes with its start.
#[inline]
pub(crate) fn in_space(p: *const u8) -> bool {
    let len = SPACE_LEN.load(Acquire);
    (p as usize).wrapping_sub(SPACE_LO.load(Relaxed)) < len
        || (GROWN_LO.load(Relaxed) != usize::MAX && in_extension(p))
}

/// True when `p` lies in one of the default space's further reservations.
#[cold]
#[inline(never)]
fn in_extension(p: *const u8) -> bool {
    vmarena::default_space().is_ok_and(|s| s.contains(p))
}

/// The default space made a further reservation `[lo, hi)`: it is in the space from now on, and
/// frees below it no longer pass with one compare. Called before the reservation hands out an
/// area, as the space's own bounds are stored before its first (the same pairing with
/// [`open_pass_through`]).
fn on_growth(lo: usize, _hi: usize) {
    GROWN_LO.fetch_min(lo, SeqCst);
    if FAST_BELOW.load(SeqCst) != 0 {
        lower_pass_below(pass_bound());
    }
}

/// The pass-through bound: a request below it (and a free of an address neither in the space
/// nor in the bootstrap heap) goes to the next allocator with no other work; 0 means "take the
/// full path". Non-zero implies the next allocator is known ([`next::ready`]).
#[inline]
pub(crate) fn fast_below() -> usize {
    FAST_BELOW.load(Acquire)
}

/// True when a free or resize of `p` may go straight to the next allocator.
#[inline]
pub(crate) fn pass_through_address(p: *const u8) -> bool {
    !in_space(p) && !bootstrap::contains(p)
}

/// True when `p` lies below both the bootstrap heap and the default space and the pass-through
/// is on: the next allocator's block (or NULL), with one compare. Implies [`fast_below`] is
/// non-zero (the next allocator is known).
#[inline]
pub(crate) fn pass_below(p: *const u8) -> bool {
    (p as usize) < PASS_BELOW.load(Acquire)
}

/// Set [`PASS_BELOW`] to `v`, or lower it to `v` when it is set: a compare-and-swap loop, so
/// two threads setting it at once (the first `malloc` and the first large one) end at the lower
/// of their values. Each caller stores its own input (the pass-through bound, the space's
/// bounds) with `SeqCst` and then reads the other's with `SeqCst`, so at least one of them sees
/// both and stores a bound below the space (Dekker's pair).
pub(crate) fn lower_pass_below(v: usize) {
    let _ = PASS_BELOW.fetch_update(SeqCst, SeqCst, |cur| Some(if cur == 0 { v } else { cur.min(v) }));
}

/// The bound below which frees pass with one compare, from the bootstrap heap's start and the
/// space's, as far as it is built.
pub(crate) fn pass_bound() -> usize {
    let bound = bootstrap::start().min(GROWN_LO.load(SeqCst));
    if SPACE_LEN.load(SeqCst) > 0 {
        bound.min(SPACE_LO.load(Relaxed))
    } else {
        bound
    }
}

/// Route requests of `bytes` and more to vmarena.
pub(crate) fn set_threshold(bytes: usize) {
    THRESHOLD.store(bytes.max(1), Relaxed);
}

/// Turn the pass-through on for requests below `bytes` (statistics are off and the next
/// allocator is known).
pub(crate) fn open_pass_through(bytes: usize) {
    FAST_BELOW.store(bytes.max(1), SeqCst);
    lower_pass_below(pass_bound());
}

/// The default space, created on first use, with its bounds published for `in_space`.
pub(crate) fn space() -> Option<&'static vmarena::VmSpace> {
    if SPACE_LEN.load(Relaxed) == 0 {
        // Before the space exists, so before it can grow.
        vmarena::space::set_growth_hook(on_growth);
    }
    let s = vmarena::default_space().ok()?;
    if SPACE_LEN.load(Relaxed) == 0 {
        // Reservations the space made before the shim first asked for it (through the C ABI),
        // whose areas a later request may be served from.
        for x in s.extensions() {
            let (lo, hi) = x.bounds();
            on_growth(lo, hi);
        }
        let (lo, hi) = s.bounds();
        // The start first: until the length is stored, nothing is in the space.
        SPACE_LO.store(lo, Relaxed);
        SPACE_LEN.store(hi - lo, SeqCst);
        // Before any area of the space is handed out: none of them may pass below. With the
        // pass-through off (not yet, or statistics on) nothing passes below anything, and
        // `on_ready`, if it comes, reads the space's bounds stored above.
        if FAST_BELOW.load(SeqCst) != 0 {
            lower_pass_below(pass_bound());
        }
    }
    Some(s)
}
