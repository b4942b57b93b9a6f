//! The invariant checker: every page of the arena is in exactly one state, and every
//! structure is internally consistent (DESIGN.md, section 7).
//!
//! It holds every lock of the arena at once: the thread-cache registry mutex, the purge mutex,
//! then the spin locks in the lock order (lock.rs, `LockRank`: node locks in index order, then
//! the free lock; Global: the one lock; Split: free, then busy). Call it when no user thread uses the arena: an
//! area in flight between two locks would otherwise look lost. The purge worker may run: its
//! purges hold the purge mutex and its cache drains the registry mutex, both held by the check.

use crate::arena::AreaTag;
use crate::arena::{Kind, Shared, NO_NODE};
use crate::strategy::BusyLazy;
use crate::sync::Ordering::Relaxed;
use vmarena_core::BusyArea;

impl Shared {
    pub(crate) fn check(&self) -> Result<(), String> {
        // The registry mutex comes before every other lock (magazine.rs) and is held to the
        // end: the worker's idle drain would otherwise move cached areas under the check.
        match &self.cache {
            Some(c) => c.with_cached_starts(|cached| self.check_with(cached?)),
            None => self.check_with(Vec::new()),
        }
    }

    /// The check, given every start that sits in a thread cache.
    fn check_with(&self, mut cached: Vec<u64>) -> Result<(), String> {
        cached.sort_unstable();
        if let Some(w) = cached.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("area {:#x} sits in two thread-cache slots", w[0]));
        }
        let _serial = self.purge_lock.lock().unwrap_or_else(|e| e.into_inner());
        (|| {
            // (start, pages, what)
            let mut all: Vec<(u64, u64, &'static str)> = Vec::new();
            let check_bl = |bl: &BusyLazy, all: &mut Vec<(u64, u64, &'static str)>| -> Result<(), String> {
                all.extend(bl.busy.sorted().iter().map(|(s, a)| (*s, a.pages, "busy")));
                all.extend(bl.lazy.iter().map(|&(s, p)| (s, p, "lazy")));
                let lp: u64 = bl.lazy.iter().map(|a| a.1).sum();
                if lp != bl.lazy_pages {
                    return Err(format!("lazy_pages {} but lazy list holds {lp}", bl.lazy_pages));
                }
                Ok(())
            };
            match &self.kind {
                Kind::Global(g) => {
                    let g = g.lock();
                    g.free.check()?;
                    all.extend(g.free.ranges().iter().map(|&(s, e)| (s, e - s, "free")));
                    check_bl(&g.bl, &mut all)?;
                }
                Kind::Split { free, busy } => {
                    let f = free.lock();
                    let b = busy.lock();
                    f.check()?;
                    all.extend(f.ranges().iter().map(|&(s, e)| (s, e - s, "free")));
                    check_bl(&b, &mut all)?;
                }
                Kind::Nodes { free, nodes } => {
                    let node_guards: Vec<_> = nodes.iter().map(|n| n.lock()).collect();
                    let f = free.lock();
                    f.check()?;
                    all.extend(f.ranges().iter().map(|&(s, e)| (s, e - s, "free")));
                    for (i, p) in node_guards.iter().enumerate() {
                        let (cs, ce) = p.chunk;
                        if cs < ce {
                            if self.shard_of(cs) != i || self.shard_of(ce - 1) != i {
                                return Err(format!("node {i}: chunk [{cs:#x}, {ce:#x}) outside its stripe"));
                            }
                            all.push((cs, ce - cs, "chunk"));
                        }
                        p.pools.check().map_err(|e| format!("node {i}: {e}"))?;
                        all.extend(p.pools.entries().iter().map(|e| (e.0, e.1, "pooled")));
                        all.extend(p.lazy_tree.iter().map(|l| (l.start, l.pages, "lazy")));
                        p.lazy_tree.check().map_err(|e| format!("node {i}: {e}"))?;
                        let published = self.lazy_lists[i].load(Relaxed);
                        if published != p.lazy_tree.pages() {
                            return Err(format!(
                                "node {i}: lazy list holds {} pages, {published} published",
                                p.lazy_tree.pages()
                            ));
                        }
                        if p.lazy_pages().abs_diff(p.synced) >= self.lazy_sync_pages {
                            return Err(format!(
                                "node {i}: {} lazy pages, {} synced, step {}",
                                p.lazy_pages(),
                                p.synced,
                                self.lazy_sync_pages
                            ));
                        }
                    }
                    let synced: u64 = node_guards.iter().map(|p| p.synced).sum();
                    let approx = self.lazy_approx.load(Relaxed);
                    if approx != synced as i64 {
                        return Err(format!("lazy counter {approx}, nodes synced {synced}"));
                    }
                    for (i, p) in node_guards.iter().enumerate() {
                        for (s, a) in p.busy.sorted() {
                            if self.shard_of(s) != i {
                                return Err(format!(
                                    "busy area {s:#x} in shard {i}, belongs in {}",
                                    self.shard_of(s)
                                ));
                            }
                            if a.node != NO_NODE && a.node as usize >= self.nr_nodes {
                                return Err(format!("busy area {s:#x} tagged with node {}", a.node));
                            }
                            self.check_state_word(s, &a, &cached)?;
                            all.push((s, a.pages, "busy"));
                        }
                    }
                    let in_caches = node_guards
                        .iter()
                        .flat_map(|p| p.busy.sorted())
                        .filter(|(s, _)| {
                            self.cache.as_ref().and_then(|c| c.states.get(*s)).is_some_and(|w| w.cached)
                        })
                        .count();
                    if in_caches != cached.len() {
                        return Err(format!(
                            "{in_caches} busy areas have cached state words, thread caches hold {}",
                            cached.len()
                        ));
                    }
                }
            }
            // busy ∪ pooled ∪ lazy ∪ chunk ∪ free must tile [lo, hi) exactly.
            all.sort_unstable_by_key(|a| a.0);
            let mut at = self.lo;
            for &(s, pages, what) in &all {
                if pages == 0 {
                    return Err(format!("empty {what} area at {s:#x}"));
                }
                if s != at {
                    return Err(if s < at {
                        format!("{what} area [{s:#x}, +{pages}) overlaps the range before it (ends {at:#x})")
                    } else {
                        format!("pages [{at:#x}, {s:#x}) are lost: in no list, tree or map")
                    });
                }
                at = s + pages;
            }
            if at != self.hi {
                return Err(format!("pages [{at:#x}, {:#x}) are lost: in no list, tree or map", self.hi));
            }
            Ok(())
        })()
    }

    /// A busy area's state word agrees with its record: live or cached exactly when the area is
    /// tracked, cached exactly when a thread cache holds it, with the record's size.
    fn check_state_word(&self, s: u64, a: &BusyArea<AreaTag>, cached: &[u64]) -> Result<(), String> {
        let Some(c) = &self.cache else { return Ok(()) };
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
