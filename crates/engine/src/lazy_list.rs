//! A node's lazy list: the freed areas that are not in a pool, indexed three ways.
//!
//! Owned by one [`NodeState`](crate::node::NodeState), so every method runs under that node's
//! lock. Three orders are needed:
//! - free order (oldest first), for the purge (which releases the oldest and keeps the newest)
//!   and for step Move (which takes the oldest memory);
//! - size order, for reuse: the smallest reusable area that fits a request;
//! - address order, for joins and extensions: runs of adjacent reusable areas.
//!
//! A plain vector in free order served the first and made the other two a scan of every entry
//! on every allocation; with all of a program's large freed areas on one list (`shared_lazy`)
//! that scan was over a third of the instructions of a run of xthread through the shim
//! (DESIGN.md, section 4, Shared lazy list).
//!
//! Invariants (checked by [`LazyList::check`]):
//! - every area is in `by_age` once, under its own stamp; `by_size` and `by_start` hold
//!   exactly the reusable ones, with the same stamp;
//! - `pages` is the sum of the areas' pages; areas do not overlap.
//!
//! An area whose front is handed out keeps its stamp: the rest of a split area takes the
//! area's place in free order, as before.

use std::collections::{BTreeMap, BTreeSet};

/// A lazily freed area that is not in a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LazyArea {
    pub start: u64,
    pub pages: u64,
    /// Allocated by this node in the default window, so it may be handed out again before a
    /// purge; otherwise it only waits for the purge.
    pub reusable: bool,
}

/// See the module documentation.
#[derive(Default)]
pub(crate) struct LazyList {
    /// The next free-order stamp.
    next_stamp: u64,
    /// Every area by stamp: free order, oldest first.
    by_age: BTreeMap<u64, LazyArea>,
    /// Reusable areas as `(pages, start, stamp)`.
    by_size: BTreeSet<(u64, u64, u64)>,
    /// Reusable areas by start: `(stamp, pages)`.
    by_start: BTreeMap<u64, (u64, u64)>,
    /// Pages of all areas.
    pages: u64,
}

impl LazyList {
    /// Number of areas.
    pub fn len(&self) -> usize {
        self.by_age.len()
    }

    /// Pages of all areas.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// The areas in free order, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &LazyArea> {
        self.by_age.values()
    }

    /// Add a freed area as the newest.
    pub fn push(&mut self, a: LazyArea) {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.insert(stamp, a);
    }

    fn insert(&mut self, stamp: u64, a: LazyArea) {
        self.by_age.insert(stamp, a);
        if a.reusable {
            self.by_size.insert((a.pages, a.start, stamp));
            self.by_start.insert(a.start, (stamp, a.pages));
        }
        self.pages += a.pages;
    }

    fn remove_stamp(&mut self, stamp: u64) -> LazyArea {
        let a = self.by_age.remove(&stamp).expect("stamp on the list");
        if a.reusable {
            self.by_size.remove(&(a.pages, a.start, stamp));
            self.by_start.remove(&a.start);
        }
        self.pages -= a.pages;
        a
    }

    /// The smallest reusable area of at least `pages` whose start is a multiple of
    /// `align_pages` (the lowest start among equals), left on the list.
    pub fn best_fit(&self, pages: u64, align_pages: u64) -> Option<LazyArea> {
        self.by_size
            .range((pages, 0, 0)..)
            .find(|&&(_, start, _)| start & (align_pages - 1) == 0)
            .map(|&(_, _, stamp)| self.by_age[&stamp])
    }

    /// Hand out the first `pages` pages of the reusable area at `start`: the area leaves the
    /// list, or its rest stays in its place in free order. Returns the area as it was.
    pub fn take_front(&mut self, start: u64, pages: u64) -> LazyArea {
        let (stamp, _) = *self.by_start.get(&start).expect("a reusable area starts there");
        let a = self.remove_stamp(stamp);
        assert!(pages <= a.pages, "the front fits the area");
        if pages < a.pages {
            self.insert(stamp, LazyArea { start: a.start + pages, pages: a.pages - pages, reusable: true });
        }
        a
    }

    /// The reusable areas in address order.
    pub fn by_address(&self) -> Vec<LazyArea> {
        self.by_start.iter().map(|(&start, &(_, pages))| LazyArea { start, pages, reusable: true }).collect()
    }

    /// The reusable areas whose start lies in `[lo, hi)`, in address order.
    pub fn reusable_in(&self, lo: u64, hi: u64) -> Vec<LazyArea> {
        self.by_start
            .range(lo..hi)
            .map(|(&start, &(_, pages))| LazyArea { start, pages, reusable: true })
            .collect()
    }

    /// Keep the areas for which `f` returns true, visiting them oldest first; `f` may shrink
    /// an area it keeps (its stamp stays).
    pub fn retain_mut(&mut self, mut f: impl FnMut(&mut LazyArea) -> bool) {
        let stamps: Vec<u64> = self.by_age.keys().copied().collect();
        for stamp in stamps {
            let before = self.by_age[&stamp];
            let mut a = before;
            let keep = f(&mut a);
            if !keep || a != before {
                self.remove_stamp(stamp);
                if keep {
                    self.insert(stamp, a);
                }
            }
        }
    }

    /// Check the invariants of the module documentation.
    pub fn check(&self) -> Result<(), String> {
        let reusable: Vec<(u64, &LazyArea)> =
            self.by_age.iter().filter(|(_, a)| a.reusable).map(|(s, a)| (*s, a)).collect();
        if reusable.len() != self.by_size.len() || reusable.len() != self.by_start.len() {
            return Err(format!(
                "lazy list: {} reusable areas, {} by size, {} by start",
                reusable.len(),
                self.by_size.len(),
                self.by_start.len()
            ));
        }
        for (stamp, a) in reusable {
            if !self.by_size.contains(&(a.pages, a.start, stamp))
                || self.by_start.get(&a.start) != Some(&(stamp, a.pages))
            {
                return Err(format!("lazy list: area {:#x}+{} missing from an index", a.start, a.pages));
            }
        }
        let sum: u64 = self.by_age.values().map(|a| a.pages).sum();
        if sum != self.pages {
            return Err(format!("lazy list: {} pages counted, {sum} on the list", self.pages));
        }
        let mut spans: Vec<(u64, u64)> = self.by_age.values().map(|a| (a.start, a.start + a.pages)).collect();
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
        assert_eq!(l.reusable_in(0, 300), vec![area(5, 6)]);
        assert_eq!(l.best_fit(6, 1), Some(area(5, 6)));
        assert_eq!(l.pages(), 16);
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
        l.by_size.clear();
        assert!(l.check().is_err());
    }
}
