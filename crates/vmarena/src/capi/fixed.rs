//! Fixed pools from C (`vmarena_fixed_*`): the handle, its magic and its statistics struct.
#![allow(unsafe_code)]

use super::ffi::{destroy, guarded, status};
use crate::default_space::default_space;
use std::ptr::null_mut;
use vmarena_platform::set_errno;

/// `struct vmarena_fixed_stats` of the header: a fixed pool's figures.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FixedStatsC {
    /// Slots in the pool.
    pub slots: u64,
    /// Slots held by callers now.
    pub held: u64,
    /// Gets served from this CPU's cached slot.
    pub cache_hits: u64,
    /// Gets served from the global list.
    pub list_pops: u64,
    /// Gets that took a slot cached on another CPU.
    pub steals: u64,
    /// Times a getter slept on an empty pool.
    pub sleeps: u64,
    /// Timed gets that gave up.
    pub timeouts: u64,
    /// Puts parked in this CPU's cache entry.
    pub cache_parks: u64,
    /// Puts pushed on the global list.
    pub list_pushes: u64,
    /// Slots whose memory was released.
    pub releases: u64,
    /// madvise/process_madvise calls made.
    pub release_calls: u64,
}

const FIXED_MAGIC: u64 = 0x7666_6978_6564_0001;

// The fixed-pool functions are `unsafe`: their pool argument must be NULL or a pointer from
// `vmarena_fixed_create` not yet destroyed (the header says so), and `out` must be writable.

/// `vmarena_fixed` of the header: a fixed pool over the default space.
pub struct FixedHandle {
    magic: u64,
    pool: crate::FixedPool<'static>,
}

fn handle<'a>(h: *const FixedHandle) -> Option<&'a FixedHandle> {
    // SAFETY: the header requires a pointer returned by vmarena_fixed_create and not yet
    // destroyed (or NULL); the magic catches NULL and most stale or foreign pointers.
    let h = unsafe { h.as_ref()? };
    (h.magic == FIXED_MAGIC).then_some(h)
}

/// `vmarena_fixed *vmarena_fixed_create(size_t slot_size, size_t slot_count);`
#[no_mangle]
pub extern "C" fn vmarena_fixed_create(slot_size: usize, slot_count: usize) -> *mut FixedHandle {
    guarded(null_mut(), || {
        let Ok(space) = default_space() else {
            set_errno(libc::ENOMEM);
            return null_mut();
        };
        let mut opts = crate::FixedOptions::from_env();
        opts.slot_bytes = slot_size as u64;
        opts.slots = slot_count as u64;
        match crate::FixedPool::new(space, "c_abi", &opts) {
            Ok(pool) => Box::into_raw(Box::new(FixedHandle { magic: FIXED_MAGIC, pool })),
            Err(e) => {
                set_errno(e.errno());
                null_mut()
            }
        }
    })
}

/// Run `f` on the pool behind `h`; `fallback` (and errno EINVAL) for an invalid handle, and
/// `fallback` when `f` returns `None` (it has set errno).
fn with_pool<T: Copy>(
    h: *const FixedHandle,
    fallback: T,
    f: impl FnOnce(&crate::FixedPool<'static>) -> Option<T>,
) -> T {
    guarded(fallback, || match handle(h) {
        Some(h) => f(&h.pool).unwrap_or(fallback),
        None => {
            set_errno(libc::EINVAL);
            fallback
        }
    })
}

/// `void *vmarena_fixed_get(vmarena_fixed *pool);` blocks until a slot is free.
///
/// # Safety
/// `pool` is NULL or what `vmarena_fixed_create` returned and no `vmarena_fixed_destroy` freed
/// (its magic is checked before anything else is read, so a foreign or destroyed handle is
/// refused unless its memory has been reused); a pointer out-parameter is NULL or points to
/// writable memory of its type.
#[no_mangle]
pub unsafe extern "C" fn vmarena_fixed_get(pool: *mut FixedHandle) -> *mut libc::c_void {
    with_pool(pool, null_mut(), |p| Some(p.get().as_ptr().cast()))
}

/// `void *vmarena_fixed_try_get(vmarena_fixed *pool);` NULL and EAGAIN when none is free.
///
/// # Safety
/// `pool` is NULL or what `vmarena_fixed_create` returned and no `vmarena_fixed_destroy` freed
/// (its magic is checked before anything else is read, so a foreign or destroyed handle is
/// refused unless its memory has been reused); a pointer out-parameter is NULL or points to
/// writable memory of its type.
#[no_mangle]
pub unsafe extern "C" fn vmarena_fixed_try_get(pool: *mut FixedHandle) -> *mut libc::c_void {
    with_pool(pool, null_mut(), |p| match p.try_get() {
        Some(s) => Some(s.as_ptr().cast()),
        None => {
            set_errno(libc::EAGAIN);
            None
        }
    })
}

/// `void *vmarena_fixed_get_timeout(vmarena_fixed *pool, uint64_t timeout_ns);` NULL and
/// ETIMEDOUT when none is free in time.
///
/// # Safety
/// `pool` is NULL or what `vmarena_fixed_create` returned and no `vmarena_fixed_destroy` freed
/// (its magic is checked before anything else is read, so a foreign or destroyed handle is
/// refused unless its memory has been reused); a pointer out-parameter is NULL or points to
/// writable memory of its type.
#[no_mangle]
pub unsafe extern "C" fn vmarena_fixed_get_timeout(
    pool: *mut FixedHandle,
    timeout_ns: u64,
) -> *mut libc::c_void {
    with_pool(pool, null_mut(), |p| match p.get_timeout(std::time::Duration::from_nanos(timeout_ns)) {
        Some(s) => Some(s.as_ptr().cast()),
        None => {
            set_errno(libc::ETIMEDOUT);
            None
        }
    })
}

/// `int vmarena_fixed_put(vmarena_fixed *pool, void *p);` 0, or -EINVAL (nothing changes).
///
/// # Safety
/// `pool` is NULL or what `vmarena_fixed_create` returned and no `vmarena_fixed_destroy` freed
/// (its magic is checked before anything else is read, so a foreign or destroyed handle is
/// refused unless its memory has been reused); a pointer out-parameter is NULL or points to
/// writable memory of its type.
#[no_mangle]
pub unsafe extern "C" fn vmarena_fixed_put(pool: *mut FixedHandle, p: *mut libc::c_void) -> libc::c_int {
    with_pool(pool, -libc::EINVAL, |pool| Some(status(pool.put(p.cast()))))
}

/// `size_t vmarena_fixed_slot_size(const vmarena_fixed *pool);` 0 for an invalid pool.
///
/// # Safety
/// `pool` is NULL or what `vmarena_fixed_create` returned and no `vmarena_fixed_destroy` freed
/// (its magic is checked before anything else is read, so a foreign or destroyed handle is
/// refused unless its memory has been reused); a pointer out-parameter is NULL or points to
/// writable memory of its type.
#[no_mangle]
pub unsafe extern "C" fn vmarena_fixed_slot_size(pool: *const FixedHandle) -> usize {
    with_pool(pool, 0, |p| Some(p.slot_bytes()))
}

/// `int vmarena_fixed_stats(const vmarena_fixed *pool, struct vmarena_fixed_stats *out);`
///
/// # Safety
/// `pool` is NULL or what `vmarena_fixed_create` returned and no `vmarena_fixed_destroy` freed
/// (its magic is checked before anything else is read, so a foreign or destroyed handle is
/// refused unless its memory has been reused); a pointer out-parameter is NULL or points to
/// writable memory of its type.
#[no_mangle]
pub unsafe extern "C" fn vmarena_fixed_stats(pool: *const FixedHandle, out: *mut FixedStatsC) -> libc::c_int {
    with_pool(pool, -libc::EINVAL, |p| {
        if out.is_null() {
            set_errno(libc::EINVAL);
            return Some(-libc::EINVAL);
        }
        let c = p.cache_stats();
        let s = FixedStatsC {
            slots: c.slots,
            held: c.held,
            cache_hits: c.cache_hits,
            list_pops: c.list_pops,
            steals: c.steals,
            sleeps: c.sleeps,
            timeouts: c.timeouts,
            cache_parks: c.cache_parks,
            list_pushes: c.list_pushes,
            releases: c.releases,
            release_calls: p.stats(false).release_calls,
        };
        // SAFETY: `out` is non-null and, per the header, points to a writable struct.
        unsafe { out.write(s) };
        Some(0)
    })
}

/// `int vmarena_fixed_destroy(vmarena_fixed *pool);` 0; -EBUSY while a slot is held (nothing
/// changes); NULL is a no-op returning 0.
///
/// # Safety
/// `pool` is NULL or what `vmarena_fixed_create` returned and no `vmarena_fixed_destroy` freed
/// (its magic is checked before anything else is read, so a foreign or destroyed handle is
/// refused unless its memory has been reused); a pointer out-parameter is NULL or points to
/// writable memory of its type.
#[no_mangle]
pub unsafe extern "C" fn vmarena_fixed_destroy(pool: *mut FixedHandle) -> libc::c_int {
    // SAFETY: the header's contract on `pool`, as for every fixed-pool function.
    unsafe { destroy(pool, |h| handle(h).is_some(), |h| h.pool.cache_stats().held > 0, |h| h.magic = 0) }
}
