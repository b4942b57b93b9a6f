//! Per-CPU objects from C (`vmarena_percpu_*`, the kernel's `alloc_percpu`), from one pool over
//! the default space built on first use.
#![allow(unsafe_code)]

use super::ffi::{guarded, ptr_or_errno, status};
use crate::default_space::default_space;
use crate::space::VmError;
use std::ptr::{null_mut, NonNull};
use vmarena_platform::set_errno;

/// The process's per-CPU object pool over the default space, built on first use.
fn percpu_pool() -> Result<&'static crate::PercpuPool<&'static crate::VmSpace>, VmError> {
    type Pool = std::sync::Arc<crate::PercpuPool<&'static crate::VmSpace>>;
    static POOL: vmarena_platform::fork_once::ForkOnce<Result<Pool, VmError>> =
        vmarena_platform::fork_once::ForkOnce::new();
    POOL.get_or_init_shared(|| {
        let _inside = vmarena_platform::reentry::enter();
        let space = default_space().map_err(|e| VmError::NoSpace(e.to_string()))?;
        crate::PercpuPool::new(space, PERCPU_UNIT_BYTES)
    })
    .as_ref()
    .map(|p| &**p)
    .map_err(Clone::clone)
}

/// Bytes per CPU of a chunk of the C ABI's per-CPU pool (address space; pages fault in as
/// they are written).
const PERCPU_UNIT_BYTES: usize = 256 << 10;

/// `void *vmarena_percpu_alloc(size_t size, size_t align);` a per-CPU object (the kernel's
/// `__alloc_percpu`): one copy per possible CPU, each zeroed, aligned to `align` (a power of
/// two, at most a page). Returns the handle (CPU 0's copy), or NULL and errno.
#[no_mangle]
pub extern "C" fn vmarena_percpu_alloc(size: usize, align: usize) -> *mut libc::c_void {
    guarded(null_mut(), || match percpu_pool() {
        Ok(pool) => ptr_or_errno(pool.alloc(size, align)),
        Err(e) => {
            set_errno(e.errno());
            null_mut()
        }
    })
}

/// `void *vmarena_percpu_ptr(void *handle, unsigned cpu);` CPU `cpu`'s copy (`per_cpu_ptr`: one
/// multiply and one add), or NULL for a CPU without one. Checks nothing else.
#[no_mangle]
pub extern "C" fn vmarena_percpu_ptr(handle: *mut libc::c_void, cpu: libc::c_uint) -> *mut libc::c_void {
    guarded(null_mut(), || {
        let (Ok(pool), Some(h)) = (percpu_pool(), NonNull::new(handle.cast::<u8>())) else {
            return null_mut();
        };
        pool.ptr(h, cpu as usize).map_or(null_mut(), |p| p.as_ptr().cast())
    })
}

/// `unsigned vmarena_percpu_cpus(void);` the CPUs a per-CPU object has a copy for (the
/// possible CPUs): `vmarena_percpu_ptr` answers for `0 <= cpu < vmarena_percpu_cpus()`.
#[no_mangle]
pub extern "C" fn vmarena_percpu_cpus() -> libc::c_uint {
    guarded(0, || percpu_pool().map_or(0, |p| p.cpus() as libc::c_uint))
}

/// `size_t vmarena_percpu_stride(void);` the bytes between CPU `c`'s copy of any per-CPU
/// object and CPU `c + 1`'s (the same for every object): `handle + cpu * stride` is CPU
/// `cpu`'s copy, as `vmarena_percpu_ptr` computes it. 0 when the pool cannot be built.
#[no_mangle]
pub extern "C" fn vmarena_percpu_stride() -> usize {
    guarded(0, || percpu_pool().map_or(0, |p| p.stride()))
}

/// `int vmarena_percpu_free(void *handle);` free a per-CPU object. 0; NULL is a no-op;
/// -EINVAL for anything but a live handle.
#[no_mangle]
pub extern "C" fn vmarena_percpu_free(handle: *mut libc::c_void) -> libc::c_int {
    guarded(-libc::EFAULT, || {
        let Some(h) = NonNull::new(handle.cast::<u8>()) else { return 0 };
        match percpu_pool() {
            Ok(pool) => status(pool.free(h)),
            Err(_) => status(Err(VmError::NotLive(handle as usize))),
        }
    })
}
