//! The interposed `malloc` family. Each function decides by size (allocations) or by address
//! (frees, resizes, size queries) whether vmarena or the next allocator handles the call; see
//! the table in the crate documentation.
//!
//! Every function catches panics from vmarena: an allocation then falls back to the next
//! allocator and nothing unwinds into C. Failures follow the C library: NULL with `errno`
//! ENOMEM, `posix_memalign` returning EINVAL or ENOMEM.
#![allow(clippy::missing_safety_doc)]

use crate::next::{self, Next};
use crate::routing::{fast_below, in_space, pass_below, pass_through_address, space, threshold};
use crate::stats::{count, COUNTERS as C};
use crate::{bootstrap, glibc_thresholds};
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{null_mut, NonNull};
use vmarena::{size_class_bytes, VmError};
use vmarena_platform::{reentry, set_errno};

fn page() -> usize {
    vmarena_platform::page_size()
}

/// A block from vmarena, or `None` when it cannot serve (the caller falls back).
///
/// A request made while this thread runs vmarena code is never served. Some memory is
/// allocated with the C library's `malloc`, which is this library's, and not with the Rust
/// global allocator: the standard library's for a new thread's handle, the C library's for the
/// destructor list of a thread-local (on the first touch of the thread cache's). Served by
/// vmarena, such a request would wait for the construction of the default space it is part of,
/// or come back to the thread-local being registered, for ever. So every call into vmarena
/// from here raises the inside-vmarena flag.
pub(crate) fn vm_alloc(size: usize, align: usize, zeroed: bool) -> Option<*mut c_void> {
    if reentry::inside() {
        count(&C.fallbacks, 1);
        return None;
    }
    let _inside = reentry::enter();
    let r = catch_unwind(|| {
        let s = space()?;
        // Every area is page aligned; a smaller alignment (or none, 0) asks for nothing more.
        let align = align.max(1);
        // Rounded to a size class, so that freed areas match later requests (`size_class`).
        let size = size_class_bytes(size, page());
        let r = if zeroed { s.vzalloc_aligned(size, align) } else { s.vmalloc_aligned(size, align) };
        r.ok()
    })
    .ok()
    .flatten();
    match r {
        Some(p) => {
            count(&C.vm_allocs, 1);
            count(&C.vm_bytes, size as u64);
            Some(p.as_ptr().cast())
        }
        None => {
            count(&C.fallbacks, 1);
            None
        }
    }
}

/// An aligned block from the next allocator.
pub(crate) fn next_aligned(n: &Next, align: usize, size: usize) -> *mut c_void {
    if let Some(f) = n.posix_memalign {
        let mut p = null_mut();
        // SAFETY: the next allocator's posix_memalign with an out pointer we own.
        let rc = unsafe { f(&mut p, align.max(std::mem::size_of::<usize>()), size) };
        if rc != 0 {
            set_errno(rc);
            return null_mut();
        }
        return p;
    }
    match n.aligned_alloc.or(n.memalign) {
        // SAFETY: the next allocator's aligned_alloc/memalign.
        Some(f) => unsafe { f(align, size) },
        None => null_mut(),
    }
}

fn next_malloc(n: Option<&Next>, size: usize) -> *mut c_void {
    match n {
        Some(n) => {
            count(&C.next_allocs, 1);
            // SAFETY: the next allocator's malloc.
            unsafe { (n.malloc)(size) }
        }
        None => {
            count(&C.bootstrap_allocs, 1);
            bootstrap::alloc(size, 16).cast()
        }
    }
}

/// A free or resize of an address inside the space that is not a live area start: a bug of
/// the program. Say so and stop, as glibc does for the pointers it can tell are bad.
#[cold]
fn bad_pointer(call: &str, p: *mut c_void, e: &VmError) -> ! {
    eprintln!("vmarena preload: {call}({p:p}): {e}; aborting");
    std::process::abort()
}

pub(crate) fn vm_free(p: *mut c_void) {
    let _inside = reentry::enter();
    let r = catch_unwind(|| space().map(|s| s.vfree_sized(p.cast())));
    match r {
        Ok(Some(Ok(bytes))) => {
            count(&C.vm_frees, 1);
            glibc_thresholds::freed(bytes);
        }
        Ok(Some(Err(e))) => bad_pointer("free", p, &e),
        _ => bad_pointer("free", p, &VmError::NotLive(p as usize)),
    }
}

/// `void *malloc(size_t size)`
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    if size < fast_below() {
        // SAFETY: a non-zero bound implies the next allocator is known; its malloc.
        return unsafe { (next::ready().malloc)(size) };
    }
    malloc_full(size)
}

#[inline(never)]
extern "C" fn malloc_full(size: usize) -> *mut c_void {
    let n = next::get();
    if size >= threshold() && n.is_some() {
        if let Some(p) = vm_alloc(size, 0, false) {
            return p;
        }
    }
    next_malloc(n, size)
}

/// `void free(void *p)`
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if pass_below(p.cast()) || (fast_below() != 0 && pass_through_address(p.cast())) {
        // SAFETY: the next allocator is known (non-zero bound) and `p` is neither vmarena's
        // nor the bootstrap heap's: the next allocator's block, or NULL, which it accepts.
        return unsafe { (next::ready().free)(p) };
    }
    free_full(p)
}

#[inline(never)]
extern "C" fn free_full(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    if in_space(p.cast()) {
        return vm_free(p);
    }
    if bootstrap::contains(p.cast()) {
        return;
    }
    if let Some(n) = next::get() {
        count(&C.next_frees, 1);
        // SAFETY: `p` is not vmarena's nor the bootstrap heap's: the next allocator's.
        unsafe { (n.free)(p) }
    }
}

/// `void *calloc(size_t n, size_t size)`
#[no_mangle]
pub unsafe extern "C" fn calloc(nmemb: usize, size: usize) -> *mut c_void {
    let Some(total) = nmemb.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return null_mut();
    };
    if total < fast_below() {
        // SAFETY: the next allocator is known (non-zero bound); its calloc.
        return unsafe { (next::ready().calloc)(nmemb, size) };
    }
    let n = next::get();
    if total >= threshold() && n.is_some() {
        if let Some(p) = vm_alloc(total, 0, true) {
            return p;
        }
    }
    match n {
        Some(n) => {
            count(&C.next_allocs, 1);
            // SAFETY: the next allocator's calloc.
            unsafe { (n.calloc)(nmemb, size) }
        }
        // Bootstrap memory is zeroed static memory, never reused.
        None => next_malloc(None, total),
    }
}

/// `void *realloc(void *p, size_t size)`
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if size < fast_below() && (pass_below(p.cast()) || pass_through_address(p.cast())) {
        // SAFETY: the next allocator is known (non-zero bound) and `p` is its block or NULL;
        // a small size stays with it.
        return unsafe { (next::ready().realloc)(p, size) };
    }
    if p.is_null() {
        // SAFETY: plain malloc.
        return unsafe { malloc(size) };
    }
    let n = next::get();
    if in_space(p.cast()) {
        return vm_realloc(n, p, size);
    }
    if bootstrap::contains(p.cast()) {
        // SAFETY: plain malloc.
        let q = unsafe { malloc(size.max(1)) };
        if !q.is_null() {
            let keep = bootstrap::size_of(p.cast()).min(size);
            // SAFETY: `p` holds `keep` bytes, `q` at least `size`; distinct blocks.
            unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), keep) };
        }
        return q;
    }
    let Some(n) = n else { return null_mut() };
    if size >= threshold() {
        if let Some(usable) = n.usable_size {
            // SAFETY: `p` is a live block of the next allocator.
            let old = unsafe { usable(p) };
            if old < threshold() {
                if let Some(q) = vm_alloc(size, 0, false) {
                    // SAFETY: `p` holds `old` usable bytes, `q` at least `size`; distinct.
                    unsafe {
                        std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), old.min(size));
                        (n.free)(p);
                    }
                    count(&C.moved_in, 1);
                    return q;
                }
            }
        }
    }
    // SAFETY: the next allocator's realloc of its own block.
    unsafe { (n.realloc)(p, size) }
}

fn vm_realloc(n: Option<&Next>, p: *mut c_void, size: usize) -> *mut c_void {
    let _inside = reentry::enter();
    let Some(s) = space() else { bad_pointer("realloc", p, &VmError::NotLive(p as usize)) };
    if size == 0 {
        // glibc frees and returns NULL for realloc(p, 0).
        vm_free(p);
        return null_mut();
    }
    if size >= threshold() {
        let class = size_class_bytes(size, page());
        let r = catch_unwind(AssertUnwindSafe(|| s.vrealloc(NonNull::new(p.cast()), class)));
        match r {
            Ok(Ok(q)) => {
                count(&C.vm_reallocs, 1);
                return q.as_ptr().cast();
            }
            Ok(Err(e @ VmError::NotLive(_))) => bad_pointer("realloc", p, &e),
            // No room in the space: the next allocator takes the contents below.
            _ => count(&C.fallbacks, 1),
        }
    }
    // Moving out: the area's size is looked up only here (vrealloc above did its own lookup).
    let usable = match s.size(p.cast()) {
        Some(u) => u,
        None => bad_pointer("realloc", p, &VmError::NotLive(p as usize)),
    };
    let q = next_malloc(n, size);
    if q.is_null() {
        set_errno(libc::ENOMEM);
        return null_mut(); // `p` is untouched
    }
    // SAFETY: `p` is a live area of `usable` bytes, `q` a block of at least `size`; distinct.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), usable.min(size)) };
    vm_free(p);
    count(&C.moved_out, 1);
    q
}

/// `int mallopt(int param, int value)`: passed on to the next allocator. Setting one of glibc's
/// thresholds turns glibc's dynamic thresholds off, and so the shim's mirror of them
/// ([`glibc_thresholds`]).
#[no_mangle]
pub unsafe extern "C" fn mallopt(param: c_int, value: c_int) -> c_int {
    let Some(f) = next::get().and_then(|n| n.mallopt) else {
        return 0;
    };
    // SAFETY: the next allocator's mallopt with the caller's arguments.
    let r = unsafe { f(param, value) };
    if r == 1 && glibc_thresholds::FIXING_PARAMS.contains(&param) {
        glibc_thresholds::disable();
    }
    r
}

/// `size_t malloc_usable_size(void *p)`
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        return 0;
    }
    if in_space(p.cast()) {
        return space().and_then(|s| s.size(p.cast())).unwrap_or(0);
    }
    if bootstrap::contains(p.cast()) {
        return bootstrap::size_of(p.cast());
    }
    match next::get().and_then(|n| n.usable_size) {
        // SAFETY: the next allocator's block.
        Some(f) => unsafe { f(p) },
        None => 0,
    }
}

/// The aligned family's common path: vmarena for large sizes and power-of-two alignments,
/// otherwise `fallback` (the next allocator's own function, with its own rules).
fn aligned(align: usize, size: usize, fallback: impl FnOnce(Option<&Next>) -> *mut c_void) -> *mut c_void {
    let n = next::get();
    if size >= threshold() && align.is_power_of_two() && n.is_some() {
        if let Some(p) = vm_alloc(size, align, false) {
            return p;
        }
    }
    if n.is_some() {
        count(&C.next_allocs, 1); // the bootstrap path counts itself
    }
    fallback(n)
}

fn bootstrap_aligned(align: usize, size: usize) -> *mut c_void {
    count(&C.bootstrap_allocs, 1);
    bootstrap::alloc(size, align.next_power_of_two()).cast()
}

/// `int posix_memalign(void **memptr, size_t alignment, size_t size)`
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(memptr: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if !align.is_power_of_two() || align % std::mem::size_of::<*mut c_void>() != 0 {
        return libc::EINVAL;
    }
    let mut rc = 0;
    let p = aligned(align, size, |n| match n.and_then(|n| n.posix_memalign) {
        Some(f) => {
            let mut q = null_mut();
            // SAFETY: the next allocator's posix_memalign with our out pointer.
            rc = unsafe { f(&mut q, align, size) };
            q
        }
        None => bootstrap_aligned(align, size),
    });
    if rc != 0 {
        return rc;
    }
    if p.is_null() && size != 0 {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a writable pointer.
    unsafe { *memptr = p };
    0
}

/// `void *aligned_alloc(size_t alignment, size_t size)`
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    aligned(align, size, |n| match n.and_then(|n| n.aligned_alloc) {
        // SAFETY: the next allocator's aligned_alloc.
        Some(f) => unsafe { f(align, size) },
        None => bootstrap_aligned(align, size),
    })
}

/// `void *memalign(size_t alignment, size_t size)`
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    aligned(align, size, |n| match n.and_then(|n| n.memalign) {
        // SAFETY: the next allocator's memalign.
        Some(f) => unsafe { f(align, size) },
        None => bootstrap_aligned(align, size),
    })
}

/// `void *valloc(size_t size)`
#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    aligned(page(), size, |n| match n.and_then(|n| n.valloc) {
        // SAFETY: the next allocator's valloc.
        Some(f) => unsafe { f(size) },
        None => bootstrap_aligned(page(), size),
    })
}

/// `void *pvalloc(size_t size)`: page aligned, size rounded up to whole pages (one page for 0).
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let Some(rounded) = size.max(1).checked_next_multiple_of(page()) else {
        set_errno(libc::ENOMEM);
        return null_mut();
    };
    aligned(page(), rounded, |n| match n.and_then(|n| n.pvalloc) {
        // SAFETY: the next allocator's pvalloc.
        Some(f) => unsafe { f(size) },
        None => bootstrap_aligned(page(), rounded),
    })
}
