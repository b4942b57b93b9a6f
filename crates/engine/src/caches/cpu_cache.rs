//! `CpuCache`: per-CPU stacks of freed areas, in front of the threads' magazines.
//!
//! The kernel keeps its per-CPU lists safe by disabling preemption; user space gets the same
//! from restartable sequences ([`vmarena_platform::cpu_stack::CpuStacks`]). A free pushes the
//! area on the stack of its size of the CPU it runs on, an allocation pops the same stack: no
//! lock, no handshake with a drainer, no thread-local lookup, and the area is reused by the
//! next allocation of its size on that CPU whichever thread makes it (DESIGN.md, section 4).
//!
//! Owns: one stack per size per possible CPU, and what each holds: sizes of 1 to [`SIZES`]
//! pages (guard included) always, and of `SIZES + 1` to [`GROWN_MAX`] (within the magazines'
//! largest) when the grown budget is not 0. A held area is still in the busy map with its
//! state word `cached`: the free that put it there claimed the word first (the
//! compare-and-swap that refuses a second free), and the thread whose pop takes it out is its
//! only writer until it stores the word `live`. The stack table is a mapping of its own, so the
//! stacks no push reaches stay untouched memory.
//!
//! Budget of the sizes up to [`SIZES`]: each CPU holds at most `cpu_pages` pages, split evenly
//! between them: a size of `p` pages holds at most `min(61, cpu_pages / SIZES / p)` areas (none
//! when that is 0). No growth; a free that finds its stack full goes to the thread's magazine.
//!
//! Budget of the larger sizes (grown): their caps start at 0, so they hold nothing until a
//! free grows one ([`CpuCache::push_growing`]: the thread caches ask only while more than twice
//! as many threads hold magazines as there are CPUs, when per-thread magazines would hold
//! each area a CPU's threads pass around once per thread). A growth raises the cap of this
//! CPU's stack of the size by one area when the caps this CPU was granted, `sum(cap x pages)`
//! over its larger sizes, stay within `grown_pages`; every drain empties the stacks and sets
//! those caps back to 0. Invariant (`CpuCache::check`): for each CPU the granted pages are that sum and at most
//! `grown_pages`, and no stack holds more than its cap, so a CPU's larger stacks hold at most
//! `grown_pages` pages.
//!
//! Locks: the grow mutex, taken by a growth and by a drain (around the stacks' drainer mutex),
//! so a cap never rises while a drain sets it back; the thread caches take it under their
//! registry mutex on drains, alone on growths. Pushes and pops take nothing.
//!
//! Drains: [`CpuCache::drain`] stops every used stack, fences with `membarrier`'s rseq command
//! and takes everything (the caller frees it through the busy map). The thread caches call it
//! under their registry mutex, on the drains that empty magazines (idle decay, purge, shrink,
//! failure, low memory), so the lock order is: registry mutex, grow mutex, then the stacks'
//! drainer mutex.
//!
//! Counters: the stacks count their committed operations themselves (`CpuStacks::figures`), so
//! a hit writes nothing but its CPU's stack and the area's word.

use crate::sync::padded::Padded;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;
use vmarena_core::Span;
use vmarena_platform::cpu_stack::{CpuStacks, SLOTS};

/// Sizes with fixed caps: areas of 1 to 8 pages, guard included (data of up to 7 pages, 28 KiB
/// with 4 KiB pages), the sizes test_vmalloc's fix_size, full_fit and long_busy use.
pub(crate) const SIZES: u64 = crate::caches::cache_interface::CPU_FIXED_SIZES;

/// The largest size with a grown stack: 257 pages, the kernel's pool range (256 data pages)
/// and the default space's largest magazine size. 512 bytes of stack a size and CPU, mapped
/// untouched until used.
pub(crate) const GROWN_MAX: u64 = 257;

/// Words of a CPU's hint bitmap: a bit per size up to [`GROWN_MAX`].
const HINT_WORDS: usize = (GROWN_MAX as usize).div_ceil(64);

/// Stacks [`CpuCache::pop_within`] tries at most before it gives up.
const WITHIN_TRIES: usize = 4;

/// The larger sizes' caps: what each CPU was granted, within `max_pages` a CPU; and which of
/// its stacks may hold an area.
struct Grown {
    max_pages: u64,
    /// Per CPU: `sum(cap x pages)` over its larger stacks (written under `mutex`).
    granted: Box<[Padded<AtomicU64>]>,
    /// Per CPU, bit `pages - 1`: that stack may hold an area. A hint, written with plain
    /// loads and stores: set after a push (on the CPU the thread runs on then), cleared by a
    /// [`CpuCache::pop_within`] that found the stack empty, and by drains. A lost update costs
    /// a missed reuse or a pop that finds nothing, never an area: the stacks hold the areas.
    hint: Box<[Padded<[AtomicU64; HINT_WORDS]>]>,
    mutex: Mutex<()>,
}

impl Grown {
    fn hint_of(&self, cpu: usize) -> Option<&[AtomicU64; HINT_WORDS]> {
        self.hint.get(cpu).map(|h| &h.0)
    }
}

/// Figures of the per-CPU stacks, summed over CPUs and sizes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpuFigures {
    pub(crate) areas: u64,
    pub(crate) pages: u64,
    pub(crate) hits: u64,
    pub(crate) pushes: u64,
    /// Of `hits`, those of the grown stacks (sizes past [`SIZES`]).
    pub(crate) grown_hits: u64,
    /// Of `pages`, those the grown stacks hold.
    pub(crate) grown_pages: u64,
}

/// See the module documentation.
pub(crate) struct CpuCache {
    stacks: CpuStacks,
    /// Sizes with stacks: 1 to `sizes` pages.
    sizes: u64,
    /// The larger sizes' caps, when they have stacks.
    grown: Option<Grown>,
    /// Areas drains took from the grown stacks (for their hits: the stacks count what drains
    /// took over all sizes only).
    grown_taken: AtomicU64,
}

impl CpuCache {
    /// Stacks for areas of 1 to `min(SIZES, max_pages)` pages, `cpu_pages` pages a CPU at most,
    /// and when `grown_pages` leaves room for one area past them, grown stacks for the sizes
    /// up to `min(GROWN_MAX, max_pages)`, `grown_pages` pages a CPU at most; `Err` names why
    /// there are none (this machine cannot run them, or no size gets a slot).
    pub(crate) fn new(max_pages: u64, cpu_pages: u64, grown_pages: u64) -> Result<CpuCache, String> {
        let fixed = SIZES.min(max_pages);
        let per_size = cpu_pages / SIZES;
        if fixed == 0 || per_size == 0 {
            return Err(format!("{cpu_pages} pages a CPU leave no room for an area (cpu_cache_pages)"));
        }
        let grows = max_pages > SIZES && grown_pages > SIZES;
        let sizes = if grows { GROWN_MAX.min(max_pages) } else { fixed };
        let stacks = CpuStacks::new(sizes as usize, 0)?;
        for p in 1..=fixed {
            stacks.set_cap((p - 1) as usize, (per_size / p).min(SLOTS as u64) as usize);
        }
        let grown = grows.then(|| Grown {
            max_pages: grown_pages,
            granted: (0..stacks.cpus()).map(|_| Padded(AtomicU64::new(0))).collect(),
            hint: (0..stacks.cpus()).map(|_| Padded(std::array::from_fn(|_| AtomicU64::new(0)))).collect(),
            mutex: Mutex::new(()),
        });
        Ok(CpuCache { stacks, sizes, grown, grown_taken: AtomicU64::new(0) })
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
        let ok = self.stacks.push(pages.wrapping_sub(1) as usize, start);
        if ok && pages > SIZES {
            self.mark(pages);
        }
        ok
    }

    /// Set the hint bit of `pages` on this CPU (after a push of a larger size).
    #[inline(always)]
    fn mark(&self, pages: u64) {
        let Some(h) = self.grown.as_ref().and_then(|g| g.hint_of(vmarena_platform::cpu::current())) else {
            return;
        };
        let (w, bit) = (&h[(pages as usize - 1) / 64], 1u64 << ((pages - 1) % 64));
        let v = w.load(Relaxed);
        if v & bit == 0 {
            w.store(v | bit, Relaxed);
        }
    }

    /// An area of `lo_pages` to `hi_pages` pages from this CPU's grown stacks, the smallest
    /// size its hint shows first, trying at most [`WITHIN_TRIES`] stacks: `(start, pages)`
    /// (the word is `cached`, and the caller's to store `live`). A larger cached area serves
    /// the request whole, as a magazine's within the slack does (test_vmalloc's random_size
    /// cycles through a hundred sizes, which exact-size stacks would each hold apart).
    pub(crate) fn pop_within(&self, lo_pages: u64, hi_pages: u64) -> Option<(u64, u64)> {
        let h = self.grown.as_ref()?.hint_of(vmarena_platform::cpu::current())?;
        let hi = hi_pages.min(self.sizes) as usize;
        let mut i = (lo_pages.max(SIZES + 1) - 1) as usize;
        for _ in 0..WITHIN_TRIES {
            // The next size at or above `i` whose bit is set.
            loop {
                if i >= hi {
                    return None;
                }
                let rest = h[i / 64].load(Relaxed) >> (i % 64);
                if rest != 0 {
                    i += rest.trailing_zeros() as usize;
                    break;
                }
                i = (i / 64 + 1) * 64;
            }
            if i >= hi {
                return None;
            }
            if let Some(s) = self.stacks.pop(i) {
                return Some((s, i as u64 + 1));
            }
            let (w, bit) = (&h[i / 64], 1u64 << (i % 64));
            w.store(w.load(Relaxed) & !bit, Relaxed);
            i += 1;
        }
        None
    }

    /// Push the area at `start` of `pages` pages (a larger size, word claimed `cached`) after
    /// growing this CPU's stack of its size by one area, when that stack is at its cap and the
    /// caps granted to this CPU leave room for the area: true when it went in. False, nothing
    /// changed but perhaps the cap, for a size without a grown stack, no room under this CPU's
    /// grown budget, or a push that still failed (a drain running, the thread moved to a CPU
    /// whose stack is full).
    #[cold]
    #[inline(never)]
    pub(crate) fn push_growing(&self, pages: u64, start: u64) -> bool {
        let Some(g) = &self.grown else { return false };
        if pages <= SIZES || !self.holds(pages) {
            return false;
        }
        let stack = (pages - 1) as usize;
        let cpu = vmarena_platform::cpu::current();
        let Some(granted) = g.granted.get(cpu) else { return false };
        // Read without the mutex first: a CPU whose budget is spent does not take it.
        if granted.load(Relaxed) + pages > g.max_pages {
            return false;
        }
        {
            let _one = g.mutex.lock().unwrap_or_else(|e| e.into_inner());
            let cap = self.stacks.cap_of(cpu, stack);
            // A stack with room (another thread popped meanwhile) takes the push as it is.
            if self.stacks.len_of(cpu, stack) >= cap {
                if cap >= SLOTS || granted.load(Relaxed) + pages > g.max_pages {
                    return false;
                }
                self.stacks.set_cap_of(cpu, stack, cap + 1);
                granted.store(granted.load(Relaxed) + pages, Relaxed);
            }
        }
        self.push(pages, start)
    }

    /// Take every held area into `out`, and set the grown caps back to 0. Nothing is taken
    /// (and no fence is paid) when no stack holds one and no cap was grown; `Err` when the
    /// fence failed, with nothing taken and no cap changed.
    pub(crate) fn drain(&self, out: &mut Vec<Span>) -> Result<usize, String> {
        let _one = self.grown.as_ref().map(|g| g.mutex.lock().unwrap_or_else(|e| e.into_inner()));
        let granted = self.grown.as_ref().is_some_and(|g| g.granted.iter().any(|c| c.load(Relaxed) > 0));
        if !granted && !self.stacks.any_held() {
            return Ok(0);
        }
        let mut grown_taken = 0;
        let push = |_, size: usize, start| {
            grown_taken += (size as u64 >= SIZES) as u64;
            out.push(Span { start, pages: size as u64 + 1 })
        };
        let Some(g) = &self.grown else { return self.stacks.drain(push) };
        let taken = self.stacks.drain_setting_caps(push, |i| (i as u64 >= SIZES).then_some(0))?;
        self.grown_taken.fetch_add(grown_taken, Relaxed);
        for c in g.granted.iter() {
            c.store(0, Relaxed);
        }
        for h in g.hint.iter() {
            for w in h.0.iter() {
                w.store(0, Relaxed);
            }
        }
        Ok(taken)
    }

    /// The grown caps against their budget (for the checker: meaningful only while no thread
    /// pushes, pops or grows): for each CPU, the granted pages are the sum of its larger
    /// stacks' caps times their sizes and at most the budget, and no stack holds more than
    /// its cap.
    pub(crate) fn check(&self) -> Result<(), String> {
        let Some(g) = &self.grown else { return Ok(()) };
        let _one = g.mutex.lock().unwrap_or_else(|e| e.into_inner());
        for (cpu, granted) in g.granted.iter().enumerate() {
            let mut sum = 0;
            for stack in SIZES as usize..self.sizes as usize {
                let (cap, len) = (self.stacks.cap_of(cpu, stack), self.stacks.len_of(cpu, stack));
                if len > cap {
                    return Err(format!(
                        "CPU {cpu}'s stack of {} pages holds {len} areas, above its cap {cap}",
                        stack + 1
                    ));
                }
                sum += cap as u64 * (stack as u64 + 1);
            }
            let granted = granted.load(Relaxed);
            if sum != granted || granted > g.max_pages {
                return Err(format!(
                    "CPU {cpu}'s grown caps sum to {sum} pages, granted {granted}, budget {}",
                    g.max_pages
                ));
            }
        }
        Ok(())
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
        let (mut ops, mut grown_ops, mut grown_areas) = (0, 0, 0);
        for (i, s) in per.iter().enumerate() {
            f.areas += s.held;
            f.pages += s.held * (i as u64 + 1);
            ops += s.ops;
            if i as u64 >= SIZES {
                grown_ops += s.ops;
                grown_areas += s.held;
                f.grown_pages += s.held * (i as u64 + 1);
            }
        }
        // Every push adds one to the length and every pop or drain takes one away.
        f.hits = ops.saturating_sub(f.areas + taken) / 2;
        f.pushes = ops - f.hits;
        f.grown_hits = grown_ops.saturating_sub(grown_areas + self.grown_taken.load(Relaxed)) / 2;
        f
    }

    /// A copy of the stacks' geometry (valid while these stacks live).
    pub(crate) fn geometry(&self) -> vmarena_platform::cpu_stack::CpuGeometry {
        self.stacks.geometry()
    }

    /// The grow mutex, then the stacks' drainer mutex, for `fork()`.
    #[cfg(not(loom))]
    pub(crate) fn lock_for_fork(&self) -> Vec<Box<dyn crate::sync::fork::Held + '_>> {
        let mut held: Vec<Box<dyn crate::sync::fork::Held + '_>> = Vec::new();
        if let Some(g) = &self.grown {
            held.push(Box::new(g.mutex.lock().unwrap_or_else(|e| e.into_inner())));
        }
        held.push(Box::new(self.stacks.lock_for_fork()));
        held
    }
}
