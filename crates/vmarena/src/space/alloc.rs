//! Allocation from a space: sizes to pages, the thread cache first, then the arena's ladder,
//! the memory made ready (cleared, backed with frames, advised for huge pages) and the arena's
//! refusal turned into the space's error; `vrealloc`.
#![allow(unsafe_code)]

use super::free::free_error;
use super::VmSpace;
use crate::error::VmError;
use std::panic::Location;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use vmarena_engine::{AllocError, AllocRequest, AreaKind, AreaTag};
use vmarena_platform::reentry;

impl VmSpace {
    /// Pages an allocation of `bytes` takes, guard included.
    pub(super) fn pages_for(&self, bytes: usize) -> Result<u64, VmError> {
        if bytes == 0 {
            return Err(VmError::ZeroSize);
        }
        let data = bytes.checked_add(self.page_bytes - 1).ok_or(VmError::Overflow(bytes))? >> self.page_shift;
        (data as u64).checked_add(self.guard_pages).ok_or(VmError::Overflow(bytes))
    }

    /// The space's error for an allocation the arena refused; the default space's first
    /// failure for lack of room is also reported on stderr (`crate::exhaustion`).
    pub(super) fn map_alloc_error(&self, e: AllocError, bytes: usize) -> VmError {
        let e = self.alloc_error(e, bytes);
        // A growing space reports only when no further reservation could serve (`alloc_slow`).
        if matches!(e, VmError::NoSpace(_))
            && self.reports_exhaustion.load(Relaxed)
            && self.extensions.is_none()
        {
            crate::exhaustion::report_once(&e);
        }
        e
    }

    /// Report the first failure for lack of room on stderr (`crate::exhaustion`): the default
    /// space asks for it, whose size the user did not choose.
    pub(crate) fn report_exhaustion(&self) {
        self.reports_exhaustion.store(true, Relaxed);
    }

    pub(super) fn alloc_error(&self, e: AllocError, bytes: usize) -> VmError {
        match e {
            AllocError::Invalid(vmarena_core::RequestError::ZeroSize) => VmError::ZeroSize,
            AllocError::Invalid(
                vmarena_core::RequestError::BadAlignment | vmarena_core::RequestError::BadNocross,
            ) => VmError::BadAlignment(0),
            AllocError::WouldBlock => VmError::WouldBlock,
            AllocError::Invalid(vmarena_core::RequestError::BadWindow) | AllocError::OutOfRange { .. } => {
                let (lo, hi) = self.bounds();
                VmError::NoSpace(format!(
                    "vmalloc for size {bytes} failed: larger than the whole {} space ({lo:#x} - {hi:#x}, {} MiB)",
                    self.name,
                    (hi - lo) >> 20
                ))
            }
            AllocError::NoAlignedStart { align_pages, .. } => {
                let (lo, hi) = self.bounds();
                VmError::NoSpace(format!(
                    "vmalloc for size {bytes} failed: no address aligned to {} bytes in the {} space \
                     ({lo:#x} - {hi:#x}) leaves room for it",
                    (align_pages as u128) << self.page_shift,
                    self.name
                ))
            }
            AllocError::NoSpace { .. } => {
                let st = self.arena.stats();
                let (lo, hi) = self.bounds();
                let committed = self.committed_bytes();
                let why = if committed < hi - lo {
                    "the kernel refused to commit more of the space (the commit limit)"
                } else {
                    "the space is full"
                };
                VmError::NoSpace(format!(
                    "vmalloc for size {bytes} failed: {why}: address range restricted to {lo:#x} - {hi:#x} \
                     ({} space, {} MiB, {} MiB of it committed; after a full purge: {} MiB free, {} live areas)",
                    self.name,
                    (hi - lo) >> 20,
                    committed >> 20,
                    (st.free_pages << self.page_shift) >> 20,
                    st.live_areas
                ))
            }
            AllocError::PartsOverlap { offset_pages } => VmError::Invalid(format!(
                "congruent areas overlap: the area at offset {} bytes starts inside the one before it or its guard page",
                (offset_pages as u128) << self.page_shift
            )),
        }
    }

    /// Congruent areas (the kernel's `pcpu_get_vm_areas(offsets, sizes, nr, align)`): one area
    /// per `(offset, size)` pair, at `base + offset` for one base that is a multiple of
    /// `align_bytes`, the lowest such base at which every area fits; all or nothing. Offsets
    /// are in bytes and page aligned; sizes are rounded up to pages, and each area has its
    /// guard page after it, which the next offset must leave room for. Each area is a
    /// `vmalloc` area of its own: `vfree` frees it, `size` reports it. The areas are fresh
    /// pages (a full purge gives lazily freed memory back to the search when nothing else
    /// fits).
    #[track_caller]
    pub fn vmalloc_congruent(
        &self,
        parts: &[(usize, usize)],
        align_bytes: usize,
    ) -> Result<Vec<NonNull<u8>>, VmError> {
        let _inside = reentry::enter();
        if !align_bytes.is_power_of_two() {
            return Err(VmError::BadAlignment(align_bytes));
        }
        let mut pages = Vec::with_capacity(parts.len());
        for &(off, size) in parts {
            if off & (self.page_bytes - 1) != 0 {
                return Err(VmError::Invalid(format!(
                    "congruent offset {off} is not a multiple of the page size"
                )));
            }
            pages.push(vmarena_core::Span::new((off >> self.page_shift) as u64, self.pages_for(size)?));
        }
        let tag = AreaTag { caller: Some(Location::caller()), requested_bytes: 0, kind: AreaKind::Vmalloc };
        let total: usize = parts.iter().map(|p| p.1).sum();
        let base = self
            .arena
            .alloc_congruent(&pages, self.align_pages_for(align_bytes), tag)
            .map_err(|e| self.map_alloc_error(e, total))?;
        let areas: Vec<NonNull<u8>> = pages
            .iter()
            .map(|p| {
                NonNull::new((((base + p.start) as usize) << self.page_shift) as *mut u8)
                    .expect("inside the reservation")
            })
            .collect();
        if self.tools_on() {
            for a in &areas {
                self.announce_alloc(a.as_ptr() as usize, false);
            }
        }
        Ok(areas)
    }

    #[inline(always)]
    pub(crate) fn alloc_inner(
        &self,
        bytes: usize,
        align_bytes: usize,
        zeroed: bool,
        nonblocking: bool,
        caller: &'static Location<'static>,
        kind: AreaKind,
    ) -> Result<NonNull<u8>, VmError> {
        // A small area from this thread's cache: no lock, no allocation (so no re-entry flag).
        if kind == AreaKind::Vmalloc && align_bytes.is_power_of_two() {
            if let Some((p, pages)) = self.alloc_cached(bytes, align_bytes, caller) {
                if zeroed {
                    // A cached area is dirty; clearing a few pages costs less than faulting
                    // fresh ones.
                    self.clear_data(p.as_ptr() as usize, pages);
                }
                return Ok(p);
            }
        }
        self.alloc_slow(bytes, align_bytes, zeroed, nonblocking, caller, kind)
    }

    #[inline(always)]
    pub(super) fn alloc_cached(
        &self,
        bytes: usize,
        align_bytes: usize,
        caller: &'static Location<'static>,
    ) -> Option<(NonNull<u8>, u64)> {
        let pages = self.pages_for(bytes).ok()?;
        let align_pages = self.align_pages_for(align_bytes);
        let (start, pages) = if align_pages == 1 {
            self.arena.alloc_cached_fit(pages, Some(caller))?
        } else {
            (self.arena.alloc_cached_aligned(pages, align_pages, Some(caller))?, pages)
        };
        Some((NonNull::new(((start as usize) << self.page_shift) as *mut u8)?, pages))
    }

    /// The common case of [`VmSpace::vmalloc`] for callers whose fast path must make no call
    /// (the C ABI, after `AbiHit`): a small area from this CPU's stack or this thread's
    /// magazine, or `None` with nothing changed and nothing counted (then call `vmalloc`).
    #[inline(always)]
    pub(crate) fn vmalloc_hit(
        &self,
        bytes: usize,
        caller: &'static Location<'static>,
    ) -> Option<NonNull<u8>> {
        // Size 0 and sizes that overflow are refused by `vmalloc`.
        if bytes == 0 {
            return None;
        }
        let data = (bytes.checked_add(self.page_bytes - 1)? >> self.page_shift) as u64;
        let start = self.arena.alloc_hit(data + self.guard_pages, Some(caller))?;
        NonNull::new(((start as usize) << self.page_shift) as *mut u8)
    }

    /// The alignment in pages of a power-of-two alignment in bytes (at least one page).
    #[inline(always)]
    pub(super) fn align_pages_for(&self, align_bytes: usize) -> u64 {
        (align_bytes >> self.page_shift).max(1) as u64
    }

    /// Zero the data pages of the area of `pages` pages (guard included) at `addr`, which the
    /// caller has just been handed, and count the memset.
    #[inline(always)]
    pub(super) fn clear_data(&self, addr: usize, pages: u64) {
        let len = ((pages - self.guard_pages) as usize) << self.page_shift;
        // SAFETY: the area's data pages belong to the caller from this allocation until its
        // free, and are mapped read-write in the reservation.
        unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len) };
        self.memsets.fetch_add(1, Relaxed);
    }

    /// Past the thread cache: the arena's ladder in the space's own reservation, and for a
    /// growing space, the further reservations when it has no room (`extensions.rs`).
    #[inline(never)]
    pub(super) fn alloc_slow(
        &self,
        bytes: usize,
        align_bytes: usize,
        zeroed: bool,
        nonblocking: bool,
        caller: &'static Location<'static>,
        kind: AreaKind,
    ) -> Result<NonNull<u8>, VmError> {
        let _inside = reentry::enter();
        let Some(ext) = self.extensions.as_deref().filter(|_| kind == AreaKind::Vmalloc) else {
            return self.alloc_here(bytes, align_bytes, zeroed, nonblocking, caller, kind);
        };
        let own_bytes = self.opts.space_bytes;
        // The own reservation was full: the reservations made since first (without growing;
        // the own one may have room again before any grows).
        if ext.own_full() {
            if let Some(r) = ext.alloc(false, own_bytes, bytes, align_bytes, zeroed, nonblocking, caller) {
                return r;
            }
        }
        match self.alloc_here(bytes, align_bytes, zeroed, nonblocking, caller, kind) {
            Err(VmError::NoSpace(why)) => {
                ext.set_own_full(true);
                ext.alloc(true, own_bytes, bytes, align_bytes, zeroed, nonblocking, caller).unwrap_or_else(
                    || {
                        let e = VmError::NoSpace(why);
                        if self.reports_exhaustion.load(Relaxed) {
                            crate::exhaustion::report_once(&e);
                        }
                        Err(e)
                    },
                )
            }
            r => r,
        }
    }

    fn alloc_here(
        &self,
        bytes: usize,
        align_bytes: usize,
        zeroed: bool,
        nonblocking: bool,
        caller: &'static Location<'static>,
        kind: AreaKind,
    ) -> Result<NonNull<u8>, VmError> {
        if !align_bytes.is_power_of_two() {
            return Err(VmError::BadAlignment(align_bytes));
        }
        let pages = self.pages_for(bytes)?;
        let req = AllocRequest {
            pages,
            align_pages: self.align_pages_for(align_bytes),
            prefer_fresh: zeroed,
            nonblocking,
            tag: AreaTag { caller: Some(caller), requested_bytes: bytes as u64, kind },
            ..AllocRequest::pages(pages)
        };
        // `alloc_inner` tried the thread cache for every request it could serve.
        let a = self.arena.alloc_uncached(&req).map_err(|e| self.map_alloc_error(e, bytes))?;
        let addr = (a.start as usize) << self.page_shift;
        if matches!(kind, AreaKind::Vmalloc | AreaKind::FixedSlot) {
            if let Some(fb) = &self.frames {
                self.back_with_frames(fb, a.start, a.pages - self.guard_pages)?;
            }
        }
        if self.tools_on() && matches!(kind, AreaKind::Vmalloc | AreaKind::HugeTlb) {
            self.announce_alloc(addr, a.fresh);
        }
        if zeroed && !a.fresh {
            self.clear_data(addr, a.pages);
        }
        Ok(NonNull::new(addr as *mut u8).expect("reservation never contains address 0"))
    }

    /// Give the area at `start` frames if it has none (a frames-backed space). On failure
    /// (after one purge to get frames back) the area is freed and the error names the pool.
    pub(super) fn back_with_frames(
        &self,
        fb: &crate::frames::backing::FrameBacking,
        start: u64,
        data_pages: u64,
    ) -> Result<(), VmError> {
        if fb.has_frames(start) {
            return Ok(());
        }
        // A refused area is freed past the thread cache, which would hand it out without frames.
        let blocks = match fb.take_blocks(data_pages) {
            Ok(b) => b,
            Err(_) => {
                self.arena.purge();
                fb.take_blocks(data_pages).inspect_err(|_| {
                    self.arena.free_uncached(start).expect("area allocated by the caller");
                })?
            }
        };
        let frames: Vec<u32> = blocks.iter().flat_map(|&(f, o)| f..f + (1 << o)).collect();
        if let Err(e) = self.map_runs(&fb.pool, start, &frames) {
            for &(f, o) in &blocks {
                fb.pool.free(f, o).expect("blocks taken above");
            }
            self.arena.free_uncached(start).expect("area allocated by the caller");
            return Err(e);
        }
        fb.record(start, blocks);
        Ok(())
    }

    /// The frame pool behind a frames-backed space.
    pub fn frame_pool(&self) -> Option<&crate::FramePool> {
        self.frames.as_ref().map(|f| &f.pool)
    }

    /// Allocate `bytes` (rounded up to pages), page aligned. Contents are undefined.
    #[track_caller]
    pub fn vmalloc(&self, bytes: usize) -> Result<NonNull<u8>, VmError> {
        self.alloc_inner(bytes, 1, false, false, Location::caller(), AreaKind::Vmalloc)
    }

    /// Allocate `bytes` of zeroed memory. Fresh pages (never touched, or released by a purge)
    /// are known to read as zero and are not cleared again.
    #[track_caller]
    pub fn vzalloc(&self, bytes: usize) -> Result<NonNull<u8>, VmError> {
        self.alloc_inner(bytes, 1, true, false, Location::caller(), AreaKind::Vmalloc)
    }

    /// Allocate `bytes` aligned to `align_bytes` (a power of two).
    #[track_caller]
    pub fn vmalloc_aligned(&self, bytes: usize, align_bytes: usize) -> Result<NonNull<u8>, VmError> {
        self.alloc_inner(bytes, align_bytes, false, false, Location::caller(), AreaKind::Vmalloc)
    }

    /// Allocate `bytes` for huge mappings (the kernel's `vmalloc_huge`): a request of at least
    /// one huge page (2 MiB on x86-64) is rounded up to whole huge pages, aligned to one, and
    /// advised for transparent huge pages (`MADV_HUGEPAGE` on the area), so that its faults map
    /// huge pages where the system allows; a smaller request gets base pages, as in the kernel.
    /// [`SpaceStats`](super::SpaceStats) counts the areas advised, the small ones and those whose advice the kernel
    /// refused (THP switched off or missing), which fall back to base pages. The advice stays
    /// on the range after the area is freed (the kernel has no advice that undoes it without
    /// setting another flag); a later area there may fault huge pages too.
    #[track_caller]
    pub fn vmalloc_huge(&self, bytes: usize) -> Result<NonNull<u8>, VmError> {
        let huge = vmarena_platform::huge_page_size();
        if bytes < huge || huge <= self.page_bytes {
            let p = self.vmalloc(bytes)?;
            self.huge_small.fetch_add(1, Relaxed);
            return Ok(p);
        }
        let rounded = bytes.checked_next_multiple_of(huge).ok_or(VmError::Overflow(bytes))?;
        let p = self.alloc_inner(rounded, huge, false, false, Location::caller(), AreaKind::Vmalloc)?;
        // SAFETY: the range is the live area just allocated, inside the reservation; the advice
        // changes how its future faults are served, never its contents.
        let ok = unsafe { libc::madvise(p.as_ptr().cast(), rounded, libc::MADV_HUGEPAGE) } == 0;
        if ok { &self.huge_advised } else { &self.huge_refused }.fetch_add(1, Relaxed);
        Ok(p)
    }

    /// [`VmSpace::vmalloc_huge`] backed by reserved huge pages (`MAP_HUGETLB`) when the caller
    /// asks for them and the system has them reserved (`/proc/sys/vm/nr_hugepages`): whole
    /// huge pages, aligned to one, mapped over the area's data pages and taken from the reserve
    /// now, so they never fault in base pages. When the reserve cannot cover the request, the
    /// area comes from `vmalloc_huge` instead (counted in [`SpaceStats`](super::SpaceStats) as `hugetlb_refused`).
    /// `vfree` puts base pages back over the area before it goes; `vrealloc` refuses it.
    #[track_caller]
    pub fn vmalloc_hugetlb(&self, bytes: usize) -> Result<NonNull<u8>, VmError> {
        let huge = vmarena_platform::huge_page_size();
        if bytes == 0 {
            return Err(VmError::ZeroSize);
        }
        let rounded = bytes.checked_next_multiple_of(huge).ok_or(VmError::Overflow(bytes))?;
        let caller = Location::caller();
        let p = self.alloc_slow(rounded, huge, false, false, caller, AreaKind::HugeTlb)?;
        // SAFETY: the area's data pages (`rounded` bytes from `p`, huge-page aligned) were just
        // handed out and are nobody else's; nothing lives in them yet.
        match unsafe { vmarena_platform::memfd::map_hugetlb_fixed(p.as_ptr() as usize, rounded) } {
            Ok(()) => {
                self.hugetlb_mapped.fetch_add(1, Relaxed);
                Ok(p)
            }
            Err(_) => {
                // Base pages back over the range, then the area goes, and the request falls
                // back to transparent huge pages.
                let start = (p.as_ptr() as usize >> self.page_shift) as u64;
                if self.tools_on() {
                    self.announce_free(p.as_ptr() as usize);
                }
                self.unmap_pages(start, rounded >> self.page_shift);
                let _inside = reentry::enter();
                self.arena.free_uncached_of(start, AreaKind::HugeTlb).expect("the area allocated above");
                self.hugetlb_refused.fetch_add(1, Relaxed);
                self.vmalloc_huge(bytes)
            }
        }
    }

    /// Allocate `bytes` of zeroed memory aligned to `align_bytes` (a power of two): the
    /// kernel's `__vmalloc_node(size, align, GFP_KERNEL | __GFP_ZERO, ...)`.
    #[track_caller]
    pub fn vzalloc_aligned(&self, bytes: usize, align_bytes: usize) -> Result<NonNull<u8>, VmError> {
        self.alloc_inner(bytes, align_bytes, true, false, Location::caller(), AreaKind::Vmalloc)
    }

    /// As `vmalloc`, but never waits for a purge (the kernel's GFP_NOWAIT path).
    #[track_caller]
    pub fn vmalloc_nonblocking(&self, bytes: usize) -> Result<NonNull<u8>, VmError> {
        self.alloc_inner(bytes, 1, false, true, Location::caller(), AreaKind::Vmalloc)
    }

    /// Resize an area, keeping its contents up to the smaller size. `None` allocates. Grows and
    /// shrinks within the area's pages happen in place, and so does a growth of an area above
    /// the pools into the free pages right after it ([`Arena::grow_in_place`](vmarena_engine::Arena::grow_in_place));
    /// otherwise a new area is allocated, the
    /// area's whole usable size (what [`VmSpace::size`] reports, also after a shrink in place)
    /// moved or copied, and the old area freed. An area of at least
    /// [`MOVE_MIN_PAGES`](vmarena_engine::MOVE_MIN_PAGES) pages moves its pages by
    /// `UFFDIO_MOVE` where the arena moves pages, so the old and the new bytes are never
    /// resident at once, and the emptied old area goes to the free tree rather than a lazy list
    /// ([`Arena::free_emptied_of`](vmarena_engine::Arena::free_emptied_of)); smaller ones, and
    /// whatever the kernel did not move, are copied. On error the old area is untouched.
    #[track_caller]
    pub fn vrealloc(&self, p: Option<NonNull<u8>>, bytes: usize) -> Result<NonNull<u8>, VmError> {
        let _inside = reentry::enter();
        let caller = Location::caller();
        let Some(p) = p else {
            return self.alloc_inner(bytes, 1, false, false, caller, AreaKind::Vmalloc);
        };
        let addr = p.as_ptr() as usize;
        // The reservation that holds the area answers for it; a move allocates from this
        // space, which may grow.
        let owner = self.extension_holding(addr).unwrap_or(self);
        let start = owner.start_page(addr)?;
        // A small area answers from its state word and stays in place without a lock; any
        // other area is looked up in the busy map.
        let small = owner.arena.small_area(start);
        let pages = match small {
            Some(a) if a.free || a.retired => return Err(VmError::NotLive(addr)),
            Some(a) => a.pages,
            None => {
                let area = owner.arena.lookup(start).ok_or(VmError::NotLive(addr))?;
                if area.tag.kind != AreaKind::Vmalloc {
                    return Err(VmError::WrongKind(addr));
                }
                area.pages
            }
        };
        let usable = ((pages - owner.guard_pages) as usize) << owner.page_shift;
        if bytes == 0 {
            return Err(VmError::ZeroSize);
        }
        if bytes <= usable {
            let still_live = match small {
                Some(_) => owner.arena.resized_in_place(start),
                None => owner.arena.update_tag(start, |t| t.requested_bytes = bytes as u64),
            };
            return if still_live { Ok(p) } else { Err(VmError::NotLive(addr)) };
        }
        // A large area grows where it lies when the pages after it are free (the lazy area
        // there, or the tree's free space): nothing copied, nothing moved. Not for frames (the
        // new pages would have none) nor under the debugging tools (they track the old extent).
        if small.is_none() && owner.frames.is_none() && !owner.tools_on() {
            let new_pages = owner.pages_for(bytes)?;
            if owner.arena.grow_in_place(start, new_pages, bytes as u64) {
                return Ok(p);
            }
        }
        // Moving: every usable byte, not only the latest request's. `size` reports the whole
        // area, so a caller may have written up to its end after a shrink in place.
        let q = self.alloc_inner(bytes, 1, false, false, caller, AreaKind::Vmalloc)?;
        let keep = usable.min(bytes);
        // A large area's pages move to the new one instead of being copied (the arena's page
        // moves, where it has them): the bytes are never held twice, and the time is the page
        // tables', not the bytes'. Both areas must be in one reservation; the debugging tools
        // see a copy (they track bytes by address).
        let q_owner = self.extension_holding(q.as_ptr() as usize).unwrap_or(self);
        let moved_pages = if std::ptr::eq(owner, q_owner) && owner.frames.is_none() && !owner.tools_on() {
            owner.arena.move_data(
                start,
                ((q.as_ptr() as usize) >> owner.page_shift) as u64,
                (keep >> owner.page_shift) as u64,
            )
        } else {
            0
        };
        // What did not move (all of it, or the rest of a move the kernel refused halfway).
        let moved = ((moved_pages as usize) << owner.page_shift).min(keep);
        if moved < keep {
            // SAFETY: `p` is a live area of at least `keep` bytes, `q` a fresh one of at least
            // `bytes`; two live areas never overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(p.as_ptr().add(moved), q.as_ptr().add(moved), keep - moved)
            };
        }
        // An area above the pools whose every data page moved holds nothing resident: it goes
        // to the free tree, not on a lazy list where a later request would take it for
        // memory already faulted in.
        let freed = if small.is_none() && moved == usable {
            owner
                .arena
                .free_emptied_of(start, AreaKind::Vmalloc)
                .map(|_| ())
                .map_err(|e| free_error(p.as_ptr(), e))
        } else {
            self.vfree(p.as_ptr())
        };
        if let Err(e) = freed {
            // `p` was freed by another call while it was copied (a bug of the caller's): the
            // new area goes back and the error is reported.
            let _ = self.vfree(q.as_ptr());
            return Err(e);
        }
        Ok(q)
    }
}
