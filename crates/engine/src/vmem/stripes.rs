//! `Stripes`: an instant-fit span cut into equal stripes, one per CPU, each its own segregated
//! free lists ([`SegFit`]) under its own mutex, so that threads on different CPUs allocate and
//! free without sharing a lock or a cache line (the vmap nodes' idea, for an integer arena).
//!
//! Even stripes carve from the bottom of their segments and odd ones from the top, so that the
//! untouched quanta of a pair stay one run across their boundary, for large requests (carved
//! across it) and for the figures. A request goes to the stripe of the caller's CPU first,
//! then to the others in turn. Only
//! when no stripe holds it alone are all stripes locked (in index order) and the free
//! segments that meet at stripe boundaries joined: a request that fits across a boundary is
//! carved from each stripe it covers and recorded in `straddled`, and a refusal still means
//! that no start exists in the span. A free of a straddling allocation locks the stripes it
//! covers, in index order.
//!
//! Owns: the stripes and the record of straddling allocations. Locks: a stripe's mutex, or
//! every stripe's in index order, then `straddled`; `straddled` alone. Taken only under the
//! integer arena's span list read lock.

use super::constraints::Quanta;
use crate::sync::current_cpu;
use crate::sync::padded::Padded;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use vmarena_core::{Request, SegFit};

/// A span gets one stripe per CPU only where each stripe has at least this many quanta.
pub(crate) const MIN_STRIPE_QUANTA: u64 = 1 << 14;

/// A span's figures, in quanta (for stripes: as one range).
pub(crate) struct Figures {
    pub live: u64,
    pub live_quanta: u64,
    pub free_ranges: u64,
    pub largest_free: u64,
}

pub(crate) struct Stripes {
    lo: u64,
    hi: u64,
    width: u64,
    parts: Vec<Padded<Mutex<SegFit>>>,
    /// Allocations carved from more than one stripe: start -> quanta.
    straddled: Mutex<HashMap<u64, u64>>,
    /// `straddled.len()`, read without its lock by every free.
    straddling: AtomicU64,
}

/// The free segments of every stripe (all locked, in index order), those that meet at a
/// boundary joined.
fn joined_runs(g: &[MutexGuard<'_, SegFit>]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for f in g {
        for (a, b) in f.ranges() {
            match runs.last_mut() {
                Some(last) if last.1 == a => last.1 = b,
                _ => runs.push((a, b)),
            }
        }
    }
    runs
}

fn lock(m: &Mutex<SegFit>) -> MutexGuard<'_, SegFit> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Stripes {
    /// Quanta `[lo, hi)` in `stripes` stripes (0: one per CPU where each has at least
    /// [`MIN_STRIPE_QUANTA`]), each allocating by best fit when `best`, else by instant fit.
    pub(crate) fn new(lo: u64, hi: u64, stripes: usize, best: bool) -> Stripes {
        let len = hi - lo;
        let n = if stripes == 0 {
            (vmarena_platform::cpu::count() as u64).min(len / MIN_STRIPE_QUANTA).max(1)
        } else {
            (stripes as u64).min(len).max(1)
        };
        let width = len.div_ceil(n);
        // Even stripes grow upwards and odd ones downwards, so that each pair keeps its
        // untouched quanta in one run across their boundary.
        let parts = (0..n)
            .map(|i| (i, lo + i * width))
            .take_while(|&(_, a)| a < hi)
            .map(|(i, a)| SegFit::growing(a, (a + width).min(hi), i % 2 == 1))
            .map(|f| Padded(Mutex::new(if best { f.best_fit() } else { f })))
            .collect();
        Stripes { lo, hi, width, parts, straddled: Mutex::new(HashMap::new()), straddling: AtomicU64::new(0) }
    }

    fn stripe_of(&self, at: u64) -> usize {
        ((at - self.lo) / self.width) as usize
    }

    fn bounds(&self, i: usize) -> (u64, u64) {
        let a = self.lo + i as u64 * self.width;
        (a, (a + self.width).min(self.hi))
    }

    fn straddled(&self) -> MutexGuard<'_, HashMap<u64, u64>> {
        self.straddled.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Allocate `q` within quanta `[lo, hi)`: the first quantum.
    pub(crate) fn alloc(&self, q: &Quanta, lo: u64, hi: u64) -> Option<u64> {
        let n = self.parts.len();
        let home = if n == 1 { 0 } else { current_cpu() % n };
        for k in 0..n {
            let i = (home + k) % n;
            let (a, b) = self.bounds(i);
            let (a, b) = (a.max(lo), b.min(hi));
            if b <= a || b - a < q.pages {
                continue;
            }
            let r =
                Request::constrained(q.pages, q.align_pages, q.phase_pages, q.nocross_pages, a, b).ok()?;
            if let Some(s) = lock(&self.parts[i]).alloc(&r) {
                return Some(s);
            }
        }
        if n > 1 {
            self.alloc_across(q, lo, hi)
        } else {
            None
        }
    }

    /// Every stripe locked: the first start in the free runs joined across the boundaries.
    #[cold]
    fn alloc_across(&self, q: &Quanta, lo: u64, hi: u64) -> Option<u64> {
        let mut g: Vec<MutexGuard<'_, SegFit>> = self.parts.iter().map(|p| lock(p)).collect();
        let r = Request::constrained(q.pages, q.align_pages, q.phase_pages, q.nocross_pages, lo, hi).ok()?;
        let runs = joined_runs(&g);
        let s = runs.iter().find_map(|&(a, b)| r.candidate_in(a, b))?;
        let e = s + q.pages;
        let mut at = s;
        while at < e {
            let i = self.stripe_of(at);
            let end = e.min(self.bounds(i).1);
            let part = Request::new(end - at, 1, at, end).ok()?;
            let got = g[i].alloc(&part);
            debug_assert_eq!(got, Some(at), "a free run's part");
            at = end;
        }
        if self.stripe_of(s) != self.stripe_of(e - 1) {
            self.straddled().insert(s, q.pages);
            self.straddling.fetch_add(1, Relaxed);
        }
        drop(g.drain(..));
        Some(s)
    }

    /// `at` starts a part of a straddling allocation other than its first: not an allocation
    /// of its own.
    fn inner_part(&self, at: u64) -> bool {
        // The count first: with no straddling allocation (the usual case) a free pays one load.
        self.straddling.load(Relaxed) > 0
            && at == self.bounds(self.stripe_of(at)).0
            && self.straddled().iter().any(|(&s, &len)| s < at && at < s + len)
    }

    /// Free the allocation at quantum `at`: its quanta.
    pub(crate) fn free(&self, at: u64) -> Option<u64> {
        if at < self.lo || at >= self.hi || self.inner_part(at) {
            return None;
        }
        if self.straddling.load(Relaxed) > 0 {
            let len = self.straddled().remove(&at);
            if let Some(len) = len {
                self.straddling.fetch_sub(1, Relaxed);
                let e = at + len;
                let (first, last) = (self.stripe_of(at), self.stripe_of(e - 1));
                let mut g: Vec<MutexGuard<'_, SegFit>> =
                    self.parts[first..=last].iter().map(|p| lock(p)).collect();
                let mut x = at;
                for (k, f) in g.iter_mut().enumerate() {
                    let freed = f.free(x);
                    debug_assert!(freed.is_some(), "a straddling allocation's part");
                    x = self.bounds(first + k).1;
                }
                return Some(len);
            }
        }
        lock(&self.parts[self.stripe_of(at)]).free(at)
    }

    /// The quanta of the live allocation at quantum `at`.
    pub(crate) fn len_of(&self, at: u64) -> Option<u64> {
        if at < self.lo || at >= self.hi || self.inner_part(at) {
            return None;
        }
        if self.straddling.load(Relaxed) > 0 {
            if let Some(&len) = self.straddled().get(&at) {
                return Some(len);
            }
        }
        lock(&self.parts[self.stripe_of(at)]).len_of(at)
    }

    /// The figures of the span as one range (free segments that meet at a boundary count as
    /// one; walks every free segment).
    pub(crate) fn figures(&self) -> Figures {
        let g: Vec<MutexGuard<'_, SegFit>> = self.parts.iter().map(|p| lock(p)).collect();
        let straddled = self.straddled();
        let parts: u64 = straddled
            .iter()
            .map(|(&s, &len)| (self.stripe_of(s + len - 1) - self.stripe_of(s)) as u64 + 1)
            .sum();
        let runs = joined_runs(&g);
        let live_segments: u64 = g.iter().map(|f| f.live() as u64).sum();
        Figures {
            live: live_segments - parts + straddled.len() as u64,
            live_quanta: g.iter().map(|f| f.allocated_len()).sum(),
            free_ranges: runs.len() as u64,
            largest_free: runs.iter().map(|(a, b)| b - a).max().unwrap_or(0),
        }
    }

    /// Free quanta in all, each stripe locked in turn.
    pub(crate) fn free_quanta(&self) -> u64 {
        self.parts.iter().map(|p| lock(p).free_len()).sum()
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        let g: Vec<MutexGuard<'_, SegFit>> = self.parts.iter().map(|p| lock(p)).collect();
        for f in &g {
            f.check()?;
        }
        let straddled = self.straddled();
        if straddled.len() as u64 != self.straddling.load(Relaxed) {
            return Err("the count of straddling allocations disagrees with their record".into());
        }
        for (&s, &len) in straddled.iter() {
            let mut x = s;
            while x < s + len {
                let i = self.stripe_of(x);
                let end = (s + len).min(self.bounds(i).1);
                if g[i].len_of(x) != Some(end - x) {
                    return Err(format!("straddling allocation {s:#x}+{len:#x}: part at {x:#x} missing"));
                }
                x = end;
            }
        }
        Ok(())
    }
}
