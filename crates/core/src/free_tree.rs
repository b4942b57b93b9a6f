//! The free-space tree: every free range of an arena, keyed by start, augmented with the
//! largest range size in each subtree.
//!
//! Owns: the free ranges of one arena (the engine keeps it under its free-space lock).
//! Does not own: busy, lazy or pooled areas; memory; locks.
//!
//! Shape: an AVL tree stored in a slab (`Vec<Node>` with `u32` links), so it needs no `unsafe`
//! and no per-node heap allocation. Each node carries `max_size`, the largest `end - start` in
//! its subtree, itself included. The search for the lowest-address fit descends left first and
//! prunes every subtree whose `max_size` is below the request's search length
//! ([`Request::search_length`]): O(log n).
//!
//! ```text
//!                 [40,48) max 16
//!                /              \
//!        [8,10) max 6         [60,76) max 16
//!        /        \
//!   [0,2) max 2  [20,26) max 6
//! ```
//!
//! Invariants (checked by [`FreeTree::check`]):
//! 1. In-order traversal gives strictly increasing starts; every range is non-empty.
//! 2. Free ranges never touch or overlap: merging is eager (`prev.end < next.start`).
//! 3. `max_size` of every node is the maximum size in its subtree.
//! 4. AVL balance: subtree heights differ by at most one; `height` fields are exact.
//! 5. `free_pages` is the sum of the range sizes; `len` is the number of ranges.

use crate::fit::{classify, FitType, Request};
use crate::span::Span;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Node {
    start: u64,
    end: u64,
    max_size: u64,
    left: u32,
    right: u32,
    height: u8,
}

/// The augmented free-space tree. See the module documentation.
#[derive(Clone, Debug)]
pub struct FreeTree {
    nodes: Vec<Node>,
    spare: Vec<u32>,
    root: u32,
    len: usize,
    free_pages: u64,
}

/// A structural error: the operation was refused and the tree is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeError {
    /// The range given back overlaps a range that is already free (a double free in the caller).
    Overlap {
        /// Start of the range given back.
        start: u64,
        /// End of the range given back.
        end: u64,
    },
    /// The range is empty or reversed.
    Empty,
    /// The range to take is not entirely inside one free range.
    NotFree,
}

impl Default for FreeTree {
    fn default() -> Self {
        Self::new()
    }
}

impl FreeTree {
    /// An empty tree (no free space).
    pub fn new() -> Self {
        FreeTree { nodes: Vec::new(), spare: Vec::new(), root: NIL, len: 0, free_pages: 0 }
    }

    /// A tree whose free space is exactly `[start, end)`.
    pub fn with_range(start: u64, end: u64) -> Self {
        let mut t = Self::new();
        if start < end {
            t.insert_merge(start, end).expect("empty tree cannot overlap");
        }
        t
    }

    /// Number of free ranges.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there is no free space at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Total free pages.
    pub fn free_pages(&self) -> u64 {
        self.free_pages
    }

    /// The largest free range size (0 when empty).
    pub fn largest(&self) -> u64 {
        self.max(self.root)
    }

    /// Free ranges in address order.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(self.len);
        self.walk(self.root, &mut out);
        out
    }

    /// Find the lowest-address fit for `req` under the search length rule and take it out of
    /// the tree. Returns the start of the allocated range and the fit type it had.
    pub fn alloc(&mut self, req: &Request) -> Option<(u64, FitType)> {
        let (n, cand) = self.find_lowest(req, req.search_length())?;
        Some((cand, self.clip(n, cand, req.size_pages)))
    }

    /// As [`FreeTree::alloc`], but without the conservative length: finds the lowest block in
    /// which the aligned request truly fits. May visit O(n) nodes when alignment is large;
    /// the engine uses it only after the fast search failed.
    pub fn alloc_exact(&mut self, req: &Request) -> Option<(u64, FitType)> {
        let (n, cand) = self.find_lowest(req, req.size_pages)?;
        Some((cand, self.clip(n, cand, req.size_pages)))
    }

    /// The start the conservative search would return, without changing anything.
    pub fn peek_lowest(&self, req: &Request) -> Option<u64> {
        self.find_lowest(req, req.search_length()).map(|(_, c)| c)
    }

    /// Take the exact range `[start, end)` out of the free space (it must lie inside one free
    /// range).
    pub fn take(&mut self, start: u64, end: u64) -> Result<FitType, TreeError> {
        if start >= end {
            return Err(TreeError::Empty);
        }
        let n = self.floor(start);
        if n == NIL || self.nodes[n as usize].end < end {
            return Err(TreeError::NotFree);
        }
        Ok(self.clip(n, start, end - start))
    }

    /// The lowest base for congruent areas (the kernel's `pcp_get_vm_areas` search): the
    /// smallest `base`, a multiple of `align` (a power of two) and at least `lo`, such that every
    /// part (a [`Span`] from the base: `[base + start, base + start + pages)`) lies inside one free
    /// range and the whole span ends at most at `hi`. `None` when there is none (or the span
    /// overflows). Changes nothing; take the parts with [`FreeTree::take`].
    ///
    /// A sweep: at a base where part `i` does not fit, no base below the next free range's
    /// start minus `i`'s offset can fit it (no free range starts in between, and the one that
    /// holds the part's start, if any, ends too early for every later start too), so the base
    /// jumps there. Each jump passes a range boundary: O(parts × ranges × log ranges) at worst.
    pub fn find_congruent(&self, parts: &[Span], align: u64, lo: u64, hi: u64) -> Option<u64> {
        if parts.is_empty() || parts.iter().any(|p| p.pages == 0) || !align.is_power_of_two() {
            return None;
        }
        let span = parts.iter().map(|p| p.start.checked_add(p.pages)).collect::<Option<Vec<u64>>>()?;
        let span = span.into_iter().max()?;
        let align_up = |x: u64| x.checked_next_multiple_of(align);
        let mut base = align_up(lo)?;
        loop {
            if base.checked_add(span)? > hi {
                return None;
            }
            let mut jump = None;
            for &Span { start: off, pages } in parts {
                let s = base + off;
                let n = self.floor(s);
                if n != NIL && self.nodes[n as usize].end >= s + pages {
                    continue;
                }
                let m = self.ceil_after(s);
                if m == NIL {
                    return None;
                }
                jump = Some(self.nodes[m as usize].start.saturating_sub(off).max(base + 1));
                break;
            }
            match jump {
                None => return Some(base),
                Some(b) => base = align_up(b)?,
            }
        }
    }

    /// Free pages touching the busy range `[start, end)`: `(before, after)`, the sizes of the
    /// free ranges that end at `start` and that begin at `end` (0 where none touches).
    pub fn free_around(&self, start: u64, end: u64) -> (u64, u64) {
        let range = |n: u32| (n != NIL).then(|| &self.nodes[n as usize]);
        let before = range(self.floor(start)).filter(|r| r.end == start);
        let after = range(self.floor(end)).filter(|r| r.start == end);
        let size = |r: Option<&Node>| r.map_or(0, |r| r.end - r.start);
        (size(before), size(after))
    }

    /// Whether one free range holds all of `[start, end)` (false for an empty range).
    pub fn covers(&self, start: u64, end: u64) -> bool {
        let n = self.floor(start);
        start < end && n != NIL && self.nodes[n as usize].end >= end
    }

    /// Give `[start, end)` back, merging with the free neighbours that touch it (eagerly, so
    /// free ranges never touch). Refuses a range that overlaps free space.
    pub fn insert_merge(&mut self, start: u64, end: u64) -> Result<(), TreeError> {
        if start >= end {
            return Err(TreeError::Empty);
        }
        let prev = self.floor(start);
        let next = self.ceil_after(start);
        if prev != NIL && self.nodes[prev as usize].end > start {
            return Err(TreeError::Overlap { start, end });
        }
        if next != NIL && self.nodes[next as usize].start < end {
            return Err(TreeError::Overlap { start, end });
        }
        let merge_prev = prev != NIL && self.nodes[prev as usize].end == start;
        let merge_next = next != NIL && self.nodes[next as usize].start == end;
        match (merge_prev, merge_next) {
            (false, false) => {
                let n = self.new_node(start, end);
                self.root = self.insert_at(self.root, n);
                self.len += 1;
            }
            (true, false) => {
                let ps = self.nodes[prev as usize].start;
                self.root = self.set_range_at(self.root, ps, ps, end);
            }
            (false, true) => {
                let (ns, ne) = (self.nodes[next as usize].start, self.nodes[next as usize].end);
                // Growing the next range downward keeps its place in the order.
                self.root = self.set_range_at(self.root, ns, start, ne);
            }
            (true, true) => {
                let ps = self.nodes[prev as usize].start;
                let (ns, ne) = (self.nodes[next as usize].start, self.nodes[next as usize].end);
                // Unlink the next range first, then grow the previous one over both.
                self.root = self.remove_at(self.root, ns);
                self.len -= 1;
                self.root = self.set_range_at(self.root, ps, ps, ne);
            }
        }
        self.free_pages += end - start;
        Ok(())
    }

    /// Check every invariant of the module doc. Returns a description of the first violation.
    pub fn check(&self) -> Result<(), String> {
        let mut last_end: Option<u64> = None;
        let mut count = 0usize;
        let mut sum = 0u64;
        self.check_node(self.root, &mut last_end, &mut count, &mut sum)?;
        if count != self.len {
            return Err(format!("len {} but {} ranges in the tree", self.len, count));
        }
        if sum != self.free_pages {
            return Err(format!("free_pages {} but ranges sum to {}", self.free_pages, sum));
        }
        Ok(())
    }

    // ---- search -------------------------------------------------------------------------

    /// Lowest block (in address order) of size >= `length` in which `req` fits.
    fn find_lowest(&self, req: &Request, length: u64) -> Option<(u32, u64)> {
        self.search(self.root, req, length)
    }

    fn search(&self, n: u32, req: &Request, length: u64) -> Option<(u32, u64)> {
        if n == NIL || self.max(n) < length {
            return None;
        }
        let node = self.nodes[n as usize];
        // Blocks of the left subtree end at or before `node.start`: useful only above `lo`.
        if node.start > req.lo {
            if let Some(hit) = self.search(node.left, req, length) {
                return Some(hit);
            }
        }
        // This block and the right subtree start at or after `node.start`.
        if node.start >= req.hi {
            return None;
        }
        if node.end - node.start >= length {
            if let Some(cand) = req.candidate_in(node.start, node.end) {
                return Some((n, cand));
            }
        }
        self.search(node.right, req, length)
    }

    /// The node with the largest start <= `key`.
    fn floor(&self, key: u64) -> u32 {
        let (mut n, mut best) = (self.root, NIL);
        while n != NIL {
            let node = &self.nodes[n as usize];
            if node.start <= key {
                best = n;
                n = node.right;
            } else {
                n = node.left;
            }
        }
        best
    }

    /// The node with the smallest start > `key`.
    fn ceil_after(&self, key: u64) -> u32 {
        let (mut n, mut best) = (self.root, NIL);
        while n != NIL {
            let node = &self.nodes[n as usize];
            if node.start > key {
                best = n;
                n = node.left;
            } else {
                n = node.right;
            }
        }
        best
    }

    /// Take `[cand, cand + size)` out of node `n`, which must contain it.
    fn clip(&mut self, n: u32, cand: u64, size: u64) -> FitType {
        let Node { start, end, .. } = self.nodes[n as usize];
        let fit = classify(start, end, cand, size).expect("clip outside its block");
        match fit {
            FitType::Full => {
                self.root = self.remove_at(self.root, start);
                self.len -= 1;
            }
            FitType::LeftEdge => self.root = self.set_range_at(self.root, start, cand + size, end),
            FitType::RightEdge => self.root = self.set_range_at(self.root, start, start, cand),
            FitType::NoEdge => {
                // Keep the node for the right remainder; the left remainder is a new node.
                self.root = self.set_range_at(self.root, start, cand + size, end);
                let left = self.new_node(start, cand);
                self.root = self.insert_at(self.root, left);
                self.len += 1;
            }
        }
        self.free_pages -= size;
        fit
    }

    // ---- AVL mechanics ------------------------------------------------------------------

    fn new_node(&mut self, start: u64, end: u64) -> u32 {
        let node = Node { start, end, max_size: end - start, left: NIL, right: NIL, height: 1 };
        if let Some(i) = self.spare.pop() {
            self.nodes[i as usize] = node;
            i
        } else {
            let i = u32::try_from(self.nodes.len()).expect("free tree exceeds u32 nodes");
            assert!(i != NIL, "free tree exceeds u32 nodes");
            self.nodes.push(node);
            i
        }
    }

    #[inline]
    fn max(&self, n: u32) -> u64 {
        if n == NIL {
            0
        } else {
            self.nodes[n as usize].max_size
        }
    }

    #[inline]
    fn height(&self, n: u32) -> i32 {
        if n == NIL {
            0
        } else {
            self.nodes[n as usize].height as i32
        }
    }

    fn update(&mut self, n: u32) {
        let Node { start, end, left, right, .. } = self.nodes[n as usize];
        let h = 1 + self.height(left).max(self.height(right));
        let m = (end - start).max(self.max(left)).max(self.max(right));
        let node = &mut self.nodes[n as usize];
        node.height = h as u8;
        node.max_size = m;
    }

    fn rotate_right(&mut self, n: u32) -> u32 {
        let l = self.nodes[n as usize].left;
        self.nodes[n as usize].left = self.nodes[l as usize].right;
        self.nodes[l as usize].right = n;
        self.update(n);
        self.update(l);
        l
    }

    fn rotate_left(&mut self, n: u32) -> u32 {
        let r = self.nodes[n as usize].right;
        self.nodes[n as usize].right = self.nodes[r as usize].left;
        self.nodes[r as usize].left = n;
        self.update(n);
        self.update(r);
        r
    }

    fn balance(&mut self, n: u32) -> u32 {
        self.update(n);
        let Node { left, right, .. } = self.nodes[n as usize];
        let bf = self.height(left) - self.height(right);
        if bf > 1 {
            let (ll, lr) = (self.nodes[left as usize].left, self.nodes[left as usize].right);
            if self.height(ll) < self.height(lr) {
                self.nodes[n as usize].left = self.rotate_left(left);
            }
            return self.rotate_right(n);
        }
        if bf < -1 {
            let (rl, rr) = (self.nodes[right as usize].left, self.nodes[right as usize].right);
            if self.height(rr) < self.height(rl) {
                self.nodes[n as usize].right = self.rotate_right(right);
            }
            return self.rotate_left(n);
        }
        n
    }

    fn insert_at(&mut self, n: u32, new: u32) -> u32 {
        if n == NIL {
            return new;
        }
        if self.nodes[new as usize].start < self.nodes[n as usize].start {
            let l = self.insert_at(self.nodes[n as usize].left, new);
            self.nodes[n as usize].left = l;
        } else {
            let r = self.insert_at(self.nodes[n as usize].right, new);
            self.nodes[n as usize].right = r;
        }
        self.balance(n)
    }

    fn remove_at(&mut self, n: u32, key: u64) -> u32 {
        assert!(n != NIL, "free tree: removing a start that is not in the tree");
        let Node { start, left, right, .. } = self.nodes[n as usize];
        if key < start {
            let l = self.remove_at(left, key);
            self.nodes[n as usize].left = l;
        } else if key > start {
            let r = self.remove_at(right, key);
            self.nodes[n as usize].right = r;
        } else {
            self.spare.push(n);
            if left == NIL {
                return right;
            }
            if right == NIL {
                return left;
            }
            let (rest, min) = self.remove_min(right);
            self.nodes[min as usize].left = left;
            self.nodes[min as usize].right = rest;
            return self.balance(min);
        }
        self.balance(n)
    }

    /// Detach the leftmost node of subtree `n`: returns (new subtree root, detached node).
    fn remove_min(&mut self, n: u32) -> (u32, u32) {
        let left = self.nodes[n as usize].left;
        if left == NIL {
            return (self.nodes[n as usize].right, n);
        }
        let (l, min) = self.remove_min(left);
        self.nodes[n as usize].left = l;
        (self.balance(n), min)
    }

    /// Change the range of the node keyed `key`; the new start must keep its in-order place.
    fn set_range_at(&mut self, n: u32, key: u64, start: u64, end: u64) -> u32 {
        assert!(n != NIL, "free tree: resizing a start that is not in the tree");
        let cur = self.nodes[n as usize].start;
        if key < cur {
            let l = self.set_range_at(self.nodes[n as usize].left, key, start, end);
            self.nodes[n as usize].left = l;
        } else if key > cur {
            let r = self.set_range_at(self.nodes[n as usize].right, key, start, end);
            self.nodes[n as usize].right = r;
        } else {
            let node = &mut self.nodes[n as usize];
            node.start = start;
            node.end = end;
        }
        self.update(n);
        n
    }

    fn walk(&self, n: u32, out: &mut Vec<(u64, u64)>) {
        if n == NIL {
            return;
        }
        let node = &self.nodes[n as usize];
        self.walk(node.left, out);
        out.push((node.start, node.end));
        self.walk(node.right, out);
    }

    fn check_node(
        &self,
        n: u32,
        last_end: &mut Option<u64>,
        count: &mut usize,
        sum: &mut u64,
    ) -> Result<(i32, u64), String> {
        if n == NIL {
            return Ok((0, 0));
        }
        let node = self.nodes[n as usize];
        let (hl, ml) = self.check_node(node.left, last_end, count, sum)?;
        if node.start >= node.end {
            return Err(format!("empty range [{:#x}, {:#x})", node.start, node.end));
        }
        if let Some(prev_end) = *last_end {
            if prev_end >= node.start {
                return Err(format!(
                    "free ranges touch or overlap: previous ends at {:#x}, next starts at {:#x}",
                    prev_end, node.start
                ));
            }
        }
        *last_end = Some(node.end);
        *count += 1;
        *sum += node.end - node.start;
        let (hr, mr) = self.check_node(node.right, last_end, count, sum)?;
        let m = (node.end - node.start).max(ml).max(mr);
        if m != node.max_size {
            return Err(format!(
                "max_size of [{:#x}, {:#x}) is {} but subtree max is {}",
                node.start, node.end, node.max_size, m
            ));
        }
        if (hl - hr).abs() > 1 || node.height as i32 != 1 + hl.max(hr) {
            return Err(format!("AVL balance broken at [{:#x}, {:#x})", node.start, node.end));
        }
        Ok((1 + hl.max(hr), m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(size: u64, align: u64) -> Request {
        Request::new(size, align, 0, u64::MAX).unwrap()
    }

    #[test]
    fn lowest_fit_and_all_fit_types() {
        let mut t = FreeTree::with_range(0, 100);
        assert_eq!(t.alloc(&req(10, 1)), Some((0, FitType::LeftEdge)));
        assert_eq!(t.alloc(&req(16, 16)), Some((16, FitType::NoEdge)));
        assert_eq!(t.ranges(), vec![(10, 16), (32, 100)]);
        assert_eq!(t.alloc(&req(6, 1)), Some((10, FitType::Full)));
        let w = Request::new(4, 1, 90, 100).unwrap();
        assert_eq!(t.alloc(&w), Some((90, FitType::NoEdge)));
        let r = Request::new(6, 1, 94, 100).unwrap();
        assert_eq!(t.alloc(&r), Some((94, FitType::Full)));
        let re = Request::new(8, 1, 0, 90).unwrap();
        assert_eq!(t.alloc(&re), Some((32, FitType::LeftEdge)));
        let right = Request::new(8, 1, 82, 90).unwrap();
        assert_eq!(t.alloc(&right), Some((82, FitType::RightEdge)));
        assert_eq!(t.ranges(), vec![(40, 82)]);
        t.check().unwrap();
    }

    /// Against a brute force over every base, on random trees over 0..200 and random parts.
    #[test]
    fn congruent_search_finds_the_lowest_base_where_every_part_fits() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..3000 {
            let mut t = FreeTree::with_range(0, 200);
            for _ in 0..rnd(12) {
                let (s, len) = (rnd(200), 1 + rnd(20));
                let _ = t.take(s, (s + len).min(200));
            }
            let parts: Vec<Span> = (0..1 + rnd(4)).map(|_| Span::new(rnd(40), 1 + rnd(8))).collect();
            let align = 1 << rnd(4);
            let (lo, hi) = (rnd(30), 150 + rnd(51));
            let fits = |b: u64| {
                parts.iter().all(|p| t.ranges().iter().any(|&(s, e)| s <= b + p.start && b + p.end() <= e))
                    && b + parts.iter().map(|p| p.end()).max().unwrap() <= hi
            };
            let want = (lo..=hi).find(|&b| b % align == 0 && fits(b));
            let got = t.find_congruent(&parts, align, lo, hi);
            assert_eq!(
                got,
                want,
                "round {round}: parts {parts:?} align {align} window [{lo}, {hi}) ranges {:?}",
                t.ranges()
            );
            if let Some(b) = got {
                // The parts overlap each other in some rounds; take them only when they do not.
                let mut sorted: Vec<(u64, u64)> = parts.iter().map(|p| (b + p.start, b + p.end())).collect();
                sorted.sort_unstable();
                if sorted.windows(2).all(|w| w[0].1 <= w[1].0) {
                    for (s, e) in sorted {
                        t.take(s, e).unwrap();
                    }
                    t.check().unwrap();
                }
            }
        }
    }

    #[test]
    fn free_around_sees_only_ranges_that_touch() {
        let mut t = FreeTree::new();
        t.insert_merge(0, 10).unwrap();
        t.insert_merge(20, 25).unwrap();
        t.insert_merge(40, 70).unwrap();
        // [10, 20) touches a range on each side; [26, 40) only the one after it.
        assert_eq!(t.free_around(10, 20), (10, 5));
        assert_eq!(t.free_around(26, 40), (0, 30));
        assert_eq!(t.free_around(25, 39), (5, 0));
        assert_eq!(t.free_around(70, 80), (30, 0));
        assert_eq!(FreeTree::new().free_around(5, 6), (0, 0));
    }

    #[test]
    fn covers_only_ranges_inside_one_free_range() {
        let mut t = FreeTree::new();
        t.insert_merge(0, 10).unwrap();
        t.insert_merge(20, 25).unwrap();
        assert!(t.covers(0, 10) && t.covers(2, 9) && t.covers(20, 25));
        assert!(!t.covers(5, 11), "past the range's end");
        assert!(!t.covers(5, 21), "across a busy gap");
        assert!(!t.covers(10, 12) && !t.covers(30, 31), "busy pages");
        assert!(!t.covers(3, 3), "an empty range");
        assert!(!FreeTree::new().covers(0, 1));
    }

    #[test]
    fn merging_is_eager_on_both_sides() {
        let mut t = FreeTree::new();
        t.insert_merge(0, 10).unwrap();
        t.insert_merge(20, 30).unwrap();
        t.insert_merge(10, 20).unwrap();
        assert_eq!(t.ranges(), vec![(0, 30)]);
        t.insert_merge(40, 50).unwrap();
        t.insert_merge(30, 35).unwrap();
        t.insert_merge(37, 40).unwrap();
        assert_eq!(t.ranges(), vec![(0, 35), (37, 50)]);
        assert_eq!(t.free_pages(), 48);
        t.check().unwrap();
    }

    #[test]
    fn overlapping_give_back_is_refused_and_changes_nothing() {
        let mut t = FreeTree::with_range(10, 20);
        let before = t.ranges();
        assert_eq!(t.insert_merge(15, 25), Err(TreeError::Overlap { start: 15, end: 25 }));
        assert_eq!(t.insert_merge(5, 11), Err(TreeError::Overlap { start: 5, end: 11 }));
        assert_eq!(t.insert_merge(12, 13), Err(TreeError::Overlap { start: 12, end: 13 }));
        assert_eq!(t.insert_merge(3, 3), Err(TreeError::Empty));
        assert_eq!(t.ranges(), before);
        assert_eq!(t.free_pages(), 10);
    }

    #[test]
    fn exhaustion_returns_none() {
        let mut t = FreeTree::with_range(0, 4);
        assert!(t.alloc(&req(5, 1)).is_none());
        assert!(t.alloc(&req(4, 1)).is_some());
        assert!(t.alloc(&req(1, 1)).is_none());
        assert!(t.is_empty());
    }

    #[test]
    fn conservative_length_skips_aligned_small_block_but_exact_finds_it() {
        // [8, 10) is 2 pages and 8-aligned, but shorter than 2 + 8 - 1.
        let mut t = FreeTree::new();
        t.insert_merge(8, 10).unwrap();
        let r = req(2, 8);
        assert_eq!(t.peek_lowest(&r), None);
        assert_eq!(t.alloc_exact(&r), Some((8, FitType::Full)));
    }

    #[test]
    fn take_exact_range() {
        let mut t = FreeTree::with_range(0, 100);
        assert_eq!(t.take(40, 50), Ok(FitType::NoEdge));
        assert_eq!(t.take(45, 46), Err(TreeError::NotFree));
        assert_eq!(t.take(30, 41), Err(TreeError::NotFree));
        assert_eq!(t.ranges(), vec![(0, 40), (50, 100)]);
    }

    #[test]
    fn many_inserts_stay_balanced() {
        let mut t = FreeTree::new();
        for i in 0..10_000u64 {
            t.insert_merge(i * 4, i * 4 + 2).unwrap();
        }
        t.check().unwrap();
        assert_eq!(t.len(), 10_000);
        // Height of an AVL tree with 10k nodes is at most 1.44 log2(n) ~ 19.
        assert!(t.height(t.root) <= 20);
        for i in (0..10_000u64).step_by(2) {
            t.insert_merge(i * 4 + 2, i * 4 + 4).unwrap();
        }
        t.check().unwrap();
        assert_eq!(t.len(), 5_000);
    }
}
