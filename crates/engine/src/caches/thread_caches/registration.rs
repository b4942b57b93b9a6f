//! Registration: a thread's first use of an arena's thread caches makes its magazine, enters
//! it in the arena's registry (with its share of the total budget) and in the thread's list
//! of magazines (most recent first, at most `MAGAZINES_PER_THREAD`, the least recent beyond
//! given back); a later use of an arena already in the list moves its entry to the front.
//!
//! Owns nothing of its own: it writes the thread's `OWNED` list and the registry under its
//! mutex, and clears the thread's static front first (`set_front`), so that the fast paths
//! find no magazine until `with_magazine_slow` publishes the new front (`mod.rs`).

use super::{give_back, set_front, Budget, CacheOwner, Entry, Owned, ThreadCaches, MAGAZINES_PER_THREAD};
use crate::caches::magazine::Magazine;
use std::cell::RefCell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

impl ThreadCaches {
    /// Put this arena's magazine first in the thread's list `o`, making and registering it on
    /// the thread's first use of the arena: `None` when `o` is borrowed (a reentrant call).
    #[cold]
    pub(super) fn find_or_register<A: CacheOwner + 'static>(
        &self,
        o: &RefCell<Owned>,
        arena: &Arc<A>,
    ) -> Option<()> {
        // Registering allocates and may start the worker: vmarena's own allocations.
        let _inside = vmarena_platform::reentry::enter();
        // `OWNED` changes below: no front until `with_magazine_slow` sets it again.
        set_front(0, std::ptr::null());
        let mut evicted = Vec::new();
        {
            let mut o = o.try_borrow_mut().ok()?;
            // Magazines of arenas that are gone hold nothing that needs giving back.
            o.0.retain(|e| e.arena.strong_count() > 0);
            if let Some(i) = o.0.iter().position(|e| e.id == self.id) {
                let e = o.0.remove(i);
                o.0.insert(0, e);
            } else {
                let mag = {
                    let mut reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
                    let n = reg.len() as u64 + 1;
                    let base_pages = self.budget.base_pages.min(self.budget.ceiling(n));
                    let mag = Arc::new(Magazine::new(
                        self.states.max_pages(),
                        Budget { base_pages, ..self.budget },
                    ));
                    reg.push(mag.clone());
                    // Under the registry mutex, as `retire` stores it: the count is the length.
                    self.magazines.store(n, Relaxed);
                    mag
                };
                let owner: Arc<dyn CacheOwner> = arena.clone();
                o.0.insert(0, Entry { id: self.id, mag, arena: Arc::downgrade(&owner) });
                // Cached areas are given back on idle intervals by the worker.
                A::registered(arena);
                while o.0.len() > MAGAZINES_PER_THREAD {
                    evicted.extend(o.0.pop());
                }
            }
        }
        for e in evicted {
            give_back(e);
        }
        Some(())
    }
}
