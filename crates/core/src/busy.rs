//! The busy map: live areas by start page.
//!
//! Owns: one record per live area of one busy shard (the engine keeps one `BusyMap` per node
//! under the node lock; the Global and Split strategies have a single one). Does not own: free,
//! lazy or pooled areas.
//!
//! A free names the exact start of a live area; anything else (an interior page, a foreign
//! address, a second free) finds no record and is refused before anything changes. Only exact
//! lookups are needed on the hot paths, so this is a hash table, not an ordered tree; ordered
//! views (`vmallocinfo`, the checker) sort a copy.
//!
//! Table: open addressing with linear probing over a power-of-two number of slots, Fibonacci
//! hashing of the start page (one multiply), at most half full, and backward-shift deletion (no
//! tombstones, so probe sequences never degrade). Removals never shrink it: a program that frees
//! thousands of areas in a row would otherwise rebuild the table, and give the old one back to
//! the system, while its frees go on (a 4 MiB table's `munmap` took a millisecond there).
//! [`BusyMap::compact`] shrinks it instead, from the purges that are not threshold purges (idle
//! decay, explicit purges, the shrinker), as the lazy list's address maps do.
//! Slots are stored in 64-byte-aligned lines, so the table of one node never shares a cache
//! line with another allocation (two nodes' tables side by side cost the Nodes strategy its
//! two-thread scaling when they did: see `docs/bench-log/design-notes.md`).
//!
//! Invariants (checked by [`BusyMap::check`]): every key sits in the probe run that starts at
//! its home slot (no empty slot between home and key); `len` counts the keys; `pages` sums
//! their sizes.

/// One live area.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BusyArea<T: Copy> {
    /// Size in pages, guard pages included.
    pub pages: u64,
    /// Index of the node that allocated the area (the kernel's `vn_id`); `u16::MAX` for none.
    pub node: u16,
    /// Whatever the layer above records with the area (caller, requested bytes).
    pub tag: T,
}

const EMPTY: u64 = 0;
const MIN_SLOTS: usize = 16;
const KEYS_PER_LINE: usize = 8;
// One value to a line (`Line<_, 1>`): the engine's values are 40 bytes, so two to a line pair
// would put every second one across two cache lines, for the same memory (a line pair holding
// two values is 128 bytes, as two lines of one value each are).

/// A cache line (or a few) of slots, aligned so that no other data shares it.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct Line<X: Copy, const N: usize>([X; N]);

/// Live areas of one shard, keyed by start page.
#[derive(Clone, Debug)]
pub struct BusyMap<T: Copy + Default> {
    /// `start + 1` per slot; 0 marks an empty slot.
    keys: Vec<Line<u64, KEYS_PER_LINE>>,
    vals: Vec<Line<BusyArea<T>, 1>>,
    slots: usize,
    shift: u32,
    len: usize,
    pages: u64,
}

impl<T: Copy + Default> Default for BusyMap<T> {
    fn default() -> Self {
        Self::with_slots(MIN_SLOTS)
    }
}

impl<T: Copy + Default> BusyMap<T> {
    fn with_slots(slots: usize) -> Self {
        debug_assert!(slots.is_power_of_two() && slots >= MIN_SLOTS);
        BusyMap {
            keys: vec![Line([EMPTY; KEYS_PER_LINE]); slots / KEYS_PER_LINE],
            vals: vec![Line([BusyArea::default()]); slots],
            slots,
            shift: 64 - slots.trailing_zeros(),
            len: 0,
            pages: 0,
        }
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The addresses a lookup of `start` reads first, for a batch that prefetches them before
    /// its removals: its home slot's key and value (each value has a line of its own). Only
    /// addresses are computed; nothing is read.
    #[inline]
    pub fn home_lines(&self, start: u64) -> [usize; 2] {
        let i = self.home(start.wrapping_add(1));
        let key = &self.keys[i / KEYS_PER_LINE].0[i % KEYS_PER_LINE] as *const u64 as usize;
        [key, self.val(i) as *const BusyArea<T> as usize]
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots - 1
    }

    #[inline]
    fn key(&self, i: usize) -> u64 {
        self.keys[i / KEYS_PER_LINE].0[i % KEYS_PER_LINE]
    }

    #[inline]
    fn set_key(&mut self, i: usize, k: u64) {
        self.keys[i / KEYS_PER_LINE].0[i % KEYS_PER_LINE] = k;
    }

    #[inline]
    fn val(&self, i: usize) -> &BusyArea<T> {
        &self.vals[i].0[0]
    }

    #[inline]
    fn val_mut(&mut self, i: usize) -> &mut BusyArea<T> {
        &mut self.vals[i].0[0]
    }

    /// `(key, value)` of every occupied slot.
    fn occupied(&self) -> impl Iterator<Item = (usize, u64, &BusyArea<T>)> + '_ {
        let keys = self.keys.iter().flat_map(|l| l.0.iter().copied());
        keys.enumerate().filter(|&(_, k)| k != EMPTY).map(|(i, k)| (i, k, self.val(i)))
    }

    /// The slot holding `key`, if any.
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        let mut i = self.home(key);
        loop {
            let k = self.key(i);
            if k == key {
                return Some(i);
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & self.mask();
        }
    }

    fn resize(&mut self, slots: usize) {
        let old = std::mem::replace(self, Self::with_slots(slots));
        for (_, k, v) in old.occupied() {
            self.insert_new(k, *v);
        }
    }

    /// Insert a key known to be absent, with room guaranteed.
    #[inline]
    fn insert_new(&mut self, key: u64, area: BusyArea<T>) {
        let mut i = self.home(key);
        while self.key(i) != EMPTY {
            i = (i + 1) & self.mask();
        }
        self.set_key(i, key);
        *self.val_mut(i) = area;
        self.len += 1;
        self.pages += area.pages;
    }

    /// Record a live area. Returns false (and changes nothing) if the start is already live.
    #[inline]
    pub fn insert(&mut self, start: u64, area: BusyArea<T>) -> bool {
        if (self.len + 1) * 2 > self.slots {
            if self.get(start).is_some() {
                return false;
            }
            self.resize(self.slots * 2);
        }
        // One probe: the key is either in the run before the first empty slot, or absent.
        let key = start.wrapping_add(1);
        let mut i = self.home(key);
        loop {
            let k = self.key(i);
            if k == key {
                return false;
            }
            if k == EMPTY {
                break;
            }
            i = (i + 1) & self.mask();
        }
        self.set_key(i, key);
        *self.val_mut(i) = area;
        self.len += 1;
        self.pages += area.pages;
        true
    }

    /// Remove the record of the area starting at `start`.
    #[inline]
    pub fn remove(&mut self, start: u64) -> Option<BusyArea<T>> {
        let hole = self.find(start.wrapping_add(1))?;
        Some(self.remove_at(hole))
    }

    /// Remove the record of the area starting at `start` if `accept` says yes: `None` when
    /// there is none, `Some(Err(record))` when `accept` refused it (nothing changes).
    #[inline]
    pub fn remove_if(
        &mut self,
        start: u64,
        accept: impl FnOnce(&BusyArea<T>) -> bool,
    ) -> Option<Result<BusyArea<T>, BusyArea<T>>> {
        let hole = self.find(start.wrapping_add(1))?;
        if !accept(self.val(hole)) {
            return Some(Err(*self.val(hole)));
        }
        Some(Ok(self.remove_at(hole)))
    }

    #[inline]
    fn remove_at(&mut self, mut hole: usize) -> BusyArea<T> {
        let area = *self.val(hole);
        self.len -= 1;
        self.pages -= area.pages;
        // Backward-shift deletion: pull later members of the run into the hole when the hole
        // lies on their probe path (between their home and their slot, cyclically).
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let k = self.key(j);
            if k == EMPTY {
                break;
            }
            let home = self.home(k);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.set_key(hole, k);
                *self.val_mut(hole) = *self.val(j);
                hole = j;
            }
        }
        self.set_key(hole, EMPTY);
        area
    }

    /// Shrink the table when it is under an eighth full, to the smallest size at most a
    /// quarter full (not below the first size). For the purges that are not threshold purges,
    /// never while frees go on (module documentation).
    pub fn compact(&mut self) {
        if self.slots > MIN_SLOTS && self.len * 8 < self.slots {
            let mut to = self.slots;
            while to > MIN_SLOTS && self.len * 4 < to / 2 {
                to /= 2;
            }
            if to < self.slots {
                self.resize(to);
            }
        }
    }

    /// Slots of the table (a power of two).
    pub fn capacity(&self) -> usize {
        self.slots
    }

    /// The record of the area starting at `start`.
    #[inline]
    pub fn get(&self, start: u64) -> Option<&BusyArea<T>> {
        self.find(start.wrapping_add(1)).map(|i| self.val(i))
    }

    /// Mutable access to a record (to update its tag).
    #[inline]
    pub fn get_mut(&mut self, start: u64) -> Option<&mut BusyArea<T>> {
        self.find(start.wrapping_add(1)).map(|i| self.val_mut(i))
    }

    /// Number of live areas.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the shard holds no live area.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pages of live areas, guards included.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Every record, `(start, area)`, sorted by start.
    pub fn sorted(&self) -> Vec<(u64, BusyArea<T>)> {
        let mut v: Vec<_> = self.occupied().map(|(_, k, &a)| (k - 1, a)).collect();
        v.sort_unstable_by_key(|&(s, _)| s);
        v
    }

    /// Check the table invariants of the module doc.
    pub fn check(&self) -> Result<(), String> {
        let mask = self.mask();
        let (mut len, mut pages) = (0usize, 0u64);
        for (i, k, v) in self.occupied() {
            len += 1;
            pages += v.pages;
            let mut j = self.home(k);
            while j != i {
                if self.key(j) == EMPTY {
                    return Err(format!("busy map: start {:#x} unreachable from its home slot", k - 1));
                }
                j = (j + 1) & mask;
            }
        }
        if len != self.len || pages != self.pages {
            return Err(format!(
                "busy map counters: len {} ({len}), pages {} ({pages})",
                self.len, self.pages
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The addresses a prefetch asks for are those a lookup reads first: for a key alone in
    /// its run, its own slot's key and value, whichever start is asked for inside the tables,
    /// and a value never crosses a line.
    #[test]
    fn home_lines_are_what_a_lookup_reads_first() {
        let mut m: BusyMap<u64> = BusyMap::default();
        for s in (0..600u64).map(|i| i * 2 + 1000) {
            m.insert(s, BusyArea { pages: 2, node: 0, tag: s });
        }
        let keys = m.keys.as_ptr() as usize..m.keys.as_ptr() as usize + m.keys.len() * 64;
        let vals = m.vals.as_ptr() as usize
            ..m.vals.as_ptr() as usize + m.vals.len() * std::mem::size_of::<Line<BusyArea<u64>, 1>>();
        let mut own = 0;
        for s in (0..1200u64).map(|i| i + 1000) {
            let [k, v] = m.home_lines(s);
            assert!(keys.contains(&k) && vals.contains(&v), "start {s}: outside the tables");
            // The whole value lies in the line it starts in.
            assert!(v % 64 + std::mem::size_of::<BusyArea<u64>>() <= 64);
            if let Some(i) = m.find(s + 1) {
                if i == m.home(s + 1) {
                    own += 1;
                    assert_eq!(k, &m.keys[i / KEYS_PER_LINE].0[i % KEYS_PER_LINE] as *const u64 as usize);
                    assert_eq!(v, m.val(i) as *const BusyArea<u64> as usize);
                }
            }
        }
        assert!(own > 100, "only {own} keys sat in their home slot");
    }

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
        assert!(m.insert(0, a) && m.insert(u64::MAX - 1, a), "extreme starts");
        assert_eq!(m.sorted().iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, u64::MAX - 1]);
        m.check().unwrap();
    }

    #[test]
    fn removals_never_shrink_and_compact_does() {
        let mut m: BusyMap<u32> = BusyMap::default();
        let a = BusyArea { pages: 2, node: 0, tag: 0 };
        for k in 0..10_000u64 {
            assert!(m.insert(k * 2, a));
        }
        let full = m.capacity();
        assert_eq!(full, 32_768, "at most half full");
        for k in 0..9_900u64 {
            assert_eq!(m.remove(k * 2), Some(a));
        }
        assert_eq!(m.capacity(), full, "a run of frees rebuilds nothing");
        m.compact();
        assert_eq!(m.capacity(), 512, "100 keys: the smallest table at most a quarter full");
        m.check().unwrap();
        for k in 9_900..10_000u64 {
            assert_eq!(m.get(k * 2), Some(&a));
        }
        m.compact();
        assert_eq!(m.capacity(), 512, "an eighth full or more: left alone");
    }

    #[test]
    fn matches_a_shadow_map_through_growth_and_shrink() {
        use std::collections::BTreeMap;
        let mut m: BusyMap<u32> = BusyMap::default();
        let mut shadow = BTreeMap::new();
        let mut x = 0x1234_5678_9abc_def1u64;
        for step in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Clustered keys (as page starts are) and a phase of mostly removals.
            let key = (x % 5000) * if step % 3 == 0 { 16 } else { 1 };
            let grow = (step / 50_000) % 2 == 0;
            if x % 10 < if grow { 6 } else { 3 } {
                let a = BusyArea { pages: x % 7 + 1, node: 1, tag: step };
                let fresh = !shadow.contains_key(&key);
                if fresh {
                    shadow.insert(key, a);
                }
                assert_eq!(m.insert(key, a), fresh, "insert of {key:#x}");
            } else {
                assert_eq!(m.remove(key), shadow.remove(&key));
            }
            if step % 10_000 == 0 {
                let before = m.capacity();
                if step % 20_000 == 0 {
                    m.compact();
                    assert!(
                        m.capacity() <= before && (m.capacity() == 16 || m.len() * 8 >= m.capacity() / 2)
                    );
                }
                m.check().unwrap();
                assert_eq!(m.sorted(), shadow.iter().map(|(&k, &v)| (k, v)).collect::<Vec<_>>());
            }
        }
        m.check().unwrap();
        assert_eq!(m.len(), shadow.len());
    }
}
