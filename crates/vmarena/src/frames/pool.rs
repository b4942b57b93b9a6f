//! `FramePool`: frames of a memory file, handed out by the buddy allocator with per-CPU page
//! lists and batch queues in front (the engine's [`FrameAllocator`]).
//!
//! Owns: one [`MemFile`] of `frames` 4 KiB pages (frame `n` is bytes `[n * 4096, (n + 1) * 4096)`
//! of the file) and the allocator of its frame numbers. Frames have no address of their own:
//! [`VmSpace::vmap`](crate::VmSpace::vmap) and [`VmSpace::vm_map_ram`](crate::VmSpace::vm_map_ram)
//! map them into areas of a space, possibly several times, and the descriptor ([`FramePool::fd`])
//! lets another process map them too. Contents of a frame are undefined when it is handed out.
//!
//! On a low-memory event the pool drops every per-CPU list to its floor and gives the memory of
//! all free buddy blocks back to the system (`fallocate(PUNCH_HOLE)` under the zone lock, so no
//! block is handed out while its memory goes).

use crate::space::VmError;
use std::sync::Arc;
use vmarena_engine::{FrameAllocator, FrameError, FrameOptions, FrameStats};
use vmarena_platform::memfd::MemFile;

struct Inner {
    file: MemFile,
    alloc: FrameAllocator,
}

impl vmarena_engine::pressure::Reclaim for Inner {
    fn reclaim_name(&self) -> String {
        format!("frame pool {}", self.alloc.name())
    }

    fn reclaim(&self) -> u64 {
        self.alloc.shrink_lists();
        self.release_free()
    }
}

impl Inner {
    fn release_free(&self) -> u64 {
        self.alloc.drain_all();
        let mut frames = 0u64;
        self.alloc.for_each_free_block(|pfn, order| {
            let page = vmarena_platform::page_size();
            // A refusal (a kernel without hole punching) leaves the memory resident.
            if self.file.punch_hole(pfn as usize * page, page << order).is_ok() {
                frames += 1 << order;
            }
        });
        frames
    }
}

/// See the module documentation. Clones share the pool.
///
/// `VmSpace::vm_unmap_ram` may leave a pool's frames mapped at their old address until the vmap
/// block is released; call `VmSpace::vm_unmap_aliases` on such spaces before dropping the last
/// clone, or those mappings keep the file's pages until then.
#[derive(Clone)]
pub struct FramePool {
    inner: Arc<Inner>,
}

impl vmarena_engine::ForkLocks for Inner {
    fn lock_for_fork(&self) -> Vec<Box<dyn vmarena_engine::sync::fork::Held + '_>> {
        vmarena_engine::ForkLocks::lock_for_fork(&self.alloc)
    }
}

impl FramePool {
    /// A pool of `bytes` (rounded down to frames; 1 frame to 8 TiB) named `name`.
    pub fn new(name: &str, bytes: u64, opts: FrameOptions) -> Result<FramePool, String> {
        crate::fork::register();
        let page = vmarena_platform::page_size() as u64;
        let frames = bytes / page;
        let alloc = FrameAllocator::new(name, frames, opts)?;
        let file = MemFile::new(name, (frames * page) as usize)
            .map_err(|e| format!("{name}: cannot create a memory file of {} bytes: {e}", frames * page))?;
        let inner = Arc::new(Inner { file, alloc });
        let r: Arc<dyn vmarena_engine::pressure::Reclaim> = inner.clone();
        vmarena_engine::pressure::register(Arc::downgrade(&r));
        let f: Arc<dyn vmarena_engine::ForkLocks> = inner.clone();
        vmarena_engine::sync::fork::register(vmarena_engine::sync::fork::Rank::Frames, Arc::downgrade(&f));
        Ok(FramePool { inner })
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        self.inner.alloc.name()
    }

    /// Frames in the pool.
    pub fn frames(&self) -> u64 {
        self.inner.alloc.frames()
    }

    /// The memory file's descriptor: `mmap(fd, offset = frame * 4096)` maps a frame elsewhere.
    pub fn fd(&self) -> i32 {
        self.inner.file.fd()
    }

    pub(crate) fn file(&self) -> &MemFile {
        &self.inner.file
    }

    /// The allocator (statistics, lock figures, drains).
    pub fn allocator(&self) -> &FrameAllocator {
        &self.inner.alloc
    }

    /// A block of `2^order` frames (order 0..=10); returns its first frame.
    pub fn alloc(&self, order: u32) -> Result<u32, VmError> {
        self.inner.alloc.alloc(order).map_err(map_error)
    }

    /// Append `n` single frames to `out` under one list lock hold; returns how many were added
    /// (fewer only when the pool ran dry).
    pub fn alloc_bulk(&self, n: usize, out: &mut Vec<u32>) -> usize {
        self.inner.alloc.alloc_bulk(n, out)
    }

    /// Give back a block that `alloc(order)` returned.
    pub fn free(&self, frame: u32, order: u32) -> Result<(), VmError> {
        self.inner.alloc.free(frame, order).map_err(map_error)
    }

    /// True when a caller holds the block that `frame` belongs to.
    pub fn is_held(&self, frame: u32) -> bool {
        self.inner.alloc.is_held(frame)
    }

    /// Drain every per-CPU list and queue, then give the memory of every free block back to the
    /// system; returns the frames covered.
    pub fn release_free(&self) -> u64 {
        self.inner.release_free()
    }

    /// A snapshot of the figures.
    pub fn stats(&self) -> FrameStats {
        self.inner.alloc.stats()
    }
}

fn map_error(e: FrameError) -> VmError {
    match e {
        FrameError::BadRequest(m) => VmError::Invalid(m),
        FrameError::NoFrames(m) => VmError::NoFrames(m),
        FrameError::NotHeld(p) => {
            VmError::Invalid(format!("frame {p} is not the head of a block held with that order"))
        }
    }
}
