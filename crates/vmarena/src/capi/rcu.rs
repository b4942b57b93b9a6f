//! Deferred frees from C: read-side sections and grace periods of the process's domain
//! (`vmarena_read_lock`, `vmarena_kvfree_rcu`, `vmarena_synchronize`, ...).
#![allow(unsafe_code)]

use super::ffi::{errno_status, guarded};

/// `int vmarena_read_lock(void);` enter a read-side section of the process's grace-period
/// domain (nesting allowed): areas retired from now on stay allocated until it ends. 0, or
/// -ENOMEM when the default space cannot be built.
#[no_mangle]
pub extern "C" fn vmarena_read_lock() -> libc::c_int {
    guarded(-libc::EFAULT, || errno_status(crate::deferred_free::read_lock()))
}

/// `int vmarena_read_unlock(void);` leave it. 0, or -EINVAL without a matching lock.
#[no_mangle]
pub extern "C" fn vmarena_read_unlock() -> libc::c_int {
    guarded(-libc::EFAULT, || errno_status(crate::deferred_free::read_unlock()))
}

/// `int vmarena_kvfree_rcu(void *p);` free the area at `p` once every read-side section that
/// may see it has ended (the kernel's one-argument `kvfree_rcu`). 0; NULL is a no-op; -EINVAL
/// for anything but a live `vmalloc` area start, or one already retired.
#[no_mangle]
pub extern "C" fn vmarena_kvfree_rcu(p: *mut libc::c_void) -> libc::c_int {
    guarded(-libc::EFAULT, || errno_status(crate::deferred_free::kvfree_rcu(p.cast(), false)))
}

/// `int vmarena_kvfree_rcu_embedded(void *p);` the same without allocating: the area's first 16
/// bytes become the link (the kernel's two-argument form, the `rcu_head` inside the object).
#[no_mangle]
pub extern "C" fn vmarena_kvfree_rcu_embedded(p: *mut libc::c_void) -> libc::c_int {
    guarded(-libc::EFAULT, || errno_status(crate::deferred_free::kvfree_rcu(p.cast(), true)))
}

/// `int vmarena_synchronize(void);` wait until every area retired before the call is freed
/// (`synchronize_rcu` and the frees). 0, or -EDEADLK inside a read-side section.
#[no_mangle]
pub extern "C" fn vmarena_synchronize() -> libc::c_int {
    guarded(-libc::EFAULT, || errno_status(crate::deferred_free::synchronize()))
}
