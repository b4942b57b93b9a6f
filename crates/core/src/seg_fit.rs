//! `SegFit`: segregated free lists over one range (vmem's power-of-two free lists, refined as
//! TLSF refines them: eight classes per power of two), with boundary tags for every segment.
//!
//! Every segment of `[lo, hi)`, free or allocated, is a node on an address-ordered doubly
//! linked list; adjacent free segments never stand side by side (a free merges at once). A free
//! segment is also on the list of its size class; a bitmap says which classes have one.
//! Allocated segments are found by their start in a hash map.
//!
//! Large requests (at least 1/65536 of the range) take the lowest start (the highest, for a
//! range that grows down) among the first 4 segments of the classes that hold them, so that
//! large blocks pack at one end and the untouched part stays whole.
//!
//! Instant fit: the request's guaranteed length (its size plus what alignment and phase may
//! cost) is rounded up to a class whose every segment holds it; the first segment of the first
//! non-empty class from there is taken, in constant time (with a nocross boundary, the first
//! four of each class are tried, as such a segment may hold the request only across it). Only
//! when none holds the request (a window, a boundary, or no segment that long) are the other
//! segments long enough for the size searched, one by one: a refusal means that no start
//! exists.
//!
//! Best fit (vmem's `VM_BESTFIT`, chosen by [`SegFit::best_fit`]): the shortest segment in
//! which the request has a start, ties to the lowest start (the highest, growing down). Every
//! segment of a class is shorter than every segment of the next, so the search walks the
//! classes from the request's size upwards and stops at the first with a fitting segment,
//! after walking that class's whole list.
//!
//! Owns: its segments, in one vector (ids are `u32`, reused), no locks, no `unsafe`.

use crate::fit::Request;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const NIL: u32 = u32::MAX;
/// Classes: lengths 1 to 7 alone, then eight per power of two up to 2^63.
const CLASSES: usize = 8 + 61 * 8;
const WORDS: usize = CLASSES.div_ceil(64);
/// Requests of at least 1/65536 of the range take the lowest (or, growing down, the highest)
/// start among the first [`ORDERED_LOOK`] segments of the classes that hold them: large
/// blocks are few, and packing them at one end keeps the untouched part of the range whole.
const ORDERED_SHIFT: u32 = 16;
const ORDERED_LOOK: usize = 4;

/// The class a segment of `len` (at least 1) is listed in.
fn class_floor(len: u64) -> usize {
    if len < 8 {
        return len as usize;
    }
    let fl = len.ilog2();
    let sl = (len >> (fl - 3)) & 7;
    8 + (fl as usize - 3) * 8 + sl as usize
}

/// The shortest length of class `c`.
fn class_base(c: usize) -> u64 {
    if c < 8 {
        return c as u64;
    }
    let fl = (c - 8) / 8 + 3;
    let sl = ((c - 8) % 8) as u64;
    (8 + sl) << (fl - 3)
}

/// The first class whose every segment is at least `need` long.
fn class_ceil(need: u64) -> usize {
    let c = class_floor(need.max(1));
    if class_base(c) == need.max(1) {
        c
    } else {
        c + 1
    }
}

/// A multiplicative hash for integer keys (starts): one multiply, no per-map seed.
#[derive(Default)]
pub struct StartHasher(u64);

impl Hasher for StartHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[derive(Clone, Copy, Debug)]
struct Seg {
    start: u64,
    len: u64,
    /// Address order.
    prev: u32,
    next: u32,
    /// The class list (free segments only).
    fprev: u32,
    fnext: u32,
    free: bool,
}

/// Segregated free lists over `[lo, hi)`.
pub struct SegFit {
    lo: u64,
    hi: u64,
    /// Carve each allocation from the top of its segment (the range grows downwards).
    high: bool,
    /// Best fit instead of instant fit.
    best: bool,
    segs: Vec<Seg>,
    spare: Vec<u32>,
    heads: Vec<u32>,
    bitmap: [u64; WORDS],
    allocated: HashMap<u64, u32, BuildHasherDefault<StartHasher>>,
    free_len: u64,
    free_count: usize,
}

impl SegFit {
    /// All of `[lo, hi)` free (`lo < hi`).
    pub fn new(lo: u64, hi: u64) -> SegFit {
        Self::growing(lo, hi, false)
    }

    /// All of `[lo, hi)` free, each allocation carved from the top of its segment when `high`
    /// (so that two neighbouring ranges, one growing up and one down, keep their untouched
    /// parts side by side).
    pub fn growing(lo: u64, hi: u64, high: bool) -> SegFit {
        assert!(lo < hi, "an empty range");
        let mut s = SegFit {
            lo,
            hi,
            high,
            best: false,
            segs: Vec::new(),
            spare: Vec::new(),
            heads: vec![NIL; CLASSES],
            bitmap: [0; WORDS],
            allocated: HashMap::default(),
            free_len: 0,
            free_count: 0,
        };
        let id = s.new_seg(lo, hi - lo, false);
        s.push_free(id);
        s
    }

    /// The same range, allocating by best fit (see the module doc) instead of instant fit.
    pub fn best_fit(mut self) -> SegFit {
        self.best = true;
        self
    }

    /// Free length in all.
    pub fn free_len(&self) -> u64 {
        self.free_len
    }

    /// Free segments.
    pub fn free_ranges(&self) -> usize {
        self.free_count
    }

    /// Length held by live allocations.
    pub fn allocated_len(&self) -> u64 {
        self.hi - self.lo - self.free_len
    }

    /// Live allocations.
    pub fn live(&self) -> usize {
        self.allocated.len()
    }

    /// The longest free segment (0 when none).
    pub fn largest(&self) -> u64 {
        let Some(c) = (0..CLASSES).rev().find(|&c| self.heads[c] != NIL) else { return 0 };
        let mut best = 0;
        let mut id = self.heads[c];
        while id != NIL {
            best = best.max(self.segs[id as usize].len);
            id = self.segs[id as usize].fnext;
        }
        best
    }

    /// The length of the live allocation at `start`.
    pub fn len_of(&self, start: u64) -> Option<u64> {
        self.allocated.get(&start).map(|&id| self.segs[id as usize].len)
    }

    /// Allocate `req` (instant fit, or best fit when so built; see the module doc): its start.
    pub fn alloc(&mut self, req: &Request) -> Option<u64> {
        if self.best {
            let (id, cand) = self.search_best(req)?;
            return Some(self.carve(id, cand, req.size_pages));
        }
        // What the alignment and phase may cost; a nocross boundary is left to the check of
        // each segment (a larger class for it would carve far larger segments than needed).
        let need = req.size_pages.saturating_add(req.align_pages.saturating_sub(1));
        let first = class_ceil(need);
        if need >= (self.hi - self.lo) >> ORDERED_SHIFT {
            if let Some((id, cand)) = self.search_ordered(req, first) {
                return Some(self.carve(id, cand, req.size_pages));
            }
        }
        if let Some((id, cand)) = self.search(req, first, CLASSES, true) {
            return Some(self.carve(id, cand, req.size_pages));
        }
        // Segments that may be long enough although their class does not promise it, and the
        // rest of the promising classes (a nocross boundary or a window refused their first).
        let (id, cand) = self
            .search(req, class_floor(req.size_pages), first.min(CLASSES), false)
            .or_else(|| self.search(req, first, CLASSES, false))?;
        Some(self.carve(id, cand, req.size_pages))
    }

    /// Free the allocation at `start`, merging it with free neighbours: its length.
    pub fn free(&mut self, start: u64) -> Option<u64> {
        let mut id = self.allocated.remove(&start)?;
        let len = self.segs[id as usize].len;
        self.segs[id as usize].free = true;
        let prev = self.segs[id as usize].prev;
        if prev != NIL && self.segs[prev as usize].free {
            self.unlist(prev);
            self.absorb_next(prev);
            id = prev;
        }
        let next = self.segs[id as usize].next;
        if next != NIL && self.segs[next as usize].free {
            self.unlist(next);
            self.absorb_next(id);
        }
        self.push_free(id);
        Some(len)
    }

    /// Free segments in address order.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(self.free_count);
        let mut id = self.first();
        while id != NIL {
            let s = &self.segs[id as usize];
            if s.free {
                out.push((s.start, s.start + s.len));
            }
            id = s.next;
        }
        out
    }

    /// Check every invariant; the first violation found.
    pub fn check(&self) -> Result<(), String> {
        let (mut at, mut id, mut prev) = (self.lo, self.first(), NIL);
        let (mut free_len, mut free_count, mut live) = (0, 0, 0);
        while id != NIL {
            let s = &self.segs[id as usize];
            if s.start != at || s.len == 0 || s.prev != prev {
                return Err(format!(
                    "segment {id} at {:#x}+{:#x} breaks the address chain at {at:#x}",
                    s.start, s.len
                ));
            }
            if s.free {
                if prev != NIL && self.segs[prev as usize].free {
                    return Err(format!("free segments side by side at {at:#x}"));
                }
                free_len += s.len;
                free_count += 1;
            } else {
                live += 1;
                if self.allocated.get(&s.start) != Some(&id) {
                    return Err(format!("allocated segment at {:#x} missing from the map", s.start));
                }
            }
            at = s.start + s.len;
            prev = id;
            id = s.next;
        }
        if at != self.hi {
            return Err(format!("segments end at {at:#x}, not {:#x}", self.hi));
        }
        if (free_len, free_count, live) != (self.free_len, self.free_count, self.allocated.len()) {
            return Err("counts disagree with the segments".into());
        }
        let mut listed = 0;
        for c in 0..CLASSES {
            let (mut id, mut p) = (self.heads[c], NIL);
            if (id != NIL) != (self.bitmap[c / 64] >> (c % 64) & 1 == 1) {
                return Err(format!("class {c}: bitmap disagrees with its list"));
            }
            while id != NIL {
                let s = &self.segs[id as usize];
                if !s.free || class_floor(s.len) != c || s.fprev != p {
                    return Err(format!("class {c}: segment {id} is misfiled"));
                }
                listed += 1;
                p = id;
                id = s.fnext;
            }
        }
        if listed != free_count {
            return Err(format!("{listed} listed, {free_count} free"));
        }
        Ok(())
    }

    // ---- internals -------------------------------------------------------------------------

    /// The lowest segment: always id 0 (a merge keeps the left segment's id, a split keeps it
    /// for the left part, and the first segment made is `[lo, hi)`).
    fn first(&self) -> u32 {
        0
    }

    fn new_seg(&mut self, start: u64, len: u64, free: bool) -> u32 {
        let seg = Seg { start, len, prev: NIL, next: NIL, fprev: NIL, fnext: NIL, free };
        if let Some(id) = self.spare.pop() {
            self.segs[id as usize] = seg;
            id
        } else {
            self.segs.push(seg);
            (self.segs.len() - 1) as u32
        }
    }

    /// The first free segment, from class `from` (inclusive) to `to` (exclusive), in which the
    /// request has a start; `promised`: every segment of these classes holds the request but
    /// for a window or a nocross boundary, so without a window only the first few of each class
    /// are looked at (one without a nocross boundary).
    fn search(&self, req: &Request, from: usize, to: usize, promised: bool) -> Option<(u32, u64)> {
        let unwindowed = req.lo <= self.lo && req.hi >= self.hi;
        let per_class = match (promised && unwindowed, req.nocross_pages) {
            (false, _) => usize::MAX,
            (true, 0) => 1,
            (true, _) => 4,
        };
        let mut next = from;
        while let Some(c) = self.next_class(next).filter(|&c| c < to) {
            next = c + 1;
            let (mut id, mut looked) = (self.heads[c], 0);
            while id != NIL && looked < per_class {
                if let Some(cand) = self.candidate(req, id) {
                    return Some((id, cand));
                }
                looked += 1;
                id = self.segs[id as usize].fnext;
            }
        }
        None
    }

    /// The first non-empty class at or after `from`.
    fn next_class(&self, from: usize) -> Option<usize> {
        let mut w = from / 64;
        let mut bits = self.bitmap.get(w)? & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            bits = *self.bitmap.get(w)?;
        }
    }

    /// Where `req` starts in the free segment `id`: as low as it can go, or as high when the
    /// range grows down.
    fn candidate(&self, req: &Request, id: u32) -> Option<u64> {
        let s = &self.segs[id as usize];
        if self.high {
            req.candidate_last_in(s.start, s.start + s.len)
        } else {
            req.candidate_in(s.start, s.start + s.len)
        }
    }

    /// The best start (lowest, or highest when growing down) among the first [`ORDERED_LOOK`]
    /// segments of the classes from `from` up that hold the request.
    fn search_ordered(&self, req: &Request, from: usize) -> Option<(u32, u64)> {
        let (mut best, mut looked) = (None::<(u32, u64)>, 0);
        let mut next = from;
        while let Some(c) = self.next_class(next) {
            next = c + 1;
            let mut id = self.heads[c];
            while id != NIL && looked < ORDERED_LOOK {
                if let Some(cand) = self.candidate(req, id) {
                    let better = match best {
                        None => true,
                        Some((_, b)) => (cand > b) == self.high,
                    };
                    if better {
                        best = Some((id, cand));
                    }
                }
                looked += 1;
                id = self.segs[id as usize].fnext;
            }
            if looked >= ORDERED_LOOK {
                break;
            }
        }
        best
    }

    /// The shortest free segment in which `req` has a start (ties: the lower start, or the
    /// higher growing down), class by class from the request's size.
    fn search_best(&self, req: &Request) -> Option<(u32, u64)> {
        let mut next = class_floor(req.size_pages);
        while let Some(c) = self.next_class(next) {
            next = c + 1;
            let mut best: Option<(u32, u64, u64)> = None;
            let mut id = self.heads[c];
            while id != NIL {
                let s = &self.segs[id as usize];
                let shorter = match best {
                    None => true,
                    Some((b, _, len)) => {
                        s.len < len || (s.len == len && (s.start < self.segs[b as usize].start) != self.high)
                    }
                };
                if shorter {
                    if let Some(cand) = self.candidate(req, id) {
                        best = Some((id, cand, s.len));
                    }
                }
                id = s.fnext;
            }
            if let Some((id, cand, _)) = best {
                return Some((id, cand));
            }
        }
        None
    }

    /// Take `[cand, cand + len)` out of the free segment `id`: the allocation's start.
    fn carve(&mut self, id: u32, cand: u64, len: u64) -> u64 {
        self.unlist(id);
        let s = self.segs[id as usize];
        let (left, right) = (cand - s.start, s.start + s.len - (cand + len));
        // `id` keeps the left part when there is one (the lowest segment keeps its id).
        let mine = if left > 0 {
            self.segs[id as usize].len = left;
            let m = self.new_seg(cand, len, false);
            self.link_after(id, m);
            self.push_free(id);
            m
        } else {
            let seg = &mut self.segs[id as usize];
            seg.len = len;
            seg.free = false;
            id
        };
        if right > 0 {
            let r = self.new_seg(cand + len, right, true);
            self.link_after(mine, r);
            self.push_free(r);
        }
        self.allocated.insert(cand, mine);
        cand
    }

    fn link_after(&mut self, a: u32, b: u32) {
        let next = self.segs[a as usize].next;
        self.segs[b as usize].prev = a;
        self.segs[b as usize].next = next;
        self.segs[a as usize].next = b;
        if next != NIL {
            self.segs[next as usize].prev = b;
        }
    }

    /// Merge the segment after `id` into `id` (both out of the class lists).
    fn absorb_next(&mut self, id: u32) {
        let n = self.segs[id as usize].next;
        let ns = self.segs[n as usize];
        self.segs[id as usize].len += ns.len;
        self.segs[id as usize].next = ns.next;
        if ns.next != NIL {
            self.segs[ns.next as usize].prev = id;
        }
        self.segs[n as usize].len = 0;
        self.spare.push(n);
    }

    fn push_free(&mut self, id: u32) {
        let c = class_floor(self.segs[id as usize].len);
        let head = self.heads[c];
        {
            let s = &mut self.segs[id as usize];
            s.free = true;
            s.fprev = NIL;
            s.fnext = head;
        }
        if head != NIL {
            self.segs[head as usize].fprev = id;
        }
        self.heads[c] = id;
        self.bitmap[c / 64] |= 1 << (c % 64);
        self.free_len += self.segs[id as usize].len;
        self.free_count += 1;
    }

    fn unlist(&mut self, id: u32) {
        let s = self.segs[id as usize];
        let c = class_floor(s.len);
        if s.fprev != NIL {
            self.segs[s.fprev as usize].fnext = s.fnext;
        } else {
            self.heads[c] = s.fnext;
            if s.fnext == NIL {
                self.bitmap[c / 64] &= !(1 << (c % 64));
            }
        }
        if s.fnext != NIL {
            self.segs[s.fnext as usize].fprev = s.fprev;
        }
        self.free_len -= s.len;
        self.free_count -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_hold_what_they_promise() {
        for len in 1..5000u64 {
            let c = class_floor(len);
            assert!(class_base(c) <= len && (c + 1 == CLASSES || len < class_base(c + 1)), "{len}");
            assert!(class_base(class_ceil(len)) >= len);
            assert!(class_ceil(len) == c || class_base(c) < len);
        }
        assert!(class_floor(u64::MAX) < CLASSES);
    }

    #[test]
    fn allocation_splits_and_free_merges() {
        let mut f = SegFit::new(100, 1100);
        let r = |size| Request::new(size, 1, 0, u64::MAX).unwrap();
        let a = f.alloc(&r(10)).unwrap();
        let b = f.alloc(&r(20)).unwrap();
        let c = f.alloc(&r(30)).unwrap();
        assert_eq!((f.live(), f.free_len()), (3, 940));
        f.check().unwrap();
        assert_eq!(f.free(b), Some(20));
        assert_eq!(f.free(b), None, "double free");
        assert_eq!(f.free(b + 1), None, "not a start");
        assert_eq!(f.free_ranges(), 2);
        assert_eq!(f.free(a), Some(10));
        assert_eq!(f.free(c), Some(30));
        assert_eq!((f.free_ranges(), f.largest()), (1, 1000));
        f.check().unwrap();
        // Alignment, phase and nocross.
        let q = Request::constrained(8, 16, 4, 32, 0, u64::MAX).unwrap();
        let s = f.alloc(&q).unwrap();
        assert!(s % 16 == 4 && s / 32 == (s + 7) / 32);
        f.check().unwrap();
        // A window.
        let w = Request::new(5, 1, 700, 710).unwrap();
        assert_eq!(f.alloc(&w), Some(700));
        assert_eq!(f.alloc(&Request::new(5, 1, 703, 712).unwrap()), Some(705));
        assert_eq!(f.alloc(&Request::new(5, 1, 703, 712).unwrap()), None, "705..710 taken");
        f.check().unwrap();
        assert_eq!(f.alloc(&r(2000)), None);
    }

    /// The length of the free segment an allocation at `s` of `size` was carved from: the
    /// allocation and its free neighbours.
    fn live_free_len_around(f: &SegFit, s: u64, size: u64) -> u64 {
        let ranges = f.ranges();
        let before = ranges.iter().find(|&&(_, b)| b == s).map_or(0, |&(a, b)| b - a);
        let after = ranges.iter().find(|&&(a, _)| a == s + size).map_or(0, |&(a, b)| b - a);
        before + size + after
    }

    #[test]
    fn random_sequences_meet_every_constraint_and_refuse_only_without_a_start() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..8 {
            let (lo, hi) = (1000u64, 1000 + 4096);
            let best = round >= 4;
            let mut f = SegFit::growing(lo, hi, round % 2 == 1);
            if best {
                f = f.best_fit();
            }
            let mut live: Vec<(u64, u64)> = Vec::new();
            for step in 0..6000 {
                if !live.is_empty() && rnd(5) < 2 {
                    let (s, len) = live.swap_remove(rnd(live.len() as u64) as usize);
                    assert_eq!(f.free(s), Some(len));
                    continue;
                }
                let bound = if rnd(8) == 0 { 400 } else { 24 };
                let size = 1 + rnd(bound);
                let align = 1u64 << rnd(6);
                let phase = if rnd(3) == 0 { rnd(align) } else { 0 };
                let nocross = if rnd(4) == 0 { size.next_power_of_two() << rnd(3) } else { 0 };
                let (wlo, whi) = if rnd(5) == 0 {
                    let a = lo + rnd(4096);
                    (a, a + size + rnd(800))
                } else {
                    (0, u64::MAX)
                };
                let Ok(req) = Request::constrained(size, align, phase, nocross, wlo, whi) else { continue };
                // Best fit: the shortest free segment with a start, taken before the call.
                let shortest = f
                    .ranges()
                    .into_iter()
                    .filter(|&(a, b)| req.candidate_in(a, b).is_some())
                    .map(|(a, b)| b - a)
                    .min();
                match f.alloc(&req) {
                    Some(s) => {
                        if best {
                            let seg = live_free_len_around(&f, s, size);
                            assert_eq!(Some(seg), shortest, "round {round} step {step}: not the best fit");
                        }
                        assert_eq!(
                            req.candidate_in(s, s + size),
                            Some(s),
                            "round {round} step {step}: {s} breaks {req:?}"
                        );
                        assert!(live.iter().all(|&(l, n)| s + size <= l || l + n <= s), "overlap at {s}");
                        assert!(s >= lo && s + size <= hi);
                        live.push((s, size));
                    }
                    None => {
                        let fits = f.ranges().iter().any(|&(a, b)| req.candidate_in(a, b).is_some());
                        assert!(!fits, "round {round} step {step}: refused {req:?} with a start free");
                    }
                }
                if step % 500 == 0 {
                    f.check().unwrap();
                }
            }
            for (s, len) in live.drain(..) {
                assert_eq!(f.free(s), Some(len));
            }
            assert_eq!((f.free_ranges(), f.largest(), f.live()), (1, 4096, 0));
            f.check().unwrap();
        }
    }
}
