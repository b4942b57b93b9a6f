//! The invariant checker: every page of the arena is in exactly one state, and every
//! structure is internally consistent (DESIGN.md, section 16).
//!
//! It holds every lock of the arena at once: the thread-cache registry mutex, the purge mutex,
//! then the strategy's locks in the lock order (sync/lock_rank.rs, `LockRank`), which the strategy's own
//! check takes and adds its ranges under. Call it when no user thread uses the arena: an area
//! in flight between two locks would otherwise look lost. The purge worker may run: its purges
//! hold the purge mutex and its cache drains the registry mutex, both held by the check.

use super::shared::Shared;
use super::strategy_ops::StrategyOps;
use super::strategy_state::with_strategy;
use crate::sync::Ordering::Relaxed;

impl Shared {
    pub(crate) fn check(&self) -> Result<(), String> {
        // The registry mutex comes before every other lock (magazine.rs) and is held to the
        // end: the worker's idle drain would otherwise move cached areas under the check.
        match &self.ctx.cache {
            Some(c) => c.with_cached_starts(|cached| self.check_with(cached?)),
            None => self.check_with(Vec::new()),
        }
    }

    /// The check, given every start that sits in a thread cache.
    fn check_with(&self, mut cached: Vec<u64>) -> Result<(), String> {
        cached.sort_unstable();
        if let Some(w) = cached.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("area {:#x} sits in two thread-cache slots", w[0]));
        }
        let _serial = self.ctx.purging.lock.lock().unwrap_or_else(|e| e.into_inner());
        // (start, pages, what)
        let mut all: Vec<(u64, u64, &'static str)> = Vec::new();
        with_strategy!(&self.state, s => s.check(&self.ctx, &cached, &mut all))?;
        // busy ∪ pooled ∪ lazy ∪ chunk ∪ free must tile the usable part [lo, grown_hi) exactly.
        all.sort_unstable_by_key(|a| a.0);
        let mut at = self.ctx.lo;
        for &(s, pages, what) in &all {
            if pages == 0 {
                return Err(format!("empty {what} area at {s:#x}"));
            }
            if s != at {
                return Err(if s < at {
                    format!("{what} area [{s:#x}, +{pages}) overlaps the range before it (ends {at:#x})")
                } else {
                    format!("pages [{at:#x}, {s:#x}) are lost: in no list, tree or map")
                });
            }
            at = s + pages;
        }
        let end = self.ctx.grown_hi.load(Relaxed);
        if at != end {
            return Err(format!("pages [{at:#x}, {end:#x}) are lost: in no list, tree or map"));
        }
        Ok(())
    }
}
