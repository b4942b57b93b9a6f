//! The allocation ladder: the thread's cache, then passes over the strategy's steps with what
//! makes room between them (step Reclaim, full purges), then a failure that names the arena
//! and its limits.
//!
//! Owns nothing: one pass is the strategy's `try_alloc` (global.rs, split.rs, nodes/) under its
//! own locks; the retries take the purge mutex through the purge, which carves the request
//! from the free tree in its last merge's hold of the tree lock. The order of the steps is
//! [`Step`]'s.

use super::shared::Shared;
use super::strategy_ops::StrategyOps;
use super::strategy_state::with_strategy;
use super::Arena;
use crate::area::{AllocRequest, Allocation, AreaKind, PurgeKind, Step};
use crate::error::AllocError;
use crate::sync::Ordering::Relaxed;
use std::panic::Location;
use vmarena_core::Request;

/// Most possible starts for which a failed allocation tries step Reclaim before a full purge.
const RECLAIM_MAX_STARTS: usize = 16;

/// Growths an allocation tries (step Grow) before the purges: one is enough unless other
/// threads take the new pages first.
pub(crate) const GROW_RETRIES: usize = 4;

/// Full purges an allocation tries, while they make progress, before it fails.
const FULL_PURGE_RETRIES: usize = 4;

/// What a failed pass tries before the next one, in order: step Reclaim once, then full
/// purges while they give something back. Other threads may take the space a purge gave back
/// before this thread's next pass, hence more than one.
const RETRIES: [Step; 1 + FULL_PURGE_RETRIES] =
    [Step::Reclaim, Step::FullPurge, Step::FullPurge, Step::FullPurge, Step::FullPurge];

impl Shared {
    /// Step Grow: make the next step of the range usable (at least what `r` needs, at its worst
    /// alignment; half the usable part when that is more, so that growths stay few) and merge
    /// it into the free tree. Under the purge mutex, with no other lock held on entry. False
    /// when the backing does not grow, the range is all usable, or the backing refused even
    /// what `r` needs.
    pub(crate) fn grow(&self, r: &Request) -> bool {
        let Some(step) = self.ctx.grow_step else {
            return false;
        };
        let _serial = self.ctx.purging.lock.lock().unwrap_or_else(|e| e.into_inner());
        let at = self.ctx.grown_hi.load(Relaxed);
        if at >= self.ctx.hi {
            return false;
        }
        // What `r` needs at its worst alignment, less the free pages already at the top, which
        // the growth merges with.
        let free_top = with_strategy!(&self.state, s => s.with_free_tree(&crate::arena::site::ALLOC_GROW, |t| t.free_around(at, at).0));
        let need =
            r.size_pages.saturating_add(r.align_pages.saturating_sub(1)).saturating_sub(free_top).max(1);
        let want = need.max(step).max((at - self.ctx.lo) / 2).div_ceil(step).saturating_mul(step);
        let mut end = at.saturating_add(want).min(self.ctx.hi);
        let grow = |end: u64| {
            self.ctx.cache.as_ref().map_or(true, |c| c.commit(end - self.ctx.lo))
                && self.ctx.backing.grow(at, end - at)
        };
        if !grow(end) {
            let least = at.saturating_add(need).min(self.ctx.hi);
            if least >= end || !grow(least) {
                return false;
            }
            end = least;
        }
        let merged = with_strategy!(&self.state, s => s.with_free_tree(&crate::arena::site::ALLOC_GROW, |t| t.insert_merge(at, end)));
        debug_assert!(merged.is_ok(), "grown pages [{at:#x}, {end:#x}) overlap the free tree");
        self.ctx.grown_hi.store(end, Relaxed);
        self.ctx.counters.grows.fetch_add(1, Relaxed);
        self.ctx.counters.grown_pages.fetch_add(end - at, Relaxed);
        true
    }

    /// The reverse of step Grow, after a full purge (under the purge mutex): where the free
    /// range at the top of the usable part spans at least two growth steps, all of it but one
    /// step (and never the first step of the range) is taken out of the free tree and given
    /// back to the backing, and the usable part ends there. Returns the pages given back.
    pub(crate) fn shrink_usable(&self) -> u64 {
        let Some(step) = self.ctx.grow_step else {
            return 0;
        };
        let top = self.ctx.grown_hi.load(Relaxed);
        let site = &crate::arena::site::PURGE_MERGE;
        let free_top =
            with_strategy!(&self.state, s => s.with_free_tree(site, |t| t.free_around(top, top).0));
        if free_top < 2 * step {
            return 0;
        }
        // Keep one step free above the highest page in use, on a step boundary.
        let used_end = top - free_top;
        let new_top = (self.ctx.lo + (used_end - self.ctx.lo + step).div_ceil(step) * step)
            .clamp(self.ctx.lo + step, top);
        if new_top >= top {
            return 0;
        }
        let taken = with_strategy!(&self.state, s => s.with_free_tree(site, |t| t.take(new_top, top)));
        if taken.is_err() {
            return 0;
        }
        if !self.ctx.backing.shrink(new_top, top - new_top) {
            let back =
                with_strategy!(&self.state, s => s.with_free_tree(site, |t| t.insert_merge(new_top, top)));
            debug_assert!(back.is_ok());
            return 0;
        }
        self.ctx.grown_hi.store(new_top, Relaxed);
        self.ctx.counters.shrinks.fetch_add(1, Relaxed);
        self.ctx.counters.shrunk_pages.fetch_add(top - new_top, Relaxed);
        top - new_top
    }

    /// One pass over the strategy's steps.
    #[inline(always)]
    fn try_alloc(&self, r: &Request, req: &AllocRequest, default_window: bool) -> Option<Allocation> {
        with_strategy!(&self.state, s => s.try_alloc(&self.ctx, r, req, default_window))
    }
}

impl Arena {
    /// Allocate an area. See [`Step`] for the order in which sources are tried; before them,
    /// a small request anywhere in the arena (of any power-of-two alignment) is served from the
    /// thread's cache.
    pub fn alloc(&self, req: &AllocRequest) -> Result<Allocation, AllocError> {
        if req.window.is_none() && req.is_plain() && req.tag.kind == AreaKind::Vmalloc {
            let hit = if req.align_pages == 1 {
                self.alloc_cached_fit(req.pages, req.tag.caller)
            } else {
                self.alloc_cached_aligned(req.pages, req.align_pages, req.tag.caller).map(|s| (s, req.pages))
            };
            if let Some((start, pages)) = hit {
                return Ok(Allocation { start, pages, fresh: false });
            }
        }
        self.alloc_uncached(req)
    }

    /// Allocate an area through the steps of [`Step`] only, without the thread's cache (for a
    /// caller that tried [`Arena::alloc_cached`] already).
    pub fn alloc_uncached(&self, req: &AllocRequest) -> Result<Allocation, AllocError> {
        let sh = &*self.shared;
        let (lo, hi) = req.window.unwrap_or((sh.ctx.lo, sh.ctx.hi));
        if lo < sh.ctx.lo || hi > sh.ctx.hi {
            return Err(AllocError::OutOfRange { window: (lo, hi), arena: (sh.ctx.lo, sh.ctx.hi) });
        }
        let r = Request::constrained(req.pages, req.align_pages, req.phase_pages, req.nocross_pages, lo, hi)
            .map_err(AllocError::Invalid)?;
        let default_window = (lo, hi) == (sh.ctx.lo, sh.ctx.hi) && req.is_plain();
        // A window with no suitably aligned start at all (align_shift's large alignments): no
        // purge can make room, so the request is refused before any search or purge.
        if r.candidate_in(lo, hi).is_none() {
            sh.ctx.counters.alloc_failures.fetch_add(1, Relaxed);
            return Err(AllocError::NoAlignedStart {
                pages: req.pages,
                align_pages: req.align_pages,
                window: (lo, hi),
            });
        }
        if let Some(a) = sh.try_alloc(&r, req, default_window) {
            return Ok(a);
        }
        if req.nonblocking {
            return Err(AllocError::WouldBlock);
        }
        // Step Grow: while the backing makes more of the range usable, the steps again.
        for _ in 0..GROW_RETRIES {
            if !sh.grow(&r) {
                break;
            }
            if let Some(a) = sh.try_alloc(&r, req, default_window) {
                return Ok(a);
            }
        }
        for step in RETRIES {
            let progress = match step {
                // A request with few possible starts (a large alignment) gets back only what
                // lies over them; with more, or when that gave nothing back, on to the purges.
                Step::Reclaim => match r.start_ranges(lo, hi, RECLAIM_MAX_STARTS) {
                    Some(ranges) => with_strategy!(&sh.state, s => s.reclaim_ranges(&sh.ctx, &ranges)) > 0,
                    None => false,
                },
                // Every lazy area released, every pool and chunk back in the tree, and this
                // request carved from the tree before any other thread can take what came back.
                _ => {
                    let (report, got) = sh.purge_claiming(PurgeKind::Full, Some((&r, req.tag)));
                    if let Some(a) = got {
                        return Ok(a);
                    }
                    report.areas_to_tree > 0
                }
            };
            if step == Step::Reclaim && !progress {
                continue;
            }
            if let Some(a) = sh.try_alloc(&r, req, default_window) {
                return Ok(a);
            }
            if !progress {
                break;
            }
        }
        sh.ctx.counters.alloc_failures.fetch_add(1, Relaxed);
        let (free_pages, largest_free) = sh.free_summary();
        let st = sh.stats();
        Err(AllocError::NoSpace {
            live_pages: st.live_pages,
            lazy_pages: st.lazy_pages,
            arena: sh.ctx.name.clone(),
            pages: req.pages,
            align_pages: req.align_pages,
            window: (lo, hi),
            free_pages,
            largest_free,
        })
    }

    /// Allocate `pages` pages (page aligned, anywhere, contents undefined) of the space's own
    /// memory from this thread's cache only: no lock, no syscall, no allocation but the
    /// thread's first (which registers its magazine). `None` on a miss or when the arena has no
    /// thread caches.
    #[inline]
    pub fn alloc_cached(&self, pages: u64, caller: Option<&'static Location<'static>>) -> Option<u64> {
        self.alloc_cached_aligned(pages, 1, caller)
    }

    /// [`Arena::alloc_cached`] for a start that is a multiple of `align_pages` (a power of
    /// two): the newest cached area of that size that happens to be aligned.
    #[inline]
    pub fn alloc_cached_aligned(
        &self,
        pages: u64,
        align_pages: u64,
        caller: Option<&'static Location<'static>>,
    ) -> Option<u64> {
        let c = self.shared.ctx.cache.as_ref()?;
        if pages == 0 || !align_pages.is_power_of_two() || !c.states.tracks(pages, AreaKind::Vmalloc) {
            return None;
        }
        c.alloc(&self.shared, pages, align_pages, caller)
    }

    /// [`Arena::alloc_cached`], where a cached area at most `lazy_slack_percent` larger serves
    /// the request whole when its own size has none: `(start, the area's pages)`. The area
    /// keeps its size (its guard page follows it, and its free returns it whole).
    #[inline]
    pub fn alloc_cached_fit(
        &self,
        pages: u64,
        caller: Option<&'static Location<'static>>,
    ) -> Option<(u64, u64)> {
        let c = self.shared.ctx.cache.as_ref()?;
        if pages == 0 || !c.states.tracks(pages, AreaKind::Vmalloc) {
            return None;
        }
        c.alloc_fit(&self.shared, pages, caller)
    }

    /// A plain thread-cache hit for callers whose fast path must make no call (the C ABI):
    /// an area of `pages` pages from this thread's cache, or `None` with nothing changed and
    /// nothing counted (call [`Arena::alloc_cached`] or [`Arena::alloc`] then).
    #[inline(always)]
    pub fn alloc_hit(&self, pages: u64, caller: Option<&'static Location<'static>>) -> Option<u64> {
        self.shared.ctx.cache.as_ref()?.alloc_hit(pages, caller)
    }
}
