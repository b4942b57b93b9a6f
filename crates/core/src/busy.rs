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
//! Table: open addressing with linear probing over a power-of-two number of slots, at most half
//! full, and backward-shift deletion (no tombstones, so probe sequences never degrade). The home
//! slot of a start is that of its run of 16 pages (a Fibonacci hash of `(start + 1) / 16`, one
//! multiply) plus its offset in the run: areas carved in a row get neighbouring slots, and the
//! runs spread over the table as single keys would. A slot holds the key and the index of its
//! record in a slab beside the table; only slots move when a deletion shifts a run back, so a
//! deletion touches the key lines of its run (four slots to a cache line) and the one record it
//! removes, never the records of the keys it moves (copying those was most of a bulk free's
//! time: `docs/bench-log/many-workers.md`, "the busy map's slab"). The slab's free entries form
//! a stack threaded through them, so the record a deletion frees is the next insertion's, and
//! records inserted in a row sit in a row: a program that frees in the order it allocated
//! reads them in address order. Removals never shrink either: a program that frees thousands of
//! areas in a row would otherwise rebuild the table, and give the old one back to the system,
//! while its frees go on (a 4 MiB table's `munmap` took a millisecond there).
//! [`BusyMap::compact`] shrinks both instead, from the purges that are not threshold purges
//! (idle decay, explicit purges, the shrinker), as the lazy list's address maps do.
//! Slots and records are stored in 64-byte-aligned lines, so the table of one node never shares
//! a cache line with another allocation (two nodes' tables side by side cost the Nodes strategy
//! its two-thread scaling when they did: see `docs/bench-log/design-notes.md`), and a record
//! never spans two lines.
//!
//! Invariants (checked by [`BusyMap::check`]): every key sits in the probe run that starts at
//! its home slot (no empty slot between home and key); every record of the slab is named by
//! exactly one slot or is on the free stack, once; `len` counts the keys; `pages` sums their
//! sizes.

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
const SLOTS_PER_LINE: usize = 4;
/// The end of the slab's free stack.
const NO_RECORD: u32 = u32::MAX;

/// A key (`start + 1`; 0 marks an empty slot) and the slab index of its record.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    key: u64,
    rec: u32,
}

/// A cache line (or a few) of slots or records, aligned so that no other data shares it.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct Line<X: Copy, const N: usize>([X; N]);

/// Live areas of one shard, keyed by start page.
#[derive(Clone, Debug)]
pub struct BusyMap<T: Copy + Default> {
    table: Vec<Line<Slot, SLOTS_PER_LINE>>,
    /// The records; a free one holds the index of the next free one in `pages`.
    recs: Vec<Line<BusyArea<T>, 1>>,
    /// The top of the free stack of `recs`, or [`NO_RECORD`].
    free_rec: u32,
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
            table: vec![Line([Slot::default(); SLOTS_PER_LINE]); slots / SLOTS_PER_LINE],
            recs: Vec::new(),
            free_rec: NO_RECORD,
            slots,
            shift: 64 - slots.trailing_zeros(),
            len: 0,
            pages: 0,
        }
    }

    /// The home slot of `key` (module documentation).
    #[inline]
    fn home(&self, key: u64) -> usize {
        let base = ((key >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize;
        (base + (key & 15) as usize) & self.mask()
    }

    /// The address a lookup of `start` reads first, for a batch that prefetches it before its
    /// removals: its home slot's line. Only the address is computed; nothing is read. (What the
    /// removal reads next follows from the slot: [`BusyMap::removal_lines`].)
    #[inline]
    pub fn home_lines(&self, start: u64) -> [usize; 1] {
        [self.slot_ref(self.home(start.wrapping_add(1))) as *const Slot as usize]
    }

    /// The addresses a removal of the live area at `start` reads after its slot, for a batch
    /// that prefetches them after its home lines: its record and the slot after its own (the
    /// backward shift reads it; another line when the key's slot ends its line). This reads
    /// the slots (prefetched by then), not the record.
    #[inline]
    pub fn removal_lines(&self, start: u64) -> Option<[usize; 2]> {
        let i = self.find(start.wrapping_add(1))?;
        let rec = self.rec_ref(self.slot(i).rec) as *const BusyArea<T> as usize;
        Some([rec, self.slot_ref((i + 1) & self.mask()) as *const Slot as usize])
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots - 1
    }

    #[inline]
    fn slot_ref(&self, i: usize) -> &Slot {
        &self.table[i / SLOTS_PER_LINE].0[i % SLOTS_PER_LINE]
    }

    #[inline]
    fn slot(&self, i: usize) -> Slot {
        *self.slot_ref(i)
    }

    #[inline]
    fn key(&self, i: usize) -> u64 {
        self.slot_ref(i).key
    }

    #[inline]
    fn set_slot(&mut self, i: usize, s: Slot) {
        self.table[i / SLOTS_PER_LINE].0[i % SLOTS_PER_LINE] = s;
    }

    #[inline]
    fn rec_ref(&self, r: u32) -> &BusyArea<T> {
        &self.recs[r as usize].0[0]
    }

    #[inline]
    fn rec_mut(&mut self, r: u32) -> &mut BusyArea<T> {
        &mut self.recs[r as usize].0[0]
    }

    #[inline]
    fn val(&self, i: usize) -> &BusyArea<T> {
        self.rec_ref(self.slot(i).rec)
    }

    #[inline]
    fn val_mut(&mut self, i: usize) -> &mut BusyArea<T> {
        let r = self.slot(i).rec;
        self.rec_mut(r)
    }

    /// A record slot for `area`: the top of the free stack, else a new one.
    #[inline]
    fn new_record(&mut self, area: BusyArea<T>) -> u32 {
        let r = self.free_rec;
        if r != NO_RECORD {
            self.free_rec = self.rec_ref(r).pages as u32;
            *self.rec_mut(r) = area;
            r
        } else {
            // At most one record per live area of one shard: far below 2^32 - 1 (each area
            // is a page or more of address space, each record 64 bytes).
            let r = self.recs.len() as u32;
            self.recs.push(Line([area]));
            r
        }
    }

    /// Push record `r` on the free stack.
    #[inline]
    fn free_record(&mut self, r: u32) {
        let next = self.free_rec;
        self.rec_mut(r).pages = next as u64;
        self.free_rec = r;
    }

    /// `(slot, key, record)` of every occupied slot.
    fn occupied(&self) -> impl Iterator<Item = (usize, u64, &BusyArea<T>)> + '_ {
        let slots = self.table.iter().flat_map(|l| l.0.iter().copied());
        slots.enumerate().filter(|&(_, s)| s.key != EMPTY).map(|(i, s)| (i, s.key, self.rec_ref(s.rec)))
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

    /// A table of `slots` slots over the same records (the slab is kept as it is).
    fn resize(&mut self, slots: usize) {
        let mut t = Self::with_slots(slots);
        for l in &self.table {
            for s in l.0.iter().filter(|s| s.key != EMPTY) {
                t.place(*s);
            }
        }
        self.table = t.table;
        self.slots = t.slots;
        self.shift = t.shift;
    }

    /// Put a slot whose key is known to be absent in the table, with room guaranteed.
    #[inline]
    fn place(&mut self, s: Slot) {
        let mut i = self.home(s.key);
        while self.key(i) != EMPTY {
            i = (i + 1) & self.mask();
        }
        self.set_slot(i, s);
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
        let rec = self.new_record(area);
        self.set_slot(i, Slot { key, rec });
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
        let rec = self.slot(hole).rec;
        let area = *self.rec_ref(rec);
        self.free_record(rec);
        self.len -= 1;
        self.pages -= area.pages;
        // Backward-shift deletion: pull later members of the run into the hole when the hole
        // lies on their probe path (between their home and their slot, cyclically). Only slots
        // move; their records stay where they are.
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let s = self.slot(j);
            if s.key == EMPTY {
                break;
            }
            let home = self.home(s.key);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.set_slot(hole, s);
                hole = j;
            }
        }
        self.set_slot(hole, Slot::default());
        area
    }

    /// Shrink the table when it is under an eighth full, to the smallest size at most a
    /// quarter full (not below the first size), and the slab when under half its records are
    /// live (rebuilt in address order). For the purges that are not threshold purges, never
    /// while frees go on (module documentation).
    pub fn compact(&mut self) {
        let mut to = self.slots;
        if self.slots > MIN_SLOTS && self.len * 8 < self.slots {
            while to > MIN_SLOTS && self.len * 4 < to / 2 {
                to /= 2;
            }
        }
        if to < self.slots || self.recs.len() > 2 * self.len + MIN_SLOTS {
            let mut live: Vec<(u64, BusyArea<T>)> = self.occupied().map(|(_, k, &a)| (k, a)).collect();
            live.sort_unstable_by_key(|&(k, _)| k);
            let mut t = Self::with_slots(to);
            t.recs.reserve_exact(live.len());
            for (key, area) in live {
                let rec = t.new_record(area);
                t.place(Slot { key, rec });
                t.len += 1;
                t.pages += area.pages;
            }
            *self = t;
        }
    }

    /// Records in the slab, live or free (its memory, in 64-byte lines).
    pub fn records(&self) -> usize {
        self.recs.len()
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
        // How many times each record is named: by a slot, or by the free stack.
        let mut named = vec![0u8; self.recs.len()];
        for (i, s) in self.table.iter().flat_map(|l| l.0.iter()).enumerate() {
            if s.key == EMPTY {
                continue;
            }
            let Some(n) = named.get_mut(s.rec as usize) else {
                return Err(format!("busy map: start {:#x} names record {} past the slab", s.key - 1, s.rec));
            };
            *n += 1;
            len += 1;
            pages += self.rec_ref(s.rec).pages;
            let mut j = self.home(s.key);
            while j != i {
                if self.key(j) == EMPTY {
                    return Err(format!("busy map: start {:#x} unreachable from its home slot", s.key - 1));
                }
                j = (j + 1) & mask;
            }
        }
        let mut r = self.free_rec;
        while r != NO_RECORD {
            let Some(n) = named.get_mut(r as usize) else {
                return Err(format!("busy map: free record {r} past the slab"));
            };
            *n += 1;
            if *n > 1 {
                break;
            }
            r = self.rec_ref(r).pages as u32;
        }
        if let Some(r) = named.iter().position(|&n| n != 1) {
            return Err(format!("busy map: record {r} named {} times (slots and free stack)", named[r]));
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

    /// The address a prefetch asks for is the line a lookup reads first (for a key alone in
    /// its run, its own slot's), inside the table whichever start is asked for; a record's
    /// address is its own, inside the slab, and a record never crosses a line.
    #[test]
    fn home_and_record_lines_are_what_a_lookup_reads() {
        let mut m: BusyMap<u64> = BusyMap::default();
        for s in (0..600u64).map(|i| i * 2 + 1000) {
            m.insert(s, BusyArea { pages: 2, node: 0, tag: s });
        }
        let table = m.table.as_ptr() as usize..m.table.as_ptr() as usize + m.table.len() * 64;
        let slab = m.recs.as_ptr() as usize
            ..m.recs.as_ptr() as usize + m.recs.len() * std::mem::size_of::<Line<BusyArea<u64>, 1>>();
        let mut own = 0;
        for s in (0..1200u64).map(|i| i + 1000) {
            let [k] = m.home_lines(s);
            assert!(table.contains(&k), "start {s}: outside the table");
            if let Some(i) = m.find(s + 1) {
                let [v, next] = m.removal_lines(s).expect("a live start has a record");
                assert!(table.contains(&next));
                assert!(slab.contains(&v) && v % 64 + std::mem::size_of::<BusyArea<u64>>() <= 64);
                assert_eq!(v, m.val(i) as *const BusyArea<u64> as usize);
                assert_eq!(m.val(i).tag, s, "the record is the start's own");
                if i == m.home(s + 1) {
                    own += 1;
                    assert_eq!(k, m.slot_ref(i) as *const Slot as usize);
                }
            } else {
                assert_eq!(m.removal_lines(s), None);
            }
        }
        assert!(own > 100, "only {own} keys sat in their home slot");
    }

    /// A deletion that shifts a run back moves slots only: every other record stays at its
    /// address (and keeps its contents), and the freed record is the next insertion's.
    #[test]
    fn a_deletion_moves_no_record() {
        let mut m: BusyMap<u64> = BusyMap::default();
        // Scattered starts (an arithmetic run hashes too evenly to collide often).
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut starts: Vec<u64> = (0..7000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % (1 << 36)
            })
            .collect();
        starts.sort_unstable();
        starts.dedup();
        for &s in &starts {
            assert!(m.insert(s, BusyArea { pages: 3, node: 1, tag: s * 7 }));
        }
        let at: Vec<usize> = starts.iter().map(|&s| m.removal_lines(s).unwrap()[0]).collect();
        let mut shifted = 0;
        for (n, &gone) in starts.iter().enumerate().step_by(5) {
            let before = m.table.iter().flat_map(|l| l.0.iter()).filter(|x| x.key != EMPTY).count();
            let hole = m.find(gone + 1).unwrap();
            let freed = m.removal_lines(gone).unwrap()[0];
            assert_eq!(m.remove(gone).map(|a| a.tag), Some(gone * 7));
            shifted += usize::from(m.key(hole) != EMPTY);
            assert_eq!(before - 1, m.len());
            let fresh = 1 << 40 | n as u64;
            assert!(m.insert(fresh, BusyArea { pages: 1, node: 2, tag: 0 }));
            assert_eq!(m.removal_lines(fresh).map(|l| l[0]), Some(freed), "the freed record is reused first");
            assert_eq!(m.remove(fresh).map(|a| a.node), Some(2));
        }
        assert!(shifted > 50, "only {shifted} deletions shifted a run: the test shows nothing");
        for (i, &s) in starts.iter().enumerate() {
            if i % 5 != 0 {
                assert_eq!(m.removal_lines(s).map(|l| l[0]), Some(at[i]), "record of {s} moved");
                assert_eq!(m.get(s).map(|a| a.tag), Some(s * 7));
            }
        }
        m.check().unwrap();
    }

    /// A compaction packs the slab in address order and keeps every record.
    #[test]
    fn compact_packs_the_slab_in_address_order() {
        let mut m: BusyMap<u64> = BusyMap::default();
        for s in (0..4000u64).rev() {
            m.insert(s * 2, BusyArea { pages: 2, node: 0, tag: s });
        }
        for s in (0..4000u64).filter(|s| s % 4 != 0) {
            m.remove(s * 2);
        }
        assert_eq!(m.records(), 4000, "removals keep the slab");
        m.compact();
        assert_eq!(m.records(), 1000);
        m.check().unwrap();
        let lines: Vec<usize> = (0..1000u64).map(|s| m.removal_lines(s * 8).unwrap()[0]).collect();
        assert!(lines.windows(2).all(|w| w[1] == w[0] + 64), "records in address order, packed");
        assert!((0..1000u64).all(|s| m.get(s * 8).map(|a| a.tag) == Some(s * 4)));
    }

    /// A named pattern of starts: the `i`-th start.
    type Pattern = (&'static str, fn(u64) -> u64);

    /// The home slot keeps runs of 16 pages together (so a free in address order reads slots
    /// in order) yet spreads the runs: every pattern of starts a program makes keeps its
    /// lookups short, a dense run of one-page areas included.
    #[test]
    fn probe_runs_stay_short_for_every_pattern() {
        let patterns: [Pattern; 7] = [
            ("dense", |i| i + 7),
            ("guarded", |i| i * 2),
            ("three", |i| i * 3 + 1),
            ("sixteen", |i| i * 16),
            ("seventeen", |i| i * 17),
            ("huge", |i| i * 512),
            ("scattered", |i: u64| i.wrapping_mul(0xD6E8_FEB8_6659_FD93).rotate_left(17) % (1 << 40)),
        ];
        for (name, start) in patterns {
            let mut m: BusyMap<()> = BusyMap::default();
            for i in 0..40_000 {
                m.insert(start(i), BusyArea { pages: 1, node: 0, tag: () });
            }
            let (mut sum, mut max) = (0usize, 0usize);
            for i in 0..40_000 {
                let key = start(i) + 1;
                let d = m.find(key).unwrap().wrapping_sub(m.home(key)) & m.mask();
                sum += d;
                max = max.max(d);
            }
            let mean = sum as f64 / 40_000.0;
            eprintln!("{name}: mean {mean:.2}, max {max}");
            assert!(mean < 2.0 && max < 64, "{name}: mean distance {mean:.2}, max {max} slots");
        }
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
