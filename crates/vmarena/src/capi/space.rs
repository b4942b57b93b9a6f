//! Spaces of one's own from C (`vmarena_space_*`): a space with its size, guards, strategy,
//! purge threshold and huge pages, the vmalloc family on it, its statistics, and its destruction,
//! refused with `-EBUSY` while any area of it is live. The default space has handles too
//! (`vmarena_space_default`): every function takes them, and `vmarena_space_destroy` frees such
//! a handle and leaves the space.
//!
//! Owns: the handles, each a box with a magic checked before anything else is read and cleared
//! before the box is freed, as the fixed pools' are. A handle holds its space (or, for the
//! default space, a reference to it); a destroyed space's reservation is unmapped, so a pointer
//! the program kept into it faults, as one into a freed `mmap` would.
#![allow(unsafe_code)]

use super::ffi::{destroy, guarded, no_space, ptr_or_errno, read_sized, status};
use super::stats::{fill_lock_stats, fill_stats, LockStatsC, StatsC};
use crate::default_space::default_space;
use crate::{ArenaOptions, SpaceOptions, Strategy, VmSpace};
use std::ffi::CStr;
use std::ptr::{null_mut, NonNull};
use vmarena_platform::set_errno;

const SPACE_MAGIC: u64 = 0x766d_7370_6163_6501;

/// `struct vmarena_space_options` of the header: every field 0 means its default, and a caller
/// built against an older header passes a smaller `size`, the missing fields taking their
/// defaults.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct SpaceOptionsC {
    /// Bytes of the struct the caller filled (`sizeof`).
    pub size: u64,
    /// The reservation in bytes; 0: 64 GiB.
    pub space_bytes: u64,
    /// Guard pages after each area; 0: one, the kernel's (`VMARENA_SPACE_NO_GUARDS`: none).
    pub guard_pages: u64,
    /// `VMARENA_STRATEGY_NODES` (0), `VMARENA_STRATEGY_SPLIT` (1), `VMARENA_STRATEGY_GLOBAL` (2).
    pub strategy: u64,
    /// Lazy pages above which a purge runs; 0: the kernel's `fls(CPUs) x 8192`.
    pub lazy_max_pages: u64,
    /// `VMARENA_SPACE_NO_GUARDS` (1), `VMARENA_SPACE_NO_HUGE_PAGES` (2).
    pub flags: u64,
}

const NO_GUARDS: u64 = 1;
const NO_HUGE_PAGES: u64 = 2;

/// The space behind a handle: its own, or the default space.
enum Held {
    Own(Box<VmSpace>),
    Default(&'static VmSpace),
}

/// `vmarena_space` of the header.
pub struct SpaceHandle {
    magic: u64,
    space: Held,
}

impl SpaceHandle {
    fn space(&self) -> &VmSpace {
        match &self.space {
            Held::Own(s) => s,
            Held::Default(s) => s,
        }
    }
}

fn handle<'a>(h: *const SpaceHandle) -> Option<&'a SpaceHandle> {
    // SAFETY: the header requires NULL or a handle that `vmarena_space_create` or
    // `vmarena_space_default` returned and no `vmarena_space_destroy` freed; the magic catches
    // most stale or foreign pointers.
    let h = unsafe { h.as_ref()? };
    (h.magic == SPACE_MAGIC).then_some(h)
}

/// Run `f` on the space behind `h`, or return `fallback` with errno EINVAL for an invalid
/// handle.
fn with_space<T>(h: *const SpaceHandle, fallback: T, f: impl FnOnce(&VmSpace) -> T) -> T {
    match handle(h) {
        Some(h) => f(h.space()),
        None => {
            set_errno(libc::EINVAL);
            fallback
        }
    }
}

/// The options a caller asked for, with its struct's missing fields at their defaults; the
/// reason for a refusal.
fn options(opts: *const SpaceOptionsC) -> Result<(SpaceOptions, ArenaOptions), &'static str> {
    let c = read_sized(opts)?;
    if c.flags & !(NO_GUARDS | NO_HUGE_PAGES) != 0 {
        return Err("unknown flags");
    }
    let mut space = SpaceOptions::default();
    if c.space_bytes != 0 {
        space.space_bytes = c.space_bytes;
    }
    if c.guard_pages != 0 {
        space.guard_pages = c.guard_pages;
    }
    if c.flags & NO_GUARDS != 0 {
        if c.guard_pages != 0 {
            return Err("guard pages and no guards");
        }
        space.guard_pages = 0;
    }
    if c.flags & NO_HUGE_PAGES != 0 {
        space.huge_pages = false;
    }
    let strategy = match c.strategy {
        0 => Strategy::Nodes,
        1 => Strategy::Split,
        2 => Strategy::Global,
        _ => return Err("unknown strategy"),
    };
    let arena = ArenaOptions { strategy, lazy_max_pages: c.lazy_max_pages, ..ArenaOptions::default() };
    Ok((space, arena))
}

/// `vmarena_space *vmarena_space_create(const char *name, const struct vmarena_space_options
/// *opts);` NULL with errno EINVAL (bad options or name) or ENOMEM (no room for the space).
///
/// # Safety
/// `name` is NULL (the space is called "space") or a NUL-terminated string; `opts` is NULL (every
/// default) or points to `opts->size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn vmarena_space_create(
    name: *const libc::c_char,
    opts: *const SpaceOptionsC,
) -> *mut SpaceHandle {
    guarded(null_mut(), || {
        let name = if name.is_null() {
            "space".to_string()
        } else {
            // SAFETY: a NUL-terminated string (contract above).
            match unsafe { CStr::from_ptr(name) }.to_str() {
                Ok(n) if !n.is_empty() => n.to_string(),
                _ => {
                    set_errno(libc::EINVAL);
                    return null_mut();
                }
            }
        };
        let Ok((space, arena)) = options(opts) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        match VmSpace::new(&name, space, arena) {
            Ok(s) => {
                Box::into_raw(Box::new(SpaceHandle { magic: SPACE_MAGIC, space: Held::Own(Box::new(s)) }))
            }
            Err(_) => {
                set_errno(libc::ENOMEM);
                null_mut()
            }
        }
    })
}

/// `vmarena_space *vmarena_space_default(void);` the default space's handle (one per call;
/// `vmarena_space_destroy` refuses it); NULL with ENOMEM when the space cannot be built.
#[no_mangle]
pub extern "C" fn vmarena_space_default() -> *mut SpaceHandle {
    guarded(null_mut(), || match default_space() {
        Ok(s) => Box::into_raw(Box::new(SpaceHandle { magic: SPACE_MAGIC, space: Held::Default(s) })),
        Err(_) => no_space().cast(),
    })
}

/// `void *vmarena_space_vmalloc(vmarena_space *space, size_t size);`
///
/// # Safety
/// `space` is NULL or a handle from `vmarena_space_create` or `vmarena_space_default` that no
/// `vmarena_space_destroy` freed (its magic is checked first).
#[no_mangle]
pub unsafe extern "C" fn vmarena_space_vmalloc(space: *mut SpaceHandle, size: usize) -> *mut libc::c_void {
    guarded(null_mut(), || with_space(space, null_mut(), |s| ptr_or_errno(s.vmalloc(size))))
}

/// `void *vmarena_space_vzalloc(vmarena_space *space, size_t size);`
///
/// # Safety
/// As [`vmarena_space_vmalloc`].
#[no_mangle]
pub unsafe extern "C" fn vmarena_space_vzalloc(space: *mut SpaceHandle, size: usize) -> *mut libc::c_void {
    guarded(null_mut(), || with_space(space, null_mut(), |s| ptr_or_errno(s.vzalloc(size))))
}

/// `void *vmarena_space_vmalloc_aligned(vmarena_space *space, size_t size, size_t align);`
///
/// # Safety
/// As [`vmarena_space_vmalloc`].
#[no_mangle]
pub unsafe extern "C" fn vmarena_space_vmalloc_aligned(
    space: *mut SpaceHandle,
    size: usize,
    align: usize,
) -> *mut libc::c_void {
    guarded(null_mut(), || with_space(space, null_mut(), |s| ptr_or_errno(s.vmalloc_aligned(size, align))))
}

/// `void *vmarena_space_vrealloc(vmarena_space *space, void *p, size_t size);`
///
/// # Safety
/// As [`vmarena_space_vmalloc`].
#[no_mangle]
pub unsafe extern "C" fn vmarena_space_vrealloc(
    space: *mut SpaceHandle,
    p: *mut libc::c_void,
    size: usize,
) -> *mut libc::c_void {
    guarded(null_mut(), || {
        with_space(space, null_mut(), |s| ptr_or_errno(s.vrealloc(NonNull::new(p.cast()), size)))
    })
}

/// `int vmarena_space_vfree(vmarena_space *space, void *p);` 0 (NULL `p` too); -EINVAL for an
/// invalid handle or anything but a live area start of this space.
///
/// # Safety
/// As [`vmarena_space_vmalloc`].
#[no_mangle]
pub unsafe extern "C" fn vmarena_space_vfree(space: *mut SpaceHandle, p: *mut libc::c_void) -> libc::c_int {
    guarded(-libc::EFAULT, || with_space(space, -libc::EINVAL, |s| status(s.vfree(p.cast()))))
}

/// `size_t vmarena_space_size(vmarena_space *space, const void *p);` usable bytes of a live
/// area, 0 otherwise.
///
/// # Safety
/// As [`vmarena_space_vmalloc`].
#[no_mangle]
pub unsafe extern "C" fn vmarena_space_size(space: *mut SpaceHandle, p: *const libc::c_void) -> usize {
    guarded(0, || with_space(space, 0, |s| s.size(p.cast()).unwrap_or(0)))
}

/// `int vmarena_space_contains(vmarena_space *space, const void *p);` 1 when `p` lies in the
/// space's reservation (the kernel's `is_vmalloc_addr`), 0 otherwise; -EINVAL for an invalid
/// handle.
///
/// # Safety
/// As [`vmarena_space_vmalloc`].
#[no_mangle]
pub unsafe extern "C" fn vmarena_space_contains(
    space: *mut SpaceHandle,
    p: *const libc::c_void,
) -> libc::c_int {
    guarded(-libc::EFAULT, || with_space(space, -libc::EINVAL, |s| s.contains(p.cast()) as libc::c_int))
}

/// `int vmarena_space_purge(vmarena_space *space);` release the memory of every lazily freed
/// area now. 0; -EINVAL for an invalid handle.
///
/// # Safety
/// As [`vmarena_space_vmalloc`].
#[no_mangle]
pub unsafe extern "C" fn vmarena_space_purge(space: *mut SpaceHandle) -> libc::c_int {
    guarded(-libc::EFAULT, || {
        with_space(space, -libc::EINVAL, |s| {
            s.purge();
            0
        })
    })
}

/// `int64_t vmarena_space_shrink(vmarena_space *space);` the shrinker: every lazy area
/// released, every pool drained. The pages released; -EINVAL for an invalid handle.
///
/// # Safety
/// As [`vmarena_space_vmalloc`].
#[no_mangle]
pub unsafe extern "C" fn vmarena_space_shrink(space: *mut SpaceHandle) -> i64 {
    guarded(-libc::EFAULT as i64, || with_space(space, -libc::EINVAL as i64, |s| s.shrink() as i64))
}

/// `int vmarena_space_stats(vmarena_space *space, struct vmarena_stats *out);` as
/// `vmarena_stats`, for this space.
///
/// # Safety
/// As [`vmarena_space_vmalloc`]; `out` as `vmarena_stats` requires.
#[no_mangle]
pub unsafe extern "C" fn vmarena_space_stats(space: *mut SpaceHandle, out: *mut StatsC) -> libc::c_int {
    guarded(-libc::EFAULT, || with_space(space, -libc::EINVAL, |s| fill_stats(out, &s.stats(false).arena)))
}

/// `int vmarena_space_lock_stats(vmarena_space *space, struct vmarena_lock_stats *out);` as
/// `vmarena_lock_stats`, for this space.
///
/// # Safety
/// As [`vmarena_space_vmalloc`]; `out` as `vmarena_lock_stats` requires.
#[no_mangle]
pub unsafe extern "C" fn vmarena_space_lock_stats(
    space: *mut SpaceHandle,
    out: *mut LockStatsC,
) -> libc::c_int {
    guarded(-libc::EFAULT, || with_space(space, -libc::EINVAL, |s| fill_lock_stats(out, Some(s))))
}

/// `int vmarena_space_destroy(vmarena_space *space);` free the space and its reservation. 0
/// (NULL is a no-op); -EBUSY while any area of it is live (nothing changes); -EINVAL for an
/// invalid handle. The default space's handle is freed, the space stays.
///
/// # Safety
/// As [`vmarena_space_vmalloc`]; no other thread uses the space during or after the call.
#[no_mangle]
pub unsafe extern "C" fn vmarena_space_destroy(space: *mut SpaceHandle) -> libc::c_int {
    // SAFETY: the contract above; `destroy` checks the magic first.
    unsafe {
        destroy(
            space,
            |h| handle(h).is_some(),
            |h| matches!(h.space, Held::Own(_)) && h.space().stats(false).arena.live_areas > 0,
            |h| h.magic = 0,
        )
    }
}
