//! The low-memory event: a registry of caches that give memory back when memory is short (the
//! kernel's shrinkers and FreeBSD's `vm_lowmem` event handlers).
//!
//! Owns: the process-wide list of registered reclaimers, as weak references, under one mutex
//! (std's, never modelled by loom: registration is not on any hot path). A reclaimer that has
//! been dropped is skipped and pruned. [`signal`] calls every live reclaimer in registration
//! order, outside the registry lock, so a reclaimer may take its own locks freely.
//!
//! What raises the event is the front end's business (an explicit call, or the PSI monitor of
//! the `vmarena` crate).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Weak};

/// A cache that can give memory back.
pub trait Reclaim: Send + Sync {
    /// Name used in reports.
    fn reclaim_name(&self) -> String;
    /// Give back every page that is cached and not in use. Returns the pages released.
    fn reclaim(&self) -> u64;
}

static REGISTRY: Mutex<Vec<Weak<dyn Reclaim>>> = Mutex::new(Vec::new());
static EVENTS: AtomicU64 = AtomicU64::new(0);

/// Register a reclaimer for every later low-memory event, for as long as it lives.
pub fn register(r: Weak<dyn Reclaim>) {
    let mut g = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    g.retain(|w| w.strong_count() > 0);
    g.push(r);
}

/// What one low-memory event did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PressureReport {
    /// Pages released, by reclaimer name, in registration order.
    pub released: Vec<(String, u64)>,
}

impl PressureReport {
    /// Pages released by all reclaimers.
    pub fn total_pages(&self) -> u64 {
        self.released.iter().map(|r| r.1).sum()
    }
}

/// The registry's lock, held (for a `fork()`: see `fork`).
#[cfg(not(loom))]
pub(crate) fn lock_registry() -> std::sync::MutexGuard<'static, Vec<Weak<dyn Reclaim>>> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Raise a low-memory event: every live reclaimer gives back what it caches.
pub fn signal() -> PressureReport {
    let live: Vec<_> = {
        let mut g = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
        g.retain(|w| w.strong_count() > 0);
        g.iter().filter_map(Weak::upgrade).collect()
    };
    EVENTS.fetch_add(1, Ordering::Relaxed);
    PressureReport { released: live.iter().map(|r| (r.reclaim_name(), r.reclaim())).collect() }
}

/// Low-memory events raised in this process so far.
pub fn events() -> u64 {
    EVENTS.load(Ordering::Relaxed)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    struct Counting(AtomicU64, &'static str);
    impl Reclaim for Counting {
        fn reclaim_name(&self) -> String {
            self.1.to_string()
        }
        fn reclaim(&self) -> u64 {
            self.0.fetch_add(1, Ordering::Relaxed) + 10
        }
    }

    #[test]
    fn live_reclaimers_are_called_and_dropped_ones_pruned() {
        let a = Arc::new(Counting(AtomicU64::new(0), "pressure-test-a"));
        let b = Arc::new(Counting(AtomicU64::new(0), "pressure-test-b"));
        let aw: Arc<dyn Reclaim> = a.clone();
        let bw: Arc<dyn Reclaim> = b.clone();
        register(Arc::downgrade(&aw));
        register(Arc::downgrade(&bw));
        drop((aw, bw));
        drop(b);
        let r = signal();
        let mine: Vec<_> = r.released.iter().filter(|x| x.0.starts_with("pressure-test")).collect();
        assert_eq!(mine, vec![&("pressure-test-a".to_string(), 10)]);
        assert_eq!(a.0.load(Ordering::Relaxed), 1);
    }
}
