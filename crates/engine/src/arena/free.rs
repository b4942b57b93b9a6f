//! Free: the thread's cache first, then the strategy's free under the busy lock of the area,
//! then the purge if the lazy pages passed their limit. While the lazy pages stand past twice
//! their limit (the purges have fallen behind), the strategy's free releases the area's memory
//! itself and returns the area to the free tree instead of making it lazy.
//!
//! Owns nothing: the record's removal is the strategy's (under its busy lock, where the kind
//! check happens too, so it costs no second lookup); the threshold check reads two atomics of
//! the lazy accounting and wakes the worker, or purges on this thread when the worker has
//! fallen far behind.

use super::shared::Shared;
use super::strategy_ops::StrategyOps;
use super::strategy_state::with_strategy;
use super::Arena;
use crate::area::{AreaKind, AreaTag, Contents, PurgeKind, NO_NODE, UNKNOWN_BYTES};
use crate::caches::thread_caches::FreeFast;
use crate::error::FreeError;
use crate::sync::Arc;
use crate::sync::Ordering::Relaxed;
use vmarena_core::BusyArea;

/// Lazy pages, as a multiple of the lazy limit, at which a freeing thread purges itself
/// because the worker has fallen behind (many more runnable threads than CPUs).
const LAZY_BACKPRESSURE: i64 = 2;

impl Arena {
    /// Free the area that starts at `start`. Its memory stays resident until a purge. A small
    /// area goes to the thread's cache; its record then reports an unknown requested size.
    pub fn free(&self, start: u64) -> Result<BusyArea<AreaTag>, FreeError> {
        if let Some(r) = self.free_cached(start) {
            return r;
        }
        self.free_uncached(start)
    }

    /// The per-CPU stacks' hit paths on copies of their geometry, for a front end that keeps
    /// them beside its own hot fields (`None` without per-CPU stacks). Valid while this arena
    /// lives: the safety contract of [`crate::caches::hit_path::HitPath`]'s operations.
    pub fn hit_path(&self) -> Option<crate::caches::hit_path::HitPath> {
        self.shared.ctx.cache.as_ref()?.hit_path()
    }

    /// A plain free into this thread's cache for callers whose fast path must make no call:
    /// true when the small live area at `start` is freed; false with nothing changed for
    /// anything else (call [`Arena::free`] then, which frees or refuses it).
    #[inline(always)]
    pub fn free_hit(&self, start: u64) -> bool {
        self.shared.ctx.cache.as_ref().is_some_and(|c| c.free_hit(start).is_some())
    }

    /// Free a small area into this thread's cache: `None` when `start` is not a small live
    /// area (nothing changed; call [`Arena::free_uncached`]). Takes no lock unless the cache is
    /// full.
    #[inline]
    pub fn free_cached(&self, start: u64) -> Option<Result<BusyArea<AreaTag>, FreeError>> {
        let c = self.shared.ctx.cache.as_ref()?;
        self.finish_cached_free(start, c.free(&self.shared, start))
    }

    /// Finish the free of an area whose word a [`crate::caches::hit_path::HitPath::free`] claimed
    /// (`HitFree::Claimed`: this CPU's stack had no room): into this thread's magazine, or
    /// through the busy map.
    #[cold]
    #[inline(never)]
    pub fn free_claimed(&self, start: u64) -> Result<BusyArea<AreaTag>, FreeError> {
        let Some(c) = self.shared.ctx.cache.as_ref() else { return Err(FreeError::NotLive { start }) };
        self.finish_cached_free(start, c.free_after_claim(&self.shared, start))
            .unwrap_or(Err(FreeError::NotLive { start }))
    }

    /// What a free through the thread cache came to, as [`Arena::free_cached`] reports it.
    #[inline(always)]
    fn finish_cached_free(&self, start: u64, f: FreeFast) -> Option<Result<BusyArea<AreaTag>, FreeError>> {
        match f {
            FreeFast::Cached { pages, caller } | FreeFast::Passed { pages, caller } => Some(Ok(BusyArea {
                pages,
                node: NO_NODE,
                tag: AreaTag { caller, requested_bytes: UNKNOWN_BYTES, kind: AreaKind::Vmalloc },
            })),
            FreeFast::Refused => Some(Err(self.refused_free(start))),
            FreeFast::Flush => Some(self.flush_claimed(start)),
            FreeFast::Untracked => None,
        }
    }

    /// A free the thread cache refused (a second free of a cached or retired area).
    #[cold]
    #[inline(never)]
    fn refused_free(&self, start: u64) -> FreeError {
        self.shared.ctx.counters.bad_frees.fetch_add(1, Relaxed);
        FreeError::NotLive { start }
    }

    /// A small area claimed by this thread (its word is cached) that its magazine could not
    /// take: finish the free through the busy map, which may allocate.
    #[cold]
    #[inline(never)]
    fn flush_claimed(&self, start: u64) -> Result<BusyArea<AreaTag>, FreeError> {
        let _inside = vmarena_platform::reentry::enter();
        self.free_uncached(start)
    }

    /// Free through the busy map only (the kernel's path), then start a purge if one is due:
    /// for a caller that tried [`Arena::free_cached`] already, or that must not put the area in
    /// a thread cache.
    #[inline(always)]
    pub fn free_uncached(&self, start: u64) -> Result<BusyArea<AreaTag>, FreeError> {
        self.free_uncached_as(start, None)
    }

    /// [`Arena::free_uncached`] of an area of `kind` only: an area of another kind is refused
    /// ([`FreeError::WrongKind`]) under the same lock that would have removed it, so the check
    /// costs no second lookup.
    #[inline(always)]
    pub fn free_uncached_of(&self, start: u64, kind: AreaKind) -> Result<BusyArea<AreaTag>, FreeError> {
        self.free_uncached_as(start, Some(kind))
    }

    /// Free the live area of `kind` at `start` whose data pages a resize moved out, every one
    /// ([`Arena::move_data`] answered all of them), so that nothing of it is resident: it goes
    /// to the free tree at once ([`Contents::Emptied`]), not on a lazy list whose areas count
    /// as resident memory a later request would find already faulted in. Not for an area that
    /// [`Arena::small_area`] reports (those go through [`Arena::free`]).
    pub fn free_emptied_of(&self, start: u64, kind: AreaKind) -> Result<BusyArea<AreaTag>, FreeError> {
        let sh = &*self.shared;
        let r = sh.free_released(start, Some(kind), Contents::Emptied);
        match r {
            Err(_) => {
                sh.ctx.counters.bad_frees.fetch_add(1, Relaxed);
            }
            // A strategy that has no free to the tree made the area lazy.
            Ok(_) => Shared::freed(&self.shared),
        }
        r
    }

    #[inline(always)]
    fn free_uncached_as(&self, start: u64, kind: Option<AreaKind>) -> Result<BusyArea<AreaTag>, FreeError> {
        let sh = &*self.shared;
        let r = if !sh.ctx.opts.lazy_free || sh.lazy_backlogged() {
            sh.free_released(start, kind, Contents::Resident)
        } else {
            sh.free(start, kind)
        };
        match r {
            Err(_) => {
                sh.ctx.counters.bad_frees.fetch_add(1, Relaxed);
            }
            Ok(_) => Shared::freed(&self.shared),
        }
        r
    }
}

impl Shared {
    /// The strategy's free: the record removed (when of `kind`), the area made lazy.
    #[inline]
    pub(crate) fn free(&self, start: u64, kind: Option<AreaKind>) -> Result<BusyArea<AreaTag>, FreeError> {
        with_strategy!(&self.state, s => s.free(&self.ctx, start, kind))
    }

    /// Lazy pages stand past [`LAZY_BACKPRESSURE`] times their limit: the purges have fallen
    /// behind (their thread starved of CPU time among many more runnable threads than CPUs,
    /// or a purge of a large backlog still running), so a free releases its own area at once
    /// ([`Shared::free_released`]) instead of adding to the backlog.
    #[inline]
    pub(crate) fn lazy_backlogged(&self) -> bool {
        let (lazy, limit) = self.lazy_and_limit();
        lazy > LAZY_BACKPRESSURE * limit
    }

    /// The lazy pages (approximate) and the limit a free compares them with.
    #[inline(always)]
    pub(crate) fn lazy_and_limit(&self) -> (i64, i64) {
        (self.ctx.lazy.approx.load(Relaxed), self.ctx.lazy.limit(self.ctx.opts.lazy_headroom) as i64)
    }

    /// The strategy's free of an area made while lazy pages are backlogged, or of one a
    /// resize emptied.
    #[cold]
    #[inline(never)]
    fn free_released(
        &self,
        start: u64,
        kind: Option<AreaKind>,
        contents: Contents,
    ) -> Result<BusyArea<AreaTag>, FreeError> {
        with_strategy!(&self.state, s => s.free_released(&self.ctx, start, kind, contents))
    }

    /// Areas went lazy: start the decay worker, and a purge if the lazy pages passed their
    /// limit (on this thread when the worker has fallen far behind).
    #[inline]
    pub(crate) fn freed(me: &Arc<Shared>) {
        Shared::start_decay_worker(me);
        let (lazy, limit) = me.lazy_and_limit();
        if lazy <= limit {
            return;
        }
        me.ctx.lazy.over_peak.fetch_max((lazy - limit) as u64, Relaxed);
        if !me.ctx.purging.requested.swap(true, Relaxed) {
            me.kick(me);
        } else if lazy > LAZY_BACKPRESSURE * limit {
            me.purge_unless_running();
        }
    }

    /// Start the worker for the decay interval (which needs it even below the threshold), once.
    #[inline]
    pub(crate) fn start_decay_worker(me: &Arc<Shared>) {
        if !me.ctx.purging.worker_started.load(Relaxed)
            && me.ctx.opts.purge_thread
            && me.ctx.opts.decay_interval_ms > 0
        {
            me.ctx.purging.worker_started.store(true, Relaxed);
            me.ctx.purging.worker.start(me);
        }
    }

    /// Start the purge: wake the worker, or purge on this thread when there is none.
    pub(crate) fn kick(&self, me: &Arc<Shared>) {
        if self.ctx.opts.purge_thread {
            self.ctx.purging.worker.wake(me);
        } else {
            self.purge(PurgeKind::Threshold);
        }
    }

    /// Purge on this thread unless a purge is already running.
    #[cold]
    fn purge_unless_running(&self) {
        if let Ok(guard) = self.ctx.purging.lock.try_lock() {
            drop(guard);
            self.purge(PurgeKind::Threshold);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::arena::strategy_state::StrategyState;
    use crate::{AllocRequest, Arena, ArenaOptions, NoBacking, Strategy};
    use std::sync::{Arc, Barrier};
    use vmarena_platform::cpu::pin_current_thread;

    /// In a crowd (more than twice as many threads holding magazines as CPUs), a larger area
    /// its CPU's grown stack cannot take goes through the busy map when its node locks are
    /// free, and into the thread's magazine while one is held: the free never waits on them.
    #[test]
    fn a_crowds_larger_free_takes_the_magazine_while_its_nodes_are_locked() {
        let o = ArenaOptions {
            strategy: Strategy::Nodes,
            nodes: 2,
            purge_thread: false,
            decay_interval_ms: 0,
            thread_cache_max_pages: 64,
            thread_cache_pages: 256,
            cpu_cache_grown_pages: 40,
            ..Default::default()
        };
        let a = Arc::new(Arena::new("pass", 0x1000, 0x1000 + (1 << 20), o, Box::new(NoBacking)).unwrap());
        if let Some(why) = a.cpu_cache_off() {
            assert!(why.contains("rseq"), "only a machine without rseq may refuse: {why}");
            return;
        }
        assert!(pin_current_thread(0));
        // The crowd: threads that each hold a magazine (made by a miss), parked meanwhile.
        let n = 2 * vmarena_platform::cpu::count();
        let (start, end) = (Arc::new(Barrier::new(n + 1)), Arc::new(Barrier::new(n + 1)));
        let crowd: Vec<_> = (0..n)
            .map(|_| {
                let (a, start, end) = (a.clone(), start.clone(), end.clone());
                std::thread::spawn(move || {
                    let x = a.alloc(&AllocRequest::pages(10)).unwrap();
                    start.wait();
                    end.wait();
                    a.free(x.start).unwrap();
                })
            })
            .collect();
        start.wait();
        let xs: Vec<u64> = (0..3).map(|_| a.alloc(&AllocRequest::pages(16)).unwrap().start).collect();
        a.free(xs[0]).unwrap();
        a.free(xs[1]).unwrap();
        assert_eq!(a.stats().cache_cpu_grown_pages, 32, "two of 16 pages within CPU 0's 40");
        // Every node lock held by another thread while the third is freed.
        let (held, done) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let holder = {
            let (a, held, done) = (a.clone(), held.clone(), done.clone());
            std::thread::spawn(move || {
                let StrategyState::Nodes(nodes) = &a.shared.state else { unreachable!() };
                let guards: Vec<_> = nodes
                    .nodes
                    .iter()
                    .map(|l| loop {
                        if let Some(g) = l.try_lock() {
                            break g;
                        }
                        std::thread::yield_now();
                    })
                    .collect();
                held.wait();
                done.wait();
                drop(guards);
            })
        };
        held.wait();
        // A free that waited for the locks would wait for ever: a watchdog ends the run.
        let freed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        {
            let freed = freed.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_secs(60));
                if !freed.load(std::sync::atomic::Ordering::Relaxed) {
                    eprintln!("a crowd's free waited 60 s for node locks another thread held");
                    std::process::abort();
                }
            });
        }
        a.free(xs[2]).unwrap();
        freed.store(true, std::sync::atomic::Ordering::Relaxed);
        done.wait();
        holder.join().unwrap();
        let st = a.stats();
        assert_eq!(
            (st.cached_pages, st.pooled_areas, st.cache_flushes),
            (48, 0, 0),
            "the third in the magazine: {st:?}"
        );
        a.check().unwrap();
        assert_eq!(a.alloc_cached(16, None), Some(xs[1]), "the stack's top");
        assert_eq!(a.alloc_cached(16, None), Some(xs[0]));
        assert_eq!(a.alloc_cached(16, None), Some(xs[2]), "then the magazine");
        // With the locks free, the third goes through the busy map to its node's pool.
        for &x in &xs {
            a.free(x).unwrap();
        }
        let st = a.stats();
        assert_eq!((st.cached_pages, st.pooled_areas, st.cache_flushes), (32, 1, 1), "{st:?}");
        a.check().unwrap();
        end.wait();
        crowd.into_iter().for_each(|t| t.join().unwrap());
    }
}
