//! `VmSpace`: the vmalloc family over one large reservation.
//!
//! Owns: one [`Reservation`] (a single mapping, never split) and the [`Arena`] that hands out
//! its pages. Memory is anonymous memory the kernel faults in on first touch; purges release it
//! with `MADV_DONTNEED` (or `MADV_FREE`), batched; guards after each area are guard markers
//! where the kernel has them.
//!
//! ```text
//!  reservation  [base ............................................................ base+len)
//!  area            [ data pages (size rounded up to pages) | guard ]
//!                  ^ pointer returned                      ^ faults on access (6.13+)
//! ```
//!
//! A pointer is valid from the `vmalloc` that returned it until the `vfree` of that pointer.
//! Every entry point checks its input before it changes anything: size 0, sizes that overflow
//! when rounded, alignments that are not powers of two, pointers that are not the start of a
//! live area (interior, foreign, freed twice) are refused with an error.
//!
//! Every entry point that takes engine locks raises this thread's inside-vmarena flag
//! (`vmarena_platform::reentry`) while it runs, so a global allocator built on vmarena
//! ([`crate::VmAlloc`]) sends vmarena's own allocations to its inner allocator.
//!
//! Unsafe: clearing reused pages, copying a moved area's bytes, and advising huge pages over live areas.
#![allow(unsafe_code)]

use crate::backing::MemoryBacking;
pub use crate::error::VmError;
use crate::options::SpaceOptions;
use std::panic::Location;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use vmarena_engine::{
    AllocError, AllocRequest, AreaKind, AreaTag, Arena, ArenaOptions, ArenaStats, FreeError, LockStats,
};
use vmarena_platform::uffd::LazyUffd;
use vmarena_platform::{guard, reentry, Reservation};

/// A space's own mutexes (vmap blocks, the frame map, a frames-backed space's block map), for
/// `fork()`: each is held alone, or (vmap) in the order `lock_for_fork` takes them, and none is
/// held while an arena lock is taken.
struct SpaceMaps {
    blocks: Arc<crate::vmap_blocks::VmapBlocks>,
    frame_map: Arc<crate::frame_map::FrameMap>,
    frames: Option<Arc<crate::frame_backing::FrameBacking>>,
}

impl vmarena_engine::ForkLocks for SpaceMaps {
    fn lock_for_fork(&self) -> Vec<Box<dyn vmarena_engine::fork::Held + '_>> {
        let mut held = self.blocks.lock_for_fork();
        held.push(self.frame_map.lock_for_fork());
        if let Some(f) = &self.frames {
            held.push(f.lock_for_fork());
        }
        held
    }
}

/// The vmalloc family over one reservation. All methods take `&self` and are thread safe.
pub struct VmSpace {
    name: String,
    arena: Arena,
    reservation: Arc<Reservation>,
    pub(crate) page_bytes: usize,
    pub(crate) page_shift: u32,
    pub(crate) guard_pages: u64,
    guards_enforced: bool,
    huge_pages: bool,
    /// The userfaultfd the reservation is registered with for moves (see `backing.rs`).
    uffd: Option<Arc<LazyUffd>>,
    opts: SpaceOptions,
    memsets: AtomicU64,
    guard_calls: Arc<AtomicU64>,
    pub(crate) frame_map: Arc<crate::frame_map::FrameMap>,
    frames: Option<Arc<crate::frame_backing::FrameBacking>>,
    pub(crate) blocks: Arc<crate::vmap_blocks::VmapBlocks>,
    /// The space's own mutexes, registered with the fork handlers while the space lives.
    _fork_maps: Arc<SpaceMaps>,
    /// Live areas that hold caller's frames (vmap, vm_map_ram, blocks).
    pub(crate) mapped_live: AtomicU64,
    pub(crate) map_calls: AtomicU64,
    /// `vmalloc_huge` areas advised for transparent huge pages, and those served with base
    /// pages (below one huge page; or the kernel refused the advice).
    huge_advised: AtomicU64,
    huge_small: AtomicU64,
    huge_refused: AtomicU64,
    hugetlb_mapped: AtomicU64,
    hugetlb_refused: AtomicU64,
    /// The first failure for lack of room is reported on stderr (the default space).
    reports_exhaustion: std::sync::atomic::AtomicBool,
}

/// Figures of a space: the arena's table plus the space's own.
#[derive(Clone, Debug, Default)]
pub struct SpaceStats {
    /// The arena's statistics.
    pub arena: ArenaStats,
    /// Resident bytes of the reservation (mincore), when asked for.
    pub resident_bytes: u64,
    /// Zeroed allocations that needed a memset (dirty memory).
    pub vzalloc_memsets: u64,
    /// Guard install and remove calls.
    pub guard_calls: u64,
    /// `mmap` calls that mapped frames or put anonymous memory back over them.
    pub map_calls: u64,
    /// Live areas holding caller's frames (vmap, vm_map_ram, vmap blocks).
    pub mapped_areas: u64,
    /// Live per-CPU vmap blocks.
    pub vmap_blocks: u64,
    /// Mappings `vm_unmap_ram` left in place in live vmap blocks (restored when the block is
    /// released, or by `vm_unmap_aliases`).
    pub map_ram_lingering: u64,
    /// `vmalloc_huge` areas advised for transparent huge pages (`MADV_HUGEPAGE`).
    pub huge_advised: u64,
    /// `vmalloc_huge` requests below one huge page: base pages, as the kernel does.
    pub huge_small: u64,
    /// `vmalloc_huge` areas whose advice the kernel refused (THP off or missing): base pages.
    pub huge_refused: u64,
    /// `vmalloc_hugetlb` areas backed by reserved huge pages (`MAP_HUGETLB`).
    pub hugetlb_mapped: u64,
    /// `vmalloc_hugetlb` requests the system had no reserved huge pages for: served by
    /// `vmalloc_huge` instead (transparent huge pages where allowed, else base pages).
    pub hugetlb_refused: u64,
}

/// The space's error for a free the arena refused at `p`.
fn free_error(p: *mut u8, e: FreeError) -> VmError {
    match e {
        FreeError::NotLive { .. } => VmError::NotLive(p as usize),
        FreeError::WrongKind { .. } => VmError::WrongKind(p as usize),
    }
}

impl VmSpace {
    /// A space named `name` with the given options.
    pub fn new(name: &str, opts: SpaceOptions, arena_opts: ArenaOptions) -> Result<VmSpace, String> {
        Self::build(name, opts, arena_opts, None)
    }

    /// A frames-backed space: `vmalloc` backs each area with frames of `pool` (blocks of the
    /// largest orders that fit, mapped one run of consecutive frames per call) instead of
    /// anonymous memory, so `vmalloc_to_frame` answers for every page and the memory can be
    /// mapped again elsewhere through the pool's file. Frames go back to the pool when a purge
    /// releases an area. Lazy areas are reused at their own size only (no splitting).
    pub fn with_frames(
        name: &str,
        opts: SpaceOptions,
        arena_opts: ArenaOptions,
        pool: crate::FramePool,
    ) -> Result<VmSpace, String> {
        Self::build(name, opts, ArenaOptions { lazy_split: false, ..arena_opts }, Some(pool))
    }

    fn build(
        name: &str,
        opts: SpaceOptions,
        arena_opts: ArenaOptions,
        pool: Option<crate::FramePool>,
    ) -> Result<VmSpace, String> {
        crate::fork::register();
        let _inside = reentry::enter();
        let page_bytes = vmarena_platform::page_size();
        let page_shift = page_bytes.trailing_zeros();
        let bytes = usize::try_from(opts.space_bytes).map_err(|_| "space_bytes does not fit in usize")?;
        if bytes < 16 * page_bytes {
            return Err(format!("space_bytes {bytes} is below 16 pages"));
        }
        // Align the reservation to the busy zone so striping starts at a zone boundary.
        let zone_bytes = (vmarena_engine::ZONE_PAGES as usize) << page_shift;
        // Inaccessible until the arena grows into it (`backing.rs`): strict overcommit charges
        // what is committed, not the reservation.
        let reservation = Arc::new(
            Reservation::new_inaccessible(bytes, zone_bytes.max(2 << 20))
                .map_err(|e| format!("{name}: cannot reserve {bytes} bytes: {e}"))?,
        );
        let guards_enforced = opts.guard_enforce && opts.guard_pages > 0 && guard::supported();
        // Huge pages for large areas: every small area's guard gives its 2 MiB range a page
        // table before the area is touched, so only ranges inside large areas (or never used)
        // can take a huge page. Without enforced guards that would not hold.
        let huge_pages = opts.huge_pages && guards_enforced && pool.is_none() && reservation.advise_huge();
        // Only Nodes moves pages, and only in memory spaces (not frames-backed ones).
        let moves = arena_opts.moves_pages();
        // Opened on the first move only: a process that never moves holds no descriptor.
        let uffd = if opts.uffd_moves && moves && pool.is_none() {
            Some(Arc::new(LazyUffd::new(reservation.base(), reservation.len_bytes())))
        } else {
            None
        };
        let backing = Box::new(MemoryBacking {
            reservation: reservation.clone(),
            page_bytes,
            granule_pages: if huge_pages {
                (vmarena_platform::huge_page_size() / page_bytes).max(1) as u64
            } else {
                1
            },
            guard_pages: opts.guard_pages,
            enforce_guards: guards_enforced,
            advice: opts.release.0,
            guard_calls: Arc::new(AtomicU64::new(0)),
            uffd: uffd.clone(),
        });
        let guard_calls = backing.guard_calls.clone();
        let lo = (reservation.base() >> page_shift) as u64;
        let hi = lo + (reservation.len_bytes() >> page_shift) as u64;
        let frame_map = Arc::new(crate::frame_map::FrameMap::default());
        let (frames, backing): (_, Box<dyn vmarena_engine::Backing>) = match pool {
            None => (None, backing),
            Some(pool) => {
                let fb = Arc::new(crate::frame_backing::FrameBacking {
                    memory: *backing,
                    pool,
                    map: frame_map.clone(),
                    blocks: Default::default(),
                    page_shift,
                });
                (Some(fb.clone()), Box::new(crate::frame_backing::SharedFrameBacking(fb)))
            }
        };
        // The pressure monitor starts on the thread of the arena's purge worker when it has one
        // (the worker starts with the arena's first use; before its first free it holds
        // nothing to give back), so that the first call does not wait for the monitor's thread.
        let worker_starts_monitor = arena_opts.purge_thread && arena_opts.decay_interval_ms > 0;
        let arena = Arena::new(name, lo, hi, arena_opts, backing)?;
        if worker_starts_monitor {
            crate::pressure::start_with_first_worker();
        } else {
            crate::pressure::start_monitor();
        }
        let lingering_max = opts.map_ram_lazy_max;
        let blocks = Arc::new(crate::vmap_blocks::VmapBlocks::new(lingering_max));
        let fork_maps = Arc::new(SpaceMaps {
            blocks: blocks.clone(),
            frame_map: frame_map.clone(),
            frames: frames.clone(),
        });
        let weak: std::sync::Weak<dyn vmarena_engine::ForkLocks> =
            Arc::downgrade(&fork_maps) as std::sync::Weak<dyn vmarena_engine::ForkLocks>;
        vmarena_engine::fork::register(vmarena_engine::fork::Rank::SpaceMaps, weak);
        Ok(VmSpace {
            name: name.to_string(),
            arena,
            reservation,
            page_bytes,
            page_shift,
            guard_pages: opts.guard_pages,
            guards_enforced,
            huge_pages,
            uffd,
            opts,
            memsets: AtomicU64::new(0),
            guard_calls,
            frame_map,
            frames,
            blocks,
            _fork_maps: fork_maps,
            mapped_live: AtomicU64::new(0),
            map_calls: AtomicU64::new(0),
            huge_advised: AtomicU64::new(0),
            huge_small: AtomicU64::new(0),
            huge_refused: AtomicU64::new(0),
            hugetlb_mapped: AtomicU64::new(0),
            hugetlb_refused: AtomicU64::new(0),
            reports_exhaustion: Default::default(),
        })
    }

    /// The space's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The options the space was built with.
    pub fn options(&self) -> &SpaceOptions {
        &self.opts
    }

    /// The arena under the space (for statistics and the lab).
    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// True when guard pages fault on access (the kernel has MADV_GUARD_INSTALL).
    pub fn guards_enforced(&self) -> bool {
        self.guards_enforced
    }

    /// Register `[addr, addr + len)` of the reservation with the space's userfaultfd again
    /// after a fresh mapping replaced it, so that it merges with the reservation and moves may
    /// land there.
    pub(crate) fn reregister(&self, addr: usize, len: usize) {
        if let Some(u) = self.uffd.as_ref().and_then(|u| u.opened()) {
            u.register(addr, len);
        }
    }

    /// True when large areas may fault in transparent huge pages (the `huge_pages` option,
    /// taken only with enforced guards, a space of its own memory and a kernel that agreed).
    pub fn huge_pages(&self) -> bool {
        self.huge_pages
    }

    /// `[start, end)` of the reservation, in bytes.
    pub fn bounds(&self) -> (usize, usize) {
        (self.reservation.base(), self.reservation.base() + self.reservation.len_bytes())
    }

    /// Bytes of the reservation committed now, from its start: the space commits in steps as it
    /// needs more, and a full purge gives the free top back (`backing.rs`).
    pub fn committed_bytes(&self) -> usize {
        let (lo, hi) = self.arena.usable_range();
        ((hi - lo) as usize) << self.page_shift
    }

    /// Pages an allocation of `bytes` takes, guard included.
    fn pages_for(&self, bytes: usize) -> Result<u64, VmError> {
        if bytes == 0 {
            return Err(VmError::ZeroSize);
        }
        let data = bytes.checked_add(self.page_bytes - 1).ok_or(VmError::Overflow(bytes))? >> self.page_shift;
        (data as u64).checked_add(self.guard_pages).ok_or(VmError::Overflow(bytes))
    }

    /// The space's error for an allocation the arena refused; the default space's first
    /// failure for lack of room is also reported on stderr (`crate::exhaustion`).
    fn map_alloc_error(&self, e: AllocError, bytes: usize) -> VmError {
        let e = self.alloc_error(e, bytes);
        if matches!(e, VmError::NoSpace(_)) && self.reports_exhaustion.load(Relaxed) {
            crate::exhaustion::report_once(&e);
        }
        e
    }

    /// Report the first failure for lack of room on stderr (`crate::exhaustion`): the default
    /// space asks for it, whose size the user did not choose.
    pub(crate) fn report_exhaustion(&self) {
        self.reports_exhaustion.store(true, Relaxed);
    }

    fn alloc_error(&self, e: AllocError, bytes: usize) -> VmError {
        match e {
            AllocError::Invalid(vmarena_core::RequestError::ZeroSize) => VmError::ZeroSize,
            AllocError::Invalid(vmarena_core::RequestError::BadAlignment) => VmError::BadAlignment(0),
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
        Ok(pages
            .iter()
            .map(|p| {
                NonNull::new((((base + p.start) as usize) << self.page_shift) as *mut u8)
                    .expect("inside the reservation")
            })
            .collect())
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
    fn alloc_cached(
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
    fn align_pages_for(&self, align_bytes: usize) -> u64 {
        (align_bytes >> self.page_shift).max(1) as u64
    }

    /// Zero the data pages of the area of `pages` pages (guard included) at `addr`, which the
    /// caller has just been handed, and count the memset.
    #[inline(always)]
    fn clear_data(&self, addr: usize, pages: u64) {
        let len = ((pages - self.guard_pages) as usize) << self.page_shift;
        // SAFETY: the area's data pages belong to the caller from this allocation until its
        // free, and are mapped read-write in the reservation.
        unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len) };
        self.memsets.fetch_add(1, Relaxed);
    }

    #[inline(never)]
    fn alloc_slow(
        &self,
        bytes: usize,
        align_bytes: usize,
        zeroed: bool,
        nonblocking: bool,
        caller: &'static Location<'static>,
        kind: AreaKind,
    ) -> Result<NonNull<u8>, VmError> {
        let _inside = reentry::enter();
        if !align_bytes.is_power_of_two() {
            return Err(VmError::BadAlignment(align_bytes));
        }
        let pages = self.pages_for(bytes)?;
        let req = AllocRequest {
            pages,
            align_pages: self.align_pages_for(align_bytes),
            window: None,
            prefer_fresh: zeroed,
            nonblocking,
            tag: AreaTag { caller: Some(caller), requested_bytes: bytes as u64, kind },
        };
        // `alloc_inner` tried the thread cache for every request it could serve.
        let a = self.arena.alloc_uncached(&req).map_err(|e| self.map_alloc_error(e, bytes))?;
        let addr = (a.start as usize) << self.page_shift;
        if matches!(kind, AreaKind::Vmalloc | AreaKind::FixedSlot) {
            if let Some(fb) = &self.frames {
                self.back_with_frames(fb, a.start, a.pages - self.guard_pages)?;
            }
        }
        if zeroed && !a.fresh {
            self.clear_data(addr, a.pages);
        }
        Ok(NonNull::new(addr as *mut u8).expect("reservation never contains address 0"))
    }

    /// Give the area at `start` frames if it has none (a frames-backed space). On failure
    /// (after one purge to get frames back) the area is freed and the error names the pool.
    fn back_with_frames(
        &self,
        fb: &crate::frame_backing::FrameBacking,
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
    /// [`SpaceStats`] counts the areas advised, the small ones and those whose advice the kernel
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
    /// area comes from `vmalloc_huge` instead (counted in [`SpaceStats`] as `hugetlb_refused`).
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
                self.unmap_pages(start, rounded >> self.page_shift);
                let _inside = reentry::enter();
                self.arena.free_uncached_of(start, AreaKind::HugeTlb).expect("the area allocated above");
                self.hugetlb_refused.fetch_add(1, Relaxed);
                self.vmalloc_huge(bytes)
            }
        }
    }

    /// Free a `HugeTlb` area: the one call that moves its kind to `Retired` (a passing state
    /// every other free refuses) puts base pages back over its data, then frees it; a racing
    /// second free is refused.
    fn vfree_hugetlb(&self, p: *mut u8, start: u64) -> Result<u64, VmError> {
        self.arena.swap_kind(start, AreaKind::HugeTlb, AreaKind::Retired).map_err(|e| free_error(p, e))?;
        let pages = self.arena.lookup(start).map(|a| a.pages).expect("a claimed area stays busy");
        self.unmap_pages(start, (pages - self.guard_pages) as usize);
        self.arena.free_uncached_of(start, AreaKind::Retired).map(|a| a.pages).map_err(|e| free_error(p, e))
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
    /// shrinks within the area's pages happen in place; otherwise a new area is allocated, the
    /// area's whole usable size (what [`VmSpace::size`] reports, also after a shrink in place)
    /// copied and the old area freed. On error the old area is untouched.
    #[track_caller]
    pub fn vrealloc(&self, p: Option<NonNull<u8>>, bytes: usize) -> Result<NonNull<u8>, VmError> {
        let _inside = reentry::enter();
        let caller = Location::caller();
        let Some(p) = p else {
            return self.alloc_inner(bytes, 1, false, false, caller, AreaKind::Vmalloc);
        };
        let addr = p.as_ptr() as usize;
        let start = self.start_page(addr)?;
        // A small area answers from its state word and stays in place without a lock; any
        // other area is looked up in the busy map.
        let small = self.arena.small_area(start);
        let pages = match small {
            Some(a) if a.free || a.retired => return Err(VmError::NotLive(addr)),
            Some(a) => a.pages,
            None => {
                let area = self.arena.lookup(start).ok_or(VmError::NotLive(addr))?;
                if area.tag.kind != AreaKind::Vmalloc {
                    return Err(VmError::WrongKind(addr));
                }
                area.pages
            }
        };
        let usable = ((pages - self.guard_pages) as usize) << self.page_shift;
        if bytes == 0 {
            return Err(VmError::ZeroSize);
        }
        if bytes <= usable {
            let still_live = match small {
                Some(_) => self.arena.resized_in_place(start),
                None => self.arena.update_tag(start, |t| t.requested_bytes = bytes as u64),
            };
            return if still_live { Ok(p) } else { Err(VmError::NotLive(addr)) };
        }
        // Moving: every usable byte, not only the latest request's. `size` reports the whole
        // area, so a caller may have written up to its end after a shrink in place.
        let q = self.alloc_inner(bytes, 1, false, false, caller, AreaKind::Vmalloc)?;
        let keep = usable.min(bytes);
        // SAFETY: `p` is a live area of at least `keep` bytes, `q` a fresh one of at least
        // `bytes`; two live areas never overlap.
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), q.as_ptr(), keep) };
        if let Err(e) = self.vfree(p.as_ptr()) {
            // `p` was freed by another call while it was copied (a bug of the caller's): the
            // new area goes back and the error is reported.
            let _ = self.vfree(q.as_ptr());
            return Err(e);
        }
        Ok(q)
    }

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
        let start = self.start_page(p as usize)?;
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
    fn vfree_slow(&self, p: *mut u8, start: u64) -> Result<u64, VmError> {
        let _inside = reentry::enter();
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
        let start = self.start_page(p as usize)?;
        self.arena.retire(start).map_err(|e| free_error(p.cast_mut(), e))
    }

    /// The grace period of the retired area at `p` has passed: make it a live area again, for
    /// the deferred free to release with `vfree`.
    pub(crate) fn unretire(&self, p: *const u8) -> Result<(), VmError> {
        let start = self.start_page(p as usize)?;
        self.arena.unretire(start).map_err(|e| free_error(p.cast_mut(), e))
    }

    /// Usable bytes of the live area that starts at `p` (whole pages), or `None`. Takes no
    /// lock for a small area (its state word answers).
    pub fn size(&self, p: *const u8) -> Option<usize> {
        let start = self.start_page(p as usize).ok()?;
        Some(self.usable_bytes(self.arena.live_pages(start)?))
    }

    /// Usable bytes of an area of `pages` pages, its guard included.
    fn usable_bytes(&self, pages: u64) -> usize {
        ((pages - self.guard_pages) as usize) << self.page_shift
    }

    /// The page size the space counts in, in bytes.
    pub fn page_bytes(&self) -> usize {
        self.page_bytes
    }

    /// True when `p` lies inside this space's reservation (the kernel's `is_vmalloc_addr`):
    /// the address test a router uses, not a liveness test.
    #[inline]
    pub fn contains(&self, p: *const u8) -> bool {
        self.reservation.contains(p as usize)
    }

    /// Release the memory of every lazily freed area now (a normal purge). Returns the pages
    /// of the released areas, guard pages included (only data pages are given back).
    pub fn purge(&self) -> u64 {
        let _inside = reentry::enter();
        self.arena.purge().pages_released
    }

    /// The shrinker: release all cached memory and return every pooled area to the free tree;
    /// mappings `vm_unmap_ram` left in place are removed first (`vm_unmap_aliases`).
    pub fn shrink(&self) -> u64 {
        let _inside = reentry::enter();
        self.blocks.unmap_aliases(self);
        self.arena.shrink().pages_released
    }

    /// Figures of the space. `resident` adds a `mincore` walk of the committed part of the
    /// reservation, whose time grows with the committed size.
    pub fn stats(&self, resident: bool) -> SpaceStats {
        let _inside = reentry::enter();
        let mut s = SpaceStats {
            arena: self.arena.stats(),
            vzalloc_memsets: self.memsets.load(Relaxed),
            huge_advised: self.huge_advised.load(Relaxed),
            huge_small: self.huge_small.load(Relaxed),
            huge_refused: self.huge_refused.load(Relaxed),
            hugetlb_mapped: self.hugetlb_mapped.load(Relaxed),
            hugetlb_refused: self.hugetlb_refused.load(Relaxed),
            guard_calls: self.guard_calls.load(Relaxed),
            map_calls: self.map_calls.load(Relaxed),
            mapped_areas: self.mapped_live.load(Relaxed),
            vmap_blocks: self.blocks.live(),
            map_ram_lingering: self.blocks.lingering(),
            ..Default::default()
        };
        if resident {
            s.resident_bytes = self.resident_bytes();
        }
        s
    }

    /// Resident bytes of the reservation (`mincore` over its committed part: nothing beyond it
    /// can be resident).
    pub fn resident_bytes(&self) -> u64 {
        vmarena_platform::process::resident_bytes(self.reservation.base(), self.committed_bytes())
    }

    /// Lock figures by lock class.
    pub fn lock_stats(&self) -> Vec<(&'static str, LockStats)> {
        let _inside = reentry::enter();
        self.arena.lock_stats()
    }

    /// Live and lazy areas in the format of the kernel's `/proc/vmallocinfo`.
    pub fn vmallocinfo(&self) -> String {
        let _inside = reentry::enter();
        crate::vmallocinfo::format(&self.arena, self.page_shift, self.guard_pages)
    }

    /// Check every invariant of the arena (call it when no other thread uses the space).
    pub fn check(&self) -> Result<(), String> {
        let _inside = reentry::enter();
        self.arena.check()
    }
}
