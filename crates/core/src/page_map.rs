//! A map from page numbers to slot numbers: the address indexes of a node's lazy list.
//!
//! Open addressing with linear probing in a power-of-two table, Fibonacci hashing of the key,
//! and deletion by shifting the entries that follow back into the hole, so there are no
//! tombstones and a lookup stops at the first empty entry. The table doubles when it would be
//! more than half full; inserts and removals never shrink it, so once a list has been as long
//! as it gets they allocate nothing. [`PageMap::compact`] halves it until it is at least a
//! quarter full when it is under an eighth full: the lazy list calls it in the purges that are
//! not threshold purges (idle decay, explicit purges, the shrinker), never while frees go on:
//! called from every purge and step Move, it rebuilt the maps 548 times in a run of xthread,
//! shrinking and growing them again, for about 3 M instructions.
//!
//! Owned by one [`LazyList`](crate::lazy_list::LazyList), so under its node's lock.
//!
//! Why not an ordered map: the lazy list's lookups by address are exact (the area that starts
//! at a page, the area that ends at one), and the one walk in address order, along a run of
//! adjacent areas, goes from one area's end to the next area's start. A B-tree paid for an
//! order nothing needed on every free and every reuse: under callgrind its inserts and
//! removals were a fifth of the instructions of the shim's large allocations and frees on xthread
//! (docs/bench-log/design-notes.md, section 4, "The lazy list's address indexes").
//!
//! Why not the busy map's table (`vmarena_core::busy::BusyMap`), the same kind of table: it keeps a
//! value of an area record beside each key in cache-line-aligned blocks and sums pages; and it then
//! halved its table on removal below an eighth full (it is now compacted by the same purges as this
//! map), while a lazy list's length swings with every purge, so it resized all the time, and each
//! operation cost more. Under the callgrind command of `docs/bench-log/design-notes.md` the whole
//! run took 95.4 M instructions with two busy maps, 93.2 M with two that never shrink, 88.5-89.8 M
//! with the B-tree and 83.6-85.8 M with this map (single runs, and ranges of three or four: the run
//! varies by about 1 M with the threads' interleaving under valgrind).
//!
//! Invariants (checked by [`PageMap::check`]): every key sits in the probe sequence from its
//! home entry with no empty entry before it; `len` is the number of keys; the table is empty
//! or a power of two at most half full.

/// The key of an empty entry (no page number reaches it).
const EMPTY: u64 = u64::MAX;
/// Entries of the first table.
const FIRST_CAPACITY: usize = 16;

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    value: u32,
}

const VACANT: Entry = Entry { key: EMPTY, value: 0 };

/// See the module documentation.
#[derive(Debug, Default)]
pub struct PageMap {
    entries: Vec<Entry>,
    len: usize,
}

impl PageMap {
    /// True when the map holds no key.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Entries of the table.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// The entry `key` hashes to, in a table of `capacity` (a power of two) entries.
    fn home(key: u64, capacity: usize) -> usize {
        // Fibonacci hashing: the high bits of the product mix every bit of the key, so page
        // numbers that share their low bits (areas aligned alike) still spread.
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - capacity.trailing_zeros())) as usize
    }

    /// The index of `key`'s entry, if it is present.
    fn find(&self, key: u64) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        let mask = self.entries.len() - 1;
        let mut i = Self::home(key, self.entries.len());
        loop {
            match self.entries[i].key {
                k if k == key => return Some(i),
                EMPTY => return None,
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<u32> {
        self.find(key).map(|i| self.entries[i].value)
    }

    /// Map `key` to `value`; `key` must not be present (the lazy list's areas do not overlap,
    /// so no two share a start or an end).
    pub fn insert(&mut self, key: u64, value: u32) {
        assert!(key != EMPTY, "a page number");
        if (self.len + 1) * 2 > self.entries.len() {
            self.grow();
        }
        let mask = self.entries.len() - 1;
        let mut i = Self::home(key, self.entries.len());
        while self.entries[i].key != EMPTY {
            assert!(self.entries[i].key != key, "page {key:#x} is in the map already");
            i = (i + 1) & mask;
        }
        self.entries[i] = Entry { key, value };
        self.len += 1;
    }

    /// Remove `key`, returning its value.
    pub fn remove(&mut self, key: u64) -> Option<u32> {
        let mut hole = self.find(key)?;
        let value = self.entries[hole].value;
        let mask = self.entries.len() - 1;
        // Shift back each following entry whose home is not between the hole and itself
        // (cyclically), so that every key stays reachable from its home without a gap.
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let k = self.entries[j].key;
            if k == EMPTY {
                break;
            }
            let home = Self::home(k, self.entries.len());
            let stays = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !stays {
                self.entries[hole] = self.entries[j];
                hole = j;
            }
        }
        self.entries[hole] = VACANT;
        self.len -= 1;
        Some(value)
    }

    /// Double the table (or make the first one) and insert every key again.
    #[cold]
    fn grow(&mut self) {
        self.rebuild((self.entries.len() * 2).max(FIRST_CAPACITY));
    }

    /// Under an eighth full: halve the table until it is at least a quarter full (or as small
    /// as the first table), so that memory follows the keys after a purge emptied the list.
    pub fn compact(&mut self) {
        let cap = self.entries.len();
        if cap > FIRST_CAPACITY && self.len * 8 < cap {
            let mut to = cap;
            while to > FIRST_CAPACITY && self.len * 4 < to {
                to /= 2;
            }
            self.rebuild(to);
        }
    }

    /// Move every key into a new table of `capacity` entries (a power of two, more than twice
    /// the keys).
    #[cold]
    fn rebuild(&mut self, capacity: usize) {
        debug_assert!(capacity.is_power_of_two() && self.len * 2 < capacity);
        let old = std::mem::replace(&mut self.entries, vec![VACANT; capacity]);
        self.len = 0;
        for e in old.into_iter().filter(|e| e.key != EMPTY) {
            self.insert(e.key, e.value);
        }
    }

    /// Every key with its value, in no particular order (a scan of the whole table, for
    /// tests: the lazy list walks its own list instead).
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.entries.iter().filter(|e| e.key != EMPTY).map(|e| (e.key, e.value))
    }

    /// Remove every key (the table keeps its size).
    #[cfg(test)]
    pub fn clear(&mut self) {
        self.entries.fill(VACANT);
        self.len = 0;
    }

    /// Check the invariants of the module documentation.
    pub fn check(&self) -> Result<(), String> {
        let cap = self.entries.len();
        if cap != 0 && (!cap.is_power_of_two() || self.len * 2 > cap) {
            return Err(format!("page map: {} keys in {cap} entries", self.len));
        }
        let mut n = 0;
        for (i, e) in self.entries.iter().enumerate() {
            if e.key == EMPTY {
                continue;
            }
            n += 1;
            let mut p = Self::home(e.key, cap);
            while p != i {
                if self.entries[p].key == EMPTY {
                    return Err(format!("page map: key {:#x} past an empty entry", e.key));
                }
                p = (p + 1) & (cap - 1);
            }
        }
        if n != self.len {
            return Err(format!("page map: {n} keys, {} counted", self.len));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Random inserts and removals against `std`'s map, with keys drawn from a small range (so
    /// probe runs collide, wrap around the table's end and are shifted back on removal) and
    /// keys that share their low bits (as aligned areas do).
    #[test]
    fn random_operations_match_a_std_map() {
        for seed in 1..=6u64 {
            let mut rng = seed.wrapping_mul(0x2545_F491_4F6C_DD1D);
            let mut next = || {
                rng ^= rng >> 12;
                rng ^= rng << 25;
                rng ^= rng >> 27;
                rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
            };
            let mut m = PageMap::default();
            let mut model: HashMap<u64, u32> = HashMap::new();
            for step in 0..4000u32 {
                let r = next();
                let key = if seed % 2 == 0 { r % 97 } else { (r % 61) << 20 };
                if r >> 60 < 9 {
                    if let std::collections::hash_map::Entry::Vacant(v) = model.entry(key) {
                        v.insert(step);
                        m.insert(key, step);
                    }
                } else {
                    assert_eq!(m.remove(key), model.remove(&key), "seed {seed} step {step}");
                }
                let probe = next() % 128;
                let probe = if seed % 2 == 0 { probe } else { probe << 20 };
                assert_eq!(m.get(probe), model.get(&probe).copied(), "seed {seed} step {step}");
                assert_eq!(m.len(), model.len());
                if step % 64 == 0 {
                    m.check().unwrap();
                    let mut got: Vec<_> = m.iter().collect();
                    let mut want: Vec<_> = model.iter().map(|(&k, &v)| (k, v)).collect();
                    got.sort_unstable();
                    want.sort_unstable();
                    assert_eq!(got, want, "seed {seed} step {step}");
                }
            }
        }
    }

    #[test]
    fn the_table_grows_at_half_full_and_keeps_its_size_when_emptied() {
        let mut m = PageMap::default();
        assert_eq!(m.get(5), None);
        assert_eq!(m.remove(5), None);
        for k in 0..8 {
            m.insert(k, k as u32);
        }
        assert_eq!(m.entries.len(), 16);
        m.insert(8, 8);
        assert_eq!(m.entries.len(), 32);
        for k in 0..9 {
            assert_eq!(m.remove(k), Some(k as u32));
        }
        assert_eq!((m.len(), m.entries.len()), (0, 32));
        m.check().unwrap();
    }

    #[test]
    fn compact_shrinks_a_sparse_table_and_keeps_its_keys() {
        let mut m = PageMap::default();
        for k in 0..1000u64 {
            m.insert(k << 8, k as u32);
        }
        let big = m.entries.len();
        assert_eq!(big, 2048);
        m.compact();
        assert_eq!(m.entries.len(), big, "half full: nothing to do");
        for k in 0..990u64 {
            assert_eq!(m.remove(k << 8), Some(k as u32));
        }
        m.compact();
        assert_eq!(m.entries.len(), FIRST_CAPACITY * 2, "ten keys: at least a quarter full");
        for k in 990..1000u64 {
            assert_eq!(m.get(k << 8), Some(k as u32));
        }
        m.check().unwrap();
        for k in 990..1000u64 {
            m.remove(k << 8);
        }
        m.compact();
        assert_eq!((m.len(), m.entries.len()), (0, FIRST_CAPACITY));
    }

    #[test]
    #[should_panic(expected = "in the map already")]
    fn a_key_is_inserted_once() {
        let mut m = PageMap::default();
        m.insert(7, 1);
        m.insert(7, 2);
    }

    #[test]
    fn check_finds_a_key_past_a_hole() {
        let mut m = PageMap::default();
        // Keys with one home: the second sits after the first.
        let cap = FIRST_CAPACITY;
        let a = 1u64;
        let b = (2..).find(|&k| PageMap::home(k, cap) == PageMap::home(a, cap)).unwrap();
        m.insert(a, 1);
        m.insert(b, 2);
        m.check().unwrap();
        let i = m.find(a).unwrap();
        m.entries[i] = VACANT;
        m.len -= 1;
        assert!(m.check().unwrap_err().contains("past an empty entry"));
    }
}
