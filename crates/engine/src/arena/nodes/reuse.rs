//! The Nodes steps that reuse resident freed memory: Pool and LazyReuse on the allocating node,
//! Steal from the other nodes, and Extend (a run of lazy areas grown into the free space
//! around it).
//!
//! Owns nothing: each step works on a node's pools and lazy list under that node's lock (one
//! node lock at a time), Extend also on the free tree under the free lock, never both at once.

use super::Nodes;
use crate::area::{Allocation, AreaTag};
use crate::arena::context::Context;
use crate::arena::nodes::node::NodeState;
use crate::arena::site;
use crate::sync::lock::StatGuard;
use crate::sync::Ordering::Relaxed;
use vmarena_core::{BusyArea, LazyArea, PoolSide, Request, Span};

/// Lazy runs (the largest) an allocation tries to grow into the free space around them (step
/// Extend).
const EXTEND_TRIES: usize = 3;

/// Within `lazy_slack_pages`, a lazy area may be handed out whole when it is at most this many
/// times the request larger (three times the request in all).
const SMALL_SLACK_FACTOR: u64 = 2;

/// An area a node handed out from its pool or lazy list (see [`Nodes::node_take`]).
pub(super) struct Taken {
    pub(super) start: u64,
    /// The request's pages, or the whole lazy area's within the slack.
    pub(super) pages: u64,
    /// The memory reads as zero (a clean pool entry).
    pub(super) fresh: bool,
    /// The area is the front of a larger lazy area and needs its guard prepared.
    pub(super) split: bool,
}

impl Nodes {
    /// Step Steal: the other nodes in turn (one node lock at a time, none held on entry), each
    /// asked for a resident area (a dirty pool entry, or a lazy area alone, split or joined).
    pub(super) fn node_steal(
        &self,
        ctx: &Context,
        r: &Request,
        me: usize,
        area: BusyArea<AreaTag>,
    ) -> Option<Allocation> {
        for k in 1..ctx.nr_nodes {
            let other = (me + k) % ctx.nr_nodes;
            let mut o = self.nodes[other].lock_at(&site::ALLOC_STEAL);
            let Some(t) = self.node_take(ctx, &mut o, r, false, false, true) else {
                continue;
            };
            o.steals += 1;
            let area = BusyArea { pages: t.pages, ..area };
            self.finish_take(ctx, o, other, t.start, area, t.split);
            return Some(Allocation { start: t.start, pages: t.pages, fresh: t.fresh });
        }
        None
    }

    /// Record an area that node `locked` (held in `g`) handed out from resident memory: into
    /// its busy shard (under `g` when `locked` is the shard), then, with no lock held, retire
    /// the guards a join or an extension left inside the area's data and prepare the guard of
    /// a split front or of an area that grew up.
    #[inline]
    pub(super) fn finish_take(
        &self,
        ctx: &Context,
        mut g: StatGuard<'_, NodeState>,
        locked: usize,
        start: u64,
        area: BusyArea<AreaTag>,
        split: bool,
    ) {
        let joined = std::mem::take(&mut g.joined_guards);
        if ctx.shard_of(start) == locked {
            let ok = g.busy.insert(start, area);
            debug_assert!(ok, "a node handed out a live start");
            self.track(ctx, start, &area);
            ctx.sync_node(&mut g, false);
            drop(g);
        } else {
            drop(g);
            self.insert_busy(ctx, start, area);
        }
        if !joined.is_empty() {
            ctx.backing.retire(&joined);
        }
        if split {
            ctx.backing.prepare(start, area.pages);
        }
    }

    /// Steps Pool and LazyReuse on the locked node.
    #[inline]
    pub(super) fn node_take(
        &self,
        ctx: &Context,
        g: &mut NodeState,
        r: &Request,
        prefer_fresh: bool,
        zeroes: bool,
        resident_only: bool,
    ) -> Option<Taken> {
        let pages = r.size_pages;
        if ctx.poolable(pages) {
            let got = if resident_only {
                g.pools.pop_dirty(pages, r.align_pages).map(|s| (s, PoolSide::Dirty))
            } else {
                let prefer = if prefer_fresh { PoolSide::Clean } else { PoolSide::Dirty };
                g.pools.pop(pages, r.align_pages, prefer)
            };
            return match got {
                Some((start, side)) => {
                    g.hits += 1;
                    if side == PoolSide::Dirty {
                        ctx.sync_node(g, false);
                    } else {
                        g.clean_hit_pages += pages;
                    }
                    Some(Taken { start, pages, fresh: side == PoolSide::Clean && zeroes, split: false })
                }
                None => {
                    // Another node's probe is not a miss of this node's pool.
                    if !resident_only {
                        g.misses += 1;
                    }
                    None
                }
            };
        }
        // A large area freed by this node and not purged yet: the smallest that fits. Its
        // pages are resident, so reuse saves the faults of fresh memory. An area within the
        // slack of the request is handed out whole; a larger one is split: the front is
        // handed out (the caller installs its new guard), the rest stays lazy and reusable
        // with the old guard at its end.
        let Some((fit, whole)) = g
            .lazy_list
            .best_fit_slot(pages, r.align_pages)
            .map(|f| (f, self.within_slack(ctx, pages, f.area.pages)))
            .filter(|&(_, whole)| whole || ctx.opts.lazy_split)
        else {
            return self.node_join(ctx, g, r);
        };
        let l = fit.area;
        let take = if whole { l.pages } else { pages };
        // The list keeps the order of the frees (a purge keeps the newest): the rest of a
        // split area takes the area's place.
        g.lazy_list.take_fit(fit, take);
        g.lazy_reuses += 1;
        g.slack_pages += take - pages;
        let split = l.pages > take;
        if split {
            g.lazy_splits += 1;
        }
        ctx.sync_node(g, false);
        Some(Taken { start: l.start, pages: take, fresh: false, split })
    }

    /// True when a lazy area of `area_pages` may serve a request of `pages` whole: it is that
    /// size, or at most `lazy_slack_percent` larger, or at most `lazy_slack_pages` and at most
    /// `SMALL_SLACK_FACTOR` times the request larger. Splitting it would install a guard page
    /// inside resident memory, which costs a TLB shootdown while other threads run
    /// (docs/bench-log/design-notes.md, sections 2 and 14).
    #[inline]
    pub(super) fn within_slack(&self, ctx: &Context, pages: u64, area_pages: u64) -> bool {
        if area_pages < pages {
            return false;
        }
        let extra = area_pages - pages;
        extra.saturating_mul(100) <= pages.saturating_mul(ctx.opts.lazy_slack_percent)
            || (extra <= ctx.opts.lazy_slack_pages && extra <= pages.saturating_mul(SMALL_SLACK_FACTOR))
    }

    /// No single lazy area fits: take a run of address-adjacent reusable lazy areas that does,
    /// the one with the smallest total. The areas before the last one are consumed whole; their
    /// guards (now inside the new area) are left in `g.joined_guards` for the caller to remove
    /// after it drops the lock; the rest of the last area stays lazy with its own guard.
    fn node_join(&self, ctx: &Context, g: &mut NodeState, r: &Request) -> Option<Taken> {
        let pages = r.size_pages;
        if !ctx.opts.lazy_split || g.lazy_list.len() < 2 {
            return None;
        }
        // From each aligned area, the areas that follow it without a gap until they cover the
        // request: the run with the fewest pages, the lowest start among equals.
        let lazy = &g.lazy_list;
        let mut best: Option<Span> = None;
        for first in lazy.reusable().filter(|a| a.start & (r.align_pages - 1) == 0) {
            let (mut total, mut members) = (first.pages, 1);
            while total < pages {
                let Some(next) = lazy.reusable_at(first.start + total) else { break };
                total += next.pages;
                members += 1;
            }
            if total >= pages
                && members >= 2
                && best.map_or(true, |b| (total, first.start) < (b.pages, b.start))
            {
                best = Some(Span::new(first.start, total));
            }
        }
        let Span { start, pages: total } = best?;
        let taken = lazy.run_from(start, start + total);
        let last = taken[taken.len() - 1];
        // The rest of the last area keeps that area's place in the list; the others leave it.
        for l in &taken[..taken.len() - 1] {
            g.lazy_list.take_front(l.start, l.pages);
        }
        // Within the slack, the last area goes whole too.
        let take = if self.within_slack(ctx, pages, total) { total } else { pages };
        g.lazy_list.take_front(last.start, start + take - last.start);
        g.joined_guards = taken[..taken.len() - 1].iter().map(LazyArea::span).collect();
        debug_assert!(last.start + last.pages == start + total);
        g.lazy_reuses += 1;
        g.lazy_joins += 1;
        g.slack_pages += take - pages;
        ctx.sync_node(g, false);
        Some(Taken { start, pages: take, fresh: false, split: total > take })
    }

    /// The runs step Extend tries for `pages` on node `g` (locked): the [`EXTEND_TRIES`] largest
    /// of [`Nodes::node_lazy_runs`].
    pub(super) fn extend_runs(g: &NodeState, pages: u64) -> Vec<(u64, u64)> {
        Self::node_lazy_runs(g, pages, EXTEND_TRIES)
    }

    /// Runs of address-adjacent reusable lazy areas of a node, each smaller than `pages`, as
    /// `[start, end)`: the `max` runs with the most pages, most first.
    fn node_lazy_runs(g: &NodeState, pages: u64, max: usize) -> Vec<(u64, u64)> {
        let lazy = &g.lazy_list;
        // Each run from its first area (none ends where it starts) to its end.
        let mut runs: Vec<(u64, u64)> = lazy
            .reusable()
            .filter(|a| !lazy.reusable_ends_at(a.start))
            .map(|a| {
                let mut end = a.start + a.pages;
                while let Some(next) = lazy.reusable_at(end) {
                    end += next.pages;
                }
                (a.start, end)
            })
            .filter(|&(s, e)| e - s < pages)
            .collect();
        runs.sort_unstable_by_key(|&(s, e)| (std::cmp::Reverse(e - s), s));
        runs.truncate(max);
        runs
    }

    /// Step Extend with no lock held on entry: the first of `runs` (lazy runs of node `me`,
    /// see [`Nodes::node_lazy_runs`]) that the free space touching it can grow to the request
    /// becomes the area, growing upward first. The free space is taken under the free lock;
    /// then, under the node lock, the run must still be on the lazy list whole (a purge or
    /// another thread of the node may have taken part of it meanwhile), else the free space
    /// goes back and the step fails.
    pub(super) fn node_extend(
        &self,
        ctx: &Context,
        me: usize,
        runs: &[(u64, u64)],
        area: BusyArea<AreaTag>,
    ) -> Option<Allocation> {
        let pages = area.pages;
        let (s, e, below, above) = {
            let mut f = self.free.lock_at(&site::ALLOC_FREE_TREE);
            runs.iter().find_map(|&(s, e)| {
                let extra = pages - (e - s);
                let (b, a) = f.free_around(s, e);
                if b + a < extra {
                    return None;
                }
                let above = a.min(extra);
                let below = extra - above;
                if below > 0 {
                    f.take(s - below, s).expect("free range touching the run");
                }
                if above > 0 {
                    f.take(e, e + above).expect("free range touching the run");
                }
                Some((s, e, below, above))
            })?
        };
        let mut g = self.nodes[me].lock_at(&site::ALLOC_NODE);
        let members = g.lazy_list.run_from(s, e);
        let covered: u64 = members.iter().map(|l| l.pages).sum();
        let whole = covered == e - s && members.iter().all(|l| l.start + l.pages <= e);
        if !whole {
            drop(g);
            let mut f = self.free.lock_at(&site::ALLOC_FREE_TREE);
            for (rs, re) in [(s - below, s), (e, e + above)] {
                if rs < re {
                    f.insert_merge(rs, re).expect("growth overlaps free space");
                }
            }
            return None;
        }
        // Guards inside the new area: every member's, and the last one's too when it grew up.
        let mut inside: Vec<Span> = Vec::with_capacity(members.len());
        for l in members {
            g.lazy_list.take_front(l.start, l.pages);
            if l.start + l.pages < e || above > 0 {
                inside.push(l.span());
            }
        }
        g.lazy_reuses += 1;
        g.lazy_extends += 1;
        ctx.counters.extend_pages.fetch_add(pages - (e - s), Relaxed);
        ctx.sync_node(&mut g, false);
        let start = s - below;
        g.joined_guards = inside;
        self.finish_take(ctx, g, me, start, area, above > 0);
        // Step Move for the growth: the oldest lazy memory instead of fresh pages, below the
        // run and above it (less the area's guard, which `finish_take` prepared).
        if ctx.moves.on {
            self.move_into(ctx, me, start, below);
            self.move_into(ctx, me, e, above.saturating_sub(ctx.backing.guard_pages()));
        }
        Some(Allocation { start, pages, fresh: false })
    }
}
