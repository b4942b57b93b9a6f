//! The Nodes part of the invariant check: each node's chunk, pools, lazy list and busy shard,
//! the published lazy figures, and the thread caches' state words against the busy records.
//!
//! Holds every node lock, then the free lock (the lock order), for the whole check, under the
//! registry mutex and purge mutex that `arena/check.rs` holds.

use super::Nodes;
use crate::area::{AreaTag, NO_NODE};
use crate::arena::context::Context;
use crate::arena::strategy_ops::check_free_tree;
use crate::sync::Ordering::Relaxed;
use vmarena_core::BusyArea;

impl Nodes {
    /// Check every node and add its ranges to `all`; `cached` lists the starts held in thread
    /// caches (sorted).
    pub(super) fn nodes_check(
        &self,
        ctx: &Context,
        cached: &[u64],
        all: &mut Vec<(u64, u64, &'static str)>,
    ) -> Result<(), String> {
        let node_guards: Vec<_> = self.nodes.iter().map(|n| n.lock()).collect();
        let f = self.free.lock();
        check_free_tree(&f, all)?;
        for (i, p) in node_guards.iter().enumerate() {
            let (cs, ce) = p.chunk;
            if cs < ce {
                if ctx.shard_of(cs) != i || ctx.shard_of(ce - 1) != i {
                    return Err(format!("node {i}: chunk [{cs:#x}, {ce:#x}) outside its stripe"));
                }
                all.push((cs, ce - cs, "chunk"));
            }
            p.pools.check().map_err(|e| format!("node {i}: {e}"))?;
            all.extend(p.pools.entries().iter().map(|e| (e.0.start, e.0.pages, "pooled")));
            all.extend(p.lazy_list.iter().map(|l| (l.start, l.pages, "lazy")));
            p.lazy_list.check().map_err(|e| format!("node {i}: {e}"))?;
            let published = ctx.lazy.list_pages[i].load(Relaxed);
            if published != p.lazy_list.pages() {
                return Err(format!(
                    "node {i}: lazy list holds {} pages, {published} published",
                    p.lazy_list.pages()
                ));
            }
            if p.lazy_pages().abs_diff(p.synced) >= ctx.lazy.sync_pages {
                return Err(format!(
                    "node {i}: {} lazy pages, {} synced, step {}",
                    p.lazy_pages(),
                    p.synced,
                    ctx.lazy.sync_pages
                ));
            }
        }
        let synced: u64 = node_guards.iter().map(|p| p.synced).sum();
        let approx = ctx.lazy.approx.load(Relaxed);
        if approx != synced as i64 {
            return Err(format!("lazy counter {approx}, nodes synced {synced}"));
        }
        let live_synced: u64 = node_guards.iter().map(|p| p.live_synced).sum();
        let live_approx = ctx.lazy.live_approx.load(Relaxed);
        if live_approx != live_synced as i64 {
            return Err(format!("live counter {live_approx}, nodes synced {live_synced}"));
        }
        let live_high = ctx.lazy.live_high.load(Relaxed);
        if ctx.opts.lazy_headroom && (live_high as i64) < live_approx {
            return Err(format!("live high-water mark {live_high} below the live counter {live_approx}"));
        }
        for (i, p) in node_guards.iter().enumerate() {
            for (s, a) in p.busy.sorted() {
                if ctx.shard_of(s) != i {
                    return Err(format!("busy area {s:#x} in shard {i}, belongs in {}", ctx.shard_of(s)));
                }
                if a.node != NO_NODE && a.node as usize >= ctx.nr_nodes {
                    return Err(format!("busy area {s:#x} tagged with node {}", a.node));
                }
                self.check_state_word(ctx, s, &a, cached)?;
                all.push((s, a.pages, "busy"));
            }
        }
        let in_caches = node_guards
            .iter()
            .flat_map(|p| p.busy.sorted())
            .filter(|(s, _)| ctx.cache.as_ref().and_then(|c| c.states.get(*s)).is_some_and(|w| w.cached))
            .count();
        if in_caches != cached.len() {
            return Err(format!(
                "{in_caches} busy areas have cached state words, thread caches hold {}",
                cached.len()
            ));
        }
        Ok(())
    }

    /// A busy area's state word agrees with its record: live or cached exactly when the area is
    /// tracked, cached exactly when a thread cache holds it, with the record's size.
    fn check_state_word(
        &self,
        ctx: &Context,
        s: u64,
        a: &BusyArea<AreaTag>,
        cached: &[u64],
    ) -> Result<(), String> {
        let Some(c) = &ctx.cache else { return Ok(()) };
        let word = c.states.get(s);
        let in_cache = cached.binary_search(&s).is_ok();
        match word {
            None if c.states.tracks(a.pages, a.tag.kind) => {
                Err(format!("busy area {s:#x} of {} pages has no state word", a.pages))
            }
            None if in_cache => Err(format!("cached area {s:#x} has no state word")),
            None => Ok(()),
            Some(w) if w.pages != a.pages => {
                Err(format!("state word of {s:#x} says {} pages, the record {}", w.pages, a.pages))
            }
            Some(w) if w.cached != in_cache => Err(format!(
                "state word of {s:#x} says {}, but the area is {}in a thread cache",
                if w.cached { "cached" } else { "live" },
                if in_cache { "" } else { "not " }
            )),
            Some(_) => Ok(()),
        }
    }
}
