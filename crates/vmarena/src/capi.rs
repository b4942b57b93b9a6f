//! The C ABI (`include/vmarena.h`), over the default space.
//!
//! Every function catches panics: no unwind crosses into C. Failures return NULL (or -EINVAL)
//! and set errno: EINVAL for bad input (size 0, alignment not a power of two, a pointer that is
//! not the start of a live area), ENOMEM when the space is exhausted after a full purge or the
//! size overflows, EAGAIN never for these calls.
#![allow(clippy::missing_safety_doc)]

use crate::default_space::default_space;
use crate::space::VmError;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{null_mut, NonNull};
use vmarena_platform::set_errno;

fn guarded<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_errno(libc::EFAULT);
        fallback
    })
}

fn ptr_or_errno(r: Result<NonNull<u8>, VmError>) -> *mut libc::c_void {
    match r {
        Ok(p) => p.as_ptr().cast(),
        Err(e) => {
            set_errno(e.errno());
            null_mut()
        }
    }
}

fn no_space() -> *mut libc::c_void {
    set_errno(libc::ENOMEM);
    null_mut()
}

/// `void *vmarena_vmalloc(size_t size);`
#[no_mangle]
pub extern "C" fn vmarena_vmalloc(size: usize) -> *mut libc::c_void {
    guarded(null_mut(), || match default_space() {
        Ok(s) => ptr_or_errno(s.vmalloc(size)),
        Err(_) => no_space(),
    })
}

/// `void *vmarena_vzalloc(size_t size);`
#[no_mangle]
pub extern "C" fn vmarena_vzalloc(size: usize) -> *mut libc::c_void {
    guarded(null_mut(), || match default_space() {
        Ok(s) => ptr_or_errno(s.vzalloc(size)),
        Err(_) => no_space(),
    })
}

/// `void *vmarena_vmalloc_aligned(size_t size, size_t align);`
#[no_mangle]
pub extern "C" fn vmarena_vmalloc_aligned(size: usize, align: usize) -> *mut libc::c_void {
    guarded(null_mut(), || match default_space() {
        Ok(s) => ptr_or_errno(s.vmalloc_aligned(size, align)),
        Err(_) => no_space(),
    })
}

/// `void *vmarena_vrealloc(void *p, size_t size);`
#[no_mangle]
pub extern "C" fn vmarena_vrealloc(p: *mut libc::c_void, size: usize) -> *mut libc::c_void {
    guarded(null_mut(), || match default_space() {
        Ok(s) => ptr_or_errno(s.vrealloc(NonNull::new(p.cast()), size)),
        Err(_) => no_space(),
    })
}

/// `int vmarena_vfree(void *p);` 0, or -EINVAL if `p` is not a live area start; NULL is a no-op.
#[no_mangle]
pub extern "C" fn vmarena_vfree(p: *mut libc::c_void) -> libc::c_int {
    guarded(-libc::EFAULT, || {
        if p.is_null() {
            return 0;
        }
        let r = match default_space() {
            Ok(s) => s.vfree(p.cast()),
            Err(_) => Err(VmError::NotLive(p as usize)),
        };
        match r {
            Ok(()) => 0,
            Err(e) => {
                set_errno(e.errno());
                -e.errno()
            }
        }
    })
}

/// `size_t vmarena_size(const void *p);` usable bytes of a live area, 0 otherwise.
#[no_mangle]
pub extern "C" fn vmarena_size(p: *const libc::c_void) -> usize {
    guarded(0, || match crate::default_space::default_space_exists() {
        true => default_space().ok().and_then(|s| s.size(p.cast())).unwrap_or(0),
        false => 0,
    })
}

/// `int vmarena_purge(void);` release cached memory now; 0.
#[no_mangle]
pub extern "C" fn vmarena_purge() -> libc::c_int {
    guarded(-libc::EFAULT, || {
        if crate::default_space::default_space_exists() {
            if let Ok(s) = default_space() {
                s.purge();
            }
        }
        0
    })
}
