//! Where a full stack's spill goes, and where a miss refills from: the depot (`depot.rs`)
//! when it takes them, else the busy-map path. The fast paths that call these are in `mod.rs`.
//!
//! Locks: a depot part's mutex, alone; the busy-map path's node locks, alone. Nothing of the
//! thread caches is held meanwhile but the owner's handshake on its magazine (a refill).

use super::{CacheOwner, ThreadCaches};
use crate::caches::magazine::{Magazine, Spill, SPILL_MAX};
use vmarena_core::Span;

impl ThreadCaches {
    /// A miss of `pages` pages (owner, inside the operation on `m`): take areas of that size
    /// from the depot, as many as the stack has room for and a spill holds, keep all but one
    /// in the magazine and return that one (its word still `cached`; the caller makes it
    /// live), as `(start, pages)`. When the depot has none of that size, the smallest it holds
    /// of up to `hi_pages` pages, alone and whole. `None` when it has neither.
    #[inline(never)]
    pub(super) fn refill<A: CacheOwner + ?Sized>(
        &self,
        arena: &A,
        m: &Magazine,
        pages: u64,
        hi_pages: u64,
    ) -> Option<(u64, u64)> {
        let want = (m.room_for(pages) + 1).min(SPILL_MAX);
        let mut got = [0u64; SPILL_MAX];
        let n = self.depot.take(pages, &mut got[..want]);
        if n == 0 && hi_pages > pages {
            return self.depot.take_within(pages + 1, hi_pages);
        }
        let (&last, rest) = got[..n].split_last()?;
        let mut left = Spill::default();
        for &s in rest {
            match m.room(pages) {
                Some(room) => m.fill(room, pages, s),
                // Not expected (`room_for` counted the room): back where it came from.
                None => left.push(Span::new(s, pages)),
            }
        }
        if !left.is_empty() {
            // The depot's stacks and the busy-map path may allocate.
            let _inside = vmarena_platform::reentry::enter();
            if !self.depot.put(left.as_mut_slice(), u64::MAX) {
                arena.free_from_cache(left.as_mut_slice());
            }
        }
        Some((last, pages))
    }

    /// A free whose push the magazine's budget refused (its word `cached`): keep it in this
    /// CPU's depot part within the lazy limit's room: true. False, with nothing changed, when
    /// the depot is off or does not take it.
    pub(super) fn keep_refused<A: CacheOwner + ?Sized>(&self, arena: &A, start: u64, pages: u64) -> bool {
        if !self.budget.depot {
            return false;
        }
        // The depot's stacks may allocate.
        let _inside = vmarena_platform::reentry::enter();
        self.depot.put(&[Span::new(start, pages)], arena.lazy_room())
    }

    /// Send the areas a push took out of the magazine (`flushed` of them of the pushed size,
    /// the rest evicted from larger sizes) to the depot, or down the busy-map path when the
    /// depot is off or does not take them; then start a purge if one is due.
    pub(super) fn spill_out<A: CacheOwner + 'static>(
        &self,
        arena: &std::sync::Arc<A>,
        spill: &mut Spill,
        flushed: usize,
    ) {
        // Their words are `cached`: no other free can race with this.
        let _inside = vmarena_platform::reentry::enter();
        // An area of a larger size taken to make room counts as drained, as before.
        let evicted = spill.len() - flushed;
        if !(self.budget.depot && self.depot.put(spill.as_mut_slice(), arena.lazy_room())) {
            arena.free_from_cache(spill.as_mut_slice());
        }
        if evicted > 0 {
            self.retired.lock().unwrap_or_else(|e| e.into_inner()).drained += evicted as u64;
        }
        A::spilled(arena);
    }
}
