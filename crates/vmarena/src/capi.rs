//! The C ABI (`include/vmarena.h`), over the default space.
//!
//! Every function catches panics: no unwind crosses into C. Failures return NULL (or -EINVAL)
//! and set errno: EINVAL for bad input (size 0, alignment not a power of two, a pointer that is
//! not the start of a live area), ENOMEM when the space is exhausted after a full purge or the
//! size overflows, EAGAIN never for these calls.
//!
//! The C ABI: raw pointers from C, checked before use, and the writes to out-parameters.
#![allow(unsafe_code)]

use crate::abi_hit::AbiHit;
use crate::default_space::{default_space, existing_default_space};
use crate::space::VmError;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::ptr::{null_mut, NonNull};
use vmarena_engine::hit_path::HitFree;
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
    guarded(null_mut(), || match default_space() {
        Ok(s) => {
            // The first miss publishes the per-CPU hit paths (`vmarena_vmalloc`'s caller).
            AbiHit::publish(s, caller);
            ptr_or_errno(s.vmalloc(size))
        }
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

/// `void *vmarena_vmalloc_huge(size_t size);` the kernel's `vmalloc_huge`: whole huge pages,
/// aligned to one and advised for transparent huge pages, from one huge page up; base pages below.
#[no_mangle]
pub extern "C" fn vmarena_vmalloc_huge(size: usize) -> *mut libc::c_void {
    guarded(null_mut(), || match default_space() {
        Ok(s) => ptr_or_errno(s.vmalloc_huge(size)),
        Err(_) => no_space(),
    })
}

/// `void *vmarena_vmalloc_hugetlb(size_t size);` `vmarena_vmalloc_huge` backed by reserved huge
/// pages (`MAP_HUGETLB`) when the system has them reserved, else as `vmarena_vmalloc_huge`.
#[no_mangle]
pub extern "C" fn vmarena_vmalloc_hugetlb(size: usize) -> *mut libc::c_void {
    guarded(null_mut(), || match default_space() {
        Ok(s) => ptr_or_errno(s.vmalloc_hugetlb(size)),
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

/// Free a handle made by `Box::into_raw`: 0 (NULL is a no-op), -EINVAL for an invalid handle,
/// -EBUSY while `busy` says it is in use (nothing changes).
///
/// # Safety
/// `ptr` is NULL or a pointer its create function returned and nobody destroyed; `valid` checks
/// the handle's magic before anything else reads it, and `clear` wipes the magic before the free.
unsafe fn destroy<H>(
    ptr: *mut H,
    valid: impl Fn(*const H) -> bool,
    busy: impl Fn(&H) -> bool,
    clear: impl Fn(&mut H),
) -> libc::c_int {
    if ptr.is_null() {
        return 0;
    }
    guarded(-libc::EFAULT, || {
        if !valid(ptr) {
            set_errno(libc::EINVAL);
            return -libc::EINVAL;
        }
        // SAFETY: `valid` matched the magic of a live handle (contract above).
        if busy(unsafe { &*ptr }) {
            set_errno(libc::EBUSY);
            return -libc::EBUSY;
        }
        // SAFETY: `ptr` came from Box::into_raw (the magic matched) and is destroyed once: the
        // magic is cleared before the memory is freed.
        let mut b = unsafe { Box::from_raw(ptr) };
        clear(&mut b);
        drop(b);
        0
    })
}

// ---- Frame pools ------------------------------------------------------------------------

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

/// 0, or `-errno` with errno set.
fn status(r: Result<(), VmError>) -> libc::c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e.errno());
            -e.errno()
        }
    }
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

fn errno_status(r: Result<(), i32>) -> libc::c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -e
        }
    }
}

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

/// The process's per-CPU object pool over the default space, built on first use.
fn percpu_pool() -> Result<&'static crate::PercpuPool<&'static crate::VmSpace>, VmError> {
    type Pool = std::sync::Arc<crate::PercpuPool<&'static crate::VmSpace>>;
    static POOL: vmarena_platform::fork_once::ForkOnce<Result<Pool, VmError>> =
        vmarena_platform::fork_once::ForkOnce::new();
    POOL.get_or_init(|| {
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

/// `unsigned vmarena_version(void);` the library's version, `major << 16 | minor << 8 | patch`
/// (the header's `VMARENA_VERSION` is what a program was compiled against).
#[no_mangle]
pub extern "C" fn vmarena_version() -> libc::c_uint {
    const fn num(s: &str) -> u32 {
        let b = s.as_bytes();
        let mut i = 0;
        let mut v = 0;
        while i < b.len() {
            v = v * 10 + (b[i] - b'0') as u32;
            i += 1;
        }
        v
    }
    const V: u32 = num(env!("CARGO_PKG_VERSION_MAJOR")) << 16
        | num(env!("CARGO_PKG_VERSION_MINOR")) << 8
        | num(env!("CARGO_PKG_VERSION_PATCH"));
    V
}

/// `size_t vmarena_pressure(void);` raise a low-memory event: every space, fixed pool and
/// frame pool releases the memory it caches. Returns the bytes released.
#[no_mangle]
pub extern "C" fn vmarena_pressure() -> usize {
    guarded(0, || crate::pressure::pressure().total_pages() as usize * vmarena_platform::page_size())
}
