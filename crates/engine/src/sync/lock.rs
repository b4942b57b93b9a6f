//! `StatLock`: the engine's spin lock, with lock statistics built in (the kernel's lockstat).
//!
//! Owns: one value of type `T` and the figures of the lock that guards it.
//!
//! Algorithm: acquire is one compare-and-swap; release is a plain store (on x86 a release store
//! is an ordinary `mov`, so an uncontended lock/unlock costs one locked instruction). A waiter
//! spins briefly, then yields the CPU in a loop, so a preempted holder gets to run when threads
//! outnumber cores. Critical sections in the engine are a few hundred nanoseconds at most; the
//! long-held purge serialisation uses a sleeping mutex instead.
//!
//! State word:
//!
//! | value | meaning |
//! |---|---|
//! | 0 | unlocked |
//! | 1 | locked |
//!
//! Statistics: `acquisitions` is incremented by the holder with a plain load and store (the
//! lock orders those), `contended` and `wait_ns` on the slow path only, `hold_ns` only while
//! [`set_timing`](super::lock_stats::set_timing) is on (it costs two clock reads per acquisition). All are read with relaxed
//! loads, so a snapshot taken while threads run is approximate.
//!
//! Call sites: [`StatLock::lock_at`] names the code path that takes the lock ([`LockSite`], a
//! static per path). A site records its contended acquisitions and wait time always (slow path
//! only) and its acquisitions and hold time while timing is on (a shared counter per
//! acquisition, which the fast path does not pay otherwise). Sites are process-wide statistics,
//! plain std atomics even under loom.
//!
//! Lock order: every `StatLock` has a [`LockRank`], and a thread takes a lock (other than with
//! `try_lock`, which cannot wait) only while every `StatLock` it holds ranks below it. The
//! order itself is written once, on [`LockRank`] (`lock_rank.rs`); debug builds (the test
//! suite) assert it on every acquisition and panic on an inversion. The figures are
//! `lock_stats.rs`'s.
#![allow(unsafe_code)]

use crate::sync::lock_rank::LockRank;
#[cfg(all(debug_assertions, not(loom)))]
use crate::sync::lock_rank::{note_acquired, note_released};
use crate::sync::lock_stats::{hooks, LockSite, LockStats, HOOK_TIMING, HOOK_TSAN};
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use vmarena_platform::process::monotonic_ns;

/// Rounds of backoff a waiter spins (2, 4, ... 64 pauses each, about 250 pauses in all: a few
/// microseconds, longer than a batch of frees holds a node) before it yields in a loop. With
/// 64 rounds (about 4,000 pauses) 64 threads freeing on 2 CPUs spent their time spinning on a
/// preempted holder: `docs/bench-log/many-workers.md`.
const SPIN_ROUNDS: u32 = 8;

/// A spin lock around `T` with built-in statistics. See the module documentation.
pub struct StatLock<T> {
    state: AtomicU32,
    /// Checked in debug builds only; release builds do not keep it.
    #[cfg(all(debug_assertions, not(loom)))]
    rank: LockRank,
    acquisitions: AtomicU64,
    contended: AtomicU64,
    wait_ns: AtomicU64,
    hold_ns: AtomicU64,
    held_since: AtomicU64,
    data: UnsafeCell<T>,
}

// SAFETY: the lock gives exclusive access to `data`, so sharing the lock is as safe as sending
// `T` between threads.
unsafe impl<T: Send> Sync for StatLock<T> {}
// SAFETY: as above; the lock owns `T`.
unsafe impl<T: Send> Send for StatLock<T> {}

impl<T> StatLock<T> {
    /// A new unlocked lock around `value`, never held with another `StatLock`.
    pub fn new(value: T) -> Self {
        Self::ranked(LockRank::UNRANKED, value)
    }

    /// A new unlocked lock around `value` at `rank` in the lock order.
    pub fn ranked(rank: LockRank, value: T) -> Self {
        #[cfg(any(not(debug_assertions), loom))]
        let _ = rank;
        StatLock {
            state: AtomicU32::new(0),
            #[cfg(all(debug_assertions, not(loom)))]
            rank,
            acquisitions: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            hold_ns: AtomicU64::new(0),
            held_since: AtomicU64::new(0),
            data: UnsafeCell::new(value),
        }
    }

    /// Take the lock.
    #[inline]
    pub fn lock(&self) -> StatGuard<'_, T> {
        #[cfg(all(debug_assertions, not(loom)))]
        note_acquired(self.rank, true);
        if self.state.compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_contended(None);
        }
        self.acquired(None)
    }

    /// Take the lock on behalf of the code path `site`.
    #[inline]
    pub fn lock_at(&self, site: &'static LockSite) -> StatGuard<'_, T> {
        #[cfg(all(debug_assertions, not(loom)))]
        note_acquired(self.rank, true);
        if self.state.compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_contended(Some(site));
        }
        self.acquired(Some(site))
    }

    /// Take the lock only if it is free now.
    #[inline]
    pub fn try_lock(&self) -> Option<StatGuard<'_, T>> {
        if self.state.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            #[cfg(all(debug_assertions, not(loom)))]
            note_acquired(self.rank, false);
            Some(self.acquired(None))
        } else {
            None
        }
    }

    #[inline]
    fn acquired(&self, site: Option<&'static LockSite>) -> StatGuard<'_, T> {
        // Only the holder writes these; the lock orders the writes.
        self.acquisitions.store(self.acquisitions.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        let h = hooks();
        if h != 0 {
            if h & HOOK_TIMING != 0 {
                self.held_since.store(monotonic_ns(), Ordering::Relaxed);
                if let Some(s) = site {
                    s.acquisitions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            if h & HOOK_TSAN != 0 {
                // ThreadSanitizer cannot see this lock's atomics: tell it what the lock orders.
                vmarena_platform::debug_tools::tsan_acquire(self as *const Self as usize);
            }
        }
        StatGuard { lock: self, site }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self, site: Option<&'static LockSite>) {
        let t0 = monotonic_ns();
        let mut spins = 0u32;
        loop {
            if self.state.load(Ordering::Relaxed) == 0
                && self.state.compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                break;
            }
            if spins < SPIN_ROUNDS {
                spins += 1;
                for _ in 0..(1u32 << spins.min(6)) {
                    crate::sync::spin_loop();
                }
            } else {
                crate::sync::yield_now();
            }
        }
        let waited = monotonic_ns().saturating_sub(t0);
        self.contended.fetch_add(1, Ordering::Relaxed);
        self.wait_ns.fetch_add(waited, Ordering::Relaxed);
        if let Some(s) = site {
            s.contended.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            s.wait_ns.fetch_add(waited, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The lock's figures so far.
    pub fn stats(&self) -> LockStats {
        LockStats {
            acquisitions: self.acquisitions.load(Ordering::Relaxed),
            contended: self.contended.load(Ordering::Relaxed),
            wait_ns: self.wait_ns.load(Ordering::Relaxed),
            hold_ns: self.hold_ns.load(Ordering::Relaxed),
        }
    }

    /// Exclusive access without locking, through `&mut self`.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

/// Proof that a `StatLock` is held; the lock is released when the guard drops.
pub struct StatGuard<'a, T> {
    lock: &'a StatLock<T>,
    site: Option<&'static LockSite>,
}

impl<T> Deref for StatGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while the lock is held, so no other reference exists.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for StatGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`, and `&mut self` makes this the only reference.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for StatGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        let h = hooks();
        if h & HOOK_TSAN != 0 {
            vmarena_platform::debug_tools::tsan_release(self.lock as *const StatLock<T> as usize);
        }
        if h & HOOK_TIMING != 0 {
            let since = self.lock.held_since.load(Ordering::Relaxed);
            if since != 0 {
                let held = monotonic_ns().saturating_sub(since);
                let l = &self.lock.hold_ns;
                l.store(l.load(Ordering::Relaxed) + held, Ordering::Relaxed);
                if let Some(s) = self.site {
                    s.hold_ns.fetch_add(held, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        #[cfg(all(debug_assertions, not(loom)))]
        note_released(self.lock.rank);
        self.lock.state.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(debug_assertions)]
    use crate::sync::lock_rank::next_owner;
    use crate::sync::lock_stats::set_timing;
    use std::sync::Arc;

    #[test]
    fn mutual_exclusion_under_contention() {
        let l = Arc::new(StatLock::new((0u64, 0u64)));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let mut g = l.lock();
                        // A torn update would leave the two fields different.
                        g.0 += 1;
                        std::hint::spin_loop();
                        g.1 += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let g = l.lock();
        assert_eq!(*g, (160_000, 160_000));
        drop(g);
        let s = l.stats();
        assert_eq!(s.acquisitions, 160_001);
        assert!(s.contended <= s.acquisitions);
    }

    #[test]
    fn sites_record_waits_always_and_acquisitions_with_timing() {
        static SITE: LockSite = LockSite::new("test site");
        let l = Arc::new(StatLock::new(0u64));
        // Contention: hold the lock while another thread asks for it at the site; the waiter
        // records its wait once it gets the lock, after this thread lets go.
        let g = l.lock();
        let arriving = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t = {
            let (l, arriving) = (l.clone(), arriving.clone());
            std::thread::spawn(move || {
                arriving.store(true, std::sync::atomic::Ordering::SeqCst);
                *l.lock_at(&SITE) += 1
            })
        };
        while !arriving.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(g);
        t.join().unwrap();
        let s = SITE.stats();
        assert_eq!(s.contended, 1, "the waiter's contended acquisition is the site's");
        assert!(s.wait_ns > 0);
        set_timing(true);
        drop(l.lock_at(&SITE));
        set_timing(false);
        assert_eq!(SITE.stats().acquisitions, 1, "counted only while timing was on");
    }

    /// Ranks rise: node locks in index order then the free lock pass; a planted inversion
    /// (the free lock, then a node lock) panics before it can deadlock.
    #[test]
    #[cfg(debug_assertions)]
    fn the_lock_order_is_asserted_on_every_acquisition() {
        let owner = next_owner();
        let nodes: Vec<_> = (0..3).map(|i| StatLock::ranked(LockRank::arena_node(owner, i), i)).collect();
        let free = StatLock::ranked(LockRank::arena_free(owner), ());
        {
            let held: Vec<_> = nodes.iter().map(|n| n.lock()).collect();
            let _f = free.lock();
            drop(held);
        }
        // A later owner ranks above every lock of an earlier one.
        let later = StatLock::ranked(LockRank::arena_node(next_owner(), 0), ());
        drop((free.lock(), later.lock()));
        // try_lock cannot wait, so it may go against the order.
        let f = free.lock();
        assert!(nodes[0].try_lock().is_some());
        drop(f);
        let inverted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _f = free.lock();
            let _n = nodes[1].lock();
        }));
        let msg = inverted.expect_err("an inversion must panic");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("lock order"), "{msg}");
        let backwards = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _a = nodes[2].lock();
            let _b = nodes[1].lock();
        }));
        assert!(backwards.is_err(), "node locks against index order must panic");
        // Every guard of the failed attempts was released on the way out.
        let _all: Vec<_> = nodes.iter().map(|n| n.lock()).collect();
    }

    #[test]
    fn try_lock_fails_while_held() {
        let l = StatLock::new(1);
        let g = l.lock();
        assert!(l.try_lock().is_none());
        drop(g);
        assert!(l.try_lock().is_some());
    }
}
