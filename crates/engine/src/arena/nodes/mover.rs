//! Step Move (Nodes): an area carved from the free tree, and the growth of a lazy run (step
//! Extend), take the resident memory of the oldest lazy areas instead of faulting in fresh
//! pages, and the mappings those moves split are healed once their ranges are free again.
//!
//! A large area freed between live ones often cannot be reused in place: the next requests are
//! larger than the gaps (docs/bench-log/design-notes.md, section 11). Its memory can still serve
//! them. The backing moves the page-table entries (`mremap`), which costs a small fraction of
//! faulting the same pages in fresh, and the donors' ranges go to the free tree as a purge would
//! send them, with their memory already gone. The purge would have released exactly these areas
//! next: donors are taken oldest first, as its threshold purge takes them.
//!
//! Owns nothing: the record of split mappings is the context's
//! [`Mosaics`](super::super::mosaics::Mosaics).
//!
//! Locks: each node's lock in turn, to take donors off its lazy list (site `alloc: move`),
//! never two at once; the free lock to merge the donors (`purge: merge`, `purge: spill`) and,
//! in the purge, to take healed ranges out of the tree (`purge: heal`).
//!
//! Invariants: a donor (a whole lazy area, or the front of one split so that the rest stays
//! lazy with its guard) is off its node's lazy list before its memory moves, so no other
//! thread can reuse it meanwhile; the new area is owned by the allocating thread until it
//! returns. Every range a move created a mapping in lies inside an area recorded in
//! [`Mosaics`] until a purge finds that area's whole range free and heals it; moves stop while
//! the mappings they added pass [`move_max_maps`].

use super::Nodes;
use crate::arena::backing::Moved;
use crate::arena::context::Context;
use crate::arena::mosaics::{move_max_maps, MOVE_MAX_DONORS, MOVE_MIN_PAGES};
use crate::arena::nodes::node::{LazyArea, NodeState};
use crate::arena::release::{claim_spill, merge_batch, merge_into_tree};
use crate::arena::site;
use crate::arena::strategy_ops::StrategyOps;
use crate::sync::Ordering::Relaxed;
use vmarena_core::Span;

/// A range whose memory moves into the new area.
#[derive(Clone, Copy, Debug)]
struct Donor {
    start: u64,
    /// Pages taken off the lazy list: the whole area (guard included) or the front of one.
    pages: u64,
    /// Data pages moved (the whole area less its guard, or the whole front).
    data: u64,
    whole: bool,
}

impl Nodes {
    /// Step Move for `data` pages at `start` that an area node `me` is handing out took fresh
    /// from the free tree (no lock held): the data pages of an area carved from the tree, or
    /// the growth of a lazy run (step Extend). Fills them, front first, with the memory of the
    /// oldest reusable lazy areas of this node, then of the others. Returns the pages moved in.
    pub(super) fn move_into(&self, ctx: &Context, me: usize, start: u64, data: u64) -> u64 {
        let guard = ctx.backing.guard_pages();
        if data < MOVE_MIN_PAGES || ctx.moves.mosaics.maps() >= move_max_maps() {
            return 0;
        }
        let mut need = data;
        let mut donors: Vec<Donor> = Vec::new();
        for k in 0..ctx.nr_nodes {
            if need < MOVE_MIN_PAGES || donors.len() >= MOVE_MAX_DONORS {
                break;
            }
            let i = (me + k) % ctx.nr_nodes;
            // A node whose lazy list cannot hold one donor is passed over without its lock.
            if ctx.lazy.list_pages[i].load(Relaxed) < MOVE_MIN_PAGES + guard {
                continue;
            }
            let mut g = self.nodes[i].lock_at(&site::ALLOC_MOVE);
            Self::take_donors(&mut g, guard, &mut need, &mut donors);
            ctx.sync_node(&mut g, false);
        }
        if donors.is_empty() {
            return 0;
        }
        let mut to = start;
        let moves: Vec<(u64, u64, u64)> = donors
            .iter()
            .map(|d| {
                let m = (d.start, to, d.data);
                to += d.data;
                m
            })
            .collect();
        let done = ctx.backing.move_pages(&moves);
        let (mut moved, mut maps, mut failed) = (0, 0, 0);
        let (mut whole, mut fronts) = (Vec::new(), Vec::new());
        let (mut keep_whole, mut keep_fronts) = (Vec::new(), Vec::new());
        for (d, how) in donors.iter().zip(done) {
            let range = Span::new(d.start, d.pages);
            if how != Moved::No {
                moved += d.data;
                // A remapped range is a mapping of its own, and splits the one it left.
                if how == Moved::Remapped {
                    maps += 2;
                }
            } else {
                failed += 1;
                if d.whole {
                    keep_whole.push(range)
                } else {
                    keep_fronts.push(range)
                }
            }
            if d.whole {
                whole.push(range)
            } else {
                fronts.push(range)
            }
        }
        // The donors go to the tree as a purge would send them: what did not move is released,
        // with the free pages sharing a huge page with a donor's ends; guards are retired.
        let all: Vec<Span> = whole.iter().chain(&fronts).copied().collect();
        let spill = claim_spill(ctx, self, &all);
        let mut calls = moves.len() as u64;
        calls += ctx.backing.release(&keep_whole) as u64;
        calls += ctx.backing.release_free(&keep_fronts) as u64;
        if !spill.is_empty() {
            calls += ctx.backing.release_free(&spill) as u64;
        }
        calls += merge_batch(ctx, self, &whole, &fronts, &spill);
        if maps > 0 {
            ctx.moves.mosaics.add(start, data, maps);
        }
        let c = &ctx.counters;
        c.page_moves.fetch_add(moves.len() as u64, Relaxed);
        c.moved_pages.fetch_add(moved, Relaxed);
        c.move_failures.fetch_add(failed, Relaxed);
        c.release_calls.fetch_add(calls - moves.len() as u64, Relaxed);
        moved
    }

    /// Take donors off a node's lazy list (locked), oldest first, until `need` data pages are
    /// covered: whole areas that fit, then the front of the next larger one (its rest stays
    /// lazy, in its place, with its guard).
    fn take_donors(g: &mut NodeState, guard: u64, need: &mut u64, donors: &mut Vec<Donor>) {
        g.lazy_list.retain_mut(|l| {
            if *need < MOVE_MIN_PAGES || donors.len() >= MOVE_MAX_DONORS || !l.reusable {
                return true;
            }
            let data = l.pages.saturating_sub(guard);
            if data < MOVE_MIN_PAGES {
                return true;
            }
            if data <= *need {
                donors.push(Donor { start: l.start, pages: l.pages, data, whole: true });
                *need -= data;
                return false;
            }
            let front = *need;
            donors.push(Donor { start: l.start, pages: front, data: front, whole: false });
            *l = LazyArea { start: l.start + front, pages: l.pages - front, reusable: true };
            *need = 0;
            true
        });
    }

    /// Heal every recorded area whose whole range is free now (under the purge mutex): take it
    /// out of the tree, map it afresh, merge it back. Recorded areas may overlap (a range freed
    /// and carved again took moves twice): overlapping ones are healed together or not at all.
    /// Returns the syscalls made.
    pub(super) fn heal(&self, ctx: &Context) -> u64 {
        let mut areas =
            std::mem::take(&mut *ctx.moves.mosaics.areas.lock().unwrap_or_else(|e| e.into_inner()));
        if areas.is_empty() {
            return 0;
        }
        areas.sort_unstable();
        // Clusters of overlapping areas: (first index, end index, start, end).
        let mut clusters: Vec<(usize, usize, u64, u64)> = Vec::new();
        for (i, &(s, pages, _)) in areas.iter().enumerate() {
            match clusters.last_mut() {
                Some(c) if s < c.3 => {
                    c.1 = i + 1;
                    c.3 = c.3.max(s + pages);
                }
                _ => clusters.push((i, i + 1, s, s + pages)),
            }
        }
        let mut healed: Vec<Span> = Vec::new();
        let mut keep: Vec<(u64, u64, u64)> = Vec::new();
        let mut maps = 0;
        // A free cluster is healed with the whole free range around it: a range healed earlier
        // next to one still split could not merge then, and may have taken a memory
        // descriptor of its own since (a fault in it), which it would keep for good.
        self.with_free_tree(&site::PURGE_HEAL, |t| {
            let mut healed_end = 0;
            for &(from, to, s, e) in &clusters {
                let cluster_maps = areas[from..to].iter().map(|a| a.2).sum::<u64>();
                if s >= healed_end && t.take(s, e).is_ok() {
                    let (below, above) = t.free_around(s, e);
                    if below > 0 {
                        t.take(s - below, s).expect("free range below a healed one");
                    }
                    if above > 0 {
                        t.take(e, e + above).expect("free range above a healed one");
                    }
                    healed.push(Span::of_range(s - below, e + above));
                    healed_end = e + above;
                    maps += cluster_maps;
                } else if e <= healed_end {
                    maps += cluster_maps;
                } else {
                    keep.extend_from_slice(&areas[from..to]);
                }
            }
        });
        ctx.moves.mosaics.areas.lock().unwrap_or_else(|e| e.into_inner()).extend(keep);
        if healed.is_empty() {
            return 0;
        }
        let calls = ctx.backing.heal(&healed) as u64;
        merge_into_tree(ctx, self, &healed);
        ctx.moves.mosaics.maps.fetch_sub(maps, Relaxed);
        ctx.counters.heals.fetch_add(healed.len() as u64, Relaxed);
        calls
    }
}
