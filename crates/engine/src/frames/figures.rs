//! What a frame allocator holds, read without changing it: who holds a frame, the free
//! blocks, lock figures, the statistics snapshot and the invariant check.
//!
//! Owns nothing: each query takes the locks it reads under (the zone lock, each CPU's list
//! and queue lock) in the order of the module documentation of `frames`.

use super::{queued, FrameAllocator, TAIL, USER};
use crate::frames::options::FrameStats;
use crate::sync::lock_stats::LockStats;
use std::sync::atomic::Ordering::Relaxed;

impl FrameAllocator {
    /// The order of the block headed by `pfn` if a caller holds it.
    pub fn held_order(&self, pfn: u32) -> Option<u32> {
        let s = self.desc.get(pfn as usize)?.state.load(Relaxed);
        (s & USER != 0).then_some((s & 0xff) as u32)
    }

    /// True when a caller holds the block that frame `pfn` belongs to (its head, or a tail of
    /// a held compound block).
    pub fn is_held(&self, pfn: u32) -> bool {
        let Some(d) = self.desc.get(pfn as usize) else { return false };
        let s = d.state.load(Relaxed);
        if s & USER != 0 {
            return true;
        }
        s == TAIL && self.held_order(d.head.load(Relaxed) as u32).is_some()
    }

    /// Call `f(pfn, order)` for every free block of the zone, with the zone lock held (so no
    /// block can be handed out meanwhile). Returns the number of blocks.
    pub fn for_each_free_block(&self, mut f: impl FnMut(u32, u32)) -> usize {
        let z = self.zone.lock();
        let blocks = z.free_blocks();
        for &(p, o) in &blocks {
            f(p, o);
        }
        blocks.len()
    }

    /// The zone lock's figures.
    pub fn zone_lock_stats(&self) -> LockStats {
        self.zone.stats()
    }

    /// The per-CPU list locks' figures, summed.
    pub fn pcp_lock_stats(&self) -> LockStats {
        let mut s = LockStats::default();
        for c in self.cpus.iter() {
            s.merge(&c.pcp.stats());
        }
        s
    }

    /// A snapshot of the figures.
    pub fn stats(&self) -> FrameStats {
        let c = &self.c;
        let (mut pcp_frames, mut pcp_hits, mut queued_frames, mut queue_inserts) = (0, 0, 0, 0);
        for cpu in self.cpus.iter() {
            let p = cpu.pcp.lock();
            (pcp_frames, pcp_hits) = (pcp_frames + p.count(), pcp_hits + p.hits);
            drop(p);
            let q = cpu.queue.lock();
            (queued_frames, queue_inserts) = (queued_frames + queued(&q), queue_inserts + q.inserts);
        }
        let free_frames = self.zone.lock().free_frames();
        FrameStats {
            frames: self.frames(),
            free_frames,
            pcp_frames,
            queued_frames,
            // Derived: a snapshot taken while threads run may be off by what moved meanwhile.
            user_frames: self.frames().saturating_sub(free_frames + pcp_frames + queued_frames),
            pcp_hits,
            pcp_refills: c.pcp_refills.load(Relaxed),
            refill_blocks: c.refill_blocks.load(Relaxed),
            pcp_drains: c.pcp_drains.load(Relaxed),
            drain_blocks: c.drain_blocks.load(Relaxed),
            free_high: c.free_high.load(Relaxed),
            trylock_failures: c.trylock_failures.load(Relaxed),
            zone_allocs: c.zone_allocs.load(Relaxed),
            zone_frees: c.zone_frees.load(Relaxed),
            queue_inserts,
            queue_flushes: c.queue_flushes.load(Relaxed),
            queue_try_failures: c.queue_try_failures.load(Relaxed),
            queue_blocking_flushes: c.queue_blocking_flushes.load(Relaxed),
            compound_preps: c.compound_preps.load(Relaxed),
            compound_dismantles: c.compound_dismantles.load(Relaxed),
            compound_ns: c.compound_ns.load(Relaxed),
            pcp_decays: c.pcp_decays.load(Relaxed),
            alloc_failures: c.alloc_failures.load(Relaxed),
            bad_frees: c.bad_frees.load(Relaxed),
        }
    }

    /// Check the zone, every list, and that every frame is accounted for exactly once (call
    /// it when no other thread uses the allocator).
    pub fn check(&self) -> Result<(), String> {
        let z = self.zone.lock();
        z.check()?;
        let mut total = z.free_frames();
        drop(z);
        for cpu in self.cpus.iter() {
            {
                let p = cpu.pcp.lock();
                p.check()?;
                total += p.count();
            }
            total += queued(&cpu.queue.lock());
        }
        // Blocks held by callers, from their head descriptors.
        total += self
            .desc
            .iter()
            .map(|d| d.state.load(Relaxed))
            .filter(|s| s & USER != 0)
            .map(|s| 1u64 << (s & 0xff))
            .sum::<u64>();
        if total != self.frames() {
            return Err(format!(
                "{}: {total} frames accounted for, {} in the zone",
                self.name,
                self.frames()
            ));
        }
        Ok(())
    }
}
