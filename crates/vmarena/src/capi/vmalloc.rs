//! The header's first section: the vmalloc family over the default space (`vmarena_vmalloc`,
//! `vmarena_vzalloc`, the aligned and huge forms, `vmarena_vrealloc`, `vmarena_vfree`,
//! `vmarena_size`, `vmarena_purge`). The two hot calls try this CPU's stack and this thread's
//! magazine first without a call that could panic; the rest runs out of line under
//! `ffi::guarded`.
#![allow(unsafe_code)]

use super::ffi::{guarded, no_space, ptr_or_errno, status};
use crate::abi_hit::AbiHit;
use crate::default_space::{default_space, existing_default_space};
use crate::space::{VmError, VmSpace};
use std::panic::Location;
use std::ptr::{null_mut, NonNull};
use vmarena_engine::caches::hit_path::HitFree;

/// An area from the default space: `f`'s pointer, or NULL with its errno (ENOMEM when the space
/// cannot be built); a panic is caught (`ffi::guarded`).
fn from_default(f: impl FnOnce(&'static VmSpace) -> Result<NonNull<u8>, VmError>) -> *mut libc::c_void {
    guarded(null_mut(), || match default_space() {
        Ok(s) => ptr_or_errno(f(s)),
        Err(_) => no_space(),
    })
}

/// `void *vmarena_vmalloc(size_t size);`
#[no_mangle]
pub extern "C" fn vmarena_vmalloc(size: usize) -> *mut libc::c_void {
    // A hit on this CPU's stack makes no call and cannot panic; everything else is out of line.
    if let Some(p) = AbiHit::get().and_then(|h| h.alloc(size)) {
        return p.as_ptr().cast();
    }
    vmalloc_rest(size, Location::caller())
}

/// Past this CPU's stack: a hit in this thread's magazine makes no call and cannot panic
/// either (where there are no per-CPU stacks, the only hit); the rest is out of line again, so
/// that this function saves only the registers the magazine's hit needs.
#[inline(never)]
fn vmalloc_rest(size: usize, caller: &'static Location<'static>) -> *mut libc::c_void {
    if let Some(p) = existing_default_space().and_then(|s| s.vmalloc_hit(size, caller)) {
        return p.as_ptr().cast();
    }
    vmalloc_slow(size, caller)
}

#[inline(never)]
#[cold]
fn vmalloc_slow(size: usize, caller: &'static Location<'static>) -> *mut libc::c_void {
    from_default(|s| {
        // The first miss publishes the per-CPU hit paths (`vmarena_vmalloc`'s caller).
        AbiHit::publish(s, caller);
        s.vmalloc(size)
    })
}

/// `void *vmarena_vzalloc(size_t size);`
#[no_mangle]
pub extern "C" fn vmarena_vzalloc(size: usize) -> *mut libc::c_void {
    from_default(|s| s.vzalloc(size))
}

/// `void *vmarena_vmalloc_aligned(size_t size, size_t align);`
#[no_mangle]
pub extern "C" fn vmarena_vmalloc_aligned(size: usize, align: usize) -> *mut libc::c_void {
    from_default(|s| s.vmalloc_aligned(size, align))
}

/// `void *vmarena_vmalloc_huge(size_t size);` the kernel's `vmalloc_huge`: whole huge pages,
/// aligned to one and advised for transparent huge pages, from one huge page up; base pages below.
#[no_mangle]
pub extern "C" fn vmarena_vmalloc_huge(size: usize) -> *mut libc::c_void {
    from_default(|s| s.vmalloc_huge(size))
}

/// `void *vmarena_vmalloc_hugetlb(size_t size);` `vmarena_vmalloc_huge` backed by reserved huge
/// pages (`MAP_HUGETLB`) when the system has them reserved, else as `vmarena_vmalloc_huge`.
#[no_mangle]
pub extern "C" fn vmarena_vmalloc_hugetlb(size: usize) -> *mut libc::c_void {
    from_default(|s| s.vmalloc_hugetlb(size))
}

/// `void *vmarena_vrealloc(void *p, size_t size);`
#[no_mangle]
pub extern "C" fn vmarena_vrealloc(p: *mut libc::c_void, size: usize) -> *mut libc::c_void {
    from_default(|s| s.vrealloc(NonNull::new(p.cast()), size))
}

/// `int vmarena_vfree(void *p);` 0, or -EINVAL if `p` is not a live area start; NULL is a no-op.
#[no_mangle]
pub extern "C" fn vmarena_vfree(p: *mut libc::c_void) -> libc::c_int {
    // A free onto this CPU's stack makes no call and cannot panic; everything else (and every
    // refusal) is out of line.
    if let Some(h) = AbiHit::get() {
        match h.free(p.cast()) {
            HitFree::Cached => return 0,
            HitFree::Claimed => return vfree_claimed(p),
            HitFree::No => {}
        }
    }
    vfree_rest(p)
}

/// The free of an area whose word the hit path claimed and whose CPU stack was full.
#[inline(never)]
fn vfree_claimed(p: *mut libc::c_void) -> libc::c_int {
    guarded(-libc::EFAULT, || match existing_default_space() {
        Some(s) => status(s.vfree_claimed(p.cast())),
        // The hit paths are published only once the space exists.
        None => -libc::EFAULT,
    })
}

/// Past this CPU's stack: a free into this thread's magazine makes no call and cannot panic
/// either; the rest (and every refusal) is out of line again, as for `vmalloc_rest`.
#[inline(never)]
fn vfree_rest(p: *mut libc::c_void) -> libc::c_int {
    if existing_default_space().is_some_and(|s| s.vfree_hit(p.cast())) {
        return 0;
    }
    vfree_slow(p)
}

#[inline(never)]
#[cold]
fn vfree_slow(p: *mut libc::c_void) -> libc::c_int {
    guarded(-libc::EFAULT, || {
        if p.is_null() {
            return 0;
        }
        let r = match default_space() {
            Ok(s) => s.vfree(p.cast()),
            Err(_) => Err(VmError::NotLive(p as usize)),
        };
        status(r)
    })
}

/// `size_t vmarena_size(const void *p);` usable bytes of a live area, 0 otherwise.
#[no_mangle]
pub extern "C" fn vmarena_size(p: *const libc::c_void) -> usize {
    guarded(0, || existing_default_space().and_then(|s| s.size(p.cast())).unwrap_or(0))
}

/// `int vmarena_purge(void);` release cached memory now; 0.
#[no_mangle]
pub extern "C" fn vmarena_purge() -> libc::c_int {
    guarded(-libc::EFAULT, || {
        if let Some(s) = existing_default_space() {
            s.purge();
        }
        0
    })
}
