//! Mapping caller's frames into a space: `vmap`/`vunmap`, `vm_map_ram`/`vm_unmap_ram` with the
//! kernel's per-CPU vmap blocks (`vmap_blocks.rs`), and `vmalloc_to_frame`.
//!
//! Owns no state: the blocks are the space's `VmapBlocks` (`vmap_blocks.rs`),
//! the frame records its `FrameMap`. This file is the space's side of both.
//!
//! Mappings: each run of consecutive frames is one `mmap(MAP_SHARED | MAP_FIXED)` of the pool's
//! memory file; unmapping puts anonymous memory back over the pages (one call), so the
//! reservation's mappings merge again. The space's `FrameMap`
//! records which frames are where.
//!
//! Lazy unmapping (the kernel's deferred TLB flush of vmap blocks): `vm_unmap_ram` of a slot
//! forgets its frames at once (`vmalloc_to_frame` answers `None`) but leaves the file mapping in
//! place; slots are never handed out twice, so nothing maps over it. The block's `stale` bits
//! record such pages. They get anonymous memory back all at once when the block is released
//! (one `mmap` over the block), or at [`VmSpace::vm_unmap_aliases`] and the shrinker. At most
//! the `map_ram_lazy_max` option's number of mappings linger space-wide (each is a kernel VMA);
//! past it, or with the option at 0, an unmap restores its slot at once. Until then a stray
//! access through the old pointer still reaches the frames, as a stale TLB entry would in the
//! kernel.
//!
//! Unsafe: mapping a frame pool's memory file over a range of the reservation.
#![allow(unsafe_code)]

use crate::frames::map::{run_count, runs};
use crate::frames::vmap_blocks::BlockSpace;
use crate::space::{VmError, VmSpace};
use crate::FramePool;
use std::panic::Location;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use vmarena_engine::AreaKind;
use vmarena_platform::{memfd, reentry};

/// Largest `vm_map_ram` served from per-CPU blocks (the kernel's `VMAP_MAX_ALLOC`).
pub const VMAP_MAX_ALLOC_PAGES: usize = 64;
pub use crate::frames::vmap_blocks::VMAP_BLOCK_PAGES;

/// The space as the vmap blocks see it.
impl BlockSpace for VmSpace {
    fn alloc_block_area(&self, caller: &'static Location<'static>) -> Result<u64, VmError> {
        let block_bytes = (VMAP_BLOCK_PAGES as usize) << self.page_shift;
        let p = self.alloc_inner(block_bytes, block_bytes, false, false, caller, AreaKind::VmapBlock)?;
        self.mapped_live.fetch_add(1, Relaxed);
        Ok((p.as_ptr() as usize >> self.page_shift) as u64)
    }

    fn free_block_area(&self, start_page: u64) {
        self.arena().free(start_page).expect("a live block's area is busy");
        self.mapped_live.fetch_sub(1, Relaxed);
    }

    fn unmap_pages(&self, page: u64, pages: usize) {
        VmSpace::unmap_pages(self, page, pages);
    }

    fn page_shift(&self) -> u32 {
        self.page_shift
    }
}

impl VmSpace {
    fn check_frames(&self, pool: &FramePool, frames: &[u32]) -> Result<(), VmError> {
        if frames.is_empty() {
            return Err(VmError::ZeroSize);
        }
        if let Some(f) = frames.iter().find(|&&f| !pool.is_held(f)) {
            return Err(VmError::Invalid(format!("frame {f} is not held from pool {}", pool.name())));
        }
        Ok(())
    }

    /// Map `frames` at the pages starting at `page`; on failure nothing stays mapped.
    pub(crate) fn map_runs(&self, pool: &FramePool, page: u64, frames: &[u32]) -> Result<(), VmError> {
        let pb = self.page_bytes;
        let base = (page as usize) << self.page_shift;
        for (i, &(at, first, len)) in runs(frames).iter().enumerate() {
            // SAFETY: the pages belong to an area (or block slots) this call just allocated and
            // that nobody else can reach until it returns; the file range is inside the pool.
            let r = unsafe { pool.file().map_fixed(base + at * pb, len * pb, first as usize * pb) };
            self.map_calls.fetch_add(1, Relaxed);
            if let Err(e) = r {
                // SAFETY: as above; only pages of this call's area are touched.
                let _ = unsafe { memfd::map_anonymous_fixed(base, frames.len() * pb, self.huge_pages()) };
                self.reregister(base, frames.len() * pb);
                return Err(VmError::NoSpace(format!(
                    "{}: mapping run {i} of {} frames failed: {e}",
                    self.name(),
                    frames.len()
                )));
            }
        }
        self.frame_map.insert(page, frames.to_vec());
        Ok(())
    }

    /// Undo `map_runs` for the `pages` pages at `page`.
    pub(crate) fn unmap_pages(&self, page: u64, pages: usize) {
        let addr = (page as usize) << self.page_shift;
        // SAFETY: the pages belong to a mapping this call removed from the frame map, so no
        // other call maps or unmaps them; anonymous memory goes back over them.
        unsafe { memfd::map_anonymous_fixed(addr, pages << self.page_shift, self.huge_pages()) }
            .unwrap_or_else(|e| panic!("{}: cannot unmap frames at {addr:#x}: {e}", self.name()));
        self.reregister(addr, pages << self.page_shift);
        self.map_calls.fetch_add(1, Relaxed);
    }

    fn map_area(
        &self,
        pool: &FramePool,
        frames: &[u32],
        kind: AreaKind,
        caller: &'static Location<'static>,
    ) -> Result<NonNull<u8>, VmError> {
        self.check_frames(pool, frames)?;
        let bytes = frames.len().checked_mul(self.page_bytes).ok_or(VmError::Overflow(usize::MAX))?;
        let p = self.alloc_inner(bytes, 1, false, false, caller, kind)?;
        self.mapped_live.fetch_add(1, Relaxed);
        let page = (p.as_ptr() as usize >> self.page_shift) as u64;
        if let Err(e) = self.map_runs(pool, page, frames) {
            self.arena().free(page).expect("area allocated above");
            self.mapped_live.fetch_sub(1, Relaxed);
            return Err(e);
        }
        Ok(p)
    }

    fn unmap_area(&self, p: *mut u8, kind: AreaKind, pages: Option<usize>) -> Result<(), VmError> {
        let start = self.start_page(p as usize)?;
        let area = self.arena().lookup(start).ok_or(VmError::NotLive(p as usize))?;
        if area.tag.kind != kind {
            return Err(if area.tag.kind == AreaKind::Vmalloc {
                VmError::NotLive(p as usize)
            } else {
                VmError::WrongKind(p as usize)
            });
        }
        if let Some(n) = pages {
            if self.frame_map.len_at(start) != Some(n) {
                return Err(VmError::Invalid(format!(
                    "{:#x} maps {:?} pages, not {n}",
                    p as usize,
                    self.frame_map.len_at(start)
                )));
            }
        }
        // Removing the record claims the area: a racing unmap of the same pointer finds none.
        let frames = self.frame_map.remove(start).ok_or(VmError::NotLive(p as usize))?;
        self.unmap_pages(start, frames.len());
        self.arena().free(start).expect("area looked up live above");
        self.mapped_live.fetch_sub(1, Relaxed);
        Ok(())
    }

    /// Map `frames` of `pool`, in order, into a new area of this space (the kernel's `vmap`).
    /// The frames stay the caller's: [`VmSpace::vunmap`] unmaps them and frees the area only.
    /// Every frame must be held from the pool; the same frame may appear twice.
    #[track_caller]
    pub fn vmap(&self, pool: &FramePool, frames: &[u32]) -> Result<NonNull<u8>, VmError> {
        let _inside = reentry::enter();
        self.map_area(pool, frames, AreaKind::Vmap, Location::caller())
    }

    /// Unmap an area that `vmap` returned and free it. Anything else is refused.
    pub fn vunmap(&self, p: *mut u8) -> Result<(), VmError> {
        let _inside = reentry::enter();
        self.unmap_area(p, AreaKind::Vmap, None)
    }

    /// Map `frames` for a short while (the kernel's `vm_map_ram`): up to 64 frames are placed in
    /// this CPU's vmap block (no tree search, no guard), more get an area of their own.
    #[track_caller]
    pub fn vm_map_ram(&self, pool: &FramePool, frames: &[u32]) -> Result<NonNull<u8>, VmError> {
        let _inside = reentry::enter();
        if frames.len() > VMAP_MAX_ALLOC_PAGES {
            return self.map_area(pool, frames, AreaKind::VmMapRam, Location::caller());
        }
        self.check_frames(pool, frames)?;
        let page = self.blocks.alloc(self, frames.len() as u64, Location::caller())?;
        if let Err(e) = self.map_runs(pool, page, frames) {
            self.blocks.free(self, page, frames.len() as u64, 0).expect("slots allocated above");
            return Err(e);
        }
        Ok(NonNull::new(((page as usize) << self.page_shift) as *mut u8).expect("never address 0"))
    }

    /// Unmap what `vm_map_ram(frames)` returned; `count` must be `frames.len()`.
    pub fn vm_unmap_ram(&self, p: *mut u8, count: usize) -> Result<(), VmError> {
        let _inside = reentry::enter();
        if count == 0 {
            return Err(VmError::ZeroSize);
        }
        if count > VMAP_MAX_ALLOC_PAGES {
            return self.unmap_area(p, AreaKind::VmMapRam, Some(count));
        }
        let page = self.start_page(p as usize)?;
        if !self.blocks.owns(page, count as u64) {
            return Err(VmError::NotLive(p as usize));
        }
        match self.frame_map.len_at(page) {
            Some(n) if n == count => {}
            Some(n) => {
                return Err(VmError::Invalid(format!("{:#x} maps {n} pages, not {count}", p as usize)))
            }
            None => return Err(VmError::NotLive(p as usize)),
        }
        let frames = self.frame_map.remove(page).ok_or(VmError::NotLive(p as usize))?;
        let maps = run_count(&frames) as u64;
        let linger = self.blocks.try_linger(maps);
        if !linger {
            self.unmap_pages(page, frames.len());
        }
        let r = self.blocks.free(self, page, count as u64, if linger { maps } else { 0 });
        if r.is_err() && linger {
            // Not reached (removing the frame record claimed the slots), but never leave an
            // uncounted mapping behind.
            self.unmap_pages(page, frames.len());
            self.blocks.unlinger(maps);
        }
        r
    }

    /// Put anonymous memory back wherever `vm_unmap_ram` left frames mapped (the kernel's
    /// `vm_unmap_aliases`): after it, no address of this space reaches a frame that is not
    /// mapped by a live `vmap` or `vm_map_ram`. Returns the mappings removed. The shrinker
    /// calls it too.
    pub fn vm_unmap_aliases(&self) -> u64 {
        let _inside = reentry::enter();
        self.blocks.unmap_aliases(self)
    }

    /// The frame mapped at `p` (any byte of a `vmap` or `vm_map_ram` mapping), or `None` for
    /// addresses that map no frame.
    pub fn vmalloc_to_frame(&self, p: *const u8) -> Option<u32> {
        if !self.contains(p) {
            return None;
        }
        self.frame_map.lookup((p as usize >> self.page_shift) as u64)
    }
}
