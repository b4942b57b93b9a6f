//! The vocabulary of areas, shared by the arena, its thread caches and the layers above: what
//! a live area records ([`AreaTag`], [`AreaKind`]), what a caller asks for and gets
//! ([`AllocRequest`], [`Allocation`]), the allocation ladder's steps ([`Step`]) and what a purge
//! does ([`PurgeKind`], [`PurgeReport`]) and what a free knows of an area's memory ([`Contents`]).
//!
//! Owns: nothing but these types (plain data, no locks, no `unsafe`).

use std::panic::Location;

/// `AreaTag::requested_bytes` of an area whose latest allocation came from a thread cache.
pub const UNKNOWN_BYTES: u64 = u64::MAX;

/// A busy-map value (an area's record) fits one cache line, which the busy map gives each
/// value: a lookup reads one line of values, and a batch prefetches that line.
const _: () = assert!(std::mem::size_of::<vmarena_core::busy::BusyArea<AreaTag>>() <= 64);

/// What the layer above records with each live area.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AreaTag {
    /// Where the area was allocated from (for `vmallocinfo`).
    pub caller: Option<&'static Location<'static>>,
    /// Bytes the user asked for (the kernel's `requested_size`); [`UNKNOWN_BYTES`] after a
    /// thread-cache reuse.
    pub requested_bytes: u64,
    /// What the area holds (the kernel's area flags, as `vmallocinfo` prints them).
    pub kind: AreaKind,
}

/// What a live area holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AreaKind {
    /// Memory of the space (`vmalloc` and family).
    #[default]
    Vmalloc,
    /// Caller's frames mapped by `vmap`.
    Vmap,
    /// Caller's frames mapped by `vm_map_ram` (more than the per-CPU block limit).
    VmMapRam,
    /// A per-CPU block that `vm_map_ram` carves small mappings from.
    VmapBlock,
    /// A slot of a fixed pool: the space's memory, owned by the pool for its whole life (only
    /// the pool frees it).
    FixedSlot,
    /// A `Vmalloc` area handed to a deferred free (`kvfree_rcu`) and waiting for its grace
    /// period: readable, refused by every free and resize ([`Arena::retire`](crate::Arena::retire)). Small areas
    /// keep the kind `Vmalloc` in their record and say `retired` in their state word. Also the
    /// passing kind of a `HugeTlb` area while the one free that claimed it puts base pages
    /// back.
    Retired,
    /// The space's memory backed by reserved huge pages (`MAP_HUGETLB`) over the area's data
    /// pages: a free puts base pages back before the area goes.
    HugeTlb,
}

/// A small area as its state word describes it ([`Arena::small_area`](crate::Arena::small_area)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmallArea {
    /// Pages, guard pages included.
    pub pages: u64,
    /// The area sits in a thread cache: free for its user.
    pub free: bool,
    /// The area waits for a deferred free ([`Arena::retire`](crate::Arena::retire)).
    pub retired: bool,
    /// The busy record's tag is current (the area has been neither reused from a thread cache
    /// nor resized in place since it entered the busy map).
    pub record_current: bool,
}

/// An allocation request. `AllocRequest::pages(n)` gives the defaults.
#[derive(Clone, Copy, Debug)]
pub struct AllocRequest {
    /// Pages, guard pages included.
    pub pages: u64,
    /// Alignment of the start, in pages (power of two).
    pub align_pages: u64,
    /// Sub-range the area must lie in; `None` for the whole arena (only then, and with no
    /// phase or nocross, are caches and pools used).
    pub window: Option<(u64, u64)>,
    /// The start is `phase_pages` past a multiple of `align_pages` (vmem's phase; below
    /// `align_pages`).
    pub phase_pages: u64,
    /// The area crosses no multiple of `nocross_pages` (vmem's nocross: 0, or a power of two
    /// at least `pages`).
    pub nocross_pages: u64,
    /// Prefer an area whose memory was released (reads as zero without a memset) among pooled
    /// areas; a thread cache still serves it a dirty area (see `Allocation::fresh`).
    pub prefer_fresh: bool,
    /// Never wait for a purge: fail with [`AllocError::WouldBlock`](crate::AllocError::WouldBlock) instead.
    pub nonblocking: bool,
    /// Recorded with the area.
    pub tag: AreaTag,
}

impl AllocRequest {
    /// `pages` pages, page aligned, anywhere in the arena.
    pub fn pages(pages: u64) -> Self {
        AllocRequest {
            pages,
            align_pages: 1,
            window: None,
            phase_pages: 0,
            nocross_pages: 0,
            prefer_fresh: false,
            nonblocking: false,
            tag: AreaTag::default(),
        }
    }
}

impl AllocRequest {
    /// No phase and no nocross: a request the caches, pools and nodes may serve when it also
    /// has no window.
    #[inline]
    pub fn is_plain(&self) -> bool {
        self.phase_pages == 0 && self.nocross_pages == 0
    }
}

/// No allocating node (the kernel's `vn_id` 0).
pub const NO_NODE: u16 = u16::MAX;

/// A successful allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// First page.
    pub start: u64,
    /// Pages: as requested, or more when a lazy area within `lazy_slack_percent` of the request
    /// was handed out whole.
    pub pages: u64,
    /// The memory is known to read as zero (fresh from the tree or released in a pool).
    pub fresh: bool,
}

/// The rungs of the allocation ladder, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// This node's exact-size pool (Nodes, default window, 1..=256 pages).
    Pool,
    /// A large area this node freed and no purge has taken yet (Nodes, default window).
    LazyReuse,
    /// Another node's resident freed area, from its pool (dirty entries) or lazy list (Nodes,
    /// requests larger than a chunk carve; option `node_steal`).
    Steal,
    /// This node's chunk, a zone of its stripe (Nodes, up to 16 pages, page alignment).
    Chunk,
    /// One of this node's largest runs of adjacent lazy areas grown into the free space above
    /// and below it (Nodes, sizes above the pools).
    Extend,
    /// The free tree, conservative O(log n) search (for Nodes first in the node's stripe).
    Tree,
    /// The free tree, exact search (only when the alignment made the first search skip blocks).
    TreeExact,
    /// The area just carved from the tree (or an Extend's growth) takes the resident memory of
    /// the oldest lazy areas, moved (Nodes, at least 256 pages a move; option `page_moves`).
    Move,
    /// The usable part of the range grown by the backing's next step (a memory space that
    /// commits in steps), the new pages merged into the free tree; then the steps again.
    Grow,
    /// The pooled and lazy areas and node chunks over the request's possible starts, when it
    /// has at most 16 (a large alignment), released and merged into the tree; then the steps
    /// again (Nodes).
    Reclaim,
    /// Full purge (every lazy area released, every pool and chunk back in the tree), then the
    /// steps again, repeated while a purge still gives something back.
    FullPurge,
}

/// How much a purge gives back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PurgeKind {
    /// Release lazy memory, refill pools with the released areas, decay pools by the option's
    /// share (25%).
    Normal,

    /// The purge the lazy threshold starts: as `Normal`, except that Nodes keeps the most
    /// recently freed lazy pages resident, up to `purge_keep_percent` of the lazy limit
    /// (`lazy_max_pages` plus the headroom), and keeps its high-water mark of live pages.
    Threshold,

    /// Release lazy memory and return every pooled and lazy area to the free tree.
    Full,

    /// The purge of the worker's periodic tick: as `Normal`, except that Nodes keeps each
    /// node's pages freed since the previous decay purge (up to its lazy pages): memory a
    /// program frees and does not reuse goes back one tick or two after its free, memory it
    /// keeps reusing stays.
    Decay,
}

/// What one purge did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// Areas whose memory was released.
    pub areas_released: u64,
    /// Pages whose memory was released.
    pub pages_released: u64,
    /// Areas returned to the free tree.
    pub areas_to_tree: u64,
    /// Syscalls made (release and retire).
    pub syscalls: u64,
}

/// What a free that returns its area to the free tree at once knows of the area's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contents {
    /// Its pages may be resident: they are released first (a free while the purges have
    /// fallen behind).
    Resident,
    /// A resize moved every data page out ([`Arena::move_data`](crate::Arena::move_data)):
    /// nothing is resident, so nothing is released unless the backing releases in huge
    /// pages (a huge page the area's first touch made may reach into free pages beside it).
    Emptied,
}
