//! `CpuCache`: per-CPU stacks of freed small areas, in front of the threads' magazines.
//!
//! The kernel keeps its per-CPU lists safe by disabling preemption; user space gets the same
//! from restartable sequences ([`vmarena_platform::cpu_stack::CpuStacks`]). A free pushes the
//! area on the stack of its size of the CPU it runs on, an allocation pops the same stack: no
//! lock, no handshake with a drainer, no thread-local lookup, and the area is reused by the
//! next allocation of its size on that CPU whichever thread makes it (DESIGN.md, section 4).
//!
//! Owns: one stack per size of 1 to [`SIZES`] pages (guard included) per possible CPU, and what
//! each holds. A held area is still in the busy map with its state word `cached`: the free
//! that put it there claimed the word first (the compare-and-swap that refuses a second free),
//! and the thread whose pop takes it out is its only writer until it stores the word `live`.
//!
//! Budget: each CPU holds at most `cpu_pages` pages, split evenly between the sizes: a size of
//! `p` pages holds at most `min(61, cpu_pages / SIZES / p)` areas (none when that is 0). There
//! is no growth; a free that finds its stack full goes to the thread's magazine.
//!
//! Drains: [`CpuCache::drain`] stops every stack, fences with `membarrier`'s rseq command and
//! takes everything (the caller frees it through the busy map). The thread caches call it
//! under their registry mutex, on the drains that empty magazines (idle decay, purge, shrink,
//! failure, low memory), so the lock order is: registry mutex, then the stacks' drainer mutex.
//!
//! Counters: the stacks count their committed operations themselves (`CpuStacks::figures`), so
//! a hit writes nothing but its CPU's stack and the area's word.

use vmarena_core::Span;
use vmarena_platform::cpu_stack::{CpuStacks, SLOTS};

/// Sizes with stacks: areas of 1 to 8 pages, guard included (data of up to 7 pages, 28 KiB
/// with 4 KiB pages), the sizes test_vmalloc's fix_size, full_fit and long_busy use.
pub(crate) const SIZES: u64 = 8;

/// Figures of the per-CPU stacks, summed over CPUs and sizes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpuFigures {
    pub(crate) areas: u64,
    pub(crate) pages: u64,
    pub(crate) hits: u64,
    pub(crate) pushes: u64,
}

/// See the module documentation.
pub(crate) struct CpuCache {
    stacks: CpuStacks,
    /// Sizes with stacks: 1 to `sizes` pages.
    sizes: u64,
}

impl CpuCache {
    /// Stacks for areas of 1 to `min(SIZES, max_pages)` pages, `cpu_pages` pages a CPU at most;
    /// `Err` names why there are none (this machine cannot run them, or no size gets a slot).
    pub(crate) fn new(max_pages: u64, cpu_pages: u64) -> Result<CpuCache, String> {
        let sizes = SIZES.min(max_pages);
        let per_size = cpu_pages / SIZES;
        if sizes == 0 || per_size == 0 {
            return Err(format!("{cpu_pages} pages a CPU leave no room for an area (cpu_cache_pages)"));
        }
        let stacks = CpuStacks::new(sizes as usize, 0)?;
        for p in 1..=sizes {
            stacks.set_cap((p - 1) as usize, (per_size / p).min(SLOTS as u64) as usize);
        }
        Ok(CpuCache { stacks, sizes })
    }

    /// An area of `pages` pages from this CPU's stack (its word is `cached`, and the caller's
    /// to store `live`); `None` for an empty stack, a drain running, or a size without a stack.
    /// Makes no call and cannot panic.
    #[inline(always)]
    pub(crate) fn pop(&self, pages: u64) -> Option<u64> {
        self.stacks.pop(pages.wrapping_sub(1) as usize)
    }

    /// Whether areas of `pages` pages have stacks.
    #[inline(always)]
    pub(crate) fn holds(&self, pages: u64) -> bool {
        pages.wrapping_sub(1) < self.sizes
    }

    /// Push the area at `start` of `pages` pages, whose word the caller has claimed `cached`:
    /// false, nothing changed, when this CPU's stack of its size is full, a drain is running, or
    /// the size has no stack. Makes no call and cannot panic.
    #[inline(always)]
    pub(crate) fn push(&self, pages: u64, start: u64) -> bool {
        self.stacks.push(pages.wrapping_sub(1) as usize, start)
    }

    /// Take every held area into `out`. Nothing is taken (and no fence is paid) when no stack
    /// holds one; `Err` when the fence failed, with nothing taken.
    pub(crate) fn drain(&self, out: &mut Vec<Span>) -> Result<usize, String> {
        if !self.stacks.any_held() {
            return Ok(0);
        }
        self.stacks.drain(|_, size, start| out.push(Span { start, pages: size as u64 + 1 }))
    }

    /// The starts of every held area (for the checker: meaningful only while no thread
    /// pushes or pops).
    pub(crate) fn starts(&self, out: &mut Vec<u64>) {
        self.stacks.for_each_held(|_, _, start| out.push(start));
    }

    /// Figures as of now (exact when no operation runs meanwhile).
    pub(crate) fn figures(&self) -> CpuFigures {
        let (per, taken) = self.stacks.figures();
        let mut f = CpuFigures::default();
        let mut ops = 0;
        for (i, s) in per.iter().enumerate() {
            f.areas += s.held;
            f.pages += s.held * (i as u64 + 1);
            ops += s.ops;
        }
        // Every push adds one to the length and every pop or drain takes one away.
        f.hits = ops.saturating_sub(f.areas + taken) / 2;
        f.pushes = ops - f.hits;
        f
    }

    /// A copy of the stacks' geometry (valid while these stacks live).
    pub(crate) fn geometry(&self) -> vmarena_platform::cpu_stack::CpuGeometry {
        self.stacks.geometry()
    }

    /// The stacks' drainer mutex, for `fork()`.
    #[cfg(not(loom))]
    pub(crate) fn lock_for_fork(&self) -> std::sync::MutexGuard<'_, ()> {
        self.stacks.lock_for_fork()
    }
}
