//! Thread caches: a per-thread magazine of freed small areas in front of the node pools
//! (vmem's quantum caches, jemalloc's tcache), so that an alloc+free pair of a small area costs
//! one locked instruction and no lock.
//!
//! Owns: each thread's [`Magazine`] for each arena it used (in thread-local storage, with an
//! `Arc` in the arena's registry), and the arena's [`AreaStates`]. A magazine holds areas that
//! are still in the busy map with their state word `cached`; from the engine's point of view
//! they are live, from the user's they are free.
//!
//! Paths (DESIGN.md section 16):
//!
//! - alloc hit: pop this thread's magazine, store the word `live` (no locked instruction);
//! - free: one compare-and-swap of the word, `live` → `cached` (the only locked instruction of
//!   the pair; a second free of the area loses it and is refused), then push on this thread's
//!   magazine (at its page budget, the oldest area of the largest larger size is evicted to
//!   make room); when its size's stack is full, or no larger area can make room, the area
//!   goes down the busy-map path, which clears the word under the shard lock;
//! - drain (idle purge, explicit purge, shrink, failure, low memory): another thread empties
//!   magazines. Owner and drainer meet through a [`Handshake`] (Dekker's pair with asymmetric
//!   fences: a compiler fence on the owner's side, `membarrier` on the drainer's). A magazine
//!   whose owner is inside an operation is not touched; its owner empties it itself at its
//!   next operation;
//! - thread exit: the thread-local destructor gives every magazine back to its arena;
//! - budget: a magazine starts at `thread_cache_pages`; a miss of a size it turned away (a
//!   refused push or an eviction, marked in its ghost bitmap) grows it by that size up to
//!   `thread_cache_pages_max`; emptying it (a drain, an owner's drain, a give-back) resets it.
//!   Invariant: the pages held never exceed the budget, and each size's stack holds at most
//!   its cap under the present budget (`Arena::check` verifies both).
//!
//! Locks: the registry mutex (registration, exit, drain) is taken before any node lock and
//! never under one. The fast paths take no lock.
//!
//! Enabled for the Nodes strategy when the range fits the state table and `membarrier` works
//! (the reason is reported otherwise); the older strategies stay as the kernel had them.
//!
//! The one `unsafe` of this module: the fast paths reach the thread's magazine through a raw
//! pointer kept in the thread's static TLS slot (`get_front`), which skips the TLS call, the
//! borrow flag and the destructor-state check of the thread-local that owns the magazines.
#![allow(unsafe_code)]

use crate::area_state::{AreaStates, Claim};
use crate::arena::Shared;
use crate::handshake::{heavy_fence, Enter, Handshake};
use std::cell::RefCell;
use std::panic::Location;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, Weak};

/// Magazines a thread keeps (one per arena it used recently); the least recent beyond this
/// is given back.
const MAGAZINES_PER_THREAD: usize = 8;

/// Entries per size class at most: a burst of 64 frees of one size (the deferred frees one
/// `Rcu` poll releases, `vmarena::rcu::POLL_EVERY`) fits, so the allocations that follow hit.
const CLASS_MAX_ENTRIES: u64 = 64;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One 64-byte cache line of words.
#[repr(align(64))]
#[derive(Default)]
struct Line([AtomicU64; 8]);

/// `len` words on whole cache lines of their own (a boxed slice of [`Line`]s): no other
/// allocation, so no other thread's data, shares a line with them.
struct LineWords {
    lines: Box<[Line]>,
    len: usize,
}

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
    /// Entries the stack may hold under the magazine's present budget (at most `slots.len()`,
    /// which is the cap under the largest budget).
    cap: AtomicUsize,
    slots: LineWords,
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
    hs: Handshake,
    /// Index `p - 1` for areas of `p` pages.
    classes: Box<[Class]>,
    /// Bit `p - 1` set when the stack of `p` pages holds an area, and maybe after it emptied
    /// (bits are cleared lazily, by the search that finds them stale, so that a pop never
    /// writes here); owner writes, or a drainer while it holds the magazine. Finds the largest
    /// cached size without a scan of every stack.
    occupied: LineWords,
    /// Pages held (owner writes; a drainer while it holds the magazine).
    pages: AtomicU64,
    /// Pages the magazine may hold now: the base budget at first and after every drain, grown
    /// by each miss of a size it had to turn away, up to the largest budget (owner writes; a
    /// drainer while it holds the magazine).
    budget: AtomicU64,
    /// Bit `p - 1` set when an area of `p` pages was turned away (evicted, or refused for
    /// want of room) since the last miss of that size: the ghost entries of an adaptive
    /// cache. Same writers as `budget`.
    ghosts: LineWords,
    grows: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    pushes: AtomicU64,
    flushes: AtomicU64,
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
struct Room<'a> {
    class: &'a Class,
    slot: &'a AtomicU64,
    /// The stack's length, and the magazine's pages, when the slot was found.
    n: usize,
    held: u64,
}

/// A magazine's page budget: where it starts, and how far misses may grow it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    pub(crate) base_pages: u64,
    pub(crate) max_pages: u64,
}

/// Single-writer counter: a plain load and store, no locked instruction.
#[inline]
fn bump(c: &AtomicU64) {
    c.store(c.load(Relaxed) + 1, Relaxed);
}

impl Magazine {
    fn new(max_pages: u64, budget: Budget) -> Magazine {
        let classes = (1..=max_pages)
            .map(|p| Class {
                len: AtomicUsize::new(0),
                cap: AtomicUsize::new(class_cap(p, budget.base_pages)),
                slots: LineWords::new(class_cap(p, budget.max_pages)),
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
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            pushes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        }
    }

    /// Record that the stack of `pages` pages holds an area (no store when the bit is set).
    #[inline(always)]
    fn mark_occupied(&self, pages: u64) {
        let (w, bit) = size_bit(pages);
        if let Some(word) = self.occupied.get(w) {
            let cur = word.load(Relaxed);
            if cur & bit == 0 {
                word.store(cur | bit, Relaxed);
            }
        }
    }

    /// Set the budget (and every stack's cap with it).
    fn set_budget(&self, pages: u64) {
        self.budget.store(pages, Relaxed);
        for (i, c) in self.classes.iter().enumerate() {
            c.cap.store(class_cap(i as u64 + 1, pages).min(c.slots.len()), Relaxed);
        }
    }

    /// A miss of `pages` pages: if that size was turned away since its last miss, a larger
    /// budget would have served it, so the budget grows by the size, up to `max_pages`.
    #[inline]
    fn missed(&self, pages: u64, max_pages: u64) {
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
    fn largest_occupied(&self) -> Option<u64> {
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
    fn pop(&self, pages: u64, align_pages: u64) -> Option<u64> {
        let c = &self.classes[pages as usize - 1];
        let n = c.len.load(Relaxed);
        let i = if align_pages == 1 {
            n.checked_sub(1)?
        } else {
            (0..n).rev().find(|&i| c.slots[i].load(Relaxed) & (align_pages - 1) == 0)?
        };
        Some(self.remove(pages, i))
    }

    /// The top of the stack of `pages` pages (1 to the largest tracked size), if any.
    #[inline(always)]
    fn pop_top(&self, pages: u64) -> Option<u64> {
        let c = self.classes.get((pages as usize).wrapping_sub(1))?;
        let n = c.len.load(Relaxed).checked_sub(1)?;
        let start = c.slots.get(n)?.load(Relaxed);
        c.len.store(n, Relaxed);
        self.pages.store(self.pages.load(Relaxed) - pages, Relaxed);
        Some(start)
    }

    /// The slot an area of `pages` pages would take without an eviction, if there is one:
    /// [`Magazine::fill`] it (nothing changes until then).
    #[inline(always)]
    fn room(&self, pages: u64) -> Option<Room<'_>> {
        let class = self.classes.get((pages as usize).wrapping_sub(1))?;
        let n = class.len.load(Relaxed);
        let held = self.pages.load(Relaxed);
        if n >= class.cap.load(Relaxed) || held + pages > self.budget.load(Relaxed) {
            return None;
        }
        let slot = class.slots.get(n)?;
        Some(Room { class, slot, n, held })
    }

    /// Push `start` (of `pages` pages) into the slot [`Magazine::room`] found (owner, inside the
    /// same operation: nothing else changed the magazine meanwhile).
    #[inline(always)]
    fn fill(&self, room: Room<'_>, pages: u64, start: u64) {
        room.slot.store(start, Relaxed);
        room.class.len.store(room.n + 1, Relaxed);
        if room.n == 0 {
            self.mark_occupied(pages);
        }
        self.pages.store(room.held + pages, Relaxed);
    }

    /// The oldest entry of `pages` pages (the bottom of its stack).
    fn take_oldest(&self, pages: u64) -> Option<u64> {
        let n = self.classes[pages as usize - 1].len.load(Relaxed);
        (n > 0).then(|| self.remove(pages, 0))
    }

    /// Remove slot `i` (below the stack's length) of the stack of `pages` pages; the entries
    /// above it move down one slot, so the stack keeps its order.
    #[inline]
    fn remove(&self, pages: u64, i: usize) -> u64 {
        let c = &self.classes[pages as usize - 1];
        let n = c.len.load(Relaxed);
        let start = c.slots[i].load(Relaxed);
        for j in i..n - 1 {
            c.slots[j].store(c.slots[j + 1].load(Relaxed), Relaxed);
        }
        c.len.store(n - 1, Relaxed);
        self.pages.store(self.pages.load(Relaxed) - pages, Relaxed);
        start
    }

    /// Push a freed area. When the magazine's pages would pass `budget_pages`, room is made
    /// first by taking the oldest area of the largest cached size, when that size is larger
    /// than this area's and frees enough (into `evicted`, which the caller frees through the
    /// busy map): the newest free is the likeliest to be asked for again, and the largest
    /// area gives back the most budget for one busy-map free, which a refused push would cost
    /// too. False, with nothing changed, when the area's stack is full or no such room exists.
    /// A size turned away (refused or evicted) leaves a ghost.
    #[inline]
    fn push(&self, pages: u64, start: u64, evicted: &mut Option<(u64, u64)>) -> bool {
        let c = &self.classes[pages as usize - 1];
        let n = c.len.load(Relaxed);
        let held = self.pages.load(Relaxed);
        let budget = self.budget.load(Relaxed);
        if n >= c.cap.load(Relaxed)
            || (held + pages > budget && !self.make_room(held + pages - budget, pages, evicted))
        {
            set_bit(&self.ghosts, pages, true);
            return false;
        }
        c.slots[n].store(start, Relaxed);
        c.len.store(n + 1, Relaxed);
        if n == 0 {
            self.mark_occupied(pages);
        }
        self.pages.store(self.pages.load(Relaxed) + pages, Relaxed);
        true
    }

    /// Take the oldest cached area of the largest cached size into `evicted` when that size
    /// is above `pages` and at least `need`; false (nothing taken) otherwise.
    #[cold]
    fn make_room(&self, need: u64, pages: u64, evicted: &mut Option<(u64, u64)>) -> bool {
        let Some(p) = self.largest_occupied() else { return false };
        if p <= pages || p < need {
            return false;
        }
        let s = self.take_oldest(p).expect("an occupied size holds an area");
        set_bit(&self.ghosts, p, true);
        *evicted = Some((s, p));
        true
    }

    /// Empty the magazine into `out` as `(start, pages)` (owner outside an operation, or a
    /// drainer holding it), and start again from the base budget with no ghosts.
    fn take(&self, out: &mut Vec<(u64, u64)>, base_pages: u64) {
        for (i, c) in self.classes.iter().enumerate() {
            let n = c.len.load(Relaxed);
            out.extend((0..n).map(|j| (c.slots[j].load(Relaxed), i as u64 + 1)));
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
    fn spans(&self) -> Vec<std::ops::Range<usize>> {
        let me = self as *const Magazine as usize;
        let classes = self.classes.as_ptr() as usize;
        let mut out = vec![
            me..me + std::mem::size_of::<Magazine>(),
            classes..classes + std::mem::size_of_val(&*self.classes),
            self.occupied.span(),
            self.ghosts.span(),
        ];
        out.extend(self.classes.iter().map(|c| c.slots.span()));
        out
    }

    /// Every cached start, after checking the magazine's own bookkeeping: the occupied bits
    /// and the page count agree with the stacks.
    fn entries(&self) -> Result<Vec<u64>, String> {
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
            out.extend((0..n).map(|j| c.slots[j].load(Relaxed)));
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
            if cap != class_cap(i as u64 + 1, budget).min(c.slots.len()) || n > cap {
                return Err(format!("magazine: size {} holds {n} areas, cap {cap}, budget {budget}", i + 1));
            }
        }
        Ok(out)
    }
}

struct Entry {
    id: u64,
    mag: Arc<Magazine>,
    arena: Weak<Shared>,
}

/// The thread's magazines, most recently used first; given back at thread exit.
struct Owned(Vec<Entry>);

impl Drop for Owned {
    fn drop(&mut self) {
        // From here on the fast paths find no magazine (and take the slow path, which finds
        // `OWNED` gone and does without a cache).
        set_front(0, std::ptr::null());
        for e in self.0.drain(..) {
            give_back(e);
        }
    }
}

fn give_back(e: Entry) {
    if let Some(sh) = e.arena.upgrade() {
        if let Some(tc) = &sh.cache {
            tc.retire(&sh, &e.mag);
        }
    }
}

thread_local! {
    static OWNED: RefCell<Owned> = const { RefCell::new(Owned(Vec::new())) };
}

/// The thread's most recently used magazine, as the fast paths read it: the id of its
/// arena's caches and a pointer to it, copied from the first entry of `OWNED` (whose `Arc`
/// keeps the magazine alive), kept in the thread's static TLS slot
/// ([`vmarena_platform::static_tls`]: one load of an offset and two loads relative to the
/// thread pointer, no call, no borrow flag, no destructor-state check). Invariant: the id is
/// 0, or the pointer is the magazine of the first entry of `OWNED` and the id that entry's
/// id. Written only by `with_magazine_slow` (after `OWNED` changed), `find_or_register`
/// (before it changes `OWNED`) and `Owned::drop` (before the magazines go); only its own
/// thread reads or writes it.
#[inline(always)]
fn get_front() -> (u64, *const Magazine) {
    let (id, mag) = vmarena_platform::static_tls::get();
    (id, mag as *const Magazine)
}

fn set_front(id: u64, mag: *const Magazine) {
    vmarena_platform::static_tls::set(id, mag as usize);
}

/// Outcome of a free through the thread cache.
pub(crate) enum FreeFast {
    /// The area sits in this thread's magazine.
    Cached { pages: u64, caller: Option<&'static Location<'static>> },
    /// The caller owns the area (its word is `cached`) and must free it through the busy map.
    Flush,
    /// Not a small live area: the busy map decides.
    Untracked,
    /// A second free of a cached area.
    Refused,
}

/// Counters of the thread caches of one arena.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CacheFigures {
    pub(crate) areas: u64,
    pub(crate) pages: u64,
    pub(crate) hits: u64,
    pub(crate) misses: u64,
    pub(crate) pushes: u64,
    pub(crate) flushes: u64,
    pub(crate) drained: u64,
    pub(crate) grows: u64,
    /// The largest budget of a live magazine now.
    pub(crate) budget_pages: u64,
}

/// The thread caches of one arena.
pub(crate) struct ThreadCaches {
    id: u64,
    pub(crate) states: AreaStates,
    budget: Budget,
    registry: Mutex<Vec<Arc<Magazine>>>,
    /// Counters of magazines given back, and areas drained.
    retired: Mutex<CacheFigures>,
}

impl ThreadCaches {
    /// Thread caches for pages `[lo, hi)`, or why there are none.
    pub(crate) fn new(lo: u64, hi: u64, max_pages: u64, budget: Budget) -> Result<ThreadCaches, String> {
        if max_pages == 0 || budget.base_pages == 0 {
            return Err("thread cache sizes are 0".into());
        }
        let budget = Budget { max_pages: budget.max_pages.max(budget.base_pages), ..budget };
        const MAX_TABLE_WORDS: u64 = 1 << 30;
        if hi - lo > MAX_TABLE_WORDS {
            return Err(format!("range of {} pages is above the state table's {MAX_TABLE_WORDS}", hi - lo));
        }
        vmarena_platform::membarrier::register()?;
        Ok(ThreadCaches {
            id: NEXT_ID.fetch_add(1, Relaxed),
            states: AreaStates::new(lo, hi - lo, max_pages)?,
            budget,
            registry: Mutex::new(Vec::new()),
            retired: Mutex::new(CacheFigures::default()),
        })
    }

    /// This thread's front magazine when it is this arena's (no registration, no reordering).
    #[inline(always)]
    fn front(&self) -> Option<&Magazine> {
        let (id, mag) = get_front();
        // SAFETY: the front's invariant (`get_front`): a non-zero id matching this arena's
        // caches means `mag` is the magazine of `OWNED`'s first entry, which holds an `Arc` of
        // it until the front is changed; only this thread changes either, and the reference
        // does not outlive the caller's operation, which does not re-enter the thread cache.
        (id == self.id).then(|| unsafe { &*mag })
    }

    /// Run `f` on this thread's magazine for the arena, registering one on first use. `None`
    /// when thread-local storage is gone (thread exit) or re-entered.
    #[inline(always)]
    fn with_magazine<R>(&self, arena: &Arc<Shared>, f: impl FnOnce(&Magazine) -> R) -> Option<R> {
        let mag = match self.front() {
            Some(m) => m as *const Magazine,
            None => self.with_magazine_slow(arena)?,
        };
        // SAFETY: the front's invariant (`get_front`): `mag` is the magazine of `OWNED`'s first
        // entry, which holds an `Arc` of it until the front changes; only this thread changes
        // either, and not during `f` (`f` does not re-enter the thread cache).
        Some(f(unsafe { &*mag }))
    }

    /// The slow half of [`ThreadCaches::with_magazine`]: put this arena's magazine first in
    /// `OWNED` (registering one if the thread has none) and make it the front.
    #[cold]
    #[inline(never)]
    fn with_magazine_slow(&self, arena: &Arc<Shared>) -> Option<*const Magazine> {
        OWNED
            .try_with(|o| {
                if o.try_borrow().ok()?.0.first().is_none_or(|e| e.id != self.id) {
                    self.find_or_register(o, arena)?;
                }
                let owned = o.try_borrow().ok()?;
                let mag = Arc::as_ptr(&owned.0.first()?.mag);
                set_front(self.id, mag);
                Some(mag)
            })
            .ok()
            .flatten()
    }

    #[cold]
    fn find_or_register(&self, o: &RefCell<Owned>, arena: &Arc<Shared>) -> Option<()> {
        // Registering allocates and may start the worker: vmarena's own allocations.
        let _inside = vmarena_platform::reentry::enter();
        // `OWNED` changes below: no front until `with_magazine_slow` sets it again.
        set_front(0, std::ptr::null());
        let mut evicted = Vec::new();
        {
            let mut o = o.try_borrow_mut().ok()?;
            // Magazines of arenas that are gone hold nothing that needs giving back.
            o.0.retain(|e| e.arena.strong_count() > 0);
            if let Some(i) = o.0.iter().position(|e| e.id == self.id) {
                let e = o.0.remove(i);
                o.0.insert(0, e);
            } else {
                let mag = Arc::new(Magazine::new(self.states.max_pages(), self.budget));
                self.registry.lock().unwrap_or_else(|e| e.into_inner()).push(mag.clone());
                o.0.insert(0, Entry { id: self.id, mag, arena: Arc::downgrade(arena) });
                // Cached areas are given back on idle intervals by the worker.
                Shared::start_decay_worker(arena);
                while o.0.len() > MAGAZINES_PER_THREAD {
                    evicted.extend(o.0.pop());
                }
            }
        }
        for e in evicted {
            give_back(e);
        }
        Some(())
    }

    /// A plain hit, for callers whose fast path must make no call: the top of this arena's
    /// front magazine's stack of `pages` pages (a size of 1 to the largest tracked), now
    /// live; `None`, with nothing changed and nothing counted, for anything else (another
    /// arena's front, a drain asked for, an empty stack), which [`ThreadCaches::alloc`] then
    /// handles.
    #[inline(always)]
    pub(crate) fn alloc_hit(&self, pages: u64, caller: Option<&'static Location<'static>>) -> Option<u64> {
        let m = self.front()?;
        if m.hs.enter() != Enter::Go {
            return None;
        }
        let got = m.pop_top(pages);
        if let Some(s) = got {
            self.states.reuse(s, pages, caller);
            bump(&m.hits);
        }
        m.hs.leave();
        got
    }

    /// A plain free into this arena's front magazine, for callers whose fast path must make no
    /// call: true when the small live area at `start` is freed into it; false, with nothing
    /// changed, for anything else (not a small live area, another arena's front, a drain
    /// asked for, no room without an eviction, a word that changed meanwhile), which
    /// [`ThreadCaches::free`] then handles. The room is checked before the word is claimed,
    /// so a claimed area always fits.
    #[inline(always)]
    /// Returns the area's pages and latest caller when it went in.
    pub(crate) fn free_hit(&self, start: u64) -> Option<(u64, Option<&'static Location<'static>>)> {
        let seen = self.states.seen_live(start)?;
        let pages = seen.pages;
        let m = self.front()?;
        if m.hs.enter() != Enter::Go {
            return None;
        }
        // The slot is found before the word is claimed: once claimed, the area must go in.
        let done = match m.room(pages) {
            Some(room) if self.states.claim_seen(&seen) => {
                m.fill(room, pages, start);
                bump(&m.pushes);
                Some((pages, seen.caller()))
            }
            _ => None,
        };
        m.hs.leave();
        done
    }

    /// Alloc through the magazine: the start of a cached area of `pages` pages aligned to
    /// `align_pages` (a power of two), now live.
    ///
    /// The common case (the front magazine is this arena's, no drain pending, the size's
    /// stack holds an area and any start will do) is inlined into the caller and touches only
    /// this thread's magazine and the area's word; everything else is
    /// [`ThreadCaches::alloc_rest`].
    #[inline(always)]
    pub(crate) fn alloc(
        &self,
        arena: &Arc<Shared>,
        pages: u64,
        align_pages: u64,
        caller: Option<&'static Location<'static>>,
    ) -> Option<u64> {
        if align_pages == 1 {
            if let Some(s) = self.alloc_hit(pages, caller) {
                return Some(s);
            }
        }
        self.alloc_rest(arena, pages, align_pages, caller)
    }

    /// [`ThreadCaches::alloc`] past its common case: registration, a drain to do, a miss, an
    /// aligned request.
    #[cold]
    #[inline(never)]
    fn alloc_rest(
        &self,
        arena: &Arc<Shared>,
        pages: u64,
        align_pages: u64,
        caller: Option<&'static Location<'static>>,
    ) -> Option<u64> {
        self.with_magazine(arena, |m| {
            if m.hs.enter() != Enter::Go {
                self.owner_drain(arena, m);
                return None;
            }
            let got = m.pop(pages, align_pages);
            if let Some(s) = got {
                self.states.reuse(s, pages, caller);
                bump(&m.hits);
            } else {
                bump(&m.misses);
                m.missed(pages, self.budget.max_pages);
            }
            m.hs.leave();
            got
        })
        .flatten()
    }

    /// Free through the magazine (see [`FreeFast`]).
    ///
    /// The common case (the word was live, the front magazine is this arena's, no drain
    /// pending, the size's stack and the budget have room) is inlined into the caller; the
    /// rest, once the word is claimed, is [`ThreadCaches::free_rest`].
    #[inline(always)]
    pub(crate) fn free(&self, arena: &Arc<Shared>, start: u64) -> FreeFast {
        if let Some((pages, caller)) = self.free_hit(start) {
            return FreeFast::Cached { pages, caller };
        }
        let (pages, caller) = match self.states.claim(start) {
            Claim::Untracked => return FreeFast::Untracked,
            Claim::AlreadyFree => return FreeFast::Refused,
            Claim::Won { pages, caller } => (pages, caller),
        };
        self.free_rest(arena, start, pages, caller)
    }

    /// [`ThreadCaches::free`] of an area whose word this thread has claimed, past the common
    /// case: registration, a drain to do, a push that must evict or is refused.
    #[cold]
    #[inline(never)]
    fn free_rest(
        &self,
        arena: &Arc<Shared>,
        start: u64,
        pages: u64,
        caller: Option<&'static Location<'static>>,
    ) -> FreeFast {
        let mut evicted = None;
        let cached = self.with_magazine(arena, |m| {
            if m.hs.enter() != Enter::Go {
                self.owner_drain(arena, m);
                return false;
            }
            let ok = m.push(pages, start, &mut evicted);
            bump(if ok { &m.pushes } else { &m.flushes });
            m.hs.leave();
            ok
        });
        if evicted.is_some() {
            // Its word is `cached`: no other free can race with this.
            let _inside = vmarena_platform::reentry::enter();
            self.give_areas(arena, evicted.as_slice());
        }
        if cached == Some(true) {
            FreeFast::Cached { pages, caller }
        } else {
            FreeFast::Flush
        }
    }

    /// The owner could not use its magazine: if a drain was asked for, empty it now.
    #[cold]
    fn owner_drain(&self, arena: &Shared, m: &Magazine) {
        if m.hs.claim_drain() {
            let mut areas = Vec::new();
            m.take(&mut areas, self.budget.base_pages);
            m.hs.release();
            self.give_areas(arena, &areas);
        }
    }

    /// Areas taken from magazines go down the busy-map path (their words are `cached`, so no
    /// free from outside can race with it).
    fn give_areas(&self, arena: &Shared, areas: &[(u64, u64)]) {
        for &(start, _) in areas {
            if let Err(e) = arena.free(start, None) {
                panic!("{}: cached area {start:#x} was not busy: {e}", arena.name);
            }
        }
        self.retired.lock().unwrap_or_else(|e| e.into_inner()).drained += areas.len() as u64;
    }

    /// A thread gave its magazine back (exit or eviction): unregister it, free its areas.
    fn retire(&self, arena: &Shared, mag: &Arc<Magazine>) {
        let mut areas = Vec::new();
        {
            let mut reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
            reg.retain(|m| !Arc::ptr_eq(m, mag));
            // Unregistered under the mutex: no drainer holds it now, and its owner is here.
            mag.take(&mut areas, self.budget.base_pages);
            let mut r = self.retired.lock().unwrap_or_else(|e| e.into_inner());
            r.hits += mag.hits.load(Relaxed);
            r.misses += mag.misses.load(Relaxed);
            r.pushes += mag.pushes.load(Relaxed);
            r.flushes += mag.flushes.load(Relaxed);
            r.grows += mag.grows.load(Relaxed);
        }
        self.give_areas(arena, &areas);
    }

    /// Empty every magazine whose owner is not inside an operation; ask the others to empty
    /// themselves. Returns the areas taken.
    ///
    /// The registry mutex is held until the areas are back in the busy-map path, so that the
    /// checker, which holds it too, never sees an area in flight: taken from its magazine but
    /// still busy with its word `cached`.
    pub(crate) fn drain_all(&self, arena: &Shared) -> u64 {
        let mut areas = Vec::new();
        let reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let held: Vec<&Arc<Magazine>> =
            reg.iter().filter(|m| m.pages.load(Relaxed) > 0).filter(|m| m.hs.mark()).collect();
        if held.is_empty() {
            return 0;
        }
        let fenced = heavy_fence();
        for m in held {
            if m.hs.settle(fenced) {
                m.take(&mut areas, self.budget.base_pages);
                m.hs.release();
            }
        }
        self.give_areas(arena, &areas);
        drop(reg);
        areas.len() as u64
    }

    /// [`Magazine::spans`] of every registered magazine.
    pub(crate) fn spans(&self) -> Vec<Vec<std::ops::Range<usize>>> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|m| m.spans()).collect()
    }

    /// Figures summed over live and given-back magazines.
    pub(crate) fn figures(&self) -> CacheFigures {
        let mut f = *self.retired.lock().unwrap_or_else(|e| e.into_inner());
        for m in self.registry.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let (areas, pages) = m.classes.iter().enumerate().fold((0, 0), |(a, p), (i, c)| {
                let n = c.len.load(Relaxed) as u64;
                (a + n, p + n * (i as u64 + 1))
            });
            f.areas += areas;
            f.pages += pages;
            f.hits += m.hits.load(Relaxed);
            f.misses += m.misses.load(Relaxed);
            f.pushes += m.pushes.load(Relaxed);
            f.flushes += m.flushes.load(Relaxed);
            f.grows += m.grows.load(Relaxed);
            f.budget_pages = f.budget_pages.max(m.budget.load(Relaxed));
        }
        f
    }

    /// Run the checker's `f` on every cached start, with the registry mutex held so that no
    /// drain moves areas meanwhile (call when no thread other than the worker uses the arena).
    pub(crate) fn with_cached_starts<R>(&self, f: impl FnOnce(Result<Vec<u64>, String>) -> R) -> R {
        let reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = Vec::new();
        let starts = reg.iter().try_for_each(|m| m.entries().map(|e| all.extend(e))).map(|()| all);
        f(starts)
    }

    /// The registry mutex, then the figures of given-back magazines (taken last on every path,
    /// with nothing taken under it), for `fork()`.
    #[cfg(not(loom))]
    pub(crate) fn lock_for_fork(&self) -> Vec<Box<dyn crate::fork::Held + '_>> {
        vec![
            Box::new(self.registry.lock().unwrap_or_else(|e| e.into_inner())),
            Box::new(self.retired.lock().unwrap_or_else(|e| e.into_inner())),
        ]
    }
}
