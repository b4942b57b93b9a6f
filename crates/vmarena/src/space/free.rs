//! Freeing in a space: the pointer checked (page-aligned, inside the reservation), the thread
//! cache first, then the arena's free of the area's kind; areas handed to a deferred free
//! (retire) and back.

use super::VmSpace;
use crate::error::VmError;
use std::panic::Location;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use vmarena_engine::{AreaKind, FreeError};
use vmarena_platform::reentry;

/// The space's error for a free the arena refused at `p`.
pub(crate) fn free_error(p: *mut u8, e: FreeError) -> VmError {
    match e {
        FreeError::NotLive { .. } => VmError::NotLive(p as usize),
        FreeError::WrongKind { .. } => VmError::WrongKind(p as usize),
    }
}

impl VmSpace {
    /// Free a `HugeTlb` area: the one call that moves its kind to `Retired` (a passing state
    /// every other free refuses) puts base pages back over its data, then frees it; a racing
    /// second free is refused.
    pub(super) fn vfree_hugetlb(&self, p: *mut u8, start: u64) -> Result<u64, VmError> {
        self.arena.swap_kind(start, AreaKind::HugeTlb, AreaKind::Retired).map_err(|e| free_error(p, e))?;
        let pages = self.arena.lookup(start).map(|a| a.pages).expect("a claimed area stays busy");
        self.unmap_pages(start, (pages - self.guard_pages) as usize);
        self.arena.free_uncached_of(start, AreaKind::Retired).map(|a| a.pages).map_err(|e| free_error(p, e))
    }

    /// The page number of `addr`: refused unless it is page-aligned and inside the reservation.
    pub(crate) fn start_page(&self, addr: usize) -> Result<u64, VmError> {
        if !self.reservation.contains(addr) || addr & (self.page_bytes - 1) != 0 {
            return Err(VmError::NotLive(addr));
        }
        Ok((addr >> self.page_shift) as u64)
    }

    /// Free the area that starts at `p`. Null is a no-op. Anything that is not the start of a
    /// live area of this space is refused and nothing changes.
    #[inline]
    pub fn vfree(&self, p: *mut u8) -> Result<(), VmError> {
        self.vfree_sized(p).map(|_| ())
    }

    /// [`VmSpace::vfree`] that also tells how many usable bytes the area had (what
    /// [`VmSpace::size`] said of it; 0 for null), found on the way at no extra cost.
    #[inline]
    pub fn vfree_sized(&self, p: *mut u8) -> Result<usize, VmError> {
        if p.is_null() {
            return Ok(0);
        }
        let start = match self.start_page(p as usize) {
            Ok(s) => s,
            // Not in the own reservation: a further one's, or refused.
            Err(e) => return self.extension_holding(p as usize).map_or(Err(e), |x| x.vfree_sized(p)),
        };
        if self.tools_on() {
            self.announce_free(p as usize);
        }
        // A small area into this thread's cache (only areas of the space's own memory have
        // a state word, so the kind needs no check).
        let pages = match self.arena.free_cached(start) {
            Some(r) => r.map_err(|_| VmError::NotLive(p as usize))?.pages,
            None => self.vfree_slow(p, start)?,
        };
        Ok(self.usable_bytes(pages))
    }

    /// The free of an area whose word a hit path claimed (`HitFree::Claimed`, `AbiHit`): into
    /// this thread's magazine, or through the busy map.
    pub(crate) fn vfree_claimed(&self, p: *mut u8) -> Result<(), VmError> {
        self.arena
            .free_claimed(((p as usize) >> self.page_shift) as u64)
            .map(|_| ())
            .map_err(|_| VmError::NotLive(p as usize))
    }

    /// The common case of [`VmSpace::vfree`] for callers whose fast path must make no call
    /// (the C ABI, after `AbiHit`): true when `p` was a small live area of this space and is
    /// in this CPU's stack or this thread's magazine now; false, with nothing changed, for
    /// anything else (then call `vfree`, which frees or refuses it).
    #[inline(always)]
    pub(crate) fn vfree_hit(&self, p: *mut u8) -> bool {
        let addr = p as usize;
        // A page outside the reservation has no state word, or one that stays zero: the
        // arena's free hit refuses it without a range check here.
        addr & (self.page_bytes - 1) == 0 && self.arena.free_hit((addr >> self.page_shift) as u64)
    }

    /// A slot for a fixed pool: an area of the space's memory that only [`VmSpace::free_fixed_slot`]
    /// frees (`vfree`, `vrealloc` and `vunmap` refuse it).
    pub(crate) fn alloc_fixed_slot(&self, bytes: usize) -> Result<NonNull<u8>, VmError> {
        self.alloc_slow(bytes, 1, false, false, Location::caller(), AreaKind::FixedSlot)
    }

    /// Free a slot made by [`VmSpace::alloc_fixed_slot`].
    pub(crate) fn free_fixed_slot(&self, p: *mut u8) -> Result<(), VmError> {
        let _inside = reentry::enter();
        let start = self.start_page(p as usize)?;
        self.arena.free_uncached_of(start, AreaKind::FixedSlot).map(|_| ()).map_err(|e| free_error(p, e))
    }

    /// The area's pages, guard included.
    #[inline(never)]
    pub(super) fn vfree_slow(&self, p: *mut u8, start: u64) -> Result<u64, VmError> {
        let _inside = reentry::enter();
        if let Some(ext) = &self.extensions {
            ext.set_own_full(false);
        }
        // `vfree` tried the thread cache already. The kind is checked under the lock that
        // removes the record: no second lookup.
        // Areas of reserved huge pages need their base pages back first; a lookup tells them
        // apart only once the space has made one.
        if self.hugetlb_mapped.load(Relaxed) > 0
            && self.arena.lookup(start).is_some_and(|a| a.tag.kind == AreaKind::HugeTlb)
        {
            return self.vfree_hugetlb(p, start);
        }
        self.arena.free_uncached_of(start, AreaKind::Vmalloc).map(|a| a.pages).map_err(|e| free_error(p, e))
    }

    /// True when `p` starts a live area that [`VmSpace::vfree`] would free (a `vmalloc` area,
    /// not a fixed slot nor a mapping of frames).
    pub fn is_vmalloc_area(&self, p: *const u8) -> bool {
        if let Some(x) = self.extension_holding(p as usize) {
            return x.is_vmalloc_area(p);
        }
        let Ok(start) = self.start_page(p as usize) else { return false };
        // State words track only vmalloc areas of the space's own memory.
        if let Some(a) = self.arena.small_area(start) {
            return !a.free && !a.retired;
        }
        self.arena.lookup(start).is_some_and(|a| a.tag.kind == AreaKind::Vmalloc)
    }

    /// Hand the live `vmalloc` area at `p` to a deferred free: until
    /// [`VmSpace::unretire`], `vfree`, `vrealloc` and a second retirement refuse it, while
    /// `size` still reports it (readers may read it). Refused, nothing changed, for anything
    /// `vfree` would refuse.
    pub(crate) fn retire(&self, p: *const u8) -> Result<(), VmError> {
        if let Some(x) = self.extension_holding(p as usize) {
            return x.retire(p);
        }
        let start = self.start_page(p as usize)?;
        self.arena.retire(start).map_err(|e| free_error(p.cast_mut(), e))
    }

    /// The grace period of the retired area at `p` has passed: make it a live area again, for
    /// the deferred free to release with `vfree`.
    pub(crate) fn unretire(&self, p: *const u8) -> Result<(), VmError> {
        if let Some(x) = self.extension_holding(p as usize) {
            return x.unretire(p);
        }
        let start = self.start_page(p as usize)?;
        self.arena.unretire(start).map_err(|e| free_error(p.cast_mut(), e))
    }
}
