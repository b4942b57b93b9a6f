//! What the thread caches and their arena exchange: the outcome of a free through a cache
//! ([`FreeFast`]), a magazine's page budget ([`Budget`]) and the caches' figures
//! ([`CacheFigures`]). Plain types, shared by the thread caches and their loom stand-in
//! (`thread_caches_loom.rs`), so both present them alike; the arena's side, `CacheOwner`,
//! names each one's `ThreadCaches` and is declared with it.
// Under loom the caches are never built, so the models use none of this.
#![cfg_attr(loom, allow(dead_code))]

use std::panic::Location;

/// Outcome of a free through the thread cache.
pub(crate) enum FreeFast {
    /// The area sits in this thread's magazine.
    Cached { pages: u64, caller: Option<&'static Location<'static>> },
    /// The caller owns the area (its word is `cached`) and must free it through the busy map.
    Flush,
    /// Freed through the busy map already, past the magazine (a larger area in a crowd).
    Passed { pages: u64, caller: Option<&'static Location<'static>> },
    /// Not a small live area: the busy map decides.
    Untracked,
    /// A second free of a cached area.
    Refused,
}

/// A magazine's page budget: where it starts, and how far misses may grow it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    pub(crate) base_pages: u64,
    pub(crate) max_pages: u64,
    /// Pages all magazines of the arena may hold together (0: no such bound): each one's
    /// budget is at most this over the magazines registered ([`Budget::ceiling`]).
    pub(crate) total_pages: u64,
    /// A cached area at most this share (percent) larger than a request may serve it whole
    /// when the request's own size has none (`lazy_slack_percent`).
    pub(crate) slack_percent: u64,
    /// Keep what full magazines spill in the depot for magazines that miss (`depot.rs`;
    /// `thread_cache_depot`), instead of freeing it through the busy map at once.
    pub(crate) depot: bool,
}

/// The smallest budget [`Budget::ceiling`] gives a magazine, however many threads share the
/// total: two entries of a 1-page area, one of a 4-page area (the per-CPU stacks hold sizes of
/// up to 8 pages beside it).
pub(crate) const MAGAZINE_MIN_PAGES: u64 = 8;

/// Sizes of the per-CPU stacks with fixed caps, 1 to this many pages (`cpu_cache.rs`; here so
/// that the hit paths, which a loom build compiles without the stacks, can name it).
pub(crate) const CPU_FIXED_SIZES: u64 = 8;

impl Budget {
    /// The most a magazine's budget may be while `magazines` are registered: the total shared
    /// out equally, within [`MAGAZINE_MIN_PAGES`] and `max_pages`.
    pub(crate) fn ceiling(&self, magazines: u64) -> u64 {
        if self.total_pages == 0 {
            return self.max_pages;
        }
        (self.total_pages / magazines.max(1)).clamp(MAGAZINE_MIN_PAGES.min(self.max_pages), self.max_pages)
    }
}

/// Counters of the thread caches of one arena.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CacheFigures {
    pub(crate) areas: u64,
    pub(crate) pages: u64,
    pub(crate) hits: u64,
    /// Hits served by the per-CPU stacks (counted in `hits` too).
    pub(crate) cpu_hits: u64,
    /// Hits served by a larger cached area within the slack (counted in `hits` too).
    pub(crate) slack_hits: u64,
    pub(crate) misses: u64,
    pub(crate) pushes: u64,
    pub(crate) flushes: u64,
    pub(crate) drained: u64,
    pub(crate) grows: u64,
    /// Times an owner emptied its magazine because more threads had come to share the total.
    pub(crate) sheds: u64,
    /// The largest budget of a live magazine now.
    pub(crate) budget_pages: u64,
    /// Pages in the depot now (counted in `pages` too).
    pub(crate) depot_pages: u64,
    /// Areas spills put in the depot, and misses took back from it.
    pub(crate) depot_puts: u64,
    pub(crate) depot_takes: u64,
    /// Of `cpu_hits`, those of the grown stacks; and the pages those hold now.
    pub(crate) cpu_grown_hits: u64,
    pub(crate) cpu_grown_pages: u64,
}
