//! Size pools: exact-size lists of freed areas, 1..=256 pages, kept outside the free tree.
//!
//! Owns: the pooled areas of one node (the engine keeps a `SizePools` under each node's pool
//! lock). Does not own: the free tree, busy areas, memory.
//!
//! Each size class has two sides:
//! - dirty: freed areas whose memory is still resident (lazy pages). Reusing one costs no
//!   syscall and no page fault.
//! - clean: areas whose memory was released by a purge. Their pages read as zero, so a zeroed
//!   allocation needs no memset.
//!
//! Both sides are FIFO queues in which allocation takes the newest entry (the back) and decay
//! takes the oldest (the front). As in the kernel, the pop looks at one entry only: if it is not
//! aligned as asked, it is rotated to the front and the pop misses, which keeps the fast path
//! O(1).
//!
//! Invariants (checked by [`SizePools::check`]): every entry of class `i` is `i + 1` pages;
//! `dirty_pages` and `len` equal the sums over the classes.

use crate::span::Span;
use std::collections::VecDeque;

/// Largest pooled area, in pages (the kernel's `MAX_VA_SIZE_PAGES`).
pub const POOL_MAX_PAGES: u64 = 256;

/// Entries of a class queue's first buffer (16 x 8 bytes = two cache lines).
const FIRST_CAPACITY: usize = 16;

/// Which side of a size class an entry is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolSide {
    /// Memory still resident.
    Dirty,
    /// Memory released.
    Clean,
}

#[derive(Clone, Debug, Default)]
struct Class {
    dirty: VecDeque<u64>,
    clean: VecDeque<u64>,
}

/// The 256 size classes of one node.
#[derive(Clone, Debug)]
pub struct SizePools {
    classes: Vec<Class>,
    len: u64,
    dirty_pages: u64,
}

impl Default for SizePools {
    fn default() -> Self {
        Self::new()
    }
}

impl SizePools {
    /// Empty pools.
    pub fn new() -> Self {
        // Made one by one: `vec![x; n]` clones `x`, and a queue's clone is a call with an
        // allocator and an iterator, which made 2 x 256 of them 54% of a process's first call.
        let classes = std::iter::repeat_with(Class::default).take(POOL_MAX_PAGES as usize).collect();
        SizePools { classes, len: 0, dirty_pages: 0 }
    }

    /// The class index of an area of `pages` pages, if it is poolable.
    #[inline]
    pub fn class_of(pages: u64) -> Option<usize> {
        (1..=POOL_MAX_PAGES).contains(&pages).then(|| (pages - 1) as usize)
    }

    /// Number of pooled areas.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when no area is pooled.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pages of pooled areas whose memory is still resident.
    pub fn dirty_pages(&self) -> u64 {
        self.dirty_pages
    }

    /// Length of each class, index `i` for `i + 1` pages.
    pub fn class_lens(&self) -> impl Iterator<Item = u64> + '_ {
        self.classes.iter().map(|c| (c.dirty.len() + c.clean.len()) as u64)
    }

    /// Pool an area. Panics if `pages` is not poolable (the engine checks first).
    #[inline]
    pub fn push(&mut self, start: u64, pages: u64, side: PoolSide) {
        let c = &mut self.classes[Self::class_of(pages).expect("area too large for the pools")];
        let q = match side {
            PoolSide::Dirty => {
                self.dirty_pages += pages;
                &mut c.dirty
            }
            PoolSide::Clean => &mut c.clean,
        };
        if q.capacity() == 0 {
            // A first buffer of 128 bytes: the hot end of one node's queue then never shares a
            // cache line with another node's queue allocated next to it.
            q.reserve_exact(FIRST_CAPACITY);
        }
        q.push_back(start);
        self.len += 1;
    }

    /// Take an area of exactly `pages` pages aligned to `align_pages`. Looks at the newest entry
    /// of the preferred side, then of the other side; a misaligned entry is rotated to the front
    /// and counts as a miss.
    #[inline]
    pub fn pop(&mut self, pages: u64, align_pages: u64, prefer: PoolSide) -> Option<(u64, PoolSide)> {
        let c = &mut self.classes[Self::class_of(pages)?];
        let (first, second) = match prefer {
            PoolSide::Dirty => ((&mut c.dirty, PoolSide::Dirty), (&mut c.clean, PoolSide::Clean)),
            PoolSide::Clean => ((&mut c.clean, PoolSide::Clean), (&mut c.dirty, PoolSide::Dirty)),
        };
        let side = Self::pop_aligned(first.0, align_pages)
            .map(|s| (s, first.1))
            .or_else(|| Self::pop_aligned(second.0, align_pages).map(|s| (s, second.1)))?;
        self.len -= 1;
        if side.1 == PoolSide::Dirty {
            self.dirty_pages -= pages;
        }
        Some(side)
    }

    /// Take a dirty area of exactly `pages` pages aligned to `align_pages` (newest entry only,
    /// as [`pop`](Self::pop) does), never a clean one.
    #[inline]
    pub fn pop_dirty(&mut self, pages: u64, align_pages: u64) -> Option<u64> {
        let c = &mut self.classes[Self::class_of(pages)?];
        let start = Self::pop_aligned(&mut c.dirty, align_pages)?;
        self.len -= 1;
        self.dirty_pages -= pages;
        Some(start)
    }

    /// The newest entry if it is aligned; a misaligned one is rotated to the front (a miss).
    #[inline]
    fn pop_aligned(q: &mut VecDeque<u64>, align_pages: u64) -> Option<u64> {
        let &start = q.back()?;
        if start & (align_pages - 1) != 0 {
            q.rotate_right(1);
            return None;
        }
        q.pop_back()
    }

    /// Detach every dirty entry, for a purge to release.
    pub fn take_dirty(&mut self) -> Vec<Span> {
        self.take_dirty_keeping(0)
    }

    /// Detach the oldest dirty entries so that about `keep_pages` dirty pages stay: every class
    /// gives up the same share of its dirty pages, oldest entries first (the shares are rounded
    /// to whole entries, carrying the rounding error from class to class so that the total is
    /// right to within one entry). For a purge to release.
    pub fn take_dirty_keeping(&mut self, keep_pages: u64) -> Vec<Span> {
        let mut out = Vec::new();
        if keep_pages >= self.dirty_pages {
            return out;
        }
        let share = (self.dirty_pages - keep_pages) as f64 / self.dirty_pages as f64;
        // Pages owed to the release so far and not yet given (negative: given in advance).
        let mut owed = 0.0f64;
        for (i, c) in self.classes.iter_mut().enumerate() {
            if c.dirty.is_empty() {
                continue;
            }
            let pages = i as u64 + 1;
            owed += (c.dirty.len() as u64 * pages) as f64 * share;
            let n = ((owed / pages as f64).round().max(0.0) as usize).min(c.dirty.len());
            owed -= (n as u64 * pages) as f64;
            self.len -= n as u64;
            self.dirty_pages -= n as u64 * pages;
            out.extend(c.dirty.drain(..n).map(|s| Span::new(s, pages)));
        }
        out
    }

    /// Detach the oldest `clean_len * numerator / denominator` clean entries of every class,
    /// for the free tree. Dirty entries are left alone: they are the areas a purge is about to
    /// release and put back, as the kernel decays a pool before repopulating it.
    pub fn decay(&mut self, numerator: u64, denominator: u64) -> Vec<Span> {
        let mut out = Vec::new();
        for (i, c) in self.classes.iter_mut().enumerate() {
            let pages = i as u64 + 1;
            let n = (c.clean.len() as u64 * numerator / denominator) as usize;
            self.len -= n as u64;
            out.extend(c.clean.drain(..n).map(|s| Span::new(s, pages)));
        }
        out
    }

    /// Detach every entry that overlaps one of `ranges` (`[start, end)` pairs), with its side.
    /// A scan of every entry, for the allocation failure path only.
    pub fn take_overlapping(&mut self, ranges: &[(u64, u64)]) -> Vec<(Span, PoolSide)> {
        let mut out = Vec::new();
        for (i, c) in self.classes.iter_mut().enumerate() {
            let pages = i as u64 + 1;
            let hit = |s: &u64| Span::new(*s, pages).overlaps_any(ranges);
            for (q, side) in [(&mut c.dirty, PoolSide::Dirty), (&mut c.clean, PoolSide::Clean)] {
                if q.iter().any(hit) {
                    q.retain(|s| {
                        let h = hit(s);
                        if h {
                            out.push((Span::new(*s, pages), side));
                        }
                        !h
                    });
                }
            }
        }
        for &(span, side) in &out {
            self.len -= 1;
            if side == PoolSide::Dirty {
                self.dirty_pages -= span.pages;
            }
        }
        out
    }

    /// Every pooled area with its side, for checkers and reports.
    pub fn entries(&self) -> Vec<(Span, PoolSide)> {
        let mut out = Vec::with_capacity(self.len as usize);
        for (i, c) in self.classes.iter().enumerate() {
            let pages = i as u64 + 1;
            out.extend(c.dirty.iter().map(|&s| (Span::new(s, pages), PoolSide::Dirty)));
            out.extend(c.clean.iter().map(|&s| (Span::new(s, pages), PoolSide::Clean)));
        }
        out
    }

    /// Check the counters against the classes.
    pub fn check(&self) -> Result<(), String> {
        let (mut len, mut dirty) = (0u64, 0u64);
        for (i, c) in self.classes.iter().enumerate() {
            len += (c.dirty.len() + c.clean.len()) as u64;
            dirty += c.dirty.len() as u64 * (i as u64 + 1);
        }
        if len != self.len || dirty != self.dirty_pages {
            return Err(format!(
                "pool counters: len {} (entries {}), dirty_pages {} (entries {})",
                self.len, len, self.dirty_pages, dirty
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_bounds() {
        assert_eq!(SizePools::class_of(0), None);
        assert_eq!(SizePools::class_of(1), Some(0));
        assert_eq!(SizePools::class_of(256), Some(255));
        assert_eq!(SizePools::class_of(257), None);
    }

    #[test]
    fn pop_prefers_the_asked_side_and_newest_entry() {
        let mut p = SizePools::new();
        p.push(10, 2, PoolSide::Dirty);
        p.push(20, 2, PoolSide::Dirty);
        p.push(30, 2, PoolSide::Clean);
        assert_eq!(p.dirty_pages(), 4);
        assert_eq!(p.pop(2, 1, PoolSide::Dirty), Some((20, PoolSide::Dirty)));
        assert_eq!(p.pop(2, 1, PoolSide::Clean), Some((30, PoolSide::Clean)));
        assert_eq!(p.pop(2, 1, PoolSide::Clean), Some((10, PoolSide::Dirty)));
        assert_eq!(p.pop(2, 1, PoolSide::Clean), None);
        assert_eq!(p.pop(3, 1, PoolSide::Clean), None);
        assert_eq!(p.dirty_pages(), 0);
        p.check().unwrap();
    }

    #[test]
    fn take_overlapping_detaches_only_entries_that_touch_a_range() {
        let mut p = SizePools::new();
        p.push(10, 2, PoolSide::Dirty); // [10, 12)
        p.push(12, 2, PoolSide::Clean); // [12, 14)
        p.push(20, 4, PoolSide::Dirty); // [20, 24)
        p.push(40, 1, PoolSide::Clean); // [40, 41)
        let mut got = p.take_overlapping(&[(11, 13), (23, 24)]);
        got.sort_by_key(|e| e.0);
        let s = Span::new;
        assert_eq!(
            got,
            vec![(s(10, 2), PoolSide::Dirty), (s(12, 2), PoolSide::Clean), (s(20, 4), PoolSide::Dirty)]
        );
        assert_eq!((p.len(), p.dirty_pages()), (1, 0));
        assert!(
            p.take_overlapping(&[(0, 40), (41, 100)]).is_empty(),
            "ranges ending at or starting after it"
        );
        p.check().unwrap();
    }

    #[test]
    fn misaligned_head_rotates_and_misses() {
        let mut p = SizePools::new();
        p.push(8, 1, PoolSide::Dirty);
        p.push(9, 1, PoolSide::Dirty);
        assert_eq!(p.pop(1, 8, PoolSide::Dirty), None);
        assert_eq!(p.pop(1, 8, PoolSide::Dirty), Some((8, PoolSide::Dirty)));
        assert_eq!(p.len(), 1);
        p.check().unwrap();
    }

    #[test]
    fn take_dirty_keeping_gives_up_the_oldest_share_of_every_class() {
        let mut p = SizePools::new();
        for s in 0..8 {
            p.push(100 + s, 2, PoolSide::Dirty);
            p.push(200 + s, 10, PoolSide::Dirty);
        }
        p.push(300, 4, PoolSide::Clean);
        assert_eq!(p.dirty_pages(), 96);
        assert!(p.take_dirty_keeping(96).is_empty(), "nothing over the budget");
        let out = p.take_dirty_keeping(48);
        let starts =
            |pages: u64| out.iter().filter(|a| a.pages == pages).map(|a| a.start).collect::<Vec<_>>();
        assert_eq!(starts(2), vec![100, 101, 102, 103], "oldest half of class 2");
        assert_eq!(starts(10), vec![200, 201, 202, 203], "oldest half of class 10");
        assert_eq!(p.dirty_pages(), 48);
        assert_eq!(p.pop(10, 1, PoolSide::Dirty), Some((207, PoolSide::Dirty)), "the newest stay");
        // A share smaller than one entry per class adds up across classes.
        let mut q = SizePools::new();
        for pages in 1..=10 {
            q.push(pages * 1000, pages, PoolSide::Dirty);
        }
        let out = q.take_dirty_keeping(55 / 2);
        let given = Span::total_pages(&out);
        assert!((given as i64 - 28).abs() <= 10, "gave {given} pages of the 28 owed");
        assert_eq!(q.dirty_pages(), 55 - given);
        assert_eq!(q.len(), 10 - out.len() as u64);
        q.check().unwrap();
        p.check().unwrap();
    }

    #[test]
    fn decay_takes_a_quarter_of_clean_oldest_first_and_take_dirty_empties_dirty() {
        let mut p = SizePools::new();
        for s in 0..12 {
            p.push(s * 10, 4, if s < 8 { PoolSide::Clean } else { PoolSide::Dirty });
        }
        let d = p.decay(1, 4);
        assert_eq!(
            d,
            vec![Span::new(0, 4), Span::new(10, 4)],
            "a quarter of the 8 clean entries, oldest first"
        );
        let dirty = p.take_dirty();
        assert_eq!(dirty.len(), 4);
        assert_eq!(p.len(), 6);
        assert_eq!(p.dirty_pages(), 0);
        let all = p.decay(1, 1);
        assert_eq!(all.len(), 6);
        assert!(p.is_empty());
        p.check().unwrap();
    }
}
