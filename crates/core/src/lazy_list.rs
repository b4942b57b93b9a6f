//! A node's lazy list: the freed areas that are not in a pool, indexed three ways.
//!
//! Owned by one node of the engine's Nodes strategy (`NodeState`), so every method runs under
//! that node's lock. Three orders are needed:
//! - free order (oldest first), for the purge (which releases the oldest and keeps the newest)
//!   and for step Move (which takes the oldest memory);
//! - size order, for reuse: the smallest reusable area that fits a request;
//! - address order, for joins and extensions: runs of adjacent reusable areas.
//!
//! Layout: the areas live in a slab of slots (`u32` links, no `unsafe`); a freed slot is
//! reused by the next push, so after warm-up pushes and takes allocate nothing (an idle purge
//! may shrink the address maps, [`LazyList::compact`]).
//! - Free order is a doubly linked list through the slots, oldest at the head.
//! - Size order is one bin per page count up to `BIN_PAGES`, each a doubly linked list with
//!   the newest area at its head, and a two-level bitmap of the bins that hold any; areas
//!   above `BIN_PAGES` pages sit in one ordered set. The fit is the smallest size that fits,
//!   and among areas of that size the one that took it last (the most recently freed, or the
//!   rest of a more recent split), as the pools hand out their newest entry.
//! - Address: two hash maps ([`PageMap`]), from each reusable area's start and from its end to
//!   its slot. Every lookup by address is exact: the area that starts at
//!   a page (a reuse by address, the next area of a run) or ends at one (is an area the first
//!   of its run). The address order that joins and extensions want is a walk along a run, from
//!   one area's end to the next one's start.
//!
//! Why a list and two maps rather than ordered trees: docs/bench-log/design-notes.md, section 4
//! ("Shared lazy list" and "The lazy list's address indexes") records the instruction counts that
//! decided it.
//!
//! Invariants (checked by [`LazyList::check`]):
//! - the free-order list holds every area once, stamps rising from head to tail;
//! - the bins and the large set hold exactly the reusable areas, each under its size; the
//!   bitmap marks exactly the non-empty bins; `by_start` and `by_end` hold exactly the
//!   reusable areas;
//! - `pages` is the sum of the areas' pages, `len` their number; areas do not overlap.
//!
//! An area whose front is handed out keeps its stamp and its place in free order.

use crate::page_map::PageMap;
use crate::span::Span;
use std::collections::BTreeSet;

/// A lazily freed area that is not in a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LazyArea {
    /// First page.
    pub start: u64,
    /// Pages, guard included.
    pub pages: u64,
    /// Allocated by this node in the default window, so it may be handed out again before a
    /// purge; otherwise it only waits for the purge.
    pub reusable: bool,
}

impl LazyArea {
    /// Its pages as a span.
    #[inline]
    pub fn span(&self) -> Span {
        Span::new(self.start, self.pages)
    }
}

/// An area [`LazyList::best_fit_slot`] found, with its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fit {
    /// The area found.
    pub area: LazyArea,
    slot: u32,
}

/// Sizes with a bin of their own: 1 to `BIN_PAGES` pages (4 MiB of 4 KiB pages, the top of
/// the shim's size classes). Larger areas go to `large`.
const BIN_PAGES: u64 = 1024;
const BIN_WORDS: usize = (BIN_PAGES as usize).div_ceil(64);
/// No slot.
const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Slot {
    area: LazyArea,
    /// Free-order stamp: higher is newer.
    stamp: u64,
    /// When the area took its present size (a free, or the rest of a split), from
    /// `next_seq`: higher is more recent. Orders the large set.
    seq: u64,
    /// Free-order links.
    older: u32,
    newer: u32,
    /// Links within the area's bin (binned reusable areas only); `prev` toward the head.
    bin_prev: u32,
    bin_next: u32,
}

/// See the module documentation.
pub struct LazyList {
    slots: Vec<Slot>,
    /// Unused slots, reused first.
    spare: Vec<u32>,
    /// Free order: oldest and newest area.
    oldest: u32,
    newest: u32,
    next_stamp: u64,
    next_seq: u64,
    /// Head (newest) of each size's bin, index `pages - 1`; empty until the first reusable
    /// area is binned.
    bins: Vec<u32>,
    /// Bit `i % 64` of word `i / 64` set: bin `i` is not empty.
    bin_words: [u64; BIN_WORDS],
    /// Bit `w` set: `bin_words[w]` is not zero.
    bin_summary: u64,
    /// Reusable areas above `BIN_PAGES`: `(pages, !seq, slot)`, so the one that took its size
    /// last comes first, as at the head of a bin.
    large: BTreeSet<(u64, u64, u32)>,
    /// Reusable areas by start: slot.
    by_start: PageMap,
    /// Reusable areas by end: slot.
    by_end: PageMap,
    len: usize,
    pages: u64,
}

impl Default for LazyList {
    fn default() -> Self {
        LazyList {
            slots: Vec::new(),
            spare: Vec::new(),
            oldest: NIL,
            newest: NIL,
            next_stamp: 0,
            next_seq: 0,
            bins: Vec::new(),
            bin_words: [0; BIN_WORDS],
            bin_summary: 0,
            large: BTreeSet::new(),
            by_start: PageMap::default(),
            by_end: PageMap::default(),
            len: 0,
            pages: 0,
        }
    }
}

impl LazyList {
    /// True when the list holds no area.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of areas.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Pages of all areas.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// The areas in free order, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &LazyArea> + '_ {
        let first = (self.oldest != NIL).then_some(self.oldest);
        std::iter::successors(first, |&i| {
            let n = self.slots[i as usize].newer;
            (n != NIL).then_some(n)
        })
        .map(|i| &self.slots[i as usize].area)
    }

    /// Add a freed area as the newest.
    pub fn push(&mut self, a: LazyArea) {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        let slot =
            Slot { area: a, stamp, seq: 0, older: self.newest, newer: NIL, bin_prev: NIL, bin_next: NIL };
        let i = match self.spare.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 lazy areas")
            }
        };
        match self.newest {
            NIL => self.oldest = i,
            n => self.slots[n as usize].newer = i,
        }
        self.newest = i;
        self.len += 1;
        self.pages += a.pages;
        if a.reusable {
            self.index(i);
        }
    }

    /// Take the area in slot `i` out of free order and the indexes; the slot becomes spare.
    fn remove_slot(&mut self, i: u32) -> LazyArea {
        let s = self.slots[i as usize];
        if s.area.reusable {
            self.unindex(i);
        }
        match s.older {
            NIL => self.oldest = s.newer,
            o => self.slots[o as usize].newer = s.newer,
        }
        match s.newer {
            NIL => self.newest = s.older,
            n => self.slots[n as usize].older = s.older,
        }
        self.spare.push(i);
        self.len -= 1;
        self.pages -= s.area.pages;
        s.area
    }

    /// Add the reusable area in slot `i` to its size bin (or the large set) and to the
    /// address maps.
    fn index(&mut self, i: u32) {
        let area = self.slots[i as usize].area;
        self.by_start.insert(area.start, i);
        self.by_end.insert(area.start + area.pages, i);
        self.index_size(i);
    }

    /// Add the reusable area in slot `i` to its size bin (or the large set) only.
    fn index_size(&mut self, i: u32) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.slots[i as usize].seq = seq;
        let area = self.slots[i as usize].area;
        if area.pages > BIN_PAGES {
            self.large.insert((area.pages, !seq, i));
            return;
        }
        if self.bins.is_empty() {
            self.bins = vec![NIL; BIN_PAGES as usize];
        }
        let b = (area.pages - 1) as usize;
        let head = self.bins[b];
        self.slots[i as usize].bin_prev = NIL;
        self.slots[i as usize].bin_next = head;
        if head != NIL {
            self.slots[head as usize].bin_prev = i;
        }
        self.bins[b] = i;
        self.bin_words[b / 64] |= 1 << (b % 64);
        self.bin_summary |= 1 << (b / 64);
    }

    /// Undo [`LazyList::index`] for slot `i`.
    fn unindex(&mut self, i: u32) {
        let area = self.slots[i as usize].area;
        self.by_start.remove(area.start);
        self.by_end.remove(area.start + area.pages);
        self.unindex_size(i);
    }

    /// Undo [`LazyList::index_size`] for slot `i`.
    fn unindex_size(&mut self, i: u32) {
        let Slot { area, seq, bin_prev, bin_next, .. } = self.slots[i as usize];
        if area.pages > BIN_PAGES {
            self.large.remove(&(area.pages, !seq, i));
            return;
        }
        let b = (area.pages - 1) as usize;
        match bin_prev {
            NIL => self.bins[b] = bin_next,
            p => self.slots[p as usize].bin_next = bin_next,
        }
        if bin_next != NIL {
            self.slots[bin_next as usize].bin_prev = bin_prev;
        }
        if self.bins[b] == NIL {
            self.bin_words[b / 64] &= !(1 << (b % 64));
            if self.bin_words[b / 64] == 0 {
                self.bin_summary &= !(1 << (b / 64));
            }
        }
    }

    /// The first non-empty bin at index `b` or above.
    fn next_bin(&self, b: usize) -> Option<usize> {
        if b >= BIN_PAGES as usize {
            return None;
        }
        let (w, bit) = (b / 64, b % 64);
        let here = self.bin_words[w] & (u64::MAX << bit);
        if here != 0 {
            return Some(w * 64 + here.trailing_zeros() as usize);
        }
        let above = if w + 1 < 64 { self.bin_summary & (u64::MAX << (w + 1)) } else { 0 };
        (above != 0).then(|| {
            let w = above.trailing_zeros() as usize;
            w * 64 + self.bin_words[w].trailing_zeros() as usize
        })
    }

    /// The slot of the reusable area that starts at `start`.
    fn slot_at(&self, start: u64) -> Option<u32> {
        self.by_start.get(start)
    }

    /// The reusable area that starts at `start`.
    pub fn reusable_at(&self, start: u64) -> Option<LazyArea> {
        self.slot_at(start).map(|i| self.slots[i as usize].area)
    }

    /// True when a reusable area ends at `end`: an area that starts there is not the first of
    /// its run.
    pub fn reusable_ends_at(&self, end: u64) -> bool {
        self.by_end.get(end).is_some()
    }

    /// Every reusable area, in free order: a walk of the list, so its cost follows the list's
    /// length, where a scan of the address maps would follow the most areas it ever held.
    pub fn reusable(&self) -> impl Iterator<Item = LazyArea> + '_ {
        self.iter().copied().filter(|a| a.reusable)
    }

    /// The smallest reusable area of at least `pages` whose start is a multiple of
    /// `align_pages`, left on the list. Among areas of one size, the one that took that size
    /// last: the most recently freed, or the rest of a more recent split.
    #[cfg(test)]
    pub fn best_fit(&self, pages: u64, align_pages: u64) -> Option<LazyArea> {
        self.best_fit_slot(pages, align_pages).map(|f| f.area)
    }

    /// `best_fit` (the tests' form), with the slot that holds the area, for [`LazyList::take_fit`].
    pub fn best_fit_slot(&self, pages: u64, align_pages: u64) -> Option<Fit> {
        let aligned = |i: u32| self.slots[i as usize].area.start & (align_pages - 1) == 0;
        let fit = |i: u32| Fit { area: self.slots[i as usize].area, slot: i };
        let mut b = pages.max(1) - 1;
        while let Some(found) = self.next_bin(b as usize) {
            let mut i = self.bins[found];
            while i != NIL {
                if aligned(i) {
                    return Some(fit(i));
                }
                i = self.slots[i as usize].bin_next;
            }
            b = found as u64 + 1;
        }
        self.large.range((pages, 0, 0)..).find(|&&(_, _, i)| aligned(i)).map(|&(_, _, i)| fit(i))
    }

    /// Hand out the first `pages` pages of the reusable area at `start`: the area leaves the
    /// list, or its rest stays in its place in free order. Returns the area as it was.
    pub fn take_front(&mut self, start: u64, pages: u64) -> LazyArea {
        let i = self.slot_at(start).expect("a reusable area starts there");
        self.take_front_of(i, pages)
    }

    /// [`LazyList::take_front`] of the area `fit` found, without looking it up again; the
    /// list must not have changed since [`LazyList::best_fit_slot`] returned it.
    pub fn take_fit(&mut self, fit: Fit, pages: u64) -> LazyArea {
        let s = &self.slots[fit.slot as usize];
        assert!(s.area == fit.area && s.area.reusable, "the fit is still on the list");
        self.take_front_of(fit.slot, pages)
    }

    fn take_front_of(&mut self, i: u32, pages: u64) -> LazyArea {
        let a = self.slots[i as usize].area;
        assert!(pages <= a.pages, "the front fits the area");
        if pages == a.pages {
            return self.remove_slot(i);
        }
        self.reshape(i, LazyArea { start: a.start + pages, pages: a.pages - pages, reusable: true });
        a
    }

    /// Give the area in slot `i` a new extent and reusability, keeping its stamp and its place
    /// in free order. A reusable area that stays reusable with the same end (the rest of a
    /// split) keeps its `by_end` entry and changes its start and size bin only.
    fn reshape(&mut self, i: u32, to: LazyArea) {
        let from = self.slots[i as usize].area;
        let same_end = from.reusable && to.reusable && from.start + from.pages == to.start + to.pages;
        if same_end {
            self.unindex_size(i);
            self.by_start.remove(from.start);
        } else if from.reusable {
            self.unindex(i);
        }
        self.slots[i as usize].area = to;
        self.pages = self.pages - from.pages + to.pages;
        if same_end {
            self.by_start.insert(to.start, i);
            self.index_size(i);
        } else if to.reusable {
            self.index(i);
        }
    }

    /// The reusable areas in address order (sorted here, for tests).
    #[cfg(test)]
    pub fn by_address(&self) -> Vec<LazyArea> {
        let mut v: Vec<LazyArea> = self.reusable().collect();
        v.sort_unstable_by_key(|a| a.start);
        v
    }

    /// The run of reusable areas from `lo`: the area that starts there, the one that starts
    /// where it ends, and so on while they start below `hi`.
    pub fn run_from(&self, lo: u64, hi: u64) -> Vec<LazyArea> {
        std::iter::successors(self.reusable_at(lo), |a| self.reusable_at(a.start + a.pages))
            .take_while(|a| a.start < hi)
            .collect()
    }

    /// Keep the areas for which `f` returns true, visiting them oldest first; `f` may shrink
    /// an area it keeps (its stamp stays).
    pub fn retain_mut(&mut self, mut f: impl FnMut(&mut LazyArea) -> bool) {
        let mut i = self.oldest;
        while i != NIL {
            let next = self.slots[i as usize].newer;
            let before = self.slots[i as usize].area;
            let mut a = before;
            if !f(&mut a) {
                self.remove_slot(i);
            } else if a != before {
                self.reshape(i, a);
            }
            i = next;
        }
    }

    /// Entries of the start map's table (for tests of when the maps shrink).
    #[doc(hidden)]
    pub fn map_capacity(&self) -> usize {
        self.by_start.capacity()
    }

    /// Shrink the address maps if the list has become much shorter than they were made for
    /// ([`PageMap::compact`]). The purges that are not threshold purges call this (an idle
    /// decay, an explicit purge, the shrinker), so that memory follows the list when the
    /// program has stopped freeing, and never on the paths of allocation and free.
    pub fn compact(&mut self) {
        self.by_start.compact();
        self.by_end.compact();
    }

    /// Check the invariants of the module documentation.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = vec![false; self.slots.len()];
        let (mut n, mut sum, mut reusable) = (0usize, 0u64, 0usize);
        let (mut i, mut prev, mut last_stamp) = (self.oldest, NIL, None::<u64>);
        while i != NIL {
            let s = self.slots.get(i as usize).ok_or_else(|| format!("lazy list: slot {i} out of range"))?;
            if std::mem::replace(&mut seen[i as usize], true) || s.older != prev {
                return Err(format!("lazy list: free order broken at slot {i}"));
            }
            if last_stamp.is_some_and(|l| l >= s.stamp) {
                return Err(format!("lazy list: stamps out of order at {:#x}", s.area.start));
            }
            last_stamp = Some(s.stamp);
            n += 1;
            sum += s.area.pages;
            if s.area.reusable {
                reusable += 1;
                if self.by_start.get(s.area.start) != Some(i)
                    || self.by_end.get(s.area.start + s.area.pages) != Some(i)
                {
                    return Err(format!(
                        "lazy list: area {:#x}+{} missing by address",
                        s.area.start, s.area.pages
                    ));
                }
                if s.area.pages > BIN_PAGES && !self.large.contains(&(s.area.pages, !s.seq, i)) {
                    return Err(format!(
                        "lazy list: area {:#x}+{} missing by size",
                        s.area.start, s.area.pages
                    ));
                }
            }
            (prev, i) = (i, s.newer);
        }
        if prev != self.newest || n != self.len || n + self.spare.len() != self.slots.len() {
            return Err(format!(
                "lazy list: {n} areas in free order, {} counted, {} slots, {} spare",
                self.len,
                self.slots.len(),
                self.spare.len()
            ));
        }
        if sum != self.pages {
            return Err(format!("lazy list: {} pages counted, {sum} on the list", self.pages));
        }
        let mut binned = 0;
        for (b, &head) in self.bins.iter().enumerate() {
            let marked = self.bin_words[b / 64] >> (b % 64) & 1 == 1;
            if marked != (head != NIL)
                || (self.bin_words[b / 64] != 0) != (self.bin_summary >> (b / 64) & 1 == 1)
            {
                return Err(format!("lazy list: bitmap wrong for the bin of {} pages", b + 1));
            }
            let (mut i, mut prev) = (head, NIL);
            while i != NIL {
                let s = &self.slots[i as usize];
                if !seen[i as usize] || !s.area.reusable || s.area.pages != b as u64 + 1 || s.bin_prev != prev
                {
                    return Err(format!("lazy list: bin of {} pages holds a wrong entry", b + 1));
                }
                binned += 1;
                (prev, i) = (i, s.bin_next);
            }
        }
        if binned + self.large.len() != reusable
            || self.by_start.len() != reusable
            || self.by_end.len() != reusable
        {
            return Err(format!(
                "lazy list: {reusable} reusable areas, {binned} binned and {} large, {} by start, {} by end",
                self.large.len(),
                self.by_start.len(),
                self.by_end.len()
            ));
        }
        self.by_start.check()?;
        self.by_end.check()?;
        let mut spans: Vec<(u64, u64)> = self.iter().map(|a| (a.start, a.start + a.pages)).collect();
        spans.sort_unstable();
        if let Some(w) = spans.windows(2).find(|w| w[0].1 > w[1].0) {
            return Err(format!("lazy list: areas {:#x?} and {:#x?} overlap", w[0], w[1]));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn area(start: u64, pages: u64) -> LazyArea {
        LazyArea { start, pages, reusable: true }
    }

    #[test]
    fn best_fit_takes_the_smallest_that_fits_and_honours_alignment() {
        let mut l = LazyList::default();
        l.push(area(0, 50));
        l.push(area(100, 20));
        l.push(area(200, 30));
        l.push(LazyArea { start: 300, pages: 25, reusable: false });
        assert_eq!(l.best_fit(21, 1), Some(area(200, 30)), "30 is the smallest of at least 21");
        assert_eq!(l.best_fit(20, 1), Some(area(100, 20)), "exact");
        assert_eq!(l.best_fit(20, 64), Some(area(0, 50)), "the only start aligned to 64");
        assert_eq!(l.best_fit(51, 1), None);
        assert_eq!(l.best_fit(25, 1).map(|a| a.start), Some(200), "not the unreusable one");
        l.check().unwrap();
    }

    #[test]
    fn a_split_rest_keeps_its_place_in_free_order() {
        let mut l = LazyList::default();
        l.push(area(0, 50));
        l.push(area(100, 20));
        assert_eq!(l.take_front(0, 10), area(0, 50));
        let order: Vec<_> = l.iter().copied().collect();
        assert_eq!(order, vec![area(10, 40), area(100, 20)], "the rest is still the oldest");
        assert_eq!(l.pages(), 60);
        assert_eq!(l.best_fit(40, 1), Some(area(10, 40)));
        l.take_front(100, 20);
        assert_eq!((l.len(), l.pages()), (1, 40));
        l.check().unwrap();
    }

    #[test]
    fn retain_visits_oldest_first_and_reindexes_what_it_shrinks() {
        let mut l = LazyList::default();
        for (i, s) in [300u64, 0, 200].into_iter().enumerate() {
            l.push(area(s, 10 + i as u64));
        }
        let mut seen = Vec::new();
        l.retain_mut(|a| {
            seen.push(a.start);
            if a.start == 0 {
                *a = area(5, 6);
            }
            a.start != 200
        });
        assert_eq!(seen, vec![300, 0, 200]);
        assert_eq!(l.by_address(), vec![area(5, 6), area(300, 10)]);
        assert_eq!(l.run_from(5, 300), vec![area(5, 6)]);
        assert_eq!(l.run_from(0, 300), vec![], "no area starts at 0 any more");
        assert_eq!(l.best_fit(6, 1), Some(area(5, 6)));
        assert_eq!(l.pages(), 16);
        l.check().unwrap();
    }

    #[test]
    fn equal_sizes_give_the_newest_and_large_areas_fit_too() {
        let mut l = LazyList::default();
        l.push(area(0, 20));
        l.push(area(100, 20));
        l.push(area(200, 20));
        assert_eq!(l.best_fit(20, 1), Some(area(200, 20)), "the most recently freed of a size");
        assert_eq!(l.best_fit(20, 8), Some(area(200, 20)));
        assert_eq!(l.best_fit(20, 64), Some(area(0, 20)), "alignment walks the bin");
        l.take_front(200, 20);
        assert_eq!(l.best_fit(20, 1), Some(area(100, 20)));
        // Above the bins: the large set, still smallest first and newest among equals.
        l.push(area(10_000, 5000));
        l.push(area(20_000, 3000));
        l.push(area(30_000, 3000));
        assert_eq!(l.best_fit(1500, 1), Some(area(30_000, 3000)));
        assert_eq!(l.best_fit(1500, 32), Some(area(20_000, 3000)), "30,000 is not a multiple of 32");
        assert_eq!(l.best_fit(3001, 1), Some(area(10_000, 5000)));
        assert_eq!(l.best_fit(5001, 1), None);
        // A split of a large area can move it into a bin.
        assert_eq!(l.take_front(10_000, 4500), area(10_000, 5000));
        assert_eq!(l.best_fit(400, 1), Some(area(14_500, 500)));
        l.check().unwrap();
    }

    #[test]
    fn the_bitmap_finds_bins_across_words() {
        let mut l = LazyList::default();
        for (i, pages) in [1u64, 63, 64, 65, 128, 129, 700, 1023, 1024].into_iter().enumerate() {
            l.push(area(i as u64 * 10_000, pages));
        }
        for (want, ask) in [
            (1, 1),
            (63, 2),
            (64, 64),
            (65, 65),
            (128, 66),
            (129, 129),
            (700, 130),
            (1023, 701),
            (1024, 1024),
        ] {
            assert_eq!(l.best_fit(ask, 1).map(|a| a.pages), Some(want), "a request of {ask} pages");
        }
        assert_eq!(l.best_fit(1025, 1), None);
        // Emptying a bin clears its bit, and its word's summary bit with the last one.
        for start in [20_000, 30_000] {
            l.take_front(start, l.best_fit(64, 1).unwrap().pages);
        }
        assert_eq!(l.best_fit(64, 1).map(|a| a.pages), Some(128));
        l.check().unwrap();
    }

    #[test]
    fn slots_are_reused_and_address_ranges_are_exact() {
        let mut l = LazyList::default();
        for i in 0..4 {
            l.push(area(i * 100, 50));
        }
        l.take_front(100, 50);
        l.take_front(200, 50);
        l.push(area(1000, 10));
        l.push(area(2000, 10));
        assert_eq!(l.slots.len(), 4, "spare slots first");
        assert_eq!(l.iter().map(|a| a.start).collect::<Vec<_>>(), vec![0, 300, 1000, 2000]);
        // A run goes from one area's end to the next one's start, and stops at a gap or at
        // the first area that starts at or above `hi`.
        assert_eq!(l.run_from(0, 1000), vec![area(0, 50)]);
        l.push(area(50, 30));
        l.push(area(80, 20));
        assert_eq!(l.run_from(0, 1000), vec![area(0, 50), area(50, 30), area(80, 20)]);
        assert_eq!(l.run_from(0, 80), vec![area(0, 50), area(50, 30)]);
        assert_eq!(l.run_from(50, 1000), vec![area(50, 30), area(80, 20)]);
        assert!(l.reusable_ends_at(100) && l.reusable_ends_at(50) && !l.reusable_ends_at(0));
        assert_eq!(l.run_from(10, 1000), vec![], "no area starts at 10");
        l.check().unwrap();
    }

    /// Random pushes, fits, splits, whole takes (by the slot found or by start), shrinks and
    /// removals against a plain vector in free order with the same rule (smallest size, then
    /// the one that took it last): every fit, the free order, the address order and the page
    /// count agree after every step.
    #[test]
    fn random_operations_match_a_plain_vector() {
        for seed in 1..=8u64 {
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut rnd = move |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let mut l = LazyList::default();
            // (when the area took its size, area), in free order, oldest first.
            let mut model: Vec<(u64, LazyArea)> = Vec::new();
            let (mut next_start, mut seq) = (0u64, 0u64);
            for step in 0..3000 {
                let what = rnd(10);
                if what < 4 || model.is_empty() {
                    // Sizes in and above the bins, gaps between areas so that some touch.
                    let pages = if rnd(8) == 0 { BIN_PAGES - 2 + rnd(5) } else { 1 + rnd(80) };
                    next_start += rnd(2) * rnd(4);
                    let a = LazyArea { start: next_start, pages, reusable: rnd(6) != 0 };
                    next_start += pages;
                    l.push(a);
                    model.push((seq, a));
                    seq += 1;
                } else if what < 8 {
                    let big = rnd(4) == 0;
                    let pages = 1 + rnd(if big { BIN_PAGES + 4 } else { 90 });
                    let align = 1u64 << rnd(4);
                    let want = model
                        .iter()
                        .filter(|(_, a)| a.reusable && a.pages >= pages && a.start % align == 0)
                        .min_by_key(|(s, a)| (a.pages, std::cmp::Reverse(*s)))
                        .map(|(_, a)| *a);
                    let fit = l.best_fit_slot(pages, align);
                    assert_eq!(fit.map(|f| f.area), want, "seed {seed} step {step}: fit of {pages}/{align}");
                    if let (Some(a), Some(fit)) = (want, fit) {
                        let take = if rnd(2) == 0 { a.pages } else { pages };
                        // By the slot found, or looked up by start.
                        let taken =
                            if rnd(2) == 0 { l.take_fit(fit, take) } else { l.take_front(a.start, take) };
                        assert_eq!(taken, a);
                        let k = model.iter().position(|(_, m)| *m == a).unwrap();
                        if take == a.pages {
                            model.remove(k);
                        } else {
                            model[k] = (
                                seq,
                                LazyArea { start: a.start + take, pages: a.pages - take, reusable: true },
                            );
                            seq += 1;
                        }
                    }
                } else {
                    // A purge-like pass: drop some areas, shrink the front of others.
                    let (mut i, cut) = (0usize, rnd(3));
                    let mut mine = Vec::new();
                    l.retain_mut(|a| {
                        assert_eq!(*a, model[i].1, "seed {seed} step {step}: visit order");
                        i += 1;
                        let keep = rnd(5) != 0;
                        if keep && a.pages > cut {
                            *a =
                                LazyArea { start: a.start + cut, pages: a.pages - cut, reusable: a.reusable };
                        }
                        mine.push(keep.then_some(*a));
                        keep
                    });
                    let mut kept = Vec::new();
                    for ((s, before), after) in model.into_iter().zip(mine) {
                        if let Some(a) = after {
                            kept.push(if a == before { (s, a) } else { (seq, a) });
                            seq += (a != before) as u64;
                        }
                    }
                    model = kept;
                }
                assert_eq!(
                    l.iter().copied().collect::<Vec<_>>(),
                    model.iter().map(|m| m.1).collect::<Vec<_>>()
                );
                let mut by_addr: Vec<LazyArea> = model.iter().map(|m| m.1).filter(|a| a.reusable).collect();
                by_addr.sort_by_key(|a| a.start);
                assert_eq!(l.by_address(), by_addr);
                // The run from a reusable area's start: the areas that follow it without a gap,
                // from the sorted list; and whether one ends where it starts.
                if !by_addr.is_empty() {
                    let k = rnd(by_addr.len() as u64) as usize;
                    let lo = by_addr[k].start;
                    let hi = lo + rnd(400);
                    let mut want = vec![by_addr[k]];
                    for a in &by_addr[k + 1..] {
                        let last = want[want.len() - 1];
                        if a.start != last.start + last.pages {
                            break;
                        }
                        want.push(*a);
                    }
                    want.retain(|a| a.start < hi);
                    assert_eq!(l.run_from(lo, hi), want, "seed {seed} step {step}: run from {lo}");
                    let joined = k > 0 && by_addr[k - 1].start + by_addr[k - 1].pages == lo;
                    assert_eq!(l.reusable_ends_at(lo), joined, "seed {seed} step {step}");
                }
                assert_eq!(l.pages(), model.iter().map(|m| m.1.pages).sum::<u64>());
                if step % 100 == 0 {
                    l.check().unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                }
            }
            l.check().unwrap();
        }
    }

    #[test]
    fn compact_shrinks_the_address_maps_of_a_list_grown_long() {
        let mut l = LazyList::default();
        for i in 0..4000 {
            l.push(area(i * 10, 5));
        }
        let big = l.by_start.capacity();
        assert!(big >= 8192);
        // Reuse takes most of them: the maps keep their size until the next purge.
        for i in 0..3990 {
            l.take_front(i * 10, 5);
        }
        assert_eq!(l.by_start.capacity(), big);
        l.retain_mut(|_| true);
        assert_eq!(l.by_start.capacity(), big, "only compact shrinks them");
        l.compact();
        assert!(l.by_start.capacity() <= 64 && l.by_end.capacity() <= 64);
        assert_eq!(l.run_from(39_900, u64::MAX), vec![area(39_900, 5)]);
        l.check().unwrap();
    }

    #[test]
    fn check_finds_a_broken_index() {
        let mut l = LazyList::default();
        l.push(area(0, 10));
        l.push(area(5, 10));
        assert!(l.check().unwrap_err().contains("overlap"));
        let mut l = LazyList::default();
        l.push(area(0, 10));
        l.by_end.clear();
        assert!(l.check().unwrap_err().contains("missing by address"));
        let mut l = LazyList::default();
        l.push(area(0, 10));
        l.by_start.clear();
        assert!(l.check().unwrap_err().contains("missing by address"));
        let mut l = LazyList::default();
        l.push(area(0, 10));
        l.bin_words[0] = 0;
        assert!(l.check().unwrap_err().contains("bitmap"));
        let mut l = LazyList::default();
        l.push(area(0, 10));
        l.push(area(20, 10));
        l.slots[1].older = NIL;
        assert!(l.check().unwrap_err().contains("free order"));
    }
}
