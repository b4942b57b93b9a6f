//! Frame pools and mappings of frames from C (`vmarena_frames_*`, `vmarena_vmap`,
//! `vmarena_vm_map_ram` and their inverses, `vmarena_vmalloc_to_frame`).
#![allow(unsafe_code)]

use super::ffi::{destroy, guarded, no_space, ptr_or_errno, status};
use crate::default_space::{default_space, existing_default_space};
use crate::space::VmError;
use std::ptr::{null_mut, NonNull};
use vmarena_platform::set_errno;

const FRAMES_MAGIC: u64 = 0x7672_6d66_7261_6d65;

/// `vmarena_frames` of the header: a frame pool.
pub struct FramesHandle {
    magic: u64,
    pool: crate::FramePool,
}

/// `struct vmarena_frame_stats` of the header (the fields of `FrameStats`, in table order).
#[repr(C)]
#[derive(Default)]
pub struct FrameStatsC {
    /// Frames in the zone.
    pub frames: u64,
    /// Frames in free buddy blocks (not counting per-CPU lists and queues).
    pub free_frames: u64,
    /// Frames cached on per-CPU lists.
    pub pcp_frames: u64,
    /// Frames waiting in batch queues for the zone.
    pub queued_frames: u64,
    /// Frames held by callers.
    pub user_frames: u64,
    /// Blocks handed out from a per-CPU list.
    pub pcp_hits: u64,
    /// Refills of a per-CPU list from the zone (one zone lock hold each).
    pub pcp_refills: u64,
    /// Blocks moved by refills.
    pub refill_blocks: u64,
    /// Drains of a per-CPU list to the zone (one zone lock hold each).
    pub pcp_drains: u64,
    /// Blocks moved by drains.
    pub drain_blocks: u64,
    /// Drains started by free_high (a producer CPU freeing order 1..3 blocks).
    pub free_high: u64,
    /// Per-CPU list trylocks that failed (the call went to the zone).
    pub trylock_failures: u64,
    /// Blocks allocated from the zone directly, one lock hold each.
    pub zone_allocs: u64,
    /// Blocks freed to the zone directly, one lock hold each.
    pub zone_frees: u64,
    /// Frees put in a batch queue.
    pub queue_inserts: u64,
    /// Batch queue flushes (one zone lock hold each).
    pub queue_flushes: u64,
    /// Half-full trylocks of the zone that failed (the frees stayed queued).
    pub queue_try_failures: u64,
    /// Flushes that blocked on the zone lock (queue full).
    pub queue_blocking_flushes: u64,
    /// Compound descriptors written (blocks of more than one frame made whole).
    pub compound_preps: u64,
    /// Compound descriptors cleared.
    pub compound_dismantles: u64,
    /// Nanoseconds preparing and dismantling compound blocks (measured while lock timing is on).
    pub compound_ns: u64,
    /// Decay ticks applied to per-CPU lists.
    pub pcp_decays: u64,
    /// Allocations that found no frames, after draining every list and queue.
    pub alloc_failures: u64,
    /// Frees refused: not the head of a block held by a caller, or of another order.
    pub bad_frees: u64,
}

fn frames_handle<'a>(h: *const FramesHandle) -> Option<&'a FramesHandle> {
    // SAFETY: the header requires a pointer returned by vmarena_frames_create and not yet
    // destroyed (or NULL); the magic catches NULL and most stale or foreign pointers.
    let h = unsafe { h.as_ref()? };
    (h.magic == FRAMES_MAGIC).then_some(h)
}

fn with_frames<T>(h: *const FramesHandle, fallback: T, f: impl FnOnce(&crate::FramePool) -> T) -> T {
    guarded_with(|| match frames_handle(h) {
        Some(h) => Some(f(&h.pool)),
        None => {
            set_errno(libc::EINVAL);
            None
        }
    })
    .unwrap_or(fallback)
}

fn guarded_with<T>(f: impl FnOnce() -> Option<T>) -> Option<T> {
    guarded(None, f)
}

/// `vmarena_frames *vmarena_frames_create(size_t bytes);`
#[no_mangle]
pub extern "C" fn vmarena_frames_create(bytes: usize) -> *mut FramesHandle {
    guarded(null_mut(), || {
        let page = vmarena_platform::page_size() as u64;
        let frames = bytes as u64 / page;
        if frames == 0 || frames > 1 << 31 {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        match crate::FramePool::new("c_abi_frames", frames * page, vmarena_engine::FrameOptions::from_env()) {
            Ok(pool) => Box::into_raw(Box::new(FramesHandle { magic: FRAMES_MAGIC, pool })),
            Err(_) => {
                set_errno(libc::ENOMEM);
                null_mut()
            }
        }
    })
}

/// `int64_t vmarena_frames_alloc(vmarena_frames *pool, unsigned order);`
///
/// # Safety
/// `pool` is NULL or what `vmarena_frames_create` returned and no `vmarena_frames_destroy`
/// freed (its magic is checked first, as for fixed pools); an array argument points to
/// `count` (or `n`) elements of its type, readable (input) or writable (output), or is NULL
/// with a count of 0; a struct out-parameter is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vmarena_frames_alloc(pool: *mut FramesHandle, order: libc::c_uint) -> i64 {
    with_frames(pool, -libc::EINVAL as i64, |p| match p.alloc(order) {
        Ok(f) => f as i64,
        Err(e) => {
            set_errno(e.errno());
            -e.errno() as i64
        }
    })
}

/// `size_t vmarena_frames_alloc_bulk(vmarena_frames *pool, size_t n, uint32_t *out);`
///
/// # Safety
/// `pool` is NULL or what `vmarena_frames_create` returned and no `vmarena_frames_destroy`
/// freed (its magic is checked first, as for fixed pools); an array argument points to
/// `count` (or `n`) elements of its type, readable (input) or writable (output), or is NULL
/// with a count of 0; a struct out-parameter is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vmarena_frames_alloc_bulk(
    pool: *mut FramesHandle,
    n: usize,
    out: *mut u32,
) -> usize {
    if out.is_null() && n > 0 {
        set_errno(libc::EINVAL);
        return 0;
    }
    with_frames(pool, 0, |p| {
        let mut v = Vec::with_capacity(n.min(1 << 20));
        let got = p.alloc_bulk(n, &mut v);
        // SAFETY: the header requires `out` to have room for `n` frames; got <= n.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out, got) };
        if got < n {
            set_errno(libc::ENOMEM);
        }
        got
    })
}

/// `int vmarena_frames_free(vmarena_frames *pool, uint32_t frame, unsigned order);`
///
/// # Safety
/// `pool` is NULL or what `vmarena_frames_create` returned and no `vmarena_frames_destroy`
/// freed (its magic is checked first, as for fixed pools); an array argument points to
/// `count` (or `n`) elements of its type, readable (input) or writable (output), or is NULL
/// with a count of 0; a struct out-parameter is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vmarena_frames_free(
    pool: *mut FramesHandle,
    frame: u32,
    order: libc::c_uint,
) -> libc::c_int {
    with_frames(pool, -libc::EINVAL, |p| status(p.free(frame, order)))
}

/// `int vmarena_frames_fd(const vmarena_frames *pool);`
///
/// # Safety
/// `pool` is NULL or what `vmarena_frames_create` returned and no `vmarena_frames_destroy`
/// freed (its magic is checked first, as for fixed pools); an array argument points to
/// `count` (or `n`) elements of its type, readable (input) or writable (output), or is NULL
/// with a count of 0; a struct out-parameter is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vmarena_frames_fd(pool: *const FramesHandle) -> libc::c_int {
    with_frames(pool, -1, |p| p.fd())
}

/// `int vmarena_frames_stats(const vmarena_frames *pool, struct vmarena_frame_stats *out);`
///
/// # Safety
/// `pool` is NULL or what `vmarena_frames_create` returned and no `vmarena_frames_destroy`
/// freed (its magic is checked first, as for fixed pools); an array argument points to
/// `count` (or `n`) elements of its type, readable (input) or writable (output), or is NULL
/// with a count of 0; a struct out-parameter is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vmarena_frames_stats(
    pool: *const FramesHandle,
    out: *mut FrameStatsC,
) -> libc::c_int {
    if out.is_null() {
        set_errno(libc::EINVAL);
        return -libc::EINVAL;
    }
    with_frames(pool, -libc::EINVAL, |p| {
        let s = p.stats();
        let c = FrameStatsC {
            frames: s.frames,
            free_frames: s.free_frames,
            pcp_frames: s.pcp_frames,
            queued_frames: s.queued_frames,
            user_frames: s.user_frames,
            pcp_hits: s.pcp_hits,
            pcp_refills: s.pcp_refills,
            refill_blocks: s.refill_blocks,
            pcp_drains: s.pcp_drains,
            drain_blocks: s.drain_blocks,
            free_high: s.free_high,
            trylock_failures: s.trylock_failures,
            zone_allocs: s.zone_allocs,
            zone_frees: s.zone_frees,
            queue_inserts: s.queue_inserts,
            queue_flushes: s.queue_flushes,
            queue_try_failures: s.queue_try_failures,
            queue_blocking_flushes: s.queue_blocking_flushes,
            compound_preps: s.compound_preps,
            compound_dismantles: s.compound_dismantles,
            compound_ns: s.compound_ns,
            pcp_decays: s.pcp_decays,
            alloc_failures: s.alloc_failures,
            bad_frees: s.bad_frees,
        };
        // SAFETY: the header requires `out` to point to a writable struct vmarena_frame_stats.
        unsafe { out.write(c) };
        0
    })
}

/// `int vmarena_frames_destroy(vmarena_frames *pool);`
///
/// # Safety
/// `pool` is NULL or what `vmarena_frames_create` returned and no `vmarena_frames_destroy`
/// freed (its magic is checked first, as for fixed pools); an array argument points to
/// `count` (or `n`) elements of its type, readable (input) or writable (output), or is NULL
/// with a count of 0; a struct out-parameter is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vmarena_frames_destroy(pool: *mut FramesHandle) -> libc::c_int {
    // Mappings vm_unmap_ram left in place would keep the pool's pages referenced after it.
    let _ = guarded(0, || existing_default_space().map_or(0, |s| s.vm_unmap_aliases()));
    // SAFETY: the header's contract on `pool`, as for every frame-pool function.
    unsafe {
        destroy(pool, |h| frames_handle(h).is_some(), |h| h.pool.stats().user_frames > 0, |h| h.magic = 0)
    }
}

fn frames_slice<'a>(frames: *const u32, count: usize) -> Option<&'a [u32]> {
    // No slice may span more than isize::MAX bytes; no space has that many pages anyway.
    if frames.is_null() || count == 0 || count > isize::MAX as usize / std::mem::size_of::<u32>() {
        set_errno(libc::EINVAL);
        return None;
    }
    // SAFETY: the header requires `frames` to point to `count` readable frame numbers.
    Some(unsafe { std::slice::from_raw_parts(frames, count) })
}

fn map_with(
    pool: *mut FramesHandle,
    frames: *const u32,
    count: usize,
    f: impl FnOnce(&crate::VmSpace, &crate::FramePool, &[u32]) -> Result<NonNull<u8>, VmError>,
) -> *mut libc::c_void {
    with_frames(pool, null_mut(), |p| {
        let Some(fr) = frames_slice(frames, count) else { return null_mut() };
        match default_space() {
            Ok(s) => ptr_or_errno(f(s, p, fr)),
            Err(_) => no_space(),
        }
    })
}

/// `void *vmarena_vmap(vmarena_frames *pool, const uint32_t *frames, size_t count);`
///
/// # Safety
/// `pool` is NULL or what `vmarena_frames_create` returned and no `vmarena_frames_destroy`
/// freed (its magic is checked first, as for fixed pools); an array argument points to
/// `count` (or `n`) elements of its type, readable (input) or writable (output), or is NULL
/// with a count of 0; a struct out-parameter is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vmarena_vmap(
    pool: *mut FramesHandle,
    frames: *const u32,
    count: usize,
) -> *mut libc::c_void {
    map_with(pool, frames, count, |s, p, f| s.vmap(p, f))
}

/// `int vmarena_vunmap(void *p);`
#[no_mangle]
pub extern "C" fn vmarena_vunmap(p: *mut libc::c_void) -> libc::c_int {
    guarded(-libc::EFAULT, || match existing_default_space() {
        Some(s) => status(s.vunmap(p.cast())),
        None => status(Err(VmError::NotLive(p as usize))),
    })
}

/// `void *vmarena_vm_map_ram(vmarena_frames *pool, const uint32_t *frames, size_t count);`
///
/// # Safety
/// `pool` is NULL or what `vmarena_frames_create` returned and no `vmarena_frames_destroy`
/// freed (its magic is checked first, as for fixed pools); an array argument points to
/// `count` (or `n`) elements of its type, readable (input) or writable (output), or is NULL
/// with a count of 0; a struct out-parameter is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vmarena_vm_map_ram(
    pool: *mut FramesHandle,
    frames: *const u32,
    count: usize,
) -> *mut libc::c_void {
    map_with(pool, frames, count, |s, p, f| s.vm_map_ram(p, f))
}

/// `int vmarena_vm_unmap_ram(void *p, size_t count);`
#[no_mangle]
pub extern "C" fn vmarena_vm_unmap_ram(p: *mut libc::c_void, count: usize) -> libc::c_int {
    guarded(-libc::EFAULT, || match existing_default_space() {
        Some(s) => status(s.vm_unmap_ram(p.cast(), count)),
        None => status(Err(VmError::NotLive(p as usize))),
    })
}

/// `int64_t vmarena_vm_unmap_aliases(void);`
#[no_mangle]
pub extern "C" fn vmarena_vm_unmap_aliases() -> i64 {
    guarded(-libc::EFAULT as i64, || existing_default_space().map_or(0, |s| s.vm_unmap_aliases() as i64))
}

/// `int64_t vmarena_vmalloc_to_frame(const void *p);`
#[no_mangle]
pub extern "C" fn vmarena_vmalloc_to_frame(p: *const libc::c_void) -> i64 {
    guarded(-libc::EFAULT as i64, || {
        match existing_default_space().and_then(|s| s.vmalloc_to_frame(p.cast())) {
            Some(f) => f as i64,
            None => {
                set_errno(libc::EINVAL);
                -libc::EINVAL as i64
            }
        }
    })
}
