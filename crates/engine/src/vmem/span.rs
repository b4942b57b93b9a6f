//! `Span` and `SpanList`: the ranges an integer arena allocates from (vmem's spans), each with
//! its index of free quanta: an engine [`Arena`] (lowest fit, with its nodes and thread caches)
//! or per-CPU stripes of segregated free lists (instant fit, `stripes.rs`).
//!
//! Owns: the spans' indexes. Each replica of a list is held under an `RwLock` of its own; a
//! span's `live` count is an atomic that allocations raise while holding a replica for
//! reading, so that a holder of every write lock who reads 0 knows no allocation can be under
//! way in the span. A stripe's mutex is taken only under a read lock, so the write locks (all
//! taken for `fork()`) find every stripe's mutex free.
//!
//! Invariant: spans in the list are disjoint and sorted by base.

use super::constraints::Quanta;
use super::stripes::{Figures, Stripes};
use crate::arena::{AllocRequest, Arena};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// A span's index of its quanta.
pub(crate) enum Index {
    /// An engine arena over the quanta: lowest fit, nodes, thread caches, free tree.
    Tree(Arena),
    /// Segregated free lists in per-CPU stripes: instant fit in constant time.
    Seg(Stripes),
}

/// One span: `[base, end)` in integers, quanta `[base >> shift, end >> shift)` in its index.
pub(crate) struct Span {
    pub base: u64,
    pub end: u64,
    pub index: Index,
    /// Imported from the parent: returned to it when its last allocation is freed.
    pub imported: bool,
    /// Live allocations (counted only for imported spans, the ones returned when empty).
    pub live: AtomicU64,
}

impl Span {
    pub(crate) fn holds(&self, at: u64) -> bool {
        self.base <= at && at < self.end
    }

    /// Allocate `q` within quanta `[lo, hi)` of this span (`whole`: the span's whole range):
    /// the first quantum.
    pub(crate) fn alloc(&self, q: &Quanta, lo: u64, hi: u64, whole: bool) -> Option<u64> {
        match &self.index {
            Index::Tree(arena) => {
                if whole && q.phase_pages == 0 && q.nocross_pages != 0 {
                    // A cached area that happens to cross no boundary serves as well as any.
                    if let Some(s) = arena.alloc_cached_aligned(q.pages, q.align_pages, None) {
                        if !q.crosses(s) {
                            return Some(s);
                        }
                        let back = arena.free(s);
                        debug_assert!(back.is_ok());
                    }
                }
                let req = AllocRequest {
                    align_pages: q.align_pages,
                    phase_pages: q.phase_pages,
                    nocross_pages: q.nocross_pages,
                    window: (!whole).then_some((lo, hi)),
                    ..AllocRequest::pages(q.pages)
                };
                arena.alloc(&req).ok().map(|a| a.start)
            }
            Index::Seg(st) => st.alloc(q, lo, hi),
        }
    }

    /// Free the allocation at quantum `at`: its quanta.
    pub(crate) fn free(&self, at: u64) -> Option<u64> {
        match &self.index {
            Index::Tree(arena) => arena.free(at).ok().map(|a| a.pages),
            Index::Seg(st) => st.free(at),
        }
    }

    /// The quanta of the live allocation at quantum `at`.
    pub(crate) fn live_quanta(&self, at: u64) -> Option<u64> {
        match &self.index {
            Index::Tree(arena) => arena.live_pages(at),
            Index::Seg(st) => st.len_of(at),
        }
    }

    pub(crate) fn figures(&self) -> Figures {
        match &self.index {
            Index::Tree(arena) => {
                let a = arena.stats();
                Figures {
                    live: a.live_areas,
                    live_quanta: a.live_pages,
                    free_ranges: a.free_ranges,
                    largest_free: arena.largest_free(),
                }
            }
            Index::Seg(st) => st.figures(),
        }
    }

    /// Free quanta (in the free tree, for an arena), without walking the free ranges.
    pub(crate) fn free_quanta(&self) -> u64 {
        match &self.index {
            Index::Tree(arena) => arena.stats().free_pages,
            Index::Seg(st) => st.free_quanta(),
        }
    }

    /// Every cached, pooled and lazy range back in the index.
    pub(crate) fn shrink(&self) {
        if let Index::Tree(arena) = &self.index {
            arena.shrink();
        }
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        match &self.index {
            Index::Tree(arena) => arena.check(),
            Index::Seg(st) => st.check(),
        }
    }

    /// One more live allocation (imported spans only).
    pub(crate) fn took(&self) {
        if self.imported {
            self.live.fetch_add(1, Relaxed);
        }
    }

    /// One fewer; true when that was the last one of an imported span.
    pub(crate) fn gave_back(&self) -> bool {
        self.imported && self.live.fetch_sub(1, Relaxed) == 1
    }
}

/// The spans of one integer arena, sorted by base.
#[derive(Default)]
pub(crate) struct SpanList {
    spans: Vec<Arc<Span>>,
}

impl SpanList {
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Span>> {
        self.spans.iter()
    }

    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// The span that holds `at`.
    pub(crate) fn find(&self, at: u64) -> Option<&Arc<Span>> {
        // The last span whose base is at or below `at`.
        let i = self.spans.partition_point(|s| s.base <= at);
        let s = self.spans.get(i.checked_sub(1)?)?;
        s.holds(at).then_some(s)
    }

    /// Whether `[base, end)` meets no span.
    pub(crate) fn is_clear(&self, base: u64, end: u64) -> bool {
        let i = self.spans.partition_point(|s| s.base < end);
        i == 0 || self.spans[i - 1].end <= base
    }

    /// Insert a span that meets no other (the caller checked with [`SpanList::is_clear`]).
    pub(crate) fn insert(&mut self, span: Arc<Span>) {
        debug_assert!(self.is_clear(span.base, span.end));
        let i = self.spans.partition_point(|s| s.base < span.base);
        self.spans.insert(i, span);
    }

    /// Remove the span based at `base` if `pred` holds for it.
    pub(crate) fn remove_if(&mut self, base: u64, pred: impl FnOnce(&Span) -> bool) -> Option<Arc<Span>> {
        let i = self.spans.iter().position(|s| s.base == base)?;
        if !pred(&self.spans[i]) {
            return None;
        }
        Some(self.spans.remove(i))
    }

    /// Every span, the list left empty.
    pub(crate) fn take_all(&mut self) -> Vec<Arc<Span>> {
        std::mem::take(&mut self.spans)
    }
}
