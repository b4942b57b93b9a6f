//! `AreaStates`: one atomic state word per page of an arena, read and changed without a lock.
//!
//! Owns: the words (a lazily zero [`WordTable`], so only table pages that cover live small
//! areas take memory; neighbouring pages' words are spread over their table page so that
//! they do not share cache lines, see `AreaStates::word`). Only the first page of an area of
//! at most `max_pages` pages that holds the space's own memory ([`AreaKind::Vmalloc`]) ever
//! has a non-zero word; every other word is zero. A word is
//!
//! ```text
//!   63                               16 15            2 1  0
//!  +-----------------------------------+---------------+----+
//!  | caller (&'static Location) >> 3   |r| pages      | st |   st: 0 none, 1 live, 2 cached,
//!  |                                   | | (guard incl.)|    |       3 retired
//!  |                                   | |              |    |   r: the busy record's tag is stale
//!  +-----------------------------------+---------------+----+
//! ```
//!
//! Transitions and who makes them (the thread cache's invariants, DESIGN.md section 8):
//!
//! - none → live: the allocating thread, under the area's busy-shard lock, when the area enters
//!   the busy map ([`AreaStates::track`]);
//! - live → cached: any freeing thread, one compare-and-swap ([`AreaStates::claim`]); the winner
//!   owns the area, a second free of it sees `cached` and is refused;
//! - cached → live: the thread that took it out of the magazine or per-CPU stack that held it
//!   (the magazine's owner, or the thread whose pop committed), one plain release store
//!   ([`AreaStates::reuse`]) — nobody else writes a cached word;
//! - cached → live, undone claim: the freeing thread whose claim found no room in its CPU's
//!   stack nor its magazine, before the area went anywhere ([`AreaStates::unclaim`]); it then
//!   frees through the full path, which claims again;
//! - live → retired: the thread that hands the area to a deferred free (`kvfree_rcu`), one
//!   compare-and-swap ([`AreaStates::retire`]); every free and resize refuses a retired area,
//!   as it refuses a cached one, so nothing but the deferred free releases it;
//! - retired → live: the deferred free, once the grace period has passed, one compare-and-swap
//!   ([`AreaStates::unretire`]), right before it frees the area;
//! - live → live with `r` set: the area's user, one compare-and-swap, when a `vrealloc` keeps the
//!   area in place without a lock ([`AreaStates::mark_stale`]); the busy record then reports an
//!   unknown requested size;
//! - live, cached or retired → none: the thread that removes the area from the busy map, under the same
//!   shard lock ([`AreaStates::clear`]), so a start is never live in the words without being
//!   live in the busy map.
//!
//! The caller is packed into the word so that a magazine hit records a truthful caller for
//! `vmallocinfo` without taking a lock; packing it is the one `unsafe` of this module.
#![allow(unsafe_code)]
#![cfg_attr(loom, allow(dead_code))]

use crate::area::{AreaKind, AreaTag};
use crate::sync::AtomicU64;
use std::panic::Location;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

// Where the words live: a lazily zero table of the platform's; under loom, loom's atomics, so
// that the models explore every interleaving of the transitions (`.ci/loom`).
#[cfg(not(loom))]
use vmarena_platform::WordTable;
#[cfg(loom)]
struct WordTable(Box<[AtomicU64]>);
#[cfg(loom)]
impl WordTable {
    fn new_uncommitted(len: usize) -> std::io::Result<WordTable> {
        Ok(WordTable((0..len).map(|_| AtomicU64::new(0)).collect()))
    }
    fn commit_words(&self, _words: usize) -> bool {
        true
    }
    fn words(&self) -> &[AtomicU64] {
        &self.0
    }
}

const ST_MASK: u64 = 0b11;
const LIVE: u64 = 1;
const CACHED: u64 = 2;
const RETIRED: u64 = 3;
const PAGES_SHIFT: u32 = 2;
const PAGES_MASK: u64 = (1 << 13) - 1;
const REUSED: u64 = 1 << 15;
const CALLER_SHIFT: u32 = 16;

/// Pages whose words share one 4 KiB page of the table, permuted among themselves.
const SPREAD_BLOCK: u64 = 512;
/// The permutation's multiplier: odd (a bijection of the block), and 9, so that pages 1 to 56
/// apart land 8 words apart or more (on different lines), and consecutive pages on consecutive
/// lines (a sweep in page order reads the table as a stream). A multiply by 9 is one `lea`.
const SPREAD_STEP: u64 = 9;

/// Largest area, in pages, a word can describe.
pub(crate) const MAX_TRACKED_PAGES: u64 = PAGES_MASK;

/// What a free found in the word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The word was live and is now cached: the caller owns the area (`pages`, `caller`).
    Won { pages: u64, caller: Option<&'static Location<'static>> },
    /// The word was already cached (a double free) or retired (handed to a deferred free).
    AlreadyFree,
    /// No word for this start: not a small live area (the busy map decides).
    Untracked,
}

/// A live word as [`AreaStates::seen_live`] read it.
pub(crate) struct Seen<'a> {
    word: &'a AtomicU64,
    value: u64,
    pub(crate) pages: u64,
}

impl Seen<'_> {
    /// The area's latest caller, as the word records it.
    #[inline(always)]
    pub(crate) fn caller(&self) -> Option<&'static Location<'static>> {
        decode_caller(self.value)
    }
}

/// A tracked word, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WordState {
    pub(crate) pages: u64,
    /// In a thread cache (free for its user).
    pub(crate) cached: bool,
    /// Handed to a deferred free: live for readers, refused by every free and resize.
    pub(crate) retired: bool,
    /// The busy record's tag is stale: the latest allocation came from a thread cache, or the
    /// area was resized in place without a lock.
    pub(crate) reused: bool,
    pub(crate) caller: Option<&'static Location<'static>>,
}

/// State words for pages `[lo, lo + len)`.
pub(crate) struct AreaStates {
    lo: u64,
    table: WordTable,
    max_pages: u64,
}

#[inline(always)]
fn encode(pages: u64, caller: Option<&'static Location<'static>>, st: u64) -> u64 {
    caller_bits(caller) | ((pages & PAGES_MASK) << PAGES_SHIFT) | st
}

/// The caller's field of a word, in place: what a hit path that always records the same
/// caller computes once.
#[inline(always)]
pub(crate) fn caller_bits(caller: Option<&'static Location<'static>>) -> u64 {
    let c = caller.map_or(0, |l| l as *const Location<'static> as u64);
    // A caller above 2^51 (not a user-space address on the supported machines) is dropped.
    let c = if c >> 51 == 0 { c >> 3 } else { 0 };
    c << CALLER_SHIFT
}

/// The index in the table of the word of page `start` of an arena that begins at page `lo`
/// (see `AreaStates::word`).
#[inline(always)]
pub(crate) fn word_index(lo: u64, start: u64) -> u64 {
    let i = start.wrapping_sub(lo);
    (i & !(SPREAD_BLOCK - 1)) | (i.wrapping_mul(SPREAD_STEP) & (SPREAD_BLOCK - 1))
}

/// The pages of a word that is live; `None` for any other word.
#[inline(always)]
pub(crate) fn live_pages(value: u64) -> Option<u64> {
    (value & ST_MASK == LIVE).then(|| pages_of(value))
}

/// Claim a word read as `value` (live): live → cached, true when this call made it.
#[inline(always)]
pub(crate) fn claim_value(word: &AtomicU64, value: u64) -> bool {
    word.compare_exchange(value, (value & !ST_MASK) | CACHED, AcqRel, Acquire).is_ok()
}

/// A cached area handed out again by whoever took it from its cache: cached → live, with the
/// latest caller and the stale bit.
#[inline(always)]
pub(crate) fn reuse_word(word: &AtomicU64, pages: u64, caller: Option<&'static Location<'static>>) {
    reuse_word_bits(word, pages, caller_bits(caller));
}

/// [`reuse_word`] with the caller's field already made ([`caller_bits`]).
#[inline(always)]
pub(crate) fn reuse_word_bits(word: &AtomicU64, pages: u64, caller_bits: u64) {
    debug_assert_eq!(word.load(Relaxed) & ST_MASK, CACHED, "reused a start that was not cached");
    word.store(caller_bits | ((pages & PAGES_MASK) << PAGES_SHIFT) | LIVE | REUSED, Release);
}

#[inline(always)]
fn decode_caller(w: u64) -> Option<&'static Location<'static>> {
    let c = (w >> CALLER_SHIFT) << 3;
    if c == 0 {
        return None;
    }
    // SAFETY: a non-zero caller field is only ever written by `encode` from a
    // `&'static Location<'static>` (8-byte aligned, so the three dropped bits were zero); the
    // location lives for the whole program.
    Some(unsafe { &*(c as *const Location<'static>) })
}

fn pages_of(w: u64) -> u64 {
    (w >> PAGES_SHIFT) & PAGES_MASK
}

impl AreaStates {
    /// Words for `len` pages from `lo`, tracking areas of at most `max_pages` pages. Every word
    /// reads as zero; only the words of the first pages that [`AreaStates::commit`] names can be
    /// written (so that strict overcommit charges the table as the arena grows).
    pub(crate) fn new(lo: u64, len: u64, max_pages: u64) -> Result<AreaStates, String> {
        // Whole blocks of `SPREAD_BLOCK` words, so that the spread below stays in the table.
        let words = len.div_ceil(SPREAD_BLOCK) * SPREAD_BLOCK;
        let table = WordTable::new_uncommitted(words as usize)
            .map_err(|e| format!("area state table of {words} words: {e}"))?;
        Ok(AreaStates { lo, table, max_pages: max_pages.min(MAX_TRACKED_PAGES) })
    }

    /// Make the words of the arena's first `pages` pages writable: whole blocks of
    /// [`SPREAD_BLOCK`], since a block's words are spread over its table page. False when the
    /// kernel refused (the commit limit). Callers serialise growths (the purge mutex).
    pub(crate) fn commit(&self, pages: u64) -> bool {
        self.table.commit_words((pages.div_ceil(SPREAD_BLOCK) * SPREAD_BLOCK) as usize)
    }

    /// Drop the table pages that hold the words of pages `[start, start + pages)`, whole
    /// blocks of [`SPREAD_BLOCK`] from the arena's first page (a block's words fill one table
    /// page, permuted within it): the words of pages no area holds are zero, so a block of
    /// free pages needs none of its page. The caller keeps every page of the range free
    /// meanwhile (out of the free tree: no area is carved there, so no word there is
    /// written). Returns the bytes dropped.
    #[cfg(not(loom))]
    pub(crate) fn discard_pages(&self, start: u64, pages: u64) -> u64 {
        let from = start.saturating_sub(self.lo);
        debug_assert!(from % SPREAD_BLOCK == 0 && pages % SPREAD_BLOCK == 0, "whole blocks");
        self.table.discard_words(from as usize, (from + pages) as usize) as u64
    }

    /// Bytes of the table that are resident now (`mincore`).
    #[cfg(not(loom))]
    pub(crate) fn resident_bytes(&self) -> u64 {
        self.table.resident_bytes()
    }

    /// Largest tracked area, in pages.
    #[inline]
    pub(crate) fn max_pages(&self) -> u64 {
        self.max_pages
    }

    /// The word of page `start`: its block of [`SPREAD_BLOCK`] pages keeps its table page, and
    /// inside the block the page's word sits at `offset * SPREAD_STEP` (mod the block), so that
    /// pages up to 56 apart get words at least 8 words (64 bytes) apart: two threads' areas
    /// carved next to each other never share a cache line of words (each thread's free and
    /// reuse write its area's word). The words of consecutive pages are on consecutive lines,
    /// so a bulk free in the order the areas were carved reads the table as a stream the
    /// hardware prefetches, where the earlier multiplier (-15) scattered it and every free
    /// missed (docs/bench-log/many-workers.md, "the state table in page order"). A bijection of
    /// every block: a page outside the range gets a word no page inside it has, which stays
    /// zero, or none.
    #[inline(always)]
    fn word(&self, start: u64) -> Option<&AtomicU64> {
        self.table.words().get(word_index(self.lo, start) as usize)
    }

    /// Where the words are, for [`crate::caches::hit_path::HitPath`]: the table's first word, its
    /// length and the arena's first page.
    pub(crate) fn place(&self) -> (*const AtomicU64, u64, u64) {
        let words = self.table.words();
        (words.as_ptr(), words.len() as u64, self.lo)
    }

    /// The address of the word of page `start` (tests check how words share cache lines).
    pub(crate) fn word_addr(&self, start: u64) -> Option<usize> {
        self.word(start).map(|w| w as *const AtomicU64 as usize)
    }

    /// Whether an area of this size and kind is tracked.
    #[inline]
    pub(crate) fn tracks(&self, pages: u64, kind: AreaKind) -> bool {
        pages <= self.max_pages && kind == AreaKind::Vmalloc
    }

    /// The area at `start` entered the busy map (call under its shard lock).
    #[inline]
    pub(crate) fn track(&self, start: u64, pages: u64, tag: &AreaTag) {
        if self.tracks(pages, tag.kind) {
            if let Some(w) = self.word(start) {
                w.store(encode(pages, tag.caller, LIVE), Release);
            }
        }
    }

    /// The area at `start` left the busy map (call under its shard lock).
    #[inline]
    pub(crate) fn clear(&self, start: u64, pages: u64) {
        if pages <= self.max_pages {
            if let Some(w) = self.word(start) {
                if w.load(Relaxed) != 0 {
                    w.store(0, Release);
                }
            }
        }
    }

    /// A free of `start`: live → cached in one compare-and-swap.
    #[inline]
    pub(crate) fn claim(&self, start: u64) -> Claim {
        let Some(w) = self.word(start) else { return Claim::Untracked };
        let mut cur = w.load(Acquire);
        loop {
            match cur & ST_MASK {
                LIVE => match w.compare_exchange_weak(cur, (cur & !ST_MASK) | CACHED, AcqRel, Acquire) {
                    Ok(_) => return Claim::Won { pages: pages_of(cur), caller: decode_caller(cur) },
                    Err(now) => cur = now,
                },
                CACHED | RETIRED => return Claim::AlreadyFree,
                _ => return Claim::Untracked,
            }
        }
    }

    /// A live word as it is now and its pages (`None` for any other state, or no word), for
    /// [`AreaStates::claim_seen`].
    #[inline(always)]
    pub(crate) fn seen_live(&self, start: u64) -> Option<Seen<'_>> {
        let word = self.word(start)?;
        let value = word.load(Acquire);
        live_pages(value).map(|pages| Seen { word, value, pages })
    }

    /// [`AreaStates::claim`] of a word [`AreaStates::seen_live`] returned: live → cached, true
    /// when this call made it; false, nothing changed, when the word has changed since (the
    /// caller then takes the full path).
    #[inline(always)]
    pub(crate) fn claim_seen(&self, seen: &Seen<'_>) -> bool {
        claim_value(seen.word, seen.value)
    }

    /// Undo a [`AreaStates::claim_seen`] that succeeded, before the area went anywhere: the word
    /// is the live one it was. Only the claimer may (nobody else writes a cached word).
    #[inline(always)]
    pub(crate) fn unclaim(&self, seen: &Seen<'_>) {
        seen.word.store(seen.value, Release);
    }

    /// A deferred free takes the area: live → retired. `Won` (with the area's pages) when
    /// it did, `AlreadyFree` when the word is cached or retired, `Untracked` without a word.
    #[inline]
    pub(crate) fn retire(&self, start: u64) -> Claim {
        self.swap_state(start, LIVE, RETIRED)
    }

    /// The deferred free gives the area back to be freed: retired → live (`Won`), or
    /// `AlreadyFree` when the word is not retired, `Untracked` without a word.
    #[inline]
    pub(crate) fn unretire(&self, start: u64) -> Claim {
        self.swap_state(start, RETIRED, LIVE)
    }

    /// Move the word from state `from` to `to` (the other fields kept).
    fn swap_state(&self, start: u64, from: u64, to: u64) -> Claim {
        let Some(w) = self.word(start) else { return Claim::Untracked };
        let mut cur = w.load(Acquire);
        loop {
            match cur & ST_MASK {
                0 => return Claim::Untracked,
                st if st != from => return Claim::AlreadyFree,
                _ => match w.compare_exchange_weak(cur, (cur & !ST_MASK) | to, AcqRel, Acquire) {
                    Ok(_) => return Claim::Won { pages: pages_of(cur), caller: decode_caller(cur) },
                    Err(now) => cur = now,
                },
            }
        }
    }

    /// A cached area handed out again by the magazine that holds it: cached → live.
    #[inline]
    pub(crate) fn reuse(&self, start: u64, pages: u64, caller: Option<&'static Location<'static>>) {
        if let Some(w) = self.word(start) {
            reuse_word(w, pages, caller);
        }
    }

    /// A resize in place that takes no lock: sets `r` on a live word (the busy record's requested
    /// size is stale from now on). False when the word is not live (freed, or never tracked).
    #[inline]
    pub(crate) fn mark_stale(&self, start: u64) -> bool {
        let Some(w) = self.word(start) else { return false };
        let mut cur = w.load(Acquire);
        loop {
            if cur & ST_MASK != LIVE {
                return false;
            }
            if cur & REUSED != 0 {
                return true;
            }
            match w.compare_exchange_weak(cur, cur | REUSED, AcqRel, Acquire) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// `None` for an untracked start.
    #[inline]
    pub(crate) fn get(&self, start: u64) -> Option<WordState> {
        let w = self.word(start)?.load(Acquire);
        let (cached, retired) = (w & ST_MASK == CACHED, w & ST_MASK == RETIRED);
        let (reused, caller) = (w & REUSED != 0, decode_caller(w));
        match w & ST_MASK {
            0 => None,
            _ => Some(WordState { pages: pages_of(w), cached, retired, reused, caller }),
        }
    }
}

/// Model checks of the transitions that race (`.ci/loom` runs them): every interleaving of two
/// threads' operations on one word, up to loom's preemption bound.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::area::UNKNOWN_BYTES;
    use loom::thread;
    use std::sync::Arc;

    const PAGE: u64 = 3;

    fn live_area() -> Arc<AreaStates> {
        let s = AreaStates::new(0, 8, 8).unwrap();
        let tag = AreaTag { caller: None, requested_bytes: UNKNOWN_BYTES, kind: AreaKind::Vmalloc };
        s.track(PAGE, 2, &tag);
        Arc::new(s)
    }

    fn won(c: Claim) -> bool {
        matches!(c, Claim::Won { pages: 2, .. })
    }

    /// Two frees of one live area: exactly one claims it, the other finds it free.
    #[test]
    fn loom_two_frees_one_claim() {
        loom::model(|| {
            let s = live_area();
            let t = {
                let s = s.clone();
                thread::spawn(move || s.claim(PAGE))
            };
            let mine = s.claim(PAGE);
            let theirs = t.join().unwrap();
            assert!(won(mine) ^ won(theirs), "exactly one free claims the area: {mine:?}, {theirs:?}");
            assert!(mine == Claim::AlreadyFree || theirs == Claim::AlreadyFree);
            assert!(s.get(PAGE).unwrap().cached);
        });
    }

    /// The hit path's free (a look, then a claim of what it saw) against the full path's: one
    /// wins; the hit path's loser changes nothing and its caller takes the full path, which
    /// refuses the area.
    #[test]
    fn loom_hit_claim_races_full_claim() {
        loom::model(|| {
            let s = live_area();
            let t = {
                let s = s.clone();
                thread::spawn(move || s.claim(PAGE))
            };
            let hit = s.seen_live(PAGE).is_some_and(|seen| s.claim_seen(&seen));
            let full = t.join().unwrap();
            assert!(hit ^ won(full), "exactly one free claims the area: hit {hit}, full {full:?}");
            if !hit {
                assert_eq!(s.claim(PAGE), Claim::AlreadyFree, "the hit path's retry is refused");
            }
        });
    }

    /// A free against a deferred free of the same area: exactly one takes it, and the word
    /// ends in the winner's state.
    #[test]
    fn loom_free_races_retire() {
        loom::model(|| {
            let s = live_area();
            let t = {
                let s = s.clone();
                thread::spawn(move || s.retire(PAGE))
            };
            let freed = won(s.claim(PAGE));
            let retired = won(t.join().unwrap());
            assert!(freed ^ retired, "exactly one takes the area: free {freed}, retire {retired}");
            let w = s.get(PAGE).unwrap();
            assert_eq!((w.cached, w.retired), (freed, retired));
        });
    }

    /// A claim undone (its stack and magazine had no room) against another free: the other
    /// free either finds the area cached (refused) or live again (claims it); never both
    /// frees succeed while the first still owns it.
    #[test]
    fn loom_unclaim_races_free() {
        loom::model(|| {
            let s = live_area();
            let seen = s.seen_live(PAGE).unwrap();
            assert!(s.claim_seen(&seen));
            let t = {
                let s = s.clone();
                thread::spawn(move || s.claim(PAGE))
            };
            s.unclaim(&seen);
            let theirs = t.join().unwrap();
            let mine_again = s.claim(PAGE);
            assert!(won(mine_again) ^ won(theirs), "one owner after the undo: {mine_again:?}, {theirs:?}");
        });
    }
}
