//! `Span` and `SpanList`: the ranges an integer arena allocates from (vmem's spans), each with
//! an engine [`Arena`] over its quanta.
//!
//! Owns: the spans' arenas. A list is held under its integer arena's `RwLock`; a span's `live`
//! count is an atomic that allocations raise while holding the lock for reading, so that a
//! holder of the write lock who reads 0 knows no allocation can be under way in the span.
//!
//! Invariant: spans in the list are disjoint and sorted by base.

use crate::arena::Arena;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// One span: `[base, end)` in integers, quanta `[base >> shift, end >> shift)` in its arena.
pub(crate) struct Span {
    pub base: u64,
    pub end: u64,
    pub arena: Arena,
    /// Imported from the parent: returned to it when its last allocation is freed.
    pub imported: bool,
    /// Live allocations (counted only for imported spans, the ones returned when empty).
    pub live: AtomicU64,
}

impl Span {
    pub(crate) fn holds(&self, at: u64) -> bool {
        self.base <= at && at < self.end
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
