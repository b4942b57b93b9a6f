//! The busy map: live areas by start page.
//!
//! Owns: one record per live area of one busy shard (the engine keeps one `BusyMap` per shard,
//! under that shard's busy lock; the Global strategy has a single shard). Does not own: free,
//! lazy or pooled areas.
//!
//! A free names the exact start of a live area; anything else (an interior page, a foreign
//! address, a second free) finds no record and is refused before anything changes. The map is a
//! hash table with a multiplicative hash of the start page: the free path needs exact lookups
//! only, and O(1) beats an ordered tree there. Ordered views (for `vmallocinfo`) sort a copy.
//!
//! Invariant: records never overlap (checked by the engine, which sees all shards at once).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// One live area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusyArea<T: Copy> {
    /// Size in pages, guard pages included.
    pub pages: u64,
    /// Index of the node that allocated the area (the kernel's `vn_id`); `u16::MAX` for none.
    pub node: u16,
    /// Whatever the layer above records with the area (caller, flags, requested bytes).
    pub tag: T,
}

/// Fibonacci hashing of a page number: one multiply, good spread for page-aligned keys.
#[derive(Default)]
pub struct PageHasher(u64);

impl Hasher for PageHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (x ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 ^= self.0 >> 29;
    }
}

/// Live areas of one shard, keyed by start page.
#[derive(Clone, Debug)]
pub struct BusyMap<T: Copy> {
    map: HashMap<u64, BusyArea<T>, BuildHasherDefault<PageHasher>>,
    pages: u64,
}

impl<T: Copy> Default for BusyMap<T> {
    fn default() -> Self {
        BusyMap { map: HashMap::default(), pages: 0 }
    }
}

impl<T: Copy> BusyMap<T> {
    /// Record a live area. Returns false (and changes nothing) if the start is already live.
    #[inline]
    pub fn insert(&mut self, start: u64, area: BusyArea<T>) -> bool {
        use std::collections::hash_map::Entry;
        match self.map.entry(start) {
            Entry::Occupied(_) => false,
            Entry::Vacant(v) => {
                v.insert(area);
                self.pages += area.pages;
                true
            }
        }
    }

    /// Remove the record of the area starting at `start`.
    #[inline]
    pub fn remove(&mut self, start: u64) -> Option<BusyArea<T>> {
        let a = self.map.remove(&start)?;
        self.pages -= a.pages;
        Some(a)
    }

    /// The record of the area starting at `start`.
    #[inline]
    pub fn get(&self, start: u64) -> Option<&BusyArea<T>> {
        self.map.get(&start)
    }

    /// Mutable access to a record (to update its tag).
    #[inline]
    pub fn get_mut(&mut self, start: u64) -> Option<&mut BusyArea<T>> {
        self.map.get_mut(&start)
    }

    /// Number of live areas.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when the shard holds no live area.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Pages of live areas, guards included.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Every record, `(start, area)`, sorted by start.
    pub fn sorted(&self) -> Vec<(u64, BusyArea<T>)> {
        let mut v: Vec<_> = self.map.iter().map(|(&s, &a)| (s, a)).collect();
        v.sort_unstable_by_key(|&(s, _)| s);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_and_double_remove() {
        let mut m: BusyMap<()> = BusyMap::default();
        let a = BusyArea { pages: 3, node: 0, tag: () };
        assert!(m.insert(10, a));
        assert!(!m.insert(10, a), "second insert of a live start is refused");
        assert_eq!(m.pages(), 3);
        assert_eq!(m.get(11), None, "interior page is not a start");
        assert_eq!(m.remove(10), Some(a));
        assert_eq!(m.remove(10), None, "second free finds nothing");
        assert!(m.is_empty());
        assert_eq!(m.pages(), 0);
    }
}
