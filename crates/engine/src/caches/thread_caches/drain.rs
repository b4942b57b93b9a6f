//! The thread caches' registry side: the magazines' share of the total budget and the shed of a
//! magazine above it, drains (by another thread, or by an owner asked to; a drain by another
//! thread empties the depot too), the give-back of an exiting thread's magazines, the figures
//! summed over every cache, the checker's view and the locks `fork()` takes. The fast paths are
//! in `mod.rs`.
//!
//! Locks: the registry mutex, then the per-CPU stacks' grow and drainer mutexes, then the
//! depot's, then
//! the figures of given-back magazines; nothing else is taken under them but the busy-map
//! frees of drained areas (node locks), which take nothing of the thread caches.

use super::{CacheFigures, CacheOwner, ThreadCaches};
use crate::caches::handshake::heavy_fence;
use crate::caches::magazine::{bump, Magazine};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use vmarena_core::Span;

/// How much of the depot a drain takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DepotDrain {
    /// Everything (purges, the shrinker, low memory, a failed allocation).
    All,
    /// What was there at the previous aged drain (the decay tick).
    Aged,
}

impl ThreadCaches {
    /// The most a magazine's budget may be now ([`Budget::ceiling`] of the magazines
    /// registered).
    pub(super) fn ceiling(&self) -> u64 {
        self.budget.ceiling(self.magazines.load(Relaxed))
    }

    /// The budget a magazine starts again at after it is emptied: the base, within the
    /// ceiling.
    pub(super) fn base_now(&self) -> u64 {
        self.budget.base_pages.min(self.ceiling())
    }

    /// More threads share the total than when `m` last grew: when its budget stands above
    /// the ceiling, empty it (owner, inside an operation) into `out` and start it again at
    /// the base within the ceiling. Rare: once per magazine for each rise in the thread count
    /// that matters.
    pub(super) fn shed(&self, m: &Magazine, out: &mut Vec<Span>) {
        let ceiling = self.ceiling();
        if m.budget_pages() > ceiling {
            m.take(out, self.budget.base_pages.min(ceiling));
            bump(&m.sheds);
        }
    }

    /// Give back what [`ThreadCaches::shed`] took (nothing when it took nothing).
    pub(super) fn give_shed<A: CacheOwner + ?Sized>(&self, arena: &A, shed: &mut [Span]) {
        if !shed.is_empty() {
            let _inside = vmarena_platform::reentry::enter();
            self.give_areas(arena, shed);
        }
    }

    /// The owner could not use its magazine: if a drain was asked for, empty it now.
    #[cold]
    pub(super) fn owner_drain<A: CacheOwner + ?Sized>(&self, arena: &A, m: &Magazine) {
        if m.hs.claim_drain() {
            let mut areas = Vec::new();
            m.take(&mut areas, self.base_now());
            m.hs.release();
            self.give_areas(arena, &mut areas);
        }
    }

    /// Areas taken from magazines go down the busy-map path (their words are `cached`, so no
    /// free from outside can race with it).
    pub(super) fn give_areas<A: CacheOwner + ?Sized>(&self, arena: &A, areas: &mut [Span]) {
        arena.free_from_cache(areas);
        self.retired.lock().unwrap_or_else(|e| e.into_inner()).drained += areas.len() as u64;
    }

    /// A thread gave its magazine back (exit or eviction): unregister it, free its areas.
    pub(super) fn retire<A: CacheOwner + ?Sized>(&self, arena: &A, mag: &Arc<Magazine>) {
        let mut areas = Vec::new();
        {
            let mut reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
            reg.retain(|m| !Arc::ptr_eq(m, mag));
            self.magazines.store(reg.len() as u64, Relaxed);
            // Unregistered under the mutex: no drainer holds it now, and its owner is here.
            mag.take(&mut areas, self.base_now());
            mag.add_counters(&mut self.retired.lock().unwrap_or_else(|e| e.into_inner()));
        }
        self.give_areas(arena, &mut areas);
    }

    /// Empty every magazine whose owner is not inside an operation; ask the others to empty
    /// themselves; empty the depot, or with [`DepotDrain::Aged`] take what the previous such
    /// drain saw there ([`crate::caches::depot::Depot::take_aged`]). Returns the areas taken.
    ///
    /// The registry mutex is held until the areas are back in the busy-map path, so that the
    /// checker, which holds it too, never sees an area in flight: taken from its magazine but
    /// still busy with its word `cached`.
    pub(crate) fn drain_all<A: CacheOwner + ?Sized>(&self, arena: &A, depot: DepotDrain) -> u64 {
        let mut areas = Vec::new();
        let reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = &self.cpu {
            // A failed fence takes nothing: the stacks keep their areas for the next drain.
            let _ = c.drain(&mut areas);
        }
        match depot {
            DepotDrain::All => self.depot.take_all(&mut areas),
            DepotDrain::Aged => self.depot.take_aged(&mut areas),
        }
        let held: Vec<&Arc<Magazine>> =
            reg.iter().filter(|m| m.pages.load(Relaxed) > 0).filter(|m| m.hs.mark()).collect();
        if held.is_empty() && areas.is_empty() {
            return 0;
        }
        if !held.is_empty() {
            let fenced = heavy_fence();
            for m in held {
                if m.hs.settle(fenced) {
                    m.take(&mut areas, self.base_now());
                    m.hs.release();
                }
            }
        }
        self.give_areas(arena, &mut areas);
        drop(reg);
        areas.len() as u64
    }

    /// Drop the state table's pages of `runs` (free space, out of the free tree while this
    /// runs, whole blocks of 512 pages from the arena's first page): `(bytes dropped,
    /// syscalls)`.
    pub(crate) fn discard_table(&self, runs: &[Span]) -> (u64, u64) {
        let dropped: Vec<u64> = runs.iter().map(|r| self.states.discard_pages(r.start, r.pages)).collect();
        (dropped.iter().sum(), dropped.iter().filter(|&&b| b > 0).count() as u64)
    }

    /// Bytes of the state table resident now.
    pub(crate) fn table_resident_bytes(&self) -> u64 {
        self.states.resident_bytes()
    }

    /// [`Magazine::spans`] of every registered magazine.
    pub(crate) fn spans(&self) -> Vec<Vec<std::ops::Range<usize>>> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|m| m.spans()).collect()
    }

    /// Figures summed over the per-CPU stacks and the live and given-back magazines.
    pub(crate) fn figures(&self) -> CacheFigures {
        let mut f = *self.retired.lock().unwrap_or_else(|e| e.into_inner());
        f.flushes += self.passed.load(Relaxed);
        if let Some(c) = &self.cpu {
            let cf = c.figures();
            f.areas += cf.areas;
            f.pages += cf.pages;
            f.hits += cf.hits;
            f.cpu_hits = cf.hits;
            f.cpu_grown_hits = cf.grown_hits;
            f.cpu_grown_pages = cf.grown_pages;
            f.pushes += cf.pushes;
        }
        let d = self.depot.figures();
        f.areas += d.areas;
        f.pages += d.pages;
        f.depot_pages = d.pages;
        f.depot_puts = d.puts;
        f.depot_takes = d.takes;
        for m in self.registry.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let (areas, pages) = m.held();
            f.areas += areas;
            f.pages += pages;
            m.add_counters(&mut f);
            f.budget_pages = f.budget_pages.max(m.budget_pages());
        }
        f
    }

    /// Run the checker's `f` on every cached start, with the registry mutex held so that no
    /// drain moves areas meanwhile (call when no thread other than the worker uses the arena).
    pub(crate) fn with_cached_starts<R>(&self, f: impl FnOnce(Result<Vec<u64>, String>) -> R) -> R {
        let reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = Vec::new();
        if let Some(c) = &self.cpu {
            c.starts(&mut all);
        }
        self.depot.starts(&mut all);
        let starts = self
            .cpu
            .as_ref()
            .map_or(Ok(()), |c| c.check())
            .and_then(|()| self.depot.check())
            .and_then(|()| reg.iter().try_for_each(|m| m.entries().map(|e| all.extend(e))))
            .map(|()| all);
        f(starts)
    }

    /// The registry mutex, the per-CPU stacks' drainer mutex (taken under the registry's), the
    /// depot's mutex (taken under the registry's by a drain, alone otherwise), then the
    /// figures of given-back magazines (taken last on every path, with nothing taken
    /// under it), for `fork()`.
    #[cfg(not(loom))]
    pub(crate) fn lock_for_fork(&self) -> Vec<Box<dyn crate::sync::fork::Held + '_>> {
        let mut held: Vec<Box<dyn crate::sync::fork::Held + '_>> =
            vec![Box::new(self.registry.lock().unwrap_or_else(|e| e.into_inner()))];
        if let Some(c) = &self.cpu {
            held.extend(c.lock_for_fork());
        }
        held.extend(self.depot.lock_for_fork());
        held.push(Box::new(self.retired.lock().unwrap_or_else(|e| e.into_inner())));
        held
    }
}
