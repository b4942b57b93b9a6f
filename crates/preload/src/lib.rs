//! `libvmarena_preload.so`: the large allocations of an unmodified program served by vmarena.
//!
//! ```text
//! LD_PRELOAD=target/release/libvmarena_preload.so program args...
//! ```
//!
//! Routing (see [`interpose`]):
//!
//! | call | to vmarena when | otherwise |
//! |---|---|---|
//! | `malloc`, `calloc`, `valloc`, `pvalloc` | the size is at or above the threshold | the next allocator |
//! | `posix_memalign`, `aligned_alloc`, `memalign` | as above, and the alignment is a power of two | the next allocator |
//! | `free`, `malloc_usable_size` | the address lies in the default space | the next allocator |
//! | `realloc` | by address, then by the new size (blocks move across when they cross the threshold) | the next allocator |
//! | `mallopt` | never (passed on; setting a threshold ends [`glibc_thresholds`]) | the next allocator |
//! | `mallinfo2`, `mallinfo`, `malloc_stats`, `malloc_info`, `malloc_trim` | the next allocator's answer plus the default space's ([`introspection`]) | the next allocator |
//! | C++ `operator new` (every form) | as `malloc` | the next definition of the same form ([`cpp_operators`]) |
//! | C++ `operator delete` (every form) | as `free` | the next definition of the same form |
//!
//! A call the shim does not serve costs one compare and a tail jump (`fast_below`; a free:
//! the reservation's range and the bootstrap heap's); the full paths are `extern "C"`
//! functions (they cannot unwind), reached by a jump too.
//!
//! Sizes of 9 pages to 4 MiB sent to vmarena are rounded up to a size class, four per doubling
//! of pages (`vmarena::size_class`), so that freed areas match later requests;
//! `malloc_usable_size` reports the rounded size.
//!
//! The next allocator is whatever follows this library in the lookup order: glibc's malloc, or
//! jemalloc or mimalloc preloaded after it ([`next`]). Calls that arrive while it is being looked
//! up are served from a static buffer ([`bootstrap`]). vmarena's own allocations (Rust's global
//! allocator inside this library) always go to the next allocator, so the shim never re-enters
//! itself. A large request vmarena cannot serve (space exhausted) falls back to the next
//! allocator; routing by address keeps that correct.
//!
//! With glibc next, every large free the shim serves moves glibc's mmap and trim thresholds as
//! glibc itself would had it served the block ([`glibc_thresholds`]), and when the default
//! space gives an idle program's memory back, glibc's free memory goes back with it
//! ([`glibc_trim`]).
//!
//! Fork: the `vmarena` crate's own `pthread_atfork` handlers (`vmarena::fork`, registered when
//! this library is loaded) hold every vmarena lock across `fork()`, so the child can allocate
//! and free; the purge worker restarts in the child on first need.
//!
//! The library also carries vmarena's C ABI (`vmarena_vmalloc` and the rest, from the
//! `vmarena` crate). A preloaded library comes first in the symbol lookup, so a program linked
//! against `libvmarena.so` gets these copies, and its `vmarena_*` calls and its large
//! `malloc`s share one default space.
//!
//! A `free` or `realloc` of an address inside the default space that is not the start of a live
//! area (a double free, an interior pointer) is a bug of the program; like glibc, the shim prints
//! what happened and aborts rather than continue with a corrupted heap.
#![allow(unsafe_code)]
#![warn(missing_docs)]

pub mod bootstrap;
pub mod cpp_operators;
pub mod glibc_thresholds;
pub mod glibc_trim;
pub mod interpose;
pub mod introspection;
pub mod mallinfo;
pub mod next;
pub mod stats;

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{
    AtomicUsize,
    Ordering::{Acquire, Relaxed, SeqCst},
};

pub use stats::{PreloadOptions, PreloadStats};

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
fn lower_pass_below(v: usize) {
    let _ = PASS_BELOW.fetch_update(SeqCst, SeqCst, |cur| Some(if cur == 0 { v } else { cur.min(v) }));
}

/// The bound below which frees pass with one compare, from the bootstrap heap's start and the
/// space's, as far as it is built.
fn pass_bound() -> usize {
    if SPACE_LEN.load(SeqCst) > 0 {
        bootstrap::start().min(SPACE_LO.load(Relaxed))
    } else {
        bootstrap::start()
    }
}

/// Called once, right after the next allocator is known: options, the exit summary,
/// and the process's `membarrier` registration, which the default space's thread caches need.
/// That happens at the first `malloc`, while the process almost always has one thread: there
/// the registration costs microseconds, while in a process with several threads the kernel
/// waits for an RCU grace period (milliseconds; BENCHMARKS.md, "The first call from a second
/// thread"), which would otherwise stall whichever thread made the first large allocation.
pub(crate) fn on_ready() {
    // A failure is remembered and reported again when the space is built without caches.
    vmarena_platform::early::prepare();
    let opts = PreloadOptions::from_env();
    THRESHOLD.store(opts.threshold.max(1), Relaxed);
    if opts.stats {
        stats::switch_on(opts.lock_timing);
    } else {
        FAST_BELOW.store(opts.threshold.max(1), SeqCst);
        lower_pass_below(pass_bound());
    }
    if let Some(m) = next::get().and_then(|n| n.glibc_mallopt).filter(|_| opts.glibc_thresholds) {
        glibc_thresholds::enable(m);
    }
    if let Some(t) = next::get().and_then(|n| n.glibc_malloc_trim).filter(|_| opts.glibc_trim) {
        glibc_trim::enable(t);
    }
}

/// The default space, created on first use, with its bounds published for `in_space`.
pub(crate) fn space() -> Option<&'static vmarena::VmSpace> {
    let s = vmarena::default_space().ok()?;
    if SPACE_LEN.load(Relaxed) == 0 {
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

/// Rust's allocator inside this library: always the next allocator (or the bootstrap heap), never
/// vmarena, so vmarena's own allocations cannot re-enter it.
struct NextAlloc;

// SAFETY: blocks come from the next allocator (which upholds the contract) or the bootstrap heap
// (disjoint, aligned, never reused); each is given back to where it came from.
unsafe impl GlobalAlloc for NextAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match next::get() {
            // SAFETY: the next allocator's functions with valid arguments.
            Some(n) if layout.align() <= 16 => unsafe { (n.malloc)(layout.size()).cast() },
            Some(n) => interpose::next_aligned(n, layout.align(), layout.size()).cast(),
            None => bootstrap::alloc(layout.size(), layout.align()),
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, _layout: Layout) {
        if bootstrap::contains(p) {
            return;
        }
        if let Some(n) = next::get() {
            // SAFETY: `p` came from the next allocator.
            unsafe { (n.free)(p.cast()) }
        }
    }
}

#[global_allocator]
static GLOBAL: NextAlloc = NextAlloc;
