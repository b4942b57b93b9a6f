//! The Nodes part of a purge: pool decay, the lazy threshold with its headroom, the recently
//! freed pages a threshold purge keeps, and step Reclaim.
//!
//! Owns nothing: it works on each node under that node's lock, one node at a time, within the
//! purge that `arena/purge.rs` serialises with the purge mutex.

use super::Nodes;
use crate::area::PurgeKind;
use crate::arena::context::Context;
use crate::arena::nodes::node::{LazyArea, NodeState};
use crate::arena::release::{merge_batch, release_batch};
use crate::arena::site;
use crate::arena::strategy_ops::PurgeBatch;
use crate::sync::Ordering::Relaxed;
use vmarena_core::{PoolSide, Span};

impl Nodes {
    /// Detach what this purge takes from every node: decayed clean pool entries go to the
    /// tree; dirty entries and lazy areas (less what a threshold or decay purge keeps) are released and
    /// go to the tree (full purge) or back to their pools clean (refill); a full purge takes
    /// the chunks back too.
    pub(super) fn nodes_detach(&self, ctx: &Context, batch: &mut PurgeBatch) {
        let kind = batch.kind;
        let full = kind == PurgeKind::Full;
        let (num, den) = if full { (1, 1) } else { (ctx.opts.pool_decay_percent, 100) };
        let limit = self.next_lazy_limit(ctx, kind);
        // A threshold purge keeps this many of the most recently freed pages, shared among the
        // nodes in proportion to their lazy pages.
        let keep_total = match kind {
            PurgeKind::Threshold => limit * ctx.opts.purge_keep_percent / 100,
            _ => 0,
        };
        let total = ctx.lazy.approx.load(Relaxed).max(1) as u64;
        let keep_ticks = ctx.decay.keep_ticks();
        for (i, node) in self.nodes.iter().enumerate() {
            let mut p = node.lock_at(&site::PURGE_DETACH);
            let decayed = p.pools.decay(num, den);
            let node_lazy = p.lazy_pages();
            if kind == PurgeKind::Decay {
                // A tick: the newest tick's frees go to the front of the ring.
                p.freed_ticks.rotate_right(1);
                p.freed_ticks[0] = p.freed_since_tick;
            } else if kind != PurgeKind::Threshold {
                p.freed_ticks = Default::default();
            }
            let keep = match kind {
                PurgeKind::Threshold if keep_total > 0 && node_lazy > 0 => {
                    (keep_total as u128 * node_lazy as u128 / total.max(node_lazy) as u128) as u64
                }
                // What was freed in the last ticks may be asked for again: as many ticks as
                // the arena's decay keep (`arena/decay.rs`).
                PurgeKind::Decay => p.freed_ticks[..keep_ticks].iter().sum::<u64>().min(node_lazy),
                _ => 0,
            };
            // A node that freed nothing for a tick is idle.
            let idle = kind != PurgeKind::Threshold && (kind != PurgeKind::Decay || p.freed_since_tick == 0);
            if kind != PurgeKind::Threshold {
                p.freed_since_tick = 0;
            }
            // Pools and the lazy list give up the same share, oldest first.
            let pool_keep = (keep as u128 * p.pools.dirty_pages() as u128)
                .checked_div(node_lazy as u128)
                .unwrap_or(0) as u64;
            let dirty = p.pools.take_dirty_keeping(pool_keep);
            let lazy = Self::take_lazy_keeping(&mut p, keep - pool_keep);
            if idle {
                // Not while frees go on: the maps would shrink and grow again (a table of a
                // million areas rebuilt at every tick of a bulk free doubled its time).
                p.lazy_list.compact();
                p.busy.compact();
            }
            ctx.sync_node(&mut p, true);
            if full {
                // The failure path and the shrinker take the chunks back too.
                let (cs, ce) = std::mem::take(&mut p.chunk);
                if cs < ce {
                    batch.chunks.push(Span::of_range(cs, ce));
                }
            }
            drop(p);
            // Decayed areas are clean: their memory was released by an earlier purge.
            batch.to_tree.extend_from_slice(&decayed);
            batch.release.extend_from_slice(&dirty);
            batch.release.extend(lazy.iter().map(LazyArea::span));
            batch.to_tree.extend(lazy.iter().map(LazyArea::span));
            if full {
                batch.to_tree.extend_from_slice(&dirty);
            } else if !dirty.is_empty() {
                batch.refill.push((i, dirty));
            }
        }
    }

    /// The lazy threshold from this purge on (`LazyAccount::limit`). An explicit purge
    /// (`purge()`, the shrinker, a failure) starts a new high-water mark at the live pages of
    /// the moment; a threshold or decay purge keeps it (a decay tick in the middle of a bulk
    /// free would otherwise put the pages freed so far over the limit at once). An idle tick
    /// starts a new mark too (`Shared::idle_purge`).
    fn next_lazy_limit(&self, ctx: &Context, kind: PurgeKind) -> u64 {
        let headroom = ctx.opts.lazy_headroom;
        // The counters exact first: the frees that started this purge may not have folded.
        for node in self.nodes.iter() {
            ctx.sync_node(&mut node.lock_at(&site::PURGE_DETACH), true);
        }
        if headroom && !matches!(kind, PurgeKind::Threshold | PurgeKind::Decay) {
            ctx.lazy.restart_mark();
        }
        ctx.lazy.limit(headroom)
    }

    /// Detach the node's oldest lazy areas until at most `keep_pages` of them stay; areas that
    /// are not reusable (allocated in a caller's window) go whatever the budget.
    fn take_lazy_keeping(p: &mut NodeState, keep_pages: u64) -> Vec<LazyArea> {
        let mut left = p.lazy_list.pages();
        let mut out = Vec::new();
        p.lazy_list.retain_mut(|l| {
            if !l.reusable || left > keep_pages {
                left -= l.pages;
                out.push(*l);
                false
            } else {
                true
            }
        });
        out
    }

    /// Step Reclaim (DESIGN.md, section 4): the pooled and lazy areas and the node chunks that
    /// overlap one of `ranges` (the few starts a largely aligned request may take), released
    /// and merged into the free tree, and nothing else. A full purge would give those starts
    /// the same room, but it also releases, retires and merges every other lazy and pooled
    /// area of the arena: milliseconds when tens of thousands are pooled. Serialised with
    /// purges by the purge mutex. Returns the areas and chunks moved to the tree.
    pub(super) fn nodes_reclaim(&self, ctx: &Context, ranges: &[(u64, u64)]) -> u64 {
        if ranges.is_empty() {
            return 0;
        }
        let _serial = ctx.purging.lock.lock().unwrap_or_else(|e| e.into_inner());
        let (mut release, mut to_tree, mut chunks) = (Vec::new(), Vec::new(), Vec::new());
        for node in self.nodes.iter() {
            let mut p = node.lock_at(&site::PURGE_DETACH);
            for (span, side) in p.pools.take_overlapping(ranges) {
                if side == PoolSide::Dirty {
                    release.push(span);
                }
                to_tree.push(span);
            }
            p.lazy_list.retain_mut(|l| {
                let h = l.span().overlaps_any(ranges);
                if h {
                    release.push(l.span());
                    to_tree.push(l.span());
                }
                !h
            });
            let (cs, ce) = p.chunk;
            if cs < ce && Span::of_range(cs, ce).overlaps_any(ranges) {
                p.chunk = (0, 0);
                chunks.push(Span::of_range(cs, ce));
            }
            ctx.sync_node(&mut p, true);
        }
        let (mut calls, spill) = release_batch(ctx, self, &release);
        calls += merge_batch(ctx, self, &to_tree, &chunks, &spill);
        let c = &ctx.counters;
        c.range_reclaims.fetch_add(1, Relaxed);
        c.areas_released.fetch_add(release.len() as u64, Relaxed);
        c.pages_released.fetch_add(Span::total_pages(&release), Relaxed);
        c.release_calls.fetch_add(calls, Relaxed);
        (to_tree.len() + chunks.len()) as u64
    }
}
