//! Thread caches: per-CPU stacks of freed areas of up to 8 pages, and of larger ones while more
//! than twice as many threads hold magazines as there are CPUs ([`CpuCache`], restartable
//! sequences), then a per-thread [`Magazine`] of freed small areas, in front of the node pools
//! (vmem's quantum caches, jemalloc's tcache), so that an alloc+free pair of a small area costs
//! one locked instruction and no lock.
//!
//! Owns: each thread's [`Magazine`] for each arena it used (in thread-local storage, with an
//! `Arc` in the arena's registry), and the arena's [`AreaStates`]. Sees its arena only
//! through [`CacheOwner`]: the busy-map free an area takes when it leaves a magazine, and the
//! decay worker a first registration starts. A magazine holds areas that
//! are still in the busy map with their state word `cached`; from the engine's point of view
//! they are live, from the user's they are free.
//!
//! Paths (DESIGN.md, sections 4 and 5):
//!
//! - alloc hit: pop this CPU's stack of the size (a larger size only while crowded: more
//!   than twice as many magazines as CPUs), else this thread's magazine, store the word
//!   `live` (no locked instruction);
//! - free hit of a size the CPU stacks hold: claim the word (below), push on this CPU's stack;
//!   a full stack of a larger size grows by one area while crowded, within this CPU's grown
//!   budget (`CpuCache::push_growing`); else the claimed area goes to the magazine, or the
//!   claim is undone for the full path; while crowded, a larger area that stack did not take
//!   passes the magazine and the depot and goes down the busy-map path when the node locks it
//!   needs are free now (try-locks: `crowd.rs`), else it takes the magazine's way;
//! - free: one compare-and-swap of the word, `live` → `cached` (the only locked instruction of
//!   the pair; a second free of the area loses it and is refused), then push on this thread's
//!   magazine (at its page budget, the oldest area of the largest larger size is evicted to
//!   make room); when its size's stack is full, its oldest half goes to this CPU's part of the
//!   depot (`depot.rs`) within the lazy limit's room, else down the busy-map path in one batch
//!   (`CacheOwner::free_from_cache`), which clears the words under each shard's lock once
//!   (`spill.rs`), and the area is cached; when no larger area can make room, the area goes
//!   to the depot within the lazy limit's room, else down the busy-map path;
//! - alloc miss of its size: a larger area within the slack (`Budget::slack_percent`) on this
//!   CPU's grown stacks while crowded (`CpuCache::pop_within`), else in the magazine, is taken
//!   whole, else a refill from the depot (up to a spill of the size, words still
//!   `cached`, records in place), else the depot's smallest area within the slack, taken
//!   whole, else the busy-map path;
//! - drain (idle purge, explicit purge, shrink, failure, low memory): another thread empties
//!   magazines. Owner and drainer meet through a [`Handshake`] (Dekker's pair with asymmetric
//!   fences: a compiler fence on the owner's side, `membarrier` on the drainer's). A magazine
//!   whose owner is inside an operation is not touched; its owner empties it itself at its
//!   next operation. The per-CPU stacks are emptied in the same drain, under the registry
//!   mutex: stopped, fenced with `membarrier`'s rseq command, taken ([`CpuCache::drain`]);
//! - thread exit: the thread-local destructor gives every magazine back to its arena;
//! - budget: a magazine starts at `thread_cache_pages`; a miss of a size it turned away (a
//!   refused push or an eviction, marked in its ghost bitmap) grows it by that size up to
//!   `thread_cache_pages_max`; emptying it (a drain, an owner's drain, a give-back) resets it.
//!   No budget passes the magazines' share of `thread_cache_cpu_pages` times the CPUs; a
//!   magazine above its share sheds (empties itself) at its owner's next miss or full push
//!   (`drain.rs`).
//!   Invariant: the pages held never exceed the budget, and each size's stack holds at most
//!   its cap under the present budget (`Arena::check` verifies both).
//!
//! Locks: the registry mutex (registration, exit, drain) is taken before any node lock and
//! never under one; the per-CPU stacks' drainer mutex only under it. The fast paths take no
//! lock.
//!
//! Enabled for the Nodes strategy when the range fits the state table and `membarrier` works
//! (the reason is reported otherwise); the older strategies stay as the kernel had them.
//!
//! The one `unsafe` of this module: the fast paths reach the thread's magazine through a raw
//! pointer kept in the thread's static TLS slot (`get_front`), which skips the TLS call, the
//! borrow flag and the destructor-state check of the thread-local that owns the magazines.
#![allow(unsafe_code)]

use crate::caches::area_state::{AreaStates, Claim};
pub(crate) use crate::caches::cache_interface::{Budget, CacheFigures, FreeFast};
use crate::caches::cpu_cache::CpuCache;
use crate::caches::depot::Depot;
use crate::caches::handshake::Enter;
use crate::caches::magazine::{bump, Magazine, Spill};
use std::cell::RefCell;
use std::panic::Location;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, Weak};
use vmarena_core::Span;

mod crowd;
mod drain;
mod registration;
pub(crate) use drain::DepotDrain;
mod spill;

/// Magazines a thread keeps (one per arena it used recently); the least recent beyond this
/// is given back.
const MAGAZINES_PER_THREAD: usize = 8;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What the thread caches need of the arena they belong to.
pub(crate) trait CacheOwner: Send + Sync {
    /// The arena's thread caches.
    fn caches(&self) -> Option<&ThreadCaches>;

    /// Free areas taken out of a magazine through the busy map, in one batch (their order may
    /// change). Their words are `cached`, so no other free can race with this; a refusal is a
    /// broken invariant and panics.
    fn free_from_cache(&self, areas: &mut [Span]);

    /// Free an area taken out of the thread caches' way (its word `cached`) through the busy
    /// map, only when the node locks it needs are free now and the free would make it lazy
    /// (lazy frees on, no backlog): true when it is freed; false, nothing changed, otherwise.
    /// A refusal is a broken invariant and panics, as in `free_from_cache`.
    fn try_free_passed(&self, start: u64) -> bool;

    /// What the lazy limit leaves above the lazy pages now. The depot may hold that much more
    /// than it does: its areas are freed memory still resident, as lazy areas are, and they
    /// still count as live, so the limit's headroom (the live pages below their peak) has not
    /// grown by them.
    fn lazy_room(&self) -> u64;

    /// Areas of a thread's frees went down the busy-map path: start a purge if one is due.
    fn spilled(me: &Arc<Self>)
    where
        Self: Sized;

    /// A thread registered its first magazine of this arena: start the decay worker, which
    /// gives cached areas back on idle intervals.
    fn registered(me: &Arc<Self>)
    where
        Self: Sized;
}

struct Entry {
    id: u64,
    mag: Arc<Magazine>,
    arena: Weak<dyn CacheOwner>,
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
    if let Some(owner) = e.arena.upgrade() {
        if let Some(tc) = owner.caches() {
            tc.retire(&*owner, &e.mag);
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

/// The thread caches of one arena.
pub(crate) struct ThreadCaches {
    id: u64,
    pub(crate) states: AreaStates,
    /// The per-CPU stacks in front of the magazines, when this machine runs them.
    cpu: Option<CpuCache>,
    /// Why there are no per-CPU stacks.
    cpu_off: Option<String>,
    budget: Budget,
    registry: Mutex<Vec<Arc<Magazine>>>,
    /// What full stacks spilled, for the magazines that miss (`depot.rs`).
    depot: Depot,
    /// Magazines registered (the registry's length, read without its mutex): the share of
    /// the total budget each may hold ([`Budget::ceiling`]).
    magazines: AtomicU64,
    /// Online CPUs when the caches were made: with more than twice as many magazines, the
    /// per-CPU stacks of the larger sizes are in use ([`ThreadCaches::crowded`]).
    cpus: u64,
    /// Counters of magazines given back, and areas drained.
    retired: Mutex<CacheFigures>,
    /// Areas a crowd's frees sent past the magazines (counted with `flushes`: a freeing thread
    /// may have no magazine of this arena to count them in).
    passed: AtomicU64,
}

impl ThreadCaches {
    /// Thread caches for pages `[lo, hi)`, or why there are none; with per-CPU stacks in front
    /// of the magazines when `cpu_pages` is `Some` (pages a CPU of the sizes up to 8 pages,
    /// and of the grown larger sizes: [`CpuCache::new`]) and this machine runs them
    /// ([`ThreadCaches::cpu_off`] says why not).
    pub(crate) fn new(
        lo: u64,
        hi: u64,
        max_pages: u64,
        budget: Budget,
        cpu_pages: Option<(u64, u64)>,
    ) -> Result<ThreadCaches, String> {
        if max_pages == 0 || budget.base_pages == 0 {
            return Err("thread cache sizes are 0".into());
        }
        let budget = Budget { max_pages: budget.max_pages.max(budget.base_pages), ..budget };
        const MAX_TABLE_WORDS: u64 = 1 << 30;
        if hi - lo > MAX_TABLE_WORDS {
            return Err(format!("range of {} pages is above the state table's {MAX_TABLE_WORDS}", hi - lo));
        }
        vmarena_platform::membarrier::register()?;
        let (cpu, cpu_off) = match cpu_pages.map(|(fixed, grown)| CpuCache::new(max_pages, fixed, grown)) {
            None => (None, Some("switched off (cpu_cache)".to_string())),
            Some(Ok(c)) => (Some(c), None),
            Some(Err(e)) => (None, Some(e)),
        };
        Ok(ThreadCaches {
            id: NEXT_ID.fetch_add(1, Relaxed),
            states: AreaStates::new(lo, hi - lo, max_pages)?,
            cpu,
            cpu_off,
            budget,
            registry: Mutex::new(Vec::new()),
            depot: Depot::new(max_pages, vmarena_platform::cpu::count()),
            magazines: AtomicU64::new(0),
            cpus: vmarena_platform::cpu::count() as u64,
            retired: Mutex::new(CacheFigures::default()),
            passed: AtomicU64::new(0),
        })
    }

    /// Make the state words of the arena's first `pages` pages writable (the arena grew to
    /// them). False when the kernel refused.
    pub(crate) fn commit(&self, pages: u64) -> bool {
        self.states.commit(pages)
    }

    /// The per-CPU stacks' hit paths on copies of their geometry and the state table's place
    /// (`None` without stacks).
    pub(crate) fn hit_path(&self) -> Option<crate::caches::hit_path::HitPath> {
        Some(crate::caches::hit_path::HitPath::new(self.cpu.as_ref()?.geometry(), self.states.place()))
    }

    /// Why this arena's caches have no per-CPU stacks (`None`: they have them).
    pub(crate) fn cpu_off(&self) -> Option<&str> {
        self.cpu_off.as_deref()
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
    fn with_magazine<A: CacheOwner + 'static, R>(
        &self,
        arena: &Arc<A>,
        f: impl FnOnce(&Magazine) -> R,
    ) -> Option<R> {
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
    fn with_magazine_slow<A: CacheOwner + 'static>(&self, arena: &Arc<A>) -> Option<*const Magazine> {
        OWNED
            .try_with(|o| {
                if o.try_borrow().ok()?.0.first().map_or(true, |e| e.id != self.id) {
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

    /// A plain hit, for callers whose fast path must make no call: the top of this CPU's
    /// stack of `pages` pages, else of this arena's front magazine's (a size of 1 to the
    /// largest tracked), now live; `None`, with nothing changed and nothing counted, for
    /// anything else (another arena's front, a drain asked for, empty stacks), which
    /// [`ThreadCaches::alloc`] then handles.
    #[inline(always)]
    pub(crate) fn alloc_hit(&self, pages: u64, caller: Option<&'static Location<'static>>) -> Option<u64> {
        // The stacks refuse sizes they do not have; the grown ones are asked only while they
        // are in use.
        if let Some(s) = self.cpu.as_ref().filter(|_| self.cpu_serves(pages)).and_then(|c| c.pop(pages)) {
            // The pop made this thread the area's only writer; the word is `cached`.
            self.states.reuse(s, pages, caller);
            return Some(s);
        }
        if pages.wrapping_sub(1) >= self.states.max_pages() {
            return None;
        }
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
        if let Some(c) = self.cpu.as_ref().filter(|c| c.holds(pages) && self.cpu_serves(pages)) {
            // Claimed first: a second free of the area, racing or not, is refused from here on.
            if !self.states.claim_seen(&seen) {
                return None;
            }
            if c.push(pages, start) {
                return Some((pages, seen.caller()));
            }
            return self.free_claimed_hit(start, pages, &seen);
        }
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

    /// [`ThreadCaches::free_hit`] of an area whose word this thread has claimed and whose CPU
    /// stack is full: into the front magazine when it has room without an eviction; else the
    /// claim is undone (the word is `live` again, nothing changed) and `None`.
    #[inline(always)]
    fn free_claimed_hit(
        &self,
        start: u64,
        pages: u64,
        seen: &crate::caches::area_state::Seen<'_>,
    ) -> Option<(u64, Option<&'static Location<'static>>)> {
        if self.grow_cpu(start, pages) || (!self.crowd_passes(pages) && self.fill_front(start, pages)) {
            return Some((pages, seen.caller()));
        }
        self.states.unclaim(seen);
        None
    }

    /// Put the claimed area at `start` in this thread's front magazine of this arena when it
    /// has room without an eviction (no drain asked for): true when it went in.
    #[inline(always)]
    fn fill_front(&self, start: u64, pages: u64) -> bool {
        let Some(m) = self.front() else { return false };
        if m.hs.enter() != Enter::Go {
            return false;
        }
        let filled = match m.room(pages) {
            Some(room) => {
                m.fill(room, pages, start);
                bump(&m.pushes);
                true
            }
            None => false,
        };
        m.hs.leave();
        filled
    }

    /// Alloc through the magazine: the start of a cached area of `pages` pages aligned to
    /// `align_pages` (a power of two), now live.
    ///
    /// The common case (the front magazine is this arena's, no drain pending, the size's
    /// stack holds an area and any start will do) is inlined into the caller and touches only
    /// this thread's magazine and the area's word; everything else is
    /// [`ThreadCaches::alloc_rest`].
    #[inline(always)]
    pub(crate) fn alloc<A: CacheOwner + 'static>(
        &self,
        arena: &Arc<A>,
        pages: u64,
        align_pages: u64,
        caller: Option<&'static Location<'static>>,
    ) -> Option<u64> {
        if align_pages == 1 {
            if let Some(s) = self.alloc_hit(pages, caller) {
                return Some(s);
            }
        }
        self.alloc_rest(arena, pages, align_pages, pages, caller).map(|(s, _)| s)
    }

    /// [`ThreadCaches::alloc`] of any start, where a larger cached area within the slack
    /// (`Budget::slack_percent`) serves the request whole when its own size has none: `(start,
    /// the area's pages)`. A program that cycles through many sizes (test_vmalloc's
    /// random_size) then reuses the areas it has for nearby sizes, instead of keeping one
    /// area per size.
    #[inline(always)]
    pub(crate) fn alloc_fit<A: CacheOwner + 'static>(
        &self,
        arena: &Arc<A>,
        pages: u64,
        caller: Option<&'static Location<'static>>,
    ) -> Option<(u64, u64)> {
        if let Some(s) = self.alloc_hit(pages, caller) {
            return Some((s, pages));
        }
        let extra = (pages as u128 * self.budget.slack_percent as u128 / 100) as u64;
        let hi = pages.saturating_add(extra).min(self.states.max_pages());
        if let Some(got) = self.grown_within(pages, hi, caller) {
            return Some(got);
        }
        self.alloc_rest(arena, pages, 1, hi, caller)
    }

    /// [`ThreadCaches::alloc`] past its common case: registration, a drain to do, a miss, an
    /// aligned request, a size served within the slack (up to `hi_pages`).
    #[cold]
    #[inline(never)]
    fn alloc_rest<A: CacheOwner + 'static>(
        &self,
        arena: &Arc<A>,
        pages: u64,
        align_pages: u64,
        hi_pages: u64,
        caller: Option<&'static Location<'static>>,
    ) -> Option<(u64, u64)> {
        let mut shed = Vec::new();
        let got = self
            .with_magazine(arena, |m| {
                if m.hs.enter() != Enter::Go {
                    self.owner_drain(&**arena, m);
                    return None;
                }
                self.shed(m, &mut shed);
                let mut got = m.pop(pages, align_pages).map(|s| (s, pages));
                if got.is_none() && hi_pages > pages {
                    got = m.pop_within(pages, hi_pages);
                    if got.is_some() {
                        bump(&m.slack_hits);
                    }
                }
                if got.is_none() && align_pages == 1 && self.budget.depot {
                    got = self.refill(&**arena, m, pages, hi_pages);
                    // The magazine missed all the same: a size it turned away grows it (else a
                    // size its budget refuses would come through the depot each time).
                    if let Some((_, p)) = got {
                        m.missed(pages, self.ceiling());
                        if p > pages {
                            bump(&m.slack_hits);
                        }
                    }
                }
                if let Some((s, p)) = got {
                    self.states.reuse(s, p, caller);
                    bump(&m.hits);
                } else {
                    bump(&m.misses);
                    m.missed(pages, self.ceiling());
                }
                m.hs.leave();
                got
            })
            .flatten();
        self.give_shed(&**arena, &mut shed);
        got
    }

    /// Free through the magazine (see [`FreeFast`]).
    ///
    /// The common case (the word was live, the front magazine is this arena's, no drain
    /// pending, the size's stack and the budget have room) is inlined into the caller; the
    /// rest, once the word is claimed, is [`ThreadCaches::free_rest`].
    #[inline(always)]
    pub(crate) fn free<A: CacheOwner + 'static>(&self, arena: &Arc<A>, start: u64) -> FreeFast {
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

    /// The free of an area whose word this thread claimed on a hit path that found no room
    /// (`HitFree::Claimed`): the magazine, or the busy-map path.
    pub(crate) fn free_after_claim<A: CacheOwner + 'static>(&self, arena: &Arc<A>, start: u64) -> FreeFast {
        match self.states.get(start) {
            Some(w) if w.cached && self.fill_front(start, w.pages) => {
                FreeFast::Cached { pages: w.pages, caller: w.caller }
            }
            Some(w) if w.cached => self.free_rest(arena, start, w.pages, w.caller),
            // Not claimed: a broken promise of the caller; nothing is changed.
            _ => FreeFast::Untracked,
        }
    }

    /// [`ThreadCaches::free`] of an area whose word this thread has claimed, past the common
    /// case: registration, a drain to do, a push that must evict or is refused.
    #[cold]
    #[inline(never)]
    fn free_rest<A: CacheOwner + 'static>(
        &self,
        arena: &Arc<A>,
        start: u64,
        pages: u64,
        caller: Option<&'static Location<'static>>,
    ) -> FreeFast {
        // In a crowd, a larger area its CPU's stack did not take passes the magazine and the
        // depot when its node locks are free (counted as a flush); with one held, it takes the
        // magazine's way, so the free never waits for them.
        if self.crowd_passes(pages) && arena.try_free_passed(start) {
            self.passed.fetch_add(1, Relaxed);
            A::spilled(arena);
            return FreeFast::Passed { pages, caller };
        }
        let mut spill = Spill::default();
        // Spilled areas of the freed area's own size (a full stack's oldest half).
        let mut flushed = 0;
        let mut shed = Vec::new();
        let cached = self.with_magazine(arena, |m| {
            if m.hs.enter() != Enter::Go {
                self.owner_drain(&**arena, m);
                return false;
            }
            self.shed(m, &mut shed);
            let ok = m.push(pages, start, &mut spill);
            bump(if ok { &m.pushes } else { &m.flushes });
            // The oldest areas of a full stack go the way a refused free goes: flushes.
            flushed = spill.of_size(pages);
            m.flushes.store(m.flushes.load(Relaxed) + flushed as u64, Relaxed);
            m.hs.leave();
            ok
        });
        if !spill.is_empty() {
            self.spill_out(arena, &mut spill, flushed);
        }
        self.give_shed(&**arena, &mut shed);
        if cached == Some(false) && self.keep_refused(&**arena, start, pages) {
            return FreeFast::Cached { pages, caller };
        }
        if cached == Some(true) {
            FreeFast::Cached { pages, caller }
        } else {
            FreeFast::Flush
        }
    }
}
