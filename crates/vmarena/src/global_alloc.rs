//! `VmAlloc`: a Rust global allocator that serves large layouts from the default space and
//! everything else from an inner allocator.
//!
//! ```no_run
//! use vmarena::VmAlloc;
//! #[global_allocator]
//! static GLOBAL: VmAlloc = VmAlloc::new(); // layouts of 64 KiB and more go to vmarena
//! ```
//!
//! Routing:
//! - allocation: `size >= threshold_bytes` goes to the default space (page aligned, or the
//!   layout's alignment when larger), unless this thread is inside vmarena
//!   (`vmarena_platform::reentry`: vmarena's own allocations, the purge worker, the space's
//!   creation) or the space cannot serve it (not creatable, exhausted): then the inner
//!   allocator serves it.
//! - sizes sent to vmarena are rounded up to a size class (four per doubling, see
//!   [`crate::size_class`]), so that freed areas match later layouts.
//! - free and resize: by address. A pointer inside the default space's reservation is
//!   vmarena's, anything else the inner allocator's, so a large layout the inner allocator had
//!   to serve is given back to it.
//! - `realloc` within vmarena uses `vrealloc` (in place while the new size fits the area's
//!   pages); across the threshold the contents are copied to the other side.
//!
//! Owns nothing but its threshold and inner allocator; the memory belongs to the default space
//! (see [`crate::default_space`]), which reads its options from the environment.
#![allow(unsafe_code)]

use crate::default_space::{default_space, existing_default_space};
use crate::size_class::size_class_bytes;
use crate::space::VmSpace;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use vmarena_platform::reentry;

/// Layouts of this many bytes and more go to vmarena by default (see the preload shim's
/// threshold in README.md for why 64 KiB).
pub const DEFAULT_THRESHOLD_BYTES: usize = 64 << 10;

/// See the module documentation.
pub struct VmAlloc<A: GlobalAlloc = System> {
    inner: A,
    threshold_bytes: usize,
}

impl VmAlloc<System> {
    /// Large layouts (64 KiB and more) to vmarena, the rest to the system allocator.
    pub const fn new() -> Self {
        VmAlloc { inner: System, threshold_bytes: DEFAULT_THRESHOLD_BYTES }
    }
}

impl Default for VmAlloc<System> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: GlobalAlloc> VmAlloc<A> {
    /// Layouts of `threshold_bytes` and more (at least 1) to vmarena, the rest to `inner`.
    pub const fn with_inner(inner: A, threshold_bytes: usize) -> Self {
        VmAlloc { inner, threshold_bytes: if threshold_bytes == 0 { 1 } else { threshold_bytes } }
    }

    /// The routing threshold in bytes.
    pub const fn threshold_bytes(&self) -> usize {
        self.threshold_bytes
    }

    /// The default space when a layout of `size` should go there.
    #[inline]
    fn space_for(&self, size: usize) -> Option<&'static VmSpace> {
        if size < self.threshold_bytes || reentry::inside() {
            register_barriers_early();
            return None;
        }
        default_space().ok()
    }

    /// The default space when `p` lies in it.
    #[inline]
    fn owner(p: *mut u8) -> Option<&'static VmSpace> {
        existing_default_space().filter(|s| s.contains(p))
    }

    fn vm_alloc(space: &VmSpace, layout: Layout, zeroed: bool) -> Option<*mut u8> {
        let page = vmarena_platform::page_size();
        let align = layout.align().max(page);
        // Rounded to a size class, so that freed areas match later layouts (`size_class`).
        let size = size_class_bytes(layout.size(), page);
        let r = if zeroed { space.vzalloc_aligned(size, align) } else { space.vmalloc_aligned(size, align) };
        r.ok().map(|p| p.as_ptr())
    }
}

/// Set once the process's `membarrier` registration was asked for.
static BARRIERS_ASKED: AtomicBool = AtomicBool::new(false);

/// Register the process for `membarrier` (which the default space's thread caches need) at the
/// first small allocation, which Rust's runtime makes before `main`, while the process has one
/// thread: there it costs microseconds, while with several threads the kernel waits for an RCU
/// grace period (milliseconds), stalling whichever thread made the first large allocation.
#[inline]
fn register_barriers_early() {
    if !BARRIERS_ASKED.load(Relaxed) {
        // The flag goes first: the registration may allocate (its error message), which comes
        // back here and must not ask again.
        BARRIERS_ASKED.store(true, Relaxed);
        vmarena_platform::early::prepare();
    }
}

// SAFETY: every pointer handed out is either a live area of the default space (page aligned
// or aligned as the layout asks, at least `size` bytes, never overlapping another) or comes from
// `inner`, which upholds the contract itself; frees and resizes go back to the side that owns
// the address.
unsafe impl<A: GlobalAlloc> GlobalAlloc for VmAlloc<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(s) = self.space_for(layout.size()) {
            if let Some(p) = Self::vm_alloc(s, layout, false) {
                return p;
            }
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { self.inner.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if let Some(s) = self.space_for(layout.size()) {
            if let Some(p) = Self::vm_alloc(s, layout, true) {
                return p;
            }
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { self.inner.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        match Self::owner(p) {
            Some(s) => {
                if let Err(e) = s.vfree(p) {
                    // The caller broke the GlobalAlloc contract (a double or foreign free).
                    eprintln!("vmarena: dealloc of {p:p}: {e}");
                    std::process::abort();
                }
            }
            // SAFETY: `p` came from `inner` with this layout (it is not vmarena's).
            None => unsafe { self.inner.dealloc(p, layout) },
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let owner = Self::owner(p);
        let to_vm = new_size >= self.threshold_bytes && !reentry::inside();
        match owner {
            // Stays in vmarena: vrealloc keeps page alignment; larger alignments move by hand.
            Some(s) if to_vm && layout.align() <= vmarena_platform::page_size() => {
                let size = size_class_bytes(new_size, vmarena_platform::page_size());
                if let Ok(q) = s.vrealloc(std::ptr::NonNull::new(p), size) {
                    return q.as_ptr();
                }
                // No room in the space: the inner allocator takes the contents below.
            }
            // Stays with the inner allocator.
            None if !to_vm => {
                // SAFETY: `p` came from `inner` with this layout.
                return unsafe { self.inner.realloc(p, layout, new_size) };
            }
            _ => {}
        }
        // Crosses sides (or needs a larger alignment, or vmarena is full): allocate, copy, free.
        // SAFETY: the caller guarantees `new_size` rounded to the alignment does not overflow.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a non-zero size layout (new_size > 0 by the GlobalAlloc contract).
        let q = unsafe { self.alloc(new_layout) };
        if !q.is_null() {
            // SAFETY: `p` holds `layout.size()` bytes, `q` at least `new_size`; distinct blocks.
            unsafe {
                std::ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
                self.dealloc(p, layout);
            }
        }
        q
    }
}
