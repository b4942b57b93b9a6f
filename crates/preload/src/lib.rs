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
pub mod routing;
pub mod stats;

pub use routing::threshold;
pub use stats::{PreloadOptions, PreloadStats};
use std::alloc::{GlobalAlloc, Layout};

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
