//! Crowding: more than twice as many threads hold magazines of an arena as there are CPUs.
//! Then a magazine per thread holds, once in each thread, the areas a CPU's threads pass
//! between them, and the per-CPU stacks of the larger sizes (`CpuCache`'s grown stacks) hold
//! them once for the CPU instead (DESIGN.md, section 4, step 1); what those stacks cannot
//! hold goes to the lazy lists, where any size reuses it. Twice: a program's main
//! thread that waits for one worker per CPU holds a magazine too, and there the grown stacks
//! held memory beside the magazines for nothing (random_size at 2 threads: 8.0 -> 11.2 MiB
//! peak). This file decides when those stacks are asked and asks them; the fast paths in
//! `mod.rs` call it.
//!
//! Owns nothing: it reads the registry's magazine count (`ThreadCaches::magazines`, a relaxed
//! load: a registration racing with it sends one operation the other way, which either layer
//! serves) and the CPU count taken when the caches were made.

use super::ThreadCaches;
use crate::caches::cpu_cache::SIZES;
use std::panic::Location;
use std::sync::atomic::Ordering::Relaxed;

impl ThreadCaches {
    /// Push the claimed area at `start` on this CPU's stack of its size after growing it by
    /// one area, for a size past the fixed ones while crowded (`CpuCache::push_growing`):
    /// true when it went in. The areas a CPU's threads pass around are then held once for the
    /// CPU, not once in each thread's magazine.
    #[inline(always)]
    pub(super) fn grow_cpu(&self, start: u64, pages: u64) -> bool {
        pages > SIZES && self.crowded() && self.cpu.as_ref().is_some_and(|c| c.push_growing(pages, start))
    }

    /// Whether a free of `pages` pages that this CPU's stack did not take passes the
    /// magazine and the depot, down the busy-map path to its node's pool or lazy list, when
    /// the node locks it needs are free now (`CacheOwner::try_free_passed`; with one held it
    /// takes the magazine's way, so such a free never waits for them): a larger size while
    /// crowded, with per-CPU stacks. A magazine would keep the area for its
    /// thread and its size alone, and the depot for its size alone, until a drain; with many
    /// threads preempted mid-operation, each size then keeps as many areas as ever were out of
    /// use at once, summed over the sizes. On the lazy list (above the pools) any size's miss
    /// reuses the memory (an area reused whole or split, a run joined or extended, the pages
    /// moved into a new carve: steps LazyReuse, Extend and Move) and the purge returns what no
    /// miss took: mid_size at 64 threads peaked 49.4 MiB above its live peak with the
    /// magazines and the depot, 40.5 this way (docs/bench-log/many-workers.md, "Past the
    /// magazines in a crowd").
    #[inline(always)]
    pub(super) fn crowd_passes(&self, pages: u64) -> bool {
        pages > SIZES && self.cpu.is_some() && self.crowded()
    }

    /// More than twice as many threads hold magazines as there are CPUs: the per-CPU stacks
    /// of the larger sizes are in use (a thread that has no magazine yet does not count).
    #[inline(always)]
    pub(super) fn crowded(&self) -> bool {
        self.magazines.load(Relaxed) > 2 * self.cpus
    }

    /// Whether the per-CPU stacks are asked for areas of `pages` pages now: the fixed sizes
    /// always, the larger ones while [`ThreadCaches::crowded`] (else they hold nothing).
    #[inline(always)]
    pub(super) fn cpu_serves(&self, pages: u64) -> bool {
        pages <= SIZES || self.crowded()
    }

    /// An area of more than `pages` pages and at most `hi_pages` on this CPU's grown stacks,
    /// while crowded, now live: `(start, the area's pages)`, taken whole
    /// (`CpuCache::pop_within`).
    #[inline(always)]
    pub(super) fn grown_within(
        &self,
        pages: u64,
        hi_pages: u64,
        caller: Option<&'static Location<'static>>,
    ) -> Option<(u64, u64)> {
        if hi_pages <= pages || pages <= SIZES || !self.crowded() {
            return None;
        }
        let (s, p) = self.cpu.as_ref()?.pop_within(pages + 1, hi_pages)?;
        self.states.reuse(s, p, caller);
        Some((s, p))
    }
}
