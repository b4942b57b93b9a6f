//! `Vmem`: an integer arena with vmem's interface (Bonwick and Adams, "Magazines and Vmem",
//! 2001; illumos and FreeBSD `vmem(9)`): spans of any integers with a quantum, allocation with
//! alignment, phase, nocross and a min/max address, lowest, instant or best fit, spans added by
//! the caller or imported from a parent arena and returned to it when they empty.
//!
//! Owns: its spans (`span.rs`), each with an index of its quanta: for lowest fit an
//! engine [`Arena`], so that small allocations are served by the arena's thread caches and
//! per-CPU nodes (vmem's quantum caches) and the rest by its free tree; for instant and best
//! fit per-CPU stripes of segregated free lists ([`vmarena_core::SegFit`]), instant fit in
//! constant time. A handle on its
//! parent, which it keeps alive.
//!
//! Locks: the span list is replicated per CPU, each replica under an `RwLock` of its own,
//! ranked [`Rank::Vmem`]: allocations and frees hold their CPU's replica for reading while they
//! call the span's index; adding or removing a span holds every replica for writing, taken in
//! index order. It is never held while calling the parent, so the locks of a parent and a child
//! are never nested.
//!
//! Invariants: spans are disjoint; an imported span is in the list exactly while it has live
//! allocations or is being allocated from (its `live` count is raised under the read lock, and
//! it is removed under the write lock only at 0); a refused call changed nothing.
//!
//! With lowest fit, constrained requests (a phase, a nocross boundary or a min/max address)
//! bypass the caches and pools and search the free tree, as vmem's `vmem_xalloc` bypasses its
//! quantum caches; a request with a nocross boundary and nothing else tries the thread's cache
//! first and keeps the area only if it crosses no boundary.

mod constraints;
mod error;
mod span;
mod stripes;

pub use constraints::Constraints;
pub use error::VmemError;

use crate::arena::backing::NoBacking;
use crate::arena::options::ArenaOptions;
use crate::arena::Arena;
use crate::sync::current_cpu;
use crate::sync::fork::{self, ForkLocks, Held, Rank};
use crate::sync::padded::Padded;
use constraints::Quanta;
use span::{Index, Span, SpanList};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use stripes::Stripes;

/// Replicas of the span list: one per CPU, at most 64.
fn replicas() -> usize {
    vmarena_platform::cpu::count().clamp(1, 64)
}

/// How an integer arena's spans index their free quanta (vmem's allocation policies).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fit {
    /// The lowest start that fits: each span an engine arena (its free tree, nodes and thread
    /// caches), the kernel's policy.
    Lowest,
    /// vmem's instant fit: the first segment of the first size class whose every segment holds
    /// the request, in constant time; each span per-CPU stripes of segregated free lists
    /// ([`vmarena_core::SegFit`]).
    #[default]
    Instant,
    /// vmem's best fit: the shortest free segment in which the request has a start, on the
    /// same stripes of segregated lists as instant fit, each allocation walking the fitting
    /// class's list; for arenas whose largest free range matters more than the rate.
    Best,
}

/// How a [`Vmem`] is built.
#[derive(Clone, Debug)]
pub struct VmemOptions {
    /// The unit of allocation: sizes are rounded up to it, starts are multiples of it (a power
    /// of two).
    pub quantum: u64,
    /// How each span indexes its quanta.
    pub fit: Fit,
    /// Stripes of an instant- or best-fit span: 0 means one per CPU where each holds at least 16,384
    /// quanta (one stripe for smaller spans).
    pub stripes: usize,
    /// Imports from the parent are rounded up to a multiple of this (0: the quantum).
    pub import_quantum: u64,
    /// The options of each span's arena.
    pub arena: ArenaOptions,
}

impl Default for VmemOptions {
    fn default() -> Self {
        VmemOptions {
            quantum: 1,
            // vmem's usual policy, and here the faster one by 3-10x with as large free ranges
            // (BENCHMARKS.md, "Integer arenas").
            fit: Fit::Instant,
            stripes: 0,
            import_quantum: 0,
            // No memory: nothing to release, in the background or later, nothing to move. A
            // free coalesces at once, as vmem's does.
            arena: ArenaOptions {
                purge_thread: false,
                page_moves: false,
                lazy_free: false,
                ..ArenaOptions::default()
            },
        }
    }
}

/// Figures of a [`Vmem`] as of now (`repr(C)`: the C ABI's `struct vmarena_vmem_stats` is its
/// size, then these).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmemStats {
    /// Spans (added and imported).
    pub spans: u64,
    /// Of those, imported from the parent.
    pub imported_spans: u64,
    /// Integers in the spans.
    pub total: u64,
    /// Integers of live allocations (rounded to the quantum).
    pub allocated: u64,
    /// Live allocations.
    pub live: u64,
    /// Free ranges in the spans' free trees (held by caches and pools not counted).
    pub free_ranges: u64,
    /// The largest free range of the free trees.
    pub largest_free: u64,
    /// Spans imported from the parent, ever.
    pub imports: u64,
    /// Spans returned to the parent, ever.
    pub returns: u64,
}

/// An integer arena. Cheap to clone (a handle); all methods take `&self`.
#[derive(Clone)]
pub struct Vmem {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    shift: u32,
    fit: Fit,
    stripes: usize,
    import_quantum: u64,
    arena_opts: ArenaOptions,
    parent: Option<Vmem>,
    /// The span list, one replica per CPU slot (each on lines of its own): a reader locks its
    /// CPU's replica only, so that threads on different CPUs share no lock word; a writer locks
    /// every replica, in index order, and changes each the same way.
    spans: Vec<Padded<RwLock<SpanList>>>,
    imports: AtomicU64,
    returns: AtomicU64,
}

impl Vmem {
    /// An empty arena named `name` (spans come from [`Vmem::add_span`] or from `parent`).
    pub fn new(name: impl Into<String>, opts: VmemOptions, parent: Option<Vmem>) -> Result<Vmem, VmemError> {
        if !opts.quantum.is_power_of_two() {
            return Err(VmemError::Invalid("quantum is not a power of two"));
        }
        if opts.import_quantum != 0 && opts.import_quantum % opts.quantum != 0 {
            return Err(VmemError::Invalid("import_quantum is not a multiple of the quantum"));
        }
        let inner = Arc::new(Inner {
            name: name.into(),
            shift: opts.quantum.trailing_zeros(),
            fit: opts.fit,
            stripes: opts.stripes,
            import_quantum: opts.import_quantum.max(opts.quantum),
            arena_opts: opts.arena,
            parent,
            spans: (0..replicas()).map(|_| Padded(RwLock::new(SpanList::default()))).collect(),
            imports: AtomicU64::new(0),
            returns: AtomicU64::new(0),
        });
        let f: Arc<dyn ForkLocks> = inner.clone();
        fork::register(Rank::Vmem, Arc::downgrade(&f));
        Ok(Vmem { inner })
    }

    /// The arena's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The quantum.
    pub fn quantum(&self) -> u64 {
        1 << self.inner.shift
    }

    /// Add the span `[base, base + size)` (vmem's `vmem_add`): both multiples of the quantum,
    /// meeting no span of the arena.
    pub fn add_span(&self, base: u64, size: u64) -> Result<(), VmemError> {
        self.inner.add_span(base, size, false)
    }

    /// Allocate `size` integers anywhere (vmem's `vmem_alloc`): the start of the allocation.
    pub fn alloc(&self, size: u64) -> Result<u64, VmemError> {
        self.xalloc(size, &Constraints::default())
    }

    /// Allocate `size` integers under `c` (vmem's `vmem_xalloc`): the start the arena's fit
    /// finds in the lowest span that holds the request (spans are tried in address order),
    /// importing a span from the parent when none does.
    pub fn xalloc(&self, size: u64, c: &Constraints) -> Result<u64, VmemError> {
        let q = Quanta::of(size, c, self.inner.shift)?;
        if let Some(at) = self.inner.try_spans(&q) {
            return Ok(at);
        }
        if self.inner.parent.is_some() {
            if let Some(at) = self.inner.import_for(&q, c) {
                return Ok(at);
            }
        }
        let (free, spans) = self.inner.free_and_spans();
        Err(VmemError::NoSpace { arena: self.inner.name.clone(), size, free, spans })
    }

    /// Free the allocation that starts at `at` (vmem's `vmem_free`): its size, rounded to the
    /// quantum. An imported span whose last allocation this was goes back to the parent.
    pub fn free(&self, at: u64) -> Result<u64, VmemError> {
        let inner = &*self.inner;
        if at & (self.quantum() - 1) != 0 {
            return Err(VmemError::NotAllocated(at));
        }
        let (base, emptied, pages) = {
            let g = inner.read();
            let span = g.find(at).ok_or(VmemError::NotAllocated(at))?;
            let pages = span.free(at >> inner.shift).ok_or(VmemError::NotAllocated(at))?;
            (span.base, span.gave_back(), pages)
        };
        if emptied {
            inner.return_if_empty(base);
        }
        Ok(pages << inner.shift)
    }

    /// The size of the live allocation that starts at `at`.
    pub fn size_of(&self, at: u64) -> Option<u64> {
        let g = self.inner.read();
        let span = g.find(at)?;
        if at & (self.quantum() - 1) != 0 {
            return None;
        }
        span.live_quanta(at >> self.inner.shift).map(|p| p << self.inner.shift)
    }

    /// Figures as of now. `free_ranges` and `largest_free` count the free trees only: call
    /// [`Vmem::shrink`] first to see what caches and pools hold as free too.
    pub fn stats(&self) -> VmemStats {
        let g = self.inner.read();
        let mut s = VmemStats {
            imports: self.inner.imports.load(Relaxed),
            returns: self.inner.returns.load(Relaxed),
            ..VmemStats::default()
        };
        for span in g.iter() {
            let f = span.figures();
            s.spans += 1;
            s.imported_spans += u64::from(span.imported);
            s.total += span.end - span.base;
            s.allocated += f.live_quanta << self.inner.shift;
            s.live += f.live;
            s.free_ranges += f.free_ranges;
            s.largest_free = s.largest_free.max(f.largest_free << self.inner.shift);
        }
        s
    }

    /// Every cached, pooled and lazily freed range back in the free trees (the shrinker).
    pub fn shrink(&self) {
        for span in self.inner.read().iter() {
            span.shrink();
        }
    }

    /// Check every span's arena (the engine's invariants); the first violation found.
    pub fn check(&self) -> Result<(), String> {
        for span in self.inner.read().iter() {
            span.check()?;
        }
        Ok(())
    }

    /// Destroy the arena (vmem's `vmem_destroy`), refused while allocations are live: the
    /// arena is handed back with the refusal. Imported spans go back to the parent.
    pub fn destroy(self) -> Result<(), (Vmem, VmemError)> {
        let live = self.stats().live;
        if live > 0 {
            return Err((self, VmemError::Busy { live }));
        }
        Ok(())
    }
}

impl Inner {
    fn read(&self) -> RwLockReadGuard<'_, SpanList> {
        let r = &self.spans[current_cpu() % self.spans.len()];
        r.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Every replica, locked for writing in index order.
    fn write(&self) -> Vec<RwLockWriteGuard<'_, SpanList>> {
        self.spans.iter().map(|r| r.write().unwrap_or_else(|p| p.into_inner())).collect()
    }

    fn add_span(&self, base: u64, size: u64, imported: bool) -> Result<(), VmemError> {
        let mask = (1u64 << self.shift) - 1;
        if size == 0 || base & mask != 0 || size & mask != 0 {
            return Err(VmemError::Invalid("span base and size must be non-zero multiples of the quantum"));
        }
        let end = base.checked_add(size).ok_or(VmemError::Overlap { base, size })?;
        let (lo, hi) = (base >> self.shift, end >> self.shift);
        let index = match self.fit {
            Fit::Lowest => Index::Tree(
                Arena::new(
                    format!("{}@{base:#x}", self.name),
                    lo,
                    hi,
                    self.arena_opts.clone(),
                    Box::new(NoBacking),
                )
                .map_err(|_| VmemError::Invalid("span options"))?,
            ),
            Fit::Instant => Index::Seg(Stripes::new(lo, hi, self.stripes, false)),
            Fit::Best => Index::Seg(Stripes::new(lo, hi, self.stripes, true)),
        };
        let span = Arc::new(Span { base, end, index, imported, live: AtomicU64::new(0) });
        let mut all = self.write();
        if !all[0].is_clear(base, end) {
            return Err(VmemError::Overlap { base, size });
        }
        for g in all.iter_mut() {
            g.insert(span.clone());
        }
        Ok(())
    }

    /// The spans in address order, each asked within the request's window.
    fn try_spans(&self, q: &Quanta) -> Option<u64> {
        let g = self.read();
        let got = g.iter().find_map(|span| self.try_span(span, q));
        got
    }

    fn try_span(&self, span: &Span, q: &Quanta) -> Option<u64> {
        let (slo, shi) = (span.base >> self.shift, span.end >> self.shift);
        let (lo, hi) = (q.lo.max(slo), q.hi.min(shi));
        if hi <= lo || hi - lo < q.pages {
            return None;
        }
        let at = span.alloc(q, lo, hi, (lo, hi) == (slo, shi))?;
        span.took();
        Some(at << self.shift)
    }

    /// Import a span from the parent that holds `q`, add it, and allocate from it.
    fn import_for(&self, q: &Quanta, c: &Constraints) -> Option<u64> {
        let parent = self.parent.as_ref()?;
        let quantum = 1u64 << self.shift;
        let bytes = q.pages << self.shift;
        // Room for the alignment's offset and for moving past one nocross boundary.
        let mut need = bytes;
        if q.align_pages > 1 {
            need = need.checked_add(q.align_pages << self.shift)?;
        }
        if q.nocross_pages != 0 {
            need = need.checked_add(bytes)?;
        }
        let need = need.checked_next_multiple_of(self.import_quantum)?;
        let pc = Constraints {
            align: quantum,
            min_addr: c.min_addr,
            max_addr: c.max_addr,
            ..Constraints::default()
        };
        let base = parent.xalloc(need, &pc).ok()?;
        if self.add_span(base, need, true).is_err() {
            let back = parent.free(base);
            debug_assert!(back.is_ok());
            return None;
        }
        self.imports.fetch_add(1, Relaxed);
        let got = {
            let g = self.read();
            g.find(base).and_then(|span| self.try_span(span, q))
        };
        if got.is_none() {
            self.return_if_empty(base);
        }
        got
    }

    /// Return the imported span based at `base` to the parent if it has no live allocation.
    fn return_if_empty(&self, base: u64) {
        let span = {
            let mut all = self.write();
            let gone = all[0].remove_if(base, |s| s.imported && s.live.load(Relaxed) == 0);
            if gone.is_some() {
                for g in all.iter_mut().skip(1) {
                    g.remove_if(base, |_| true);
                }
            }
            gone
        };
        if let (Some(span), Some(parent)) = (span, self.parent.as_ref()) {
            let back = parent.free(span.base);
            debug_assert!(back.is_ok());
            self.returns.fetch_add(1, Relaxed);
        }
    }

    fn free_and_spans(&self) -> (u64, usize) {
        let g = self.read();
        let free = g.iter().map(|s| s.free_quanta() << self.shift).sum();
        (free, g.len())
    }
}

impl ForkLocks for Inner {
    fn lock_for_fork(&self) -> Vec<Box<dyn Held + '_>> {
        self.write().into_iter().map(|g| Box::new(g) as Box<dyn Held + '_>).collect()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let mut spans = Vec::new();
        for r in self.spans.iter_mut() {
            spans = r.0.get_mut().unwrap_or_else(|p| p.into_inner()).take_all();
        }
        if let Some(parent) = &self.parent {
            for span in spans.iter().filter(|s| s.imported) {
                let _ = parent.free(span.base);
            }
        }
    }
}
