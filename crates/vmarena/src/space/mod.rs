//! `VmSpace`: the vmalloc family over one large reservation.
//!
//! Owns: one [`Reservation`] (a single mapping, never split) and the [`Arena`] that hands out
//! its pages; a growing space (the default space) also its further reservations
//! (`extensions.rs`), each a space of its own, when its own reservation is full. Memory is
//! anonymous memory the kernel faults in on first touch; purges release it with
//! `MADV_DONTNEED` (or `MADV_FREE`), batched; guards after each area are guard markers where
//! the kernel has them.
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
mod alloc;
mod extensions;
mod free;
mod tools;

pub use extensions::{set_growth_hook, MAX_EXTENSIONS};

pub use crate::error::VmError;
use crate::options::SpaceOptions;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use vmarena_engine::{Arena, ArenaOptions, ArenaStats, LockStats};
use vmarena_platform::uffd::LazyUffd;
use vmarena_platform::{guard, reentry, Reservation};

/// A space's own mutexes (vmap blocks, the frame map, a frames-backed space's block map), for
/// `fork()`: each is held alone, or (vmap) in the order `lock_for_fork` takes them, and none is
/// held while an arena lock is taken.
struct SpaceMaps {
    blocks: Arc<crate::frames::vmap_blocks::VmapBlocks>,
    frame_map: Arc<crate::frames::map::FrameMap>,
    frames: Option<Arc<crate::frames::backing::FrameBacking>>,
}

impl vmarena_engine::ForkLocks for SpaceMaps {
    fn lock_for_fork(&self) -> Vec<Box<dyn vmarena_engine::sync::fork::Held + '_>> {
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
    pub(crate) frame_map: Arc<crate::frames::map::FrameMap>,
    frames: Option<Arc<crate::frames::backing::FrameBacking>>,
    pub(crate) blocks: Arc<crate::frames::vmap_blocks::VmapBlocks>,
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
    /// The debugging tools found when the space was built (`vmarena_platform::debug_tools`;
    /// `tools.rs` announces areas to them).
    tools: u8,
    /// Further reservations, for a space that grows ([`VmSpace::growing`]).
    extensions: Option<Box<extensions::Extensions<VmSpace>>>,
}

impl extensions::Part for VmSpace {
    fn build(name: &str, opts: SpaceOptions, arena_opts: ArenaOptions) -> Result<VmSpace, String> {
        VmSpace::new(name, opts, arena_opts)
    }

    fn holds(&self, addr: usize) -> bool {
        self.reservation.contains(addr)
    }

    fn bounds(&self) -> (usize, usize) {
        VmSpace::bounds(self)
    }

    fn alloc_vmalloc(
        &self,
        bytes: usize,
        align_bytes: usize,
        zeroed: bool,
        nonblocking: bool,
        caller: &'static std::panic::Location<'static>,
    ) -> Result<std::ptr::NonNull<u8>, VmError> {
        self.alloc_inner(bytes, align_bytes, zeroed, nonblocking, caller, vmarena_engine::AreaKind::Vmalloc)
    }
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
    /// Further reservations of a growing space (each a space of its own, named after this one
    /// with `+1`, `+2`...; `arena` counts only this space's own reservation).
    pub extensions: u64,
    /// Live areas in the further reservations.
    pub extension_live_areas: u64,
    /// Pages of those live areas, guard pages included.
    pub extension_live_pages: u64,
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
        // With a debugging tool present every area passes the space's announcements
        // (`tools.rs`): no thread caches, whose hits bypass the space.
        let tools = vmarena_platform::debug_tools::detect();
        let arena_opts = if tools != 0 {
            if tools & vmarena_platform::debug_tools::TSAN != 0 {
                vmarena_engine::sync::lock_stats::tell_thread_sanitizer();
            }
            ArenaOptions { thread_cache: false, cpu_cache: false, ..arena_opts }
        } else {
            arena_opts
        };
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
        let frame_map = Arc::new(crate::frames::map::FrameMap::default());
        let (frames, backing): (_, Box<dyn vmarena_engine::Backing>) = match pool {
            None => (None, backing),
            Some(pool) => {
                let fb = Arc::new(crate::frames::backing::FrameBacking {
                    memory: *backing,
                    pool,
                    map: frame_map.clone(),
                    blocks: Default::default(),
                    page_shift,
                });
                (Some(fb.clone()), Box::new(crate::frames::backing::SharedFrameBacking(fb)))
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
        let blocks = Arc::new(crate::frames::vmap_blocks::VmapBlocks::new(lingering_max));
        let fork_maps = Arc::new(SpaceMaps {
            blocks: blocks.clone(),
            frame_map: frame_map.clone(),
            frames: frames.clone(),
        });
        let weak: std::sync::Weak<dyn vmarena_engine::ForkLocks> =
            Arc::downgrade(&fork_maps) as std::sync::Weak<dyn vmarena_engine::ForkLocks>;
        vmarena_engine::sync::fork::register(vmarena_engine::sync::fork::Rank::SpaceMaps, weak);
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
            tools,
            extensions: None,
        })
    }

    /// This space, made to grow: when its own reservation has no room for a `vmalloc`-family
    /// request, further reservations of the same options serve it, each of the size
    /// `fit(own size)` gives when it is made (at least `min_bytes`, halved while refused), up
    /// to [`MAX_EXTENSIONS`]. `vmap`, congruent areas, huge-page areas and fixed slots stay in
    /// the own reservation.
    pub(crate) fn growing(mut self, fit: fn(u64) -> u64, min_bytes: u64) -> VmSpace {
        let arena_opts = self.arena.options().clone();
        self.extensions = Some(Box::new(extensions::Extensions::new(
            &self.name,
            self.opts.clone(),
            arena_opts,
            fit,
            min_bytes,
        )));
        self
    }

    /// The further reservation that holds `addr`, when this space grows and its own
    /// reservation does not hold it.
    #[inline]
    pub(crate) fn extension_holding(&self, addr: usize) -> Option<&VmSpace> {
        match &self.extensions {
            Some(x) if !self.reservation.contains(addr) && x.len() > 0 => x.holding(addr),
            _ => None,
        }
    }

    /// The further reservations of a growing space, oldest first (none for other spaces).
    pub fn extensions(&self) -> impl Iterator<Item = &VmSpace> {
        self.extensions.iter().flat_map(|x| x.all())
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

    /// Usable bytes of the live area that starts at `p` (whole pages), or `None`. Takes no
    /// lock for a small area (its state word answers).
    pub fn size(&self, p: *const u8) -> Option<usize> {
        if let Some(x) = self.extension_holding(p as usize) {
            return x.size(p);
        }
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

    /// True when `p` lies inside this space's reservation or one of its further reservations
    /// (the kernel's `is_vmalloc_addr`): the address test a router uses, not a liveness test.
    #[inline]
    pub fn contains(&self, p: *const u8) -> bool {
        self.reservation.contains(p as usize) || self.extension_holding(p as usize).is_some()
    }

    /// Release the memory of every lazily freed area now (a normal purge). Returns the pages
    /// of the released areas, guard pages included (only data pages are given back).
    pub fn purge(&self) -> u64 {
        let _inside = reentry::enter();
        self.arena.purge().pages_released + self.extensions().map(|x| x.purge()).sum::<u64>()
    }

    /// The shrinker: release all cached memory and return every pooled area to the free tree;
    /// mappings `vm_unmap_ram` left in place are removed first (`vm_unmap_aliases`).
    pub fn shrink(&self) -> u64 {
        let _inside = reentry::enter();
        self.blocks.unmap_aliases(self);
        self.arena.shrink().pages_released + self.extensions().map(|x| x.shrink()).sum::<u64>()
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
        for x in self.extensions() {
            let a = x.arena.stats();
            s.extensions += 1;
            s.extension_live_areas += a.live_areas;
            s.extension_live_pages += a.live_pages;
        }
        if resident {
            s.resident_bytes = self.resident_bytes();
        }
        s
    }

    /// Resident bytes of the reservation (`mincore` over its committed part: nothing beyond it
    /// can be resident).
    pub fn resident_bytes(&self) -> u64 {
        vmarena_platform::process::resident_bytes(self.reservation.base(), self.committed_bytes())
            + self.extensions().map(|x| x.resident_bytes()).sum::<u64>()
    }

    /// Lock figures by lock class.
    pub fn lock_stats(&self) -> Vec<(&'static str, LockStats)> {
        let _inside = reentry::enter();
        self.arena.lock_stats()
    }

    /// Live and lazy areas in the format of the kernel's `/proc/vmallocinfo`.
    pub fn vmallocinfo(&self) -> String {
        let _inside = reentry::enter();
        let mut text = crate::vmallocinfo::format(&self.arena, self.page_shift, self.guard_pages);
        for x in self.extensions() {
            text.push_str(&x.vmallocinfo());
        }
        text
    }

    /// Check every invariant of the arena (call it when no other thread uses the space).
    pub fn check(&self) -> Result<(), String> {
        let _inside = reentry::enter();
        self.arena.check()?;
        self.extensions().try_for_each(|x| x.check())
    }
}
