//! Growth in place (Nodes): a live area above the pools grows into the range right after it,
//! when that range is the front of a lazy area of the shared lazy list or free space of the
//! tree, so a resize keeps its address and neither copies nor moves a page.
//!
//! Owns nothing: the area's busy record is its shard's, the lazy area node 0's (areas above
//! the pools are freed through node 0, `shared_lazy`), the free range the tree's.
//!
//! Locks: node 0, then the area's shard node when it is another (index order), then the free
//! lock when the lazy list has nothing after the area (the one lock order,
//! sync/lock_rank.rs). All are held from the lookup of the record until it is entered again
//! with its new size, so no thread sees the range both free and part of the area, and the
//! area's free (by a caller that does not own it, a bug) finds either size, whole.
//!
//! Guards: the area's old guard lies inside the grown area; it is retired after the locks are
//! dropped, and the new end gets its guard unless a whole lazy area was taken (its guard is
//! already there). Until then only the area's owner, inside its resize, can reach those pages.

use super::Nodes;
use crate::area::AreaKind;
use crate::arena::context::Context;
use crate::arena::nodes::node::NodeState;
use crate::arena::site;
use crate::sync::Ordering::Relaxed;
use vmarena_core::{BusyArea, Span};

impl Nodes {
    /// Grow the live area at `start` to `new_pages` pages (guard included) in place: true when
    /// it now has them (at least `new_pages`: a lazy area within the slack is taken whole).
    /// False, with nothing changed, for an area that is not live, is a pool size or has a
    /// state word (a thread cache may hold its size), or when the pages after it are not free.
    /// The grown record's requested size becomes `requested_bytes`.
    pub(super) fn grow_area(&self, ctx: &Context, start: u64, new_pages: u64, requested_bytes: u64) -> bool {
        if !ctx.opts.shared_lazy || ctx.poolable(new_pages) {
            return false;
        }
        let shard = ctx.shard_of(start);
        let mut lazy_g = self.nodes[0].lock_at(&site::ALLOC_RESIZE);
        let mut shard_g = (shard != 0).then(|| self.nodes[shard].lock_at(&site::ALLOC_RESIZE));
        let Some(&area) = shard_g.as_deref().unwrap_or(&lazy_g).busy.get(start) else {
            return false;
        };
        let tracked = ctx.cache.as_ref().is_some_and(|c| c.states.tracks(area.pages, area.tag.kind));
        if area.tag.kind != AreaKind::Vmalloc
            || area.pages >= new_pages
            || ctx.poolable(area.pages)
            || tracked
            || area.node != 0
        {
            return false;
        }
        let end = start + area.pages;
        let need = new_pages - area.pages;
        let Some((taken, guarded)) = Self::take_after(ctx, &mut lazy_g, self, end, need) else {
            return false;
        };
        let mut grown = BusyArea { pages: area.pages + taken, ..area };
        grown.tag.requested_bytes = requested_bytes;
        let g: &mut NodeState = match shard_g.as_deref_mut() {
            Some(g) => g,
            None => &mut lazy_g,
        };
        let old = g.busy.remove(start);
        debug_assert_eq!(old.map(|a| a.pages), Some(area.pages), "the record looked up above");
        let ok = g.busy.insert(start, grown);
        debug_assert!(ok, "the record was removed above");
        ctx.sync_node(g, false);
        if shard != 0 {
            ctx.sync_node(&mut lazy_g, false);
        }
        drop(shard_g);
        drop(lazy_g);
        // The old guard is data now; the new end needs one unless the lazy area's came whole.
        ctx.backing.retire(&[Span::new(start, area.pages)]);
        if !guarded {
            ctx.backing.prepare(start, grown.pages);
        }
        let c = &ctx.counters;
        c.grown_in_place.fetch_add(1, Relaxed);
        c.grown_in_place_pages.fetch_add(taken, Relaxed);
        true
    }

    /// Take `need` pages that start at `end` off node 0's lazy list (locked in `lazy_g`; the
    /// whole lazy area when it is within the slack of `need`), else out of the free tree:
    /// the pages taken and whether their end already has a guard (a whole lazy area's), or
    /// `None` when neither holds them.
    fn take_after(
        ctx: &Context,
        lazy_g: &mut NodeState,
        nodes: &Nodes,
        end: u64,
        need: u64,
    ) -> Option<(u64, bool)> {
        if let Some(l) = lazy_g.lazy_list.reusable_at(end).filter(|l| l.pages >= need) {
            let whole = l.pages == need || nodes.within_slack(ctx, need, l.pages);
            if whole || ctx.opts.lazy_split {
                let take = if whole { l.pages } else { need };
                lazy_g.lazy_list.take_front(end, take);
                return Some((take, whole));
            }
        }
        let mut f = nodes.free.lock_at(&site::ALLOC_RESIZE);
        if f.free_around(end, end).1 < need {
            return None;
        }
        f.take(end, end + need).expect("free range after the area");
        Some((need, false))
    }
}
