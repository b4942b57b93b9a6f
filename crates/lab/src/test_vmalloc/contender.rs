//! What the test_vmalloc cases run against: one trait, one implementation per contender.
//!
//! A contender allocates page-granular memory with the operations the kernel cases use. The
//! vmarena strategies implement it over a `VmSpace` (with an `Rcu` domain for the kvfree_rcu
//! cases); the peers (glibc, jemalloc, mimalloc, mmap) will implement it with page-aligned
//! allocation of the same sizes.

use std::ptr::NonNull;
use std::sync::Arc;
use vmarena::rcu::Rcu;
use vmarena::{ArenaOptions, LockStats, SpaceOptions, Strategy, VmSpace};

/// Page-granular allocation as the kernel cases use it.
pub trait Contender: Send + Sync {
    /// Name in reports (`vmarena-nodes`, `glibc`, ...).
    fn name(&self) -> String;
    /// `vmalloc`, or `__vmalloc_node(size, align, GFP_KERNEL [| __GFP_ZERO])`.
    fn alloc(&self, bytes: usize, align: usize, zeroed: bool) -> Option<NonNull<u8>>;
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
    /// Wait for every deferred free to complete.
    fn quiesce(&self) {}
    /// Resident bytes of the memory the contender manages itself, where it can tell (vmarena:
    /// its reservation); `None` for the peers, whose memory is part of the process heap.
    fn managed_resident_bytes(&self) -> Option<u64> {
        None
    }
}

/// A vmarena strategy over its own space.
pub struct VmarenaContender {
    pub strategy: Strategy,
    space: Arc<VmSpace>,
    rcu: Arc<Rcu>,
}

impl VmarenaContender {
    pub fn new(strategy: Strategy, space_bytes: u64) -> Result<Self, String> {
        let so = SpaceOptions { space_bytes, ..SpaceOptions::default().with_env()? };
        let ao = ArenaOptions { strategy, ..ArenaOptions::default().with_env()? };
        let space = Arc::new(VmSpace::new(&format!("test_vmalloc-{strategy}"), so, ao)?);
        let rcu = Rcu::new(space.clone());
        Ok(VmarenaContender { strategy, space, rcu })
    }
}

impl Contender for VmarenaContender {
    fn name(&self) -> String {
        format!("vmarena-{}", self.strategy)
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
            self.rcu.kvfree_rcu(p);
        }
    }

    fn lock_stats(&self) -> Vec<(&'static str, LockStats)> {
        self.space.lock_stats()
    }

    fn quiesce(&self) {
        self.rcu.synchronize();
    }

    fn managed_resident_bytes(&self) -> Option<u64> {
        Some(self.space.resident_bytes())
    }
}
