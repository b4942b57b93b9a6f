//! The per-CPU vmap blocks that small `vm_map_ram` requests (up to
//! [`VMAP_MAX_ALLOC_PAGES`](crate::frames::vmap::VMAP_MAX_ALLOC_PAGES) pages) are carved from, as the
//! kernel's `vb_alloc`/`vb_free` do:
//!
//! ```text
//!  block (an area of 1024 pages, aligned to its size, one per CPU at a time on the free list)
//!  [ used | dirty | used |  free (never handed out yet) ... ]
//!    bump allocation in power-of-two slots from the front; holes are not reused;
//!    the block's area is freed when every page is dirty, or when nothing is used and less
//!    than a quarter was never handed out (the kernel purges such blocks at its next purge)
//! ```
//!
//! Owns: [`VmapBlocks`], the blocks' bookkeeping (per-CPU free lists, an address index in
//! shards, each block's used, dirty and stale bits). Sees the space only through
//! [`BlockSpace`]: a block's area comes from it and goes back to it, and stale pages get
//! anonymous memory back through it.
//!
//! Locks: a CPU's free list, then a block (in that order only); the address index shard alone.
//! None is held across a space call that may purge. The only syscalls under a lock are the
//! `mmap`s with which [`VmapBlocks::unmap_aliases`] restores a live block's dirty slots: it
//! holds that block's lock, so the block cannot be released (and its area reused) meanwhile.
//!
//! Unsafe: the fork handler's guards of block states, which borrow blocks held by a shard's map.
#![allow(unsafe_code)]

use crate::error::VmError;
use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

/// What the blocks need of the space they are carved from.
pub(crate) trait BlockSpace {
    /// A new block's area: [`VMAP_BLOCK_PAGES`] pages aligned to their size. Its first page.
    fn alloc_block_area(&self, caller: &'static Location<'static>) -> Result<u64, VmError>;

    /// Free the area of a released block (its pages hold anonymous memory again).
    fn free_block_area(&self, start_page: u64);

    /// Put anonymous memory back over `pages` pages at `page` (one call).
    fn unmap_pages(&self, page: u64, pages: usize);

    /// log2 of the page size.
    fn page_shift(&self) -> u32;
}

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

    /// `maps` lingering mappings counted by [`VmapBlocks::try_linger`] were restored after all.
    pub(crate) fn unlinger(&self, maps: u64) {
        self.lingering.fetch_sub(maps, Relaxed);
    }

    /// Count `runs` more lingering mappings if the limit allows; false means restore now.
    pub(crate) fn try_linger(&self, runs: u64) -> bool {
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
    pub(crate) fn alloc<S: BlockSpace>(
        &self,
        space: &S,
        pages: u64,
        caller: &'static Location<'static>,
    ) -> Result<u64, VmError> {
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
            let start_page = space.alloc_block_area(caller)?;
            self.created.fetch_add(1, Relaxed);
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
    pub(crate) fn owns(&self, page: u64, pages: u64) -> bool {
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
    pub(crate) fn free<S: BlockSpace>(
        &self,
        space: &S,
        page: u64,
        pages: u64,
        lingering: u64,
    ) -> Result<(), VmError> {
        let start = page & !(VMAP_BLOCK_PAGES - 1);
        let addr = (page as usize) << space.page_shift();
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
        space.free_block_area(start);
        self.released.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Every mutex of the blocks, for `fork()`: the free lists, the index shards, then each
    /// block's state (the order of `alloc`, which holds a free list and a block's state; a
    /// shard is held alone everywhere else).
    pub(crate) fn lock_for_fork(&self) -> Vec<Box<dyn vmarena_engine::sync::fork::Held + '_>> {
        let mut held: Vec<Box<dyn vmarena_engine::sync::fork::Held + '_>> = Vec::new();
        held.extend(
            self.free_lists.iter().map(|l| Box::new(lock(l)) as Box<dyn vmarena_engine::sync::fork::Held>),
        );
        let shards: Vec<MutexGuard<'_, HashMap<u64, Arc<Block>>>> = self.index.iter().map(lock).collect();
        let mut states: Vec<Box<dyn vmarena_engine::sync::fork::Held + '_>> = Vec::new();
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
        held.extend(shards.into_iter().map(|g| Box::new(g) as Box<dyn vmarena_engine::sync::fork::Held>));
        held.extend(states);
        held
    }

    /// Put anonymous memory back over the stale pages of every live block (one `mmap` per run
    /// of adjacent stale pages). Returns the mappings restored.
    pub(crate) fn unmap_aliases<S: BlockSpace>(&self, space: &S) -> u64 {
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
