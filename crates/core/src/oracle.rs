//! A linear-scan model of free space, for tests.
//!
//! Owns: a plain sorted map of free ranges with the same operations as
//! [`FreeTree`](crate::FreeTree), each written the obvious O(n) way. The model tests run random
//! operation sequences on both and compare after every step; the engine's debug checks can
//! compare a tree search against [`Oracle::lowest_fit`] (the kernel's
//! `DEBUG_AUGMENT_LOWEST_MATCH_CHECK`).

use crate::fit::Request;
use std::collections::BTreeMap;

/// Free ranges as a `BTreeMap<start, end>`.
#[derive(Clone, Debug, Default)]
pub struct Oracle {
    free: BTreeMap<u64, u64>,
}

impl Oracle {
    /// Build from the ranges of a tree (or any sorted, disjoint list).
    pub fn from_ranges(ranges: &[(u64, u64)]) -> Self {
        Oracle { free: ranges.iter().copied().collect() }
    }

    /// The free ranges in address order.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.free.iter().map(|(&s, &e)| (s, e)).collect()
    }

    /// Lowest fit by linear scan: the first range (in address order) of at least `length`
    /// pages in which `req` fits; returns the candidate start.
    pub fn lowest_fit(&self, req: &Request, length: u64) -> Option<u64> {
        self.free.iter().filter(|(&s, &e)| e - s >= length).find_map(|(&s, &e)| req.candidate_in(s, e))
    }

    /// Remove `[start, start + size)` from the range that contains it.
    pub fn take(&mut self, start: u64, size: u64) -> bool {
        let Some((&s, &e)) = self.free.range(..=start).next_back() else {
            return false;
        };
        if start + size > e {
            return false;
        }
        self.free.remove(&s);
        if s < start {
            self.free.insert(s, start);
        }
        if start + size < e {
            self.free.insert(start + size, e);
        }
        true
    }

    /// Give a range back, merging with touching neighbours; false (and no change) on overlap.
    pub fn give(&mut self, start: u64, end: u64) -> bool {
        if start >= end {
            return false;
        }
        if let Some((_, &pe)) = self.free.range(..=start).next_back() {
            if pe > start {
                return false;
            }
        }
        if let Some((&ns, _)) = self.free.range(start..).next() {
            if ns < end {
                return false;
            }
        }
        let (mut s, mut e) = (start, end);
        if let Some((&ps, &pe)) = self.free.range(..start).next_back() {
            if pe == start {
                self.free.remove(&ps);
                s = ps;
            }
        }
        if let Some(ne) = self.free.remove(&end) {
            e = ne;
        }
        self.free.insert(s, e);
        true
    }
}
