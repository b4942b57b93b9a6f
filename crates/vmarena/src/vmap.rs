//! Mapping caller's frames into a space: `vmap`/`vunmap`, `vm_map_ram`/`vm_unmap_ram` with the
//! kernel's per-CPU vmap blocks, and `vmalloc_to_frame`.
//!
//! Owns: `VmapBlocks`, the per-CPU blocks that small `vm_map_ram` requests (up to
//! [`VMAP_MAX_ALLOC_PAGES`] pages) are carved from, as the kernel's `vb_alloc`/`vb_free` do:
//!
//! ```text
//!  block (an area of 1024 pages, aligned to its size, one per CPU at a time on the free list)
//!  [ used | dirty | used |  free (never handed out yet) ... ]
//!    bump allocation in power-of-two slots from the front; holes are not reused;
//!    the block's area is freed when every page is dirty, or when nothing is used and less
//!    than a quarter was never handed out (the kernel purges such blocks at its next purge)
//! ```
//!
//! Locks: a CPU's free list, then a block (in that order only); the address index shard alone.
//! None is held across an engine call that may purge. The only syscalls under a lock are the
//! `mmap`s with which [`VmSpace::vm_unmap_aliases`] restores a live block's dirty slots: it
//! holds that block's lock, so the block cannot be released (and its area reused) meanwhile.
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

use crate::frame_map::{run_count, runs};
use crate::space::{VmError, VmSpace};
use crate::FramePool;
use std::collections::HashMap;
use std::panic::Location;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use vmarena_engine::AreaKind;
use vmarena_platform::{memfd, reentry};

/// Largest `vm_map_ram` served from per-CPU blocks (the kernel's `VMAP_MAX_ALLOC`).
pub const VMAP_MAX_ALLOC_PAGES: usize = 64;
/// Pages of one vmap block (the kernel's `VMAP_BBMAP_BITS` for up to 512 CPUs).
pub const VMAP_BLOCK_PAGES: u64 = 1024;
const PURGE_THRESHOLD: u64 = VMAP_BLOCK_PAGES / 4;
const WORDS: usize = (VMAP_BLOCK_PAGES / 64) as usize;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct BlockState {
    free: u64,
    dirty: u64,
    /// Pages of slots handed out and not yet freed.
    used: [u64; WORDS],
    /// Dirty pages whose frames are still mapped (lazy unmapping, module documentation).
    stale: [u64; WORDS],
    /// Mappings (runs of frames) under `stale`, counted in [`VmapBlocks::lingering`].
    lingering: u64,
    dead: bool,
}

fn set_bits(map: &mut [u64; WORDS], off: u64, n: u64, set: bool) {
    for b in off..off + n {
        let (w, m) = ((b / 64) as usize, 1u64 << (b % 64));
        if set {
            map[w] |= m;
        } else {
            map[w] &= !m;
        }
    }
}

fn bit(map: &[u64; WORDS], b: u64) -> bool {
    map[(b / 64) as usize] & (1 << (b % 64)) != 0
}

impl BlockState {
    fn all_set(&self, off: u64, n: u64) -> bool {
        (off..off + n).all(|b| bit(&self.used, b))
    }

    /// Runs `(first page offset, pages)` of stale pages.
    fn stale_runs(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for b in (0..VMAP_BLOCK_PAGES).filter(|&b| bit(&self.stale, b)) {
            match out.last_mut() {
                Some((first, n)) if *first + *n == b => *n += 1,
                _ => out.push((b, 1)),
            }
        }
        out
    }
}

struct Block {
    start_page: u64,
    cpu: usize,
    state: Mutex<BlockState>,
}

/// Blocks by first page, for the CPUs whose index `(page / block) % CPUs` they hash to.
type Shard = Mutex<HashMap<u64, Arc<Block>>>;

/// See the module documentation.
pub(crate) struct VmapBlocks {
    free_lists: Box<[Mutex<Vec<Arc<Block>>>]>,
    index: Box<[Shard]>,
    created: AtomicU64,
    released: AtomicU64,
    /// Mappings left in place by `vm_unmap_ram`, in every live block.
    lingering: AtomicU64,
    /// Most mappings that may linger (the `map_ram_lazy_max` option).
    lingering_max: u64,
}

impl VmapBlocks {
    pub(crate) fn new(lingering_max: u64) -> VmapBlocks {
        let n = vmarena_platform::cpu::count().max(1);
        VmapBlocks {
            free_lists: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
            index: (0..n).map(|_| Mutex::new(HashMap::new())).collect(),
            created: AtomicU64::new(0),
            released: AtomicU64::new(0),
            lingering: AtomicU64::new(0),
            lingering_max,
        }
    }

    /// Mappings `vm_unmap_ram` has left in place.
    pub(crate) fn lingering(&self) -> u64 {
        self.lingering.load(Relaxed)
    }

    /// Count `runs` more lingering mappings if the limit allows; false means restore now.
    fn try_linger(&self, runs: u64) -> bool {
        self.lingering
            .fetch_update(Relaxed, Relaxed, |n| n.checked_add(runs).filter(|&m| m <= self.lingering_max))
            .is_ok()
    }

    fn shard(&self, start_page: u64) -> &Shard {
        &self.index[(start_page / VMAP_BLOCK_PAGES) as usize % self.index.len()]
    }

    /// Blocks whose areas are live now.
    pub(crate) fn live(&self) -> u64 {
        self.created.load(Relaxed) - self.released.load(Relaxed)
    }

    /// `vb_alloc`: the first page of `2^order >= pages` slots in this CPU's blocks.
    fn alloc(&self, space: &VmSpace, pages: u64, caller: &'static Location<'static>) -> Result<u64, VmError> {
        let n = pages.next_power_of_two();
        let cpu = vmarena_platform::cpu::current() % self.free_lists.len();
        loop {
            {
                let mut list = lock(&self.free_lists[cpu]);
                let mut i = 0;
                while i < list.len() {
                    let b = list[i].clone();
                    let mut st = lock(&b.state);
                    if !st.dead && st.free >= n {
                        let off = VMAP_BLOCK_PAGES - st.free;
                        set_bits(&mut st.used, off, n, true);
                        st.free -= n;
                        let full = st.free == 0;
                        drop(st);
                        if full {
                            list.swap_remove(i);
                        }
                        return Ok(b.start_page + off);
                    }
                    i += 1;
                }
            }
            let block_bytes = (VMAP_BLOCK_PAGES as usize) << space.page_shift;
            let p = space.alloc_inner(block_bytes, block_bytes, false, false, caller, AreaKind::VmapBlock)?;
            space.mapped_live.fetch_add(1, Relaxed);
            self.created.fetch_add(1, Relaxed);
            let start_page = (p.as_ptr() as usize >> space.page_shift) as u64;
            let b = Arc::new(Block {
                start_page,
                cpu,
                state: Mutex::new(BlockState {
                    free: VMAP_BLOCK_PAGES,
                    dirty: 0,
                    used: [0; WORDS],
                    stale: [0; WORDS],
                    lingering: 0,
                    dead: false,
                }),
            });
            lock(self.shard(start_page)).insert(start_page, b.clone());
            lock(&self.free_lists[cpu]).push(b);
        }
    }

    /// True when `pages` pages at `page` are slots in use in a live block.
    fn owns(&self, page: u64, pages: u64) -> bool {
        let start = page & !(VMAP_BLOCK_PAGES - 1);
        let Some(b) = lock(self.shard(start)).get(&start).cloned() else { return false };
        let n = pages.next_power_of_two();
        let off = page - start;
        let st = lock(&b.state);
        !st.dead && off + n <= VMAP_BLOCK_PAGES && st.all_set(off, n)
    }

    /// `vb_free` of the slots holding `pages` pages at `page`. The caller has unmapped them, or
    /// left `lingering` mappings there that [`VmapBlocks::try_linger`] counted. A released
    /// block gets anonymous memory back over all of it before its area is freed.
    fn free(&self, space: &VmSpace, page: u64, pages: u64, lingering: u64) -> Result<(), VmError> {
        let start = page & !(VMAP_BLOCK_PAGES - 1);
        let addr = (page as usize) << space.page_shift;
        let b = lock(self.shard(start)).get(&start).cloned().ok_or(VmError::NotLive(addr))?;
        let n = pages.next_power_of_two();
        let off = page - start;
        let mut st = lock(&b.state);
        if st.dead || off + n > VMAP_BLOCK_PAGES || !st.all_set(off, n) {
            return Err(VmError::NotLive(addr));
        }
        set_bits(&mut st.used, off, n, false);
        if lingering > 0 {
            set_bits(&mut st.stale, off, n, true);
            st.lingering += lingering;
        }
        st.dirty += n;
        let unused = st.used.iter().all(|&w| w == 0);
        let release = st.dirty == VMAP_BLOCK_PAGES || (unused && st.free < PURGE_THRESHOLD);
        if !release {
            return Ok(());
        }
        st.dead = true;
        let stale = std::mem::take(&mut st.lingering);
        st.stale = [0; WORDS];
        drop(st);
        lock(self.shard(start)).remove(&start);
        lock(&self.free_lists[b.cpu]).retain(|x| !Arc::ptr_eq(x, &b));
        if stale > 0 {
            space.unmap_pages(start, VMAP_BLOCK_PAGES as usize);
            self.lingering.fetch_sub(stale, Relaxed);
        }
        space.arena().free(start).expect("a live block's area is busy");
        space.mapped_live.fetch_sub(1, Relaxed);
        self.released.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Every mutex of the blocks, for `fork()`: the free lists, the index shards, then each
    /// block's state (the order of `alloc`, which holds a free list and a block's state; a
    /// shard is held alone everywhere else).
    pub(crate) fn lock_for_fork(&self) -> Vec<Box<dyn vmarena_engine::fork::Held + '_>> {
        let mut held: Vec<Box<dyn vmarena_engine::fork::Held + '_>> = Vec::new();
        held.extend(self.free_lists.iter().map(|l| Box::new(lock(l)) as Box<dyn vmarena_engine::fork::Held>));
        let shards: Vec<MutexGuard<'_, HashMap<u64, Arc<Block>>>> = self.index.iter().map(lock).collect();
        let mut states: Vec<Box<dyn vmarena_engine::fork::Held + '_>> = Vec::new();
        for shard in &shards {
            for b in shard.values() {
                // SAFETY: the block lives in an `Arc` that this shard's map holds; the shard's
                // guard goes into `held` before the state guards, and `fork` drops guards
                // last-taken first, so the map, and the block with it, outlive the state guard
                // (nobody can remove the entry while the shard is held).
                let block: &Block = unsafe { &*Arc::as_ptr(b) };
                states.push(Box::new(lock(&block.state)));
            }
        }
        held.extend(shards.into_iter().map(|g| Box::new(g) as Box<dyn vmarena_engine::fork::Held>));
        held.extend(states);
        held
    }

    /// Put anonymous memory back over the stale pages of every live block (one `mmap` per run
    /// of adjacent stale pages). Returns the mappings restored.
    pub(crate) fn unmap_aliases(&self, space: &VmSpace) -> u64 {
        let mut restored = 0;
        for shard in self.index.iter() {
            let blocks: Vec<Arc<Block>> = lock(shard).values().cloned().collect();
            for b in blocks {
                let mut st = lock(&b.state);
                if st.dead || st.lingering == 0 {
                    continue;
                }
                // The block lock is held across the calls: a release waits, so the area
                // cannot be freed and reused under them.
                for (off, n) in st.stale_runs() {
                    space.unmap_pages(b.start_page + off, n as usize);
                }
                st.stale = [0; WORDS];
                let m = std::mem::take(&mut st.lingering);
                self.lingering.fetch_sub(m, Relaxed);
                restored += m;
            }
        }
        restored
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
            self.blocks.lingering.fetch_sub(maps, Relaxed);
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
