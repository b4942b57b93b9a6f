//! What the test_vmalloc cases run against: one trait, one implementation per contender.
//!
//! A contender allocates page-granular memory with the operations the kernel cases use. The
//! vmarena strategies implement it over a `VmSpace` (with an `Rcu` domain for the kvfree_rcu
//! cases and a frame pool for vm_map_ram_test); the peers (glibc, jemalloc, mimalloc, mmap) will implement it with page-aligned
//! allocation of the same sizes.

use std::ptr::NonNull;
use std::sync::Arc;
use vmarena::rcu::Rcu;
use vmarena::{
    ArenaOptions, FrameOptions, FramePool, LockStats, PercpuPool, SpaceOptions, Strategy, VmSpace,
};

/// Page-granular allocation as the kernel cases use it.
pub trait Contender: Send + Sync {
    /// Name in reports (`vmarena-nodes`, `glibc`, ...).
    fn name(&self) -> String;
    /// `vmalloc`, or `__vmalloc_node(size, align, GFP_KERNEL [| __GFP_ZERO])`.
    fn alloc(&self, bytes: usize, align: usize, zeroed: bool) -> Option<NonNull<u8>>;
    /// `vmalloc_huge`: huge mappings from one huge page up. Peers have none: a plain
    /// allocation.
    fn alloc_huge(&self, bytes: usize) -> Option<NonNull<u8>> {
        self.alloc(bytes, 1, false)
    }
    /// `__vmalloc(size, GFP_NOWAIT)`: never waits for reclaim.
    fn alloc_nonblocking(&self, bytes: usize) -> Option<NonNull<u8>>;
    /// `vrealloc`.
    fn realloc(&self, p: Option<NonNull<u8>>, bytes: usize) -> Option<NonNull<u8>>;
    /// `vfree`.
    fn free(&self, p: NonNull<u8>);
    /// `kvfree_rcu`: free after a grace period; `embedded` for the two-argument form.
    fn kvfree_rcu(&self, p: NonNull<u8>, embedded: bool);
    /// Lock figures by lock class, if the contender has any.
    fn lock_stats(&self) -> Vec<(&'static str, LockStats)> {
        Vec::new()
    }
    /// The contender's own statistics (vmarena: its space's table), where it keeps any.
    fn stats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Wait for every deferred free to complete.
    fn quiesce(&self) {}
    /// Resident bytes of the memory the contender manages itself, where it can tell (vmarena:
    /// its reservation); `None` for the peers, whose memory is part of the process heap.
    fn managed_resident_bytes(&self) -> Option<u64> {
        None
    }
    /// `vm_map_ram_test`'s setup: `pages` pages allocated once, to be mapped again and again.
    /// `None`: the contender has no way to map existing pages; `Some(Err)`: the allocation
    /// came back short.
    fn map_ram_session(&self, _pages: usize) -> Option<Result<Box<dyn MapRamSession + '_>, String>> {
        None
    }
    /// `pcpu_alloc_test`'s allocator (`__alloc_percpu` / `free_percpu`); `None`: the contender
    /// has no per-CPU object allocator.
    fn percpu(&self) -> Option<&dyn PercpuAlloc> {
        None
    }
}

/// Per-CPU objects as the kernel's per-CPU allocator hands them out.
pub trait PercpuAlloc {
    /// `__alloc_percpu(size, align)`: an object with a zeroed copy per possible CPU.
    fn alloc(&self, size: usize, align: usize) -> Option<NonNull<u8>>;
    /// `free_percpu`.
    fn free(&self, p: NonNull<u8>);
}

impl PercpuAlloc for PercpuPool {
    fn alloc(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        PercpuPool::alloc(self, size, align).ok()
    }
    fn free(&self, p: NonNull<u8>) {
        PercpuPool::free(self, p).expect("pcpu_alloc_test frees each object once");
    }
}

/// Existing pages mapped and unmapped in a loop (`vm_map_ram` / `vm_unmap_ram`).
pub trait MapRamSession {
    /// Map the session's pages at a new address.
    fn map(&mut self) -> Option<NonNull<u8>>;
    /// Unmap what `map` returned.
    fn unmap(&mut self, p: NonNull<u8>);
}

/// Frames of a vmarena frame pool mapped into the contender's space.
struct FrameSession<'a> {
    space: &'a VmSpace,
    pool: &'a FramePool,
    frames: Vec<u32>,
}

impl MapRamSession for FrameSession<'_> {
    fn map(&mut self) -> Option<NonNull<u8>> {
        self.space.vm_map_ram(self.pool, &self.frames).ok()
    }
    fn unmap(&mut self, p: NonNull<u8>) {
        self.space.vm_unmap_ram(p.as_ptr(), self.frames.len()).expect("vm_unmap_ram of a live mapping");
    }
}

impl Drop for FrameSession<'_> {
    fn drop(&mut self) {
        // The frames go back to the pool for other users: no address of the space may still
        // reach them through a mapping vm_unmap_ram left in place.
        self.space.vm_unmap_aliases();
        for &f in &self.frames {
            self.pool.free(f, 0).expect("frames of the session are held");
        }
    }
}

/// A vmarena strategy over its own space.
pub struct VmarenaContender {
    pub strategy: Strategy,
    space: Arc<VmSpace>,
    rcu: Arc<Rcu>,
    frames: std::sync::OnceLock<Result<FramePool, String>>,
    /// Per-CPU objects on the space's congruent areas, built on first use.
    percpu: std::sync::OnceLock<Option<Arc<PercpuPool>>>,
}

/// Bytes per CPU of a per-CPU chunk (the kernel's units are tens of KiB to a few MiB).
const PERCPU_UNIT_BYTES: usize = 1 << 20;

impl VmarenaContender {
    pub fn new(strategy: Strategy, space_bytes: u64) -> Result<Self, String> {
        let so = SpaceOptions { space_bytes, ..SpaceOptions::default().with_env()? };
        let ao = ArenaOptions { strategy, ..ArenaOptions::default().with_env()? };
        let space = Arc::new(VmSpace::new(&format!("test_vmalloc-{strategy}"), so, ao)?);
        let rcu = Rcu::new(space.clone());
        Ok(VmarenaContender {
            strategy,
            space,
            rcu,
            frames: std::sync::OnceLock::new(),
            percpu: std::sync::OnceLock::new(),
        })
    }
}

impl Contender for VmarenaContender {
    fn name(&self) -> String {
        format!("vmarena-{}", self.strategy)
    }

    fn percpu(&self) -> Option<&dyn PercpuAlloc> {
        self.percpu
            .get_or_init(|| PercpuPool::new(self.space.clone(), PERCPU_UNIT_BYTES).ok())
            .as_deref()
            .map(|p| p as &dyn PercpuAlloc)
    }

    fn alloc(&self, bytes: usize, align: usize, zeroed: bool) -> Option<NonNull<u8>> {
        match (align <= 1, zeroed) {
            (true, false) => self.space.vmalloc(bytes),
            (true, true) => self.space.vzalloc(bytes),
            (false, false) => self.space.vmalloc_aligned(bytes, align),
            (false, true) => self.space.vzalloc_aligned(bytes, align),
        }
        .ok()
    }

    fn alloc_nonblocking(&self, bytes: usize) -> Option<NonNull<u8>> {
        self.space.vmalloc_nonblocking(bytes).ok()
    }

    fn alloc_huge(&self, bytes: usize) -> Option<NonNull<u8>> {
        self.space.vmalloc_huge(bytes).ok()
    }

    fn realloc(&self, p: Option<NonNull<u8>>, bytes: usize) -> Option<NonNull<u8>> {
        self.space.vrealloc(p, bytes).ok()
    }

    fn free(&self, p: NonNull<u8>) {
        self.space.vfree(p.as_ptr()).expect("test_vmalloc freed an area twice");
    }

    fn kvfree_rcu(&self, p: NonNull<u8>, embedded: bool) {
        if embedded {
            assert!(self.rcu.kvfree_rcu_embedded(p), "kvfree_rcu of a pointer that is not a live area");
        } else {
            assert!(self.rcu.kvfree_rcu(p), "kvfree_rcu of a pointer that is not a live area");
        }
    }

    fn lock_stats(&self) -> Vec<(&'static str, LockStats)> {
        self.space.lock_stats()
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        self.space.stats(false).arena.values()
    }

    fn quiesce(&self) {
        self.rcu.synchronize();
    }

    fn managed_resident_bytes(&self) -> Option<u64> {
        Some(self.space.resident_bytes())
    }

    fn map_ram_session(&self, pages: usize) -> Option<Result<Box<dyn MapRamSession + '_>, String>> {
        let pool = self.frames.get_or_init(|| {
            let opts = FrameOptions::default().with_env()?;
            FramePool::new(&format!("test_vmalloc-{}", self.strategy), FRAME_POOL_BYTES, opts)
        });
        let pool = match pool {
            Ok(p) => p,
            Err(e) => return Some(Err(e.clone())),
        };
        let mut frames = Vec::with_capacity(pages);
        let got = pool.alloc_bulk(pages, &mut frames);
        let session = FrameSession { space: &self.space, pool, frames };
        if got < pages {
            return Some(Err(format!("bulk allocation gave {got} of {pages} frames")));
        }
        Some(Ok(Box::new(session)))
    }
}

/// The frame pool behind `vm_map_ram_test` (sparse: only frames written take memory).
const FRAME_POOL_BYTES: u64 = 1 << 30;
