//! Congruent areas: the kernel's `pcpu_get_vm_areas`, which the per-CPU allocator uses to get
//! one chunk per group at the same offsets from a common base.
//!
//! Owns nothing of its own: it searches the arena's free tree under the free lock
//! ([`FreeTree::find_congruent`], lowest base first), takes every part out of the tree under
//! that one hold (all or nothing), then, with the free lock released, enters each part in the
//! busy map as an area of its own (Nodes: under its shard's lock, one at a time).
//! The parts are fresh pages from the tree; when nothing fits, the lazily freed areas and the
//! pools go back to the tree by full purges and the search runs again, as an allocation's last
//! step does. Each part is freed like any other area ([`Arena::free`]).

use super::shared::Shared;
use super::strategy_ops::StrategyOps;
use super::strategy_state::with_strategy;
use crate::area::{AreaTag, PurgeKind};
use crate::arena::site;
use crate::arena::Arena;
use crate::error::AllocError;
use crate::sync::Ordering::Relaxed;
use vmarena_core::{FreeTree, Request, RequestError, Span};

/// Full purges a congruent allocation tries, while they make progress, before it fails.
const FULL_PURGE_RETRIES: usize = 3;

impl Arena {
    /// Allocate congruent areas: `parts[i]` at `parts[i].start` pages from one base that is a
    /// multiple of `align_pages` (a power of two), the lowest base in the arena at which every
    /// part lies in free space; all parts or none. Each part becomes an area of its own, with
    /// `tag`, freed with [`Arena::free`]. Returns the base. Refused, with nothing changed, when
    /// `parts` is empty, a part is empty, the alignment is not a power of two or two parts
    /// overlap.
    pub fn alloc_congruent(&self, parts: &[Span], align_pages: u64, tag: AreaTag) -> Result<u64, AllocError> {
        if parts.is_empty() || parts.iter().any(|p| p.pages == 0) {
            return Err(AllocError::Invalid(RequestError::ZeroSize));
        }
        if !align_pages.is_power_of_two() {
            return Err(AllocError::Invalid(RequestError::BadAlignment));
        }
        let mut sorted = parts.to_vec();
        sorted.sort_unstable();
        for w in sorted.windows(2) {
            if w[0].start.checked_add(w[0].pages).map_or(true, |end| end > w[1].start) {
                return Err(AllocError::PartsOverlap { offset_pages: w[1].start });
            }
        }
        let sh = &*self.shared;
        if let Some(base) = sh.try_congruent(parts, align_pages, tag) {
            return Ok(base);
        }
        // Step Grow, for the whole span of the parts at the alignment.
        let span = sorted.last().map_or(1, |p| p.start.saturating_add(p.pages));
        if let Ok(r) = Request::new(span, align_pages, sh.ctx.lo, sh.ctx.hi) {
            for _ in 0..super::alloc::GROW_RETRIES {
                if !sh.grow(&r) {
                    break;
                }
                if let Some(base) = sh.try_congruent(parts, align_pages, tag) {
                    return Ok(base);
                }
            }
        }
        for _ in 0..FULL_PURGE_RETRIES {
            let progress = sh.purge(PurgeKind::Full).areas_to_tree > 0;
            if let Some(base) = sh.try_congruent(parts, align_pages, tag) {
                return Ok(base);
            }
            if !progress {
                break;
            }
        }
        sh.ctx.counters.alloc_failures.fetch_add(1, Relaxed);
        let (free_pages, largest_free) = sh.free_summary();
        let st = sh.stats();
        let span = sorted.last().map_or(0, |p| p.start.saturating_add(p.pages));
        Err(AllocError::NoSpace {
            live_pages: st.live_pages,
            lazy_pages: st.lazy_pages,
            arena: sh.ctx.name.clone(),
            pages: span,
            align_pages,
            window: (sh.ctx.lo, sh.ctx.hi),
            free_pages,
            largest_free,
        })
    }
}

impl Shared {
    /// One search and, when it finds a base, the parts taken and entered in the busy map.
    fn try_congruent(&self, parts: &[Span], align_pages: u64, tag: AreaTag) -> Option<u64> {
        let take = |f: &mut FreeTree| -> Option<u64> {
            let base = f.find_congruent(parts, align_pages, self.ctx.lo, self.ctx.hi)?;
            for p in parts {
                f.take(base + p.start, base + p.end()).expect("the search found every part free");
            }
            Some(base)
        };
        let base = with_strategy!(&self.state, s => s.with_free_tree(&site::ALLOC_FREE_TREE, take))?;
        let placed: Vec<Span> = parts.iter().map(|p| Span::new(base + p.start, p.pages)).collect();
        with_strategy!(&self.state, s => s.insert_parts(&self.ctx, &placed, tag));
        for p in &placed {
            self.ctx.counters.tree_allocs.fetch_add(1, Relaxed);
            self.ctx.counters.tree_pages.fetch_add(p.pages, Relaxed);
            self.ctx.backing.prepare(p.start, p.pages);
        }
        Some(base)
    }
}
