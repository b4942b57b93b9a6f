//! `HitPath`: the per-CPU stacks' hit paths on copies of what they read, for a front end that
//! keeps them beside its own hot fields (the C ABI's default space keeps them in a static).
//!
//! A hit through [`crate::Arena::alloc_hit`] reaches the stacks and the state words through the
//! arena's shared state, one load more on every step of the chain; and its callers' paths carry
//! enough live values that the compiler saves registers on the stack, stores which the free's
//! compare-and-swap must then wait for. A `HitPath` is a copy of the stacks' geometry and of the
//! state table's place, read from wherever the caller keeps it, and its two operations need few
//! registers (docs/bench-log/design-notes.md, section 16, "The C ABI's hit path").
//!
//! Owns nothing: raw copies of addresses the arena owns (its per-CPU stacks and its state
//! table), valid while that arena lives; that is the safety contract of [`HitPath::alloc`] and
//! [`HitPath::free`]. The state-word rules are the thread caches' (`area_state.rs`): a free
//! claims the word live → cached with one compare-and-swap before it pushes, an allocation
//! stores it live after its pop.
#![allow(unsafe_code)]
// Under loom the thread caches are never built, so nothing makes a path.
#![cfg_attr(loom, allow(dead_code))]

use crate::caches::area_state::{caller_bits, claim_value, live_pages, reuse_word_bits, word_index};
use crate::sync::AtomicU64;
use std::panic::Location;
use std::sync::atomic::Ordering::Acquire;
use vmarena_platform::cpu_stack::CpuGeometry;

/// What [`HitPath::free`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HitFree {
    /// The area is on this CPU's stack.
    Cached,
    /// The word is claimed (`cached`, this thread's) but this CPU's stack had no room: finish
    /// the free with [`crate::Arena::free_claimed`].
    Claimed,
    /// Nothing changed: not a live area of a size with stacks, or the word changed meanwhile
    /// (the full path decides, and refuses a double free).
    No,
}

/// See the module documentation.
#[derive(Debug)]
pub struct HitPath {
    cpu: CpuGeometry,
    /// Sizes this path serves: 1 to this many pages, the stacks with fixed caps (the grown
    /// ones are reached through the thread caches, which know when they are in use).
    fixed: u64,
    words: *const AtomicU64,
    words_len: u64,
    lo: u64,
}

// SAFETY: a `HitPath` holds addresses of atomics (stack words, state words) that any thread may
// use; it is a copy of where they are, valid under the contract of its operations.
unsafe impl Send for HitPath {}
// SAFETY: as for `Send`: every access through it is atomic or a restartable sequence.
unsafe impl Sync for HitPath {}

impl HitPath {
    pub(crate) fn new(cpu: CpuGeometry, (words, words_len, lo): (*const AtomicU64, u64, u64)) -> HitPath {
        let fixed = crate::caches::cache_interface::CPU_FIXED_SIZES.min(cpu.per_cpu() as u64);
        HitPath { cpu, fixed, words, words_len, lo }
    }

    /// The largest area, in pages (guard included), that this path serves.
    pub fn max_pages(&self) -> u64 {
        self.fixed
    }

    /// The word of page `start`, or `None` outside the table.
    ///
    /// # Safety
    ///
    /// The arena this path came from is alive.
    #[inline(always)]
    unsafe fn word(&self, start: u64) -> Option<&AtomicU64> {
        let i = word_index(self.lo, start);
        // SAFETY: `i` is inside the table, which the arena keeps mapped while it lives (the
        // caller's promise), and every word is an `AtomicU64`.
        (i < self.words_len).then(|| unsafe { &*self.words.add(i as usize) })
    }

    /// The state word's caller field for `caller`, for [`HitPath::alloc`] (a caller that is
    /// always the same computes it once).
    pub fn caller_bits(caller: Option<&'static Location<'static>>) -> u64 {
        caller_bits(caller)
    }

    /// An area of `pages` pages (guard included) from this CPU's stack of its size, now live
    /// with the caller of `caller_bits` ([`HitPath::caller_bits`]) as its latest caller;
    /// `None`, with nothing changed, when that stack is empty, a drain holds it, or the size
    /// is not one this path serves ([`HitPath::max_pages`]). Makes no call and cannot panic.
    ///
    /// # Safety
    ///
    /// The arena this path came from ([`crate::Arena::hit_path`]) is alive.
    #[inline(always)]
    pub unsafe fn alloc(&self, pages: u64, caller_bits: u64) -> Option<u64> {
        if pages.wrapping_sub(1) >= self.fixed {
            return None;
        }
        // SAFETY: the geometry of the arena's stacks, alive (the caller's promise).
        let start = unsafe { self.cpu.pop(pages.wrapping_sub(1) as usize) }?;
        // SAFETY: as above. The pop made this thread the area's only writer.
        if let Some(w) = unsafe { self.word(start) } {
            reuse_word_bits(w, pages, caller_bits);
        }
        Some(start)
    }

    /// Free the live area at `start` onto this CPU's stack of its size (see [`HitFree`]).
    /// Makes no call and cannot panic.
    ///
    /// # Safety
    ///
    /// As for [`HitPath::alloc`].
    #[inline(always)]
    pub unsafe fn free(&self, start: u64) -> HitFree {
        // SAFETY: the arena is alive (the caller's promise).
        let Some(w) = (unsafe { self.word(start) }) else { return HitFree::No };
        let value = w.load(Acquire);
        let Some(pages) = live_pages(value) else { return HitFree::No };
        // Claimed before the push: a second free of the area, racing or not, is refused from
        // here on. A size without stacks is refused by the push, after the claim, so check
        // the size first (the claim must not be taken for nothing).
        if pages.wrapping_sub(1) >= self.fixed || !claim_value(w, value) {
            return HitFree::No;
        }
        // SAFETY: the geometry of the arena's stacks, alive.
        if unsafe { self.cpu.push((pages - 1) as usize, start) } {
            HitFree::Cached
        } else {
            HitFree::Claimed
        }
    }
}
