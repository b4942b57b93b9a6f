//! The invariant checker: every page of the arena is in exactly one state, and every
//! structure is internally consistent (DESIGN.md, section 7).
//!
//! It is the only engine code that holds several spin locks at once, in the documented order:
//! purge mutex, node locks in index order, free lock (Global: the one lock; Split: free, then
//! busy). Call it when no other thread uses the arena: an area in flight between two locks would
//! otherwise look lost.

use crate::arena::{Kind, Shared, NO_NODE};
use crate::lock::with_nesting_allowed;
use crate::strategy::BusyLazy;

impl Shared {
    pub(crate) fn check(&self) -> Result<(), String> {
        let _serial = self.purge_lock.lock().unwrap_or_else(|e| e.into_inner());
        with_nesting_allowed(|| {
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
                        let lp: u64 = p.lazy_tree.iter().map(|l| l.pages).sum();
                        if lp != p.lazy_tree_pages {
                            return Err(format!(
                                "node {i}: lazy_tree_pages {} but list holds {lp}",
                                p.lazy_tree_pages
                            ));
                        }
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
                            all.push((s, a.pages, "busy"));
                        }
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
        })
    }
}
