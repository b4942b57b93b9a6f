//! `Magazine`: one thread's cached small areas of one arena, a stack per size, under a page
//! budget that misses grow and drains reset.
//!
//! Owns: the stacks (a [`LineWords`] of starts per size, on cache lines of their own), the
//! occupied and ghost bitmaps, the budget and the counters of one magazine. Its thread writes
//! it with plain loads and stores of relaxed atomics; a drainer writes it only while it holds
//! the magazine through the [`Handshake`] (see `thread_caches/`, which owns the magazines
//! and decides who may touch one).
//!
//! Invariant: the pages held never exceed the budget, and each size's stack holds at most its
//! cap under the present budget (`Arena::check` verifies both, through [`Magazine::entries`]).

use crate::caches::cache_interface::{Budget, CacheFigures};
use crate::caches::handshake::Handshake;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use vmarena_core::Span;
use vmarena_platform::fork_once::ForkOnce;

/// Entries per size class at most: a burst of 64 frees of one size (the deferred frees one
/// `Rcu` poll releases, `vmarena::rcu::POLL_EVERY`) fits, so the allocations that follow hit.
const CLASS_MAX_ENTRIES: u64 = 64;

/// Areas a push takes out of a full stack at once: half of the largest stack, as jemalloc's
/// thread cache flushes half of a full bin. They go down the busy-map path together
/// ([`Spill`]), one lock acquisition per busy shard, and the entries left move down by as
/// many slots: one move per area spilled.
pub(crate) const SPILL_MAX: usize = CLASS_MAX_ENTRIES as usize / 2;

/// Areas a push took out of the magazine, for the busy-map path: the oldest half of a full
/// stack, or the one area evicted from a larger size to make room. Their words stay `cached`
/// until the busy-map path clears them, so no free from outside can race with it.
pub(crate) struct Spill {
    /// One more than a full stack spills: the push's eviction, which cannot follow a spill
    /// (a spill leaves room for the area under the budget) but costs nothing to allow.
    spans: [Span; SPILL_MAX + 1],
    len: usize,
}

impl Default for Spill {
    fn default() -> Spill {
        Spill { spans: [Span::default(); SPILL_MAX + 1], len: 0 }
    }
}

impl Spill {
    pub(crate) fn push(&mut self, s: Span) {
        self.spans[self.len] = s;
        self.len += 1;
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [Span] {
        &mut self.spans[..self.len]
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Spilled areas of `pages` pages.
    pub(crate) fn of_size(&self, pages: u64) -> usize {
        self.spans[..self.len].iter().filter(|a| a.pages == pages).count()
    }
}

/// One 64-byte cache line of words.
#[repr(align(64))]
#[derive(Default)]
struct Line([AtomicU64; 8]);

/// `len` words on whole cache lines of their own (a vector of [`Line`]s): no other
/// allocation, so no other thread's data, shares a line with them.
struct LineWords {
    lines: Vec<Line>,
    len: usize,
}

/// The slots of a stack that has had no push yet: none.
static NO_SLOTS: LineWords = LineWords { lines: Vec::new(), len: 0 };

impl LineWords {
    fn new(len: usize) -> LineWords {
        LineWords { lines: (0..len.div_ceil(8)).map(|_| Line::default()).collect(), len }
    }

    /// Word `i`, or `None` past the lines (indices from the length up to the end of the last
    /// line are spare words that callers never ask for: they keep within their caps).
    #[inline(always)]
    fn get(&self, i: usize) -> Option<&AtomicU64> {
        self.lines.get(i / 8).map(|l| &l.0[i % 8])
    }

    fn len(&self) -> usize {
        self.len
    }

    fn iter(&self) -> impl Iterator<Item = &AtomicU64> + '_ {
        (0..self.len).map(|i| &self[i])
    }

    /// The address range the words' lines cover.
    fn span(&self) -> std::ops::Range<usize> {
        let start = self.lines.as_ptr() as usize;
        start..start + std::mem::size_of_val(&*self.lines)
    }
}

impl std::ops::Index<usize> for LineWords {
    type Output = AtomicU64;
    fn index(&self, i: usize) -> &AtomicU64 {
        self.get(i).expect("word index within the length")
    }
}

/// One size class: a stack of area starts, written only by its owner (or a drainer that
/// stole the magazine). Relaxed atomics, so plain loads and stores on the fast path. On a
/// cache line of its own (the classes are one boxed slice).
#[repr(align(64))]
struct Class {
    len: AtomicUsize,
    /// Entries the stack may hold under the magazine's present budget (at most `max_len`).
    cap: AtomicUsize,
    /// Entries the stack may hold under the largest budget: the length of its slots.
    max_len: usize,
    /// Made at the stack's first push, by the owner: a magazine has a stack for every size up
    /// to the largest it holds (257 in the default space), and most programs use a few, so
    /// a magazine's first use allocates one line array instead of 257 (46 KiB with every
    /// magazine, most of it slots no push ever reached). A `ForkOnce`:
    /// a fork while the owner makes them leaves the child a cell it can finish (std's
    /// `OnceLock` would wait for ever there).
    slots: ForkOnce<LineWords>,
}

impl Class {
    /// The slots, none before the first push.
    #[inline(always)]
    fn slots(&self) -> &LineWords {
        self.slots.get().unwrap_or(&NO_SLOTS)
    }

    /// The slots, made now if the stack has none yet (its owner, before a push).
    fn slots_made(&self) -> &LineWords {
        self.slots.get_or_init(|| LineWords::new(self.max_len))
    }
}

/// Entries a stack of `pages` pages may hold under a budget of `budget_pages`.
fn class_cap(pages: u64, budget_pages: u64) -> usize {
    (budget_pages / (4 * pages)).clamp(1, CLASS_MAX_ENTRIES) as usize
}

/// One thread's cached areas of one arena. Aligned to two cache lines, and every slice it
/// owns is made of whole lines ([`LineWords`], [`Class`]): what its owner writes shares no
/// line with another thread's data (`Arena::thread_cache_spans` lists the memory).
#[repr(align(128))]
pub(crate) struct Magazine {
    pub(crate) hs: Handshake,
    /// Index `p - 1` for areas of `p` pages.
    classes: Box<[Class]>,
    /// Bit `p - 1` set when the stack of `p` pages holds an area, and maybe after it emptied
    /// (bits are cleared lazily, by the search that finds them stale, so that a pop never
    /// writes here); owner writes, or a drainer while it holds the magazine. Finds the largest
    /// cached size without a scan of every stack.
    occupied: LineWords,
    /// Pages held (owner writes; a drainer while it holds the magazine).
    pub(crate) pages: AtomicU64,
    /// Pages the magazine may hold now: the base budget at first and after every drain, grown
    /// by each miss of a size it had to turn away, up to the largest budget (owner writes; a
    /// drainer while it holds the magazine).
    budget: AtomicU64,
    /// Bit `p - 1` set when an area of `p` pages was turned away (evicted, or refused for
    /// want of room) since the last miss of that size: the ghost entries of an adaptive
    /// cache. Same writers as `budget`.
    ghosts: LineWords,
    pub(crate) grows: AtomicU64,
    /// Times the owner emptied it because more threads came to share the arena's total.
    pub(crate) sheds: AtomicU64,
    pub(crate) hits: AtomicU64,
    pub(crate) slack_hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) pushes: AtomicU64,
    pub(crate) flushes: AtomicU64,
}

/// The word and the bit of size `pages` in a per-size bitmap (bit `pages - 1`).
#[inline]
fn size_bit(pages: u64) -> (usize, u64) {
    ((pages - 1) as usize / 64, 1u64 << ((pages - 1) % 64))
}

/// Set or clear the bit of size `pages` (single writer).
#[inline]
fn set_bit(words: &LineWords, pages: u64, yes: bool) {
    let (w, bit) = size_bit(pages);
    let cur = words[w].load(Relaxed);
    words[w].store(if yes { cur | bit } else { cur & !bit }, Relaxed);
}

/// A free slot of a magazine's stack, found by [`Magazine::room`].
pub(crate) struct Room<'a> {
    class: &'a Class,
    slot: &'a AtomicU64,
    /// The stack's length, and the magazine's pages, when the slot was found.
    n: usize,
    held: u64,
}

/// Single-writer counter: a plain load and store, no locked instruction.
#[inline]
pub(crate) fn bump(c: &AtomicU64) {
    c.store(c.load(Relaxed) + 1, Relaxed);
}

impl Magazine {
    /// Add this magazine's counters (hits, slack hits, misses, pushes, flushes, growths,
    /// sheds) to `f`.
    pub(crate) fn add_counters(&self, f: &mut CacheFigures) {
        f.hits += self.hits.load(Relaxed);
        f.slack_hits += self.slack_hits.load(Relaxed);
        f.misses += self.misses.load(Relaxed);
        f.pushes += self.pushes.load(Relaxed);
        f.flushes += self.flushes.load(Relaxed);
        f.grows += self.grows.load(Relaxed);
        f.sheds += self.sheds.load(Relaxed);
    }

    /// Areas and pages held, summed over the stacks.
    pub(crate) fn held(&self) -> (u64, u64) {
        self.classes.iter().enumerate().fold((0, 0), |(a, p), (i, c)| {
            let n = c.len.load(Relaxed) as u64;
            (a + n, p + n * (i as u64 + 1))
        })
    }

    /// Pages the magazine may hold now.
    pub(crate) fn budget_pages(&self) -> u64 {
        self.budget.load(Relaxed)
    }

    pub(crate) fn new(max_pages: u64, budget: Budget) -> Magazine {
        let classes = (1..=max_pages)
            .map(|p| Class {
                len: AtomicUsize::new(0),
                cap: AtomicUsize::new(class_cap(p, budget.base_pages).min(class_cap(p, budget.max_pages))),
                max_len: class_cap(p, budget.max_pages),
                slots: ForkOnce::new(),
            })
            .collect();
        let words = (max_pages as usize).div_ceil(64);
        Magazine {
            hs: Handshake::default(),
            classes,
            occupied: LineWords::new(words),
            pages: AtomicU64::new(0),
            budget: AtomicU64::new(budget.base_pages),
            ghosts: LineWords::new(words),
            grows: AtomicU64::new(0),
            sheds: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            slack_hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            pushes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        }
    }

    /// Record that the stack of `pages` pages holds an area (no store when the bit is set).
    #[inline(always)]
    pub(crate) fn mark_occupied(&self, pages: u64) {
        let (w, bit) = size_bit(pages);
        if let Some(word) = self.occupied.get(w) {
            let cur = word.load(Relaxed);
            if cur & bit == 0 {
                word.store(cur | bit, Relaxed);
            }
        }
    }

    /// Set the budget (and every stack's cap with it).
    pub(crate) fn set_budget(&self, pages: u64) {
        self.budget.store(pages, Relaxed);
        for (i, c) in self.classes.iter().enumerate() {
            c.cap.store(class_cap(i as u64 + 1, pages).min(c.max_len), Relaxed);
        }
    }

    /// A miss of `pages` pages: if that size was turned away since its last miss, a larger
    /// budget would have served it, so the budget grows by the size, up to `max_pages`.
    #[inline]
    pub(crate) fn missed(&self, pages: u64, max_pages: u64) {
        let (w, bit) = size_bit(pages);
        let g = self.ghosts[w].load(Relaxed);
        if g & bit == 0 {
            return;
        }
        self.ghosts[w].store(g & !bit, Relaxed);
        let budget = self.budget.load(Relaxed);
        if budget < max_pages {
            self.set_budget((budget + pages).min(max_pages));
            bump(&self.grows);
        }
    }

    /// The largest size, in pages, whose stack holds an area; clears the stale bits of the
    /// larger sizes it passes on the way (stacks that emptied since their bit was set).
    pub(crate) fn largest_occupied(&self) -> Option<u64> {
        for w in (0..self.occupied.len()).rev() {
            let o = &self.occupied[w];
            let mut x = o.load(Relaxed);
            while x != 0 {
                let bit = 63 - x.leading_zeros() as u64;
                let pages = w as u64 * 64 + bit + 1;
                if self.classes[pages as usize - 1].len.load(Relaxed) > 0 {
                    return Some(pages);
                }
                x &= !(1 << bit);
                o.store(x, Relaxed);
            }
        }
        None
    }

    /// The newest entry of `pages` pages whose start is a multiple of `align_pages` (a power
    /// of two): the top of the stack when any start will do, else the first aligned one from
    /// the top, whose slot takes the entries above it (the stack keeps its order).
    #[inline]
    pub(crate) fn pop(&self, pages: u64, align_pages: u64) -> Option<u64> {
        let c = &self.classes[pages as usize - 1];
        let n = c.len.load(Relaxed);
        let i = if align_pages == 1 {
            n.checked_sub(1)?
        } else {
            (0..n).rev().find(|&i| c.slots()[i].load(Relaxed) & (align_pages - 1) == 0)?
        };
        Some(self.remove(pages, i))
    }

    /// The newest area of the smallest cached size above `pages` and at most `hi_pages`, as
    /// `(start, its pages)`: the occupied bits of those sizes, in ascending order, clearing the
    /// stale bits it meets (owner inside an operation, or a drainer holding the magazine).
    pub(crate) fn pop_within(&self, pages: u64, hi_pages: u64) -> Option<(u64, u64)> {
        let hi = hi_pages.min(self.classes.len() as u64);
        let mut p = pages + 1;
        while p <= hi {
            let (w, _) = size_bit(p);
            let o = &self.occupied[w];
            let word = o.load(Relaxed);
            // Bits of sizes p..=hi within this word (bit `q - 1` for size `q`).
            let from = (p - 1) % 64;
            let to = ((hi - 1) - w as u64 * 64).min(63);
            let span = if to - from == 63 { u64::MAX } else { ((1u64 << (to - from + 1)) - 1) << from };
            let mut x = word & span;
            while x != 0 {
                let bit = x.trailing_zeros() as u64;
                let q = w as u64 * 64 + bit + 1;
                if let Some(s) = self.pop_top(q) {
                    return Some((s, q));
                }
                x &= !(1 << bit);
                o.store(o.load(Relaxed) & !(1 << bit), Relaxed);
            }
            p = (w as u64 + 1) * 64 + 1;
        }
        None
    }

    /// The top of the stack of `pages` pages (1 to the largest tracked size), if any.
    #[inline(always)]
    pub(crate) fn pop_top(&self, pages: u64) -> Option<u64> {
        let c = self.classes.get((pages as usize).wrapping_sub(1))?;
        let n = c.len.load(Relaxed).checked_sub(1)?;
        let start = c.slots().get(n)?.load(Relaxed);
        c.len.store(n, Relaxed);
        self.pages.store(self.pages.load(Relaxed) - pages, Relaxed);
        Some(start)
    }

    /// The slot an area of `pages` pages would take without an eviction, if there is one:
    /// [`Magazine::fill`] it (nothing changes until then).
    #[inline(always)]
    pub(crate) fn room(&self, pages: u64) -> Option<Room<'_>> {
        let class = self.classes.get((pages as usize).wrapping_sub(1))?;
        let n = class.len.load(Relaxed);
        let held = self.pages.load(Relaxed);
        if n >= class.cap.load(Relaxed) || held + pages > self.budget.load(Relaxed) {
            return None;
        }
        // None before the stack's first push: the caller falls back to `push`, which makes
        // the slots.
        let slot = class.slots().get(n)?;
        Some(Room { class, slot, n, held })
    }

    /// How many areas of `pages` pages [`Magazine::room`] would find room for in a row.
    pub(crate) fn room_for(&self, pages: u64) -> usize {
        let Some(class) = self.classes.get((pages as usize).wrapping_sub(1)) else { return 0 };
        let cap = class.cap.load(Relaxed).min(class.slots_made().len);
        let slots = cap.saturating_sub(class.len.load(Relaxed));
        let budget = self.budget.load(Relaxed).saturating_sub(self.pages.load(Relaxed)) / pages;
        slots.min(budget as usize)
    }

    /// Push `start` (of `pages` pages) into the slot [`Magazine::room`] found (owner, inside the
    /// same operation: nothing else changed the magazine meanwhile).
    #[inline(always)]
    pub(crate) fn fill(&self, room: Room<'_>, pages: u64, start: u64) {
        room.slot.store(start, Relaxed);
        room.class.len.store(room.n + 1, Relaxed);
        if room.n == 0 {
            self.mark_occupied(pages);
        }
        self.pages.store(room.held + pages, Relaxed);
    }

    /// The oldest entry of `pages` pages (the bottom of its stack).
    pub(crate) fn take_oldest(&self, pages: u64) -> Option<u64> {
        let n = self.classes[pages as usize - 1].len.load(Relaxed);
        (n > 0).then(|| self.remove(pages, 0))
    }

    /// Remove slot `i` (below the stack's length) of the stack of `pages` pages; the entries
    /// above it move down one slot, so the stack keeps its order.
    #[inline]
    pub(crate) fn remove(&self, pages: u64, i: usize) -> u64 {
        let c = &self.classes[pages as usize - 1];
        let n = c.len.load(Relaxed);
        let slots = c.slots();
        let start = slots[i].load(Relaxed);
        for j in i..n - 1 {
            slots[j].store(slots[j + 1].load(Relaxed), Relaxed);
        }
        c.len.store(n - 1, Relaxed);
        self.pages.store(self.pages.load(Relaxed) - pages, Relaxed);
        start
    }

    /// Push a freed area. A full stack first spills its oldest half (at least one area)
    /// into `spill`, which the caller frees through the busy map in one batch: the newest
    /// frees are the likeliest to be asked for again, and a batch takes each busy shard's lock
    /// once where one free at a time took it for every area. When the magazine's pages would
    /// pass its budget, room is made by taking the oldest area of the largest cached size, when
    /// that size is larger than this area's and frees enough (into `spill`): the largest area
    /// gives back the most budget for one busy-map free, which a refused push would cost too.
    /// False, with nothing changed, when no such room exists. A size turned away (spilled,
    /// refused or evicted) leaves a ghost.
    #[inline]
    pub(crate) fn push(&self, pages: u64, start: u64, spill: &mut Spill) -> bool {
        let c = &self.classes[pages as usize - 1];
        let n = c.len.load(Relaxed);
        let cap = c.cap.load(Relaxed);
        if n >= cap {
            self.spill_oldest(pages, (n / 2).max(n + 1 - cap).min(SPILL_MAX), spill);
            set_bit(&self.ghosts, pages, true);
        }
        let n = c.len.load(Relaxed);
        let held = self.pages.load(Relaxed);
        let budget = self.budget.load(Relaxed);
        if held + pages > budget && !self.make_room(held + pages - budget, pages, spill) {
            set_bit(&self.ghosts, pages, true);
            return false;
        }
        c.slots_made()[n].store(start, Relaxed);
        c.len.store(n + 1, Relaxed);
        if n == 0 {
            self.mark_occupied(pages);
        }
        self.pages.store(self.pages.load(Relaxed) + pages, Relaxed);
        true
    }

    /// Move the `k` oldest entries of the stack of `pages` pages (the bottom, `k` at most its
    /// length) into `spill`; the entries above them move down, so the stack keeps its order.
    #[cold]
    fn spill_oldest(&self, pages: u64, k: usize, spill: &mut Spill) {
        let c = &self.classes[pages as usize - 1];
        let n = c.len.load(Relaxed);
        let k = k.min(n);
        let lines = &c.slots().lines;
        for j in 0..k {
            spill.push(Span::new(lines[j / 8].0[j % 8].load(Relaxed), pages));
        }
        for j in k..n {
            lines[(j - k) / 8].0[(j - k) % 8].store(lines[j / 8].0[j % 8].load(Relaxed), Relaxed);
        }
        c.len.store(n - k, Relaxed);
        self.pages.store(self.pages.load(Relaxed) - k as u64 * pages, Relaxed);
    }

    /// Take the oldest cached area of the largest cached size into `spill` when that size
    /// is above `pages` and at least `need`; false (nothing taken) otherwise.
    #[cold]
    pub(crate) fn make_room(&self, need: u64, pages: u64, spill: &mut Spill) -> bool {
        let Some(p) = self.largest_occupied() else { return false };
        if p <= pages || p < need {
            return false;
        }
        let s = self.take_oldest(p).expect("an occupied size holds an area");
        set_bit(&self.ghosts, p, true);
        spill.push(Span::new(s, p));
        true
    }

    /// Empty the magazine into `out` (owner outside an operation, or a drainer holding it), and
    /// start again from the base budget with no ghosts.
    pub(crate) fn take(&self, out: &mut Vec<Span>, base_pages: u64) {
        for (i, c) in self.classes.iter().enumerate() {
            let n = c.len.load(Relaxed);
            out.extend((0..n).map(|j| Span::new(c.slots()[j].load(Relaxed), i as u64 + 1)));
            c.len.store(0, Relaxed);
        }
        for o in self.occupied.iter().chain(self.ghosts.iter()) {
            o.store(0, Relaxed);
        }
        self.pages.store(0, Relaxed);
        if self.budget.load(Relaxed) != base_pages {
            self.set_budget(base_pages);
        }
    }

    /// The address ranges of the memory this magazine owns (what its owner's fast paths
    /// write, besides the areas' state words).
    pub(crate) fn spans(&self) -> Vec<std::ops::Range<usize>> {
        let me = self as *const Magazine as usize;
        let classes = self.classes.as_ptr() as usize;
        let mut out = vec![
            me..me + std::mem::size_of::<Magazine>(),
            classes..classes + std::mem::size_of_val(&*self.classes),
            self.occupied.span(),
            self.ghosts.span(),
        ];
        out.extend(self.classes.iter().filter_map(|c| c.slots.get()).map(LineWords::span));
        out
    }

    /// Every cached start, after checking the magazine's own bookkeeping: the occupied bits
    /// and the page count agree with the stacks.
    pub(crate) fn entries(&self) -> Result<Vec<u64>, String> {
        let mut out = Vec::new();
        let mut pages = 0;
        for (i, c) in self.classes.iter().enumerate() {
            let n = c.len.load(Relaxed);
            let p = i as u64 + 1;
            let bit = self.occupied[i / 64].load(Relaxed) >> (i % 64) & 1 == 1;
            if n > 0 && !bit {
                return Err(format!("magazine: size {p} holds {n} areas but its occupied bit is clear"));
            }
            pages += n as u64 * p;
            out.extend((0..n).map(|j| c.slots()[j].load(Relaxed)));
        }
        let held = self.pages.load(Relaxed);
        if held != pages {
            return Err(format!("magazine: counts {held} pages, its stacks hold {pages}"));
        }
        let budget = self.budget.load(Relaxed);
        if held > budget {
            return Err(format!("magazine: holds {held} pages, its budget is {budget}"));
        }
        for (i, c) in self.classes.iter().enumerate() {
            let (n, cap) = (c.len.load(Relaxed), c.cap.load(Relaxed));
            if cap != class_cap(i as u64 + 1, budget).min(c.max_len) || n > cap || n > c.slots().len() {
                return Err(format!("magazine: size {} holds {n} areas, cap {cap}, budget {budget}", i + 1));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> Budget {
        Budget { base_pages: 512, max_pages: 2048, total_pages: 0, slack_percent: 50, depot: true }
    }

    /// A size's stack is made at its first push (or when a refill counts its room), and only
    /// that one: a new magazine owns its struct, its classes and two bitmaps; a room for a size
    /// with no stack is none, so the free falls back to the push that makes it.
    #[test]
    fn a_stack_is_made_at_its_first_push() {
        let m = Magazine::new(257, budget());
        assert_eq!(m.spans().len(), 4, "no stack made");
        assert!(m.room(3).is_none());
        let mut spill = Spill::default();
        assert!(m.push(3, 0x1000, &mut spill));
        assert!(spill.is_empty());
        assert_eq!(m.spans().len(), 5, "the stack of 3 pages");
        assert!(m.room(3).is_some());
        assert_eq!(m.entries().unwrap(), [0x1000]);
        assert_eq!(m.pop(3, 1), Some(0x1000));
        assert_eq!(m.pop(3, 1), None);
        assert!(m.room_for(5) > 0);
        assert_eq!(m.spans().len(), 6, "and of 5, for a refill");
        assert!(m.entries().unwrap().is_empty());
    }
}
