//! What an arena's pages stand for: the hook between the integer engine and real memory.
//!
//! The engine calls a `Backing` at three moments of an area's life, never with a lock held:
//! - `prepare` after carving an area from the free tree (a memory space installs its guard);
//! - `release` when a purge gives back the memory of lazily freed areas (one batch per purge);
//! - `retire` before areas go back to the free tree (a memory space removes their guards, so
//!   the pages can later be data of another area);
//! - `move_pages` when a fresh area takes the resident memory of lazily freed areas instead of
//!   faulting in new pages (step Move), and `heal` when the ranges such moves left behind are
//!   free again;
//! - `grow` when the arena's usable part is full and a request needs more (step Grow): a
//!   backing that makes its range usable in steps ([`Backing::grow_step_pages`]) commits the
//!   next step; the arena starts with one step and grows while the backing agrees; `shrink`
//!   gives the free top back after a full purge.
//!
//! An arena over a plain integer range (an id space, a device heap) uses [`NoBacking`].

use vmarena_core::Span;

/// See the module documentation. Areas are [`Span`]s with their guard pages included.
pub trait Backing: Send + Sync + 'static {
    /// Set up an area just carved from the free tree.
    fn prepare(&self, start_page: u64, pages: u64);
    /// Release the memory of these areas; return the syscalls made.
    fn release(&self, areas: &[Span]) -> usize;
    /// Undo `prepare` for areas going back to the free tree; return the syscalls made.
    fn retire(&self, areas: &[Span]) -> usize;
    /// True when released memory reads as zero (then pages from the free tree are fresh).
    fn zeroes_on_release(&self) -> bool;
    /// Pages per unit the memory may be backed in (a huge page), 1 when there is none: the
    /// first touch of an area can make resident a whole unit, free pages around the area
    /// included, and releasing the area alone would leave those resident.
    fn release_granule_pages(&self) -> u64 {
        1
    }
    /// Release plain free pages, no guard in them; return the syscalls made. Called only when
    /// `release_granule_pages` is above 1.
    fn release_free(&self, _spans: &[Span]) -> usize {
        0
    }
    /// Pages at the end of every area that hold no data (guards); they are never moved.
    fn guard_pages(&self) -> u64 {
        0
    }
    /// True when [`Backing::move_pages`] can move memory at all.
    fn moves_pages(&self) -> bool {
        false
    }
    /// Move the memory of each `(from, to, pages)` (plain data ranges, disjoint, no guard in
    /// them) to `to`; `from` then reads as zero. Returns, per move, what became of it; a
    /// refused move leaves `from` as it was and `to` reading as zero.
    fn move_pages(&self, moves: &[(u64, u64, u64)]) -> Vec<Moved> {
        vec![Moved::No; moves.len()]
    }
    /// Move as much as it can of the memory of `pages` pages at `from` to `to` (plain data
    /// ranges, disjoint, `to` holding nothing anyone needs), from the front, keeping every
    /// byte: the pages moved, and how. `[to, to + moved)` then holds the bytes of
    /// `[from, from + moved)`, which reads as zero; the rest of `from` is exactly as it was,
    /// for the caller to copy (a resize). Unlike [`Backing::move_pages`], whose sources are
    /// freed areas, nothing may be lost on the way.
    fn move_prefix(&self, _from: u64, _to: u64, _pages: u64) -> (u64, Moved) {
        (0, Moved::No)
    }
    /// Undo what moves left in these spans, which are free space now (no guard, no data): a
    /// memory space makes each one ordinary memory of its reservation again. Returns the
    /// syscalls made.
    fn heal(&self, _spans: &[Span]) -> usize {
        0
    }
    /// True when [`Backing::heal`] may also be given plain free ranges of the usable part, to
    /// make them fresh memory with no page tables (a purge does so for the 2 MiB blocks it
    /// leaves free: a released range's page tables otherwise stay). False by default.
    fn heals_free_blocks(&self) -> bool {
        false
    }
    /// `Some(step)` when the range becomes usable in steps of at least `step` pages from its
    /// start ([`Backing::grow`]); `None` (the default) when all of it is usable at once.
    fn grow_step_pages(&self) -> Option<u64> {
        None
    }
    /// Make `[start, start + pages)`, the range just above the usable part, usable. False when
    /// refused (a commit limit): the arena then serves from what it has.
    fn grow(&self, _start: u64, _pages: u64) -> bool {
        true
    }
    /// Undo [`Backing::grow`] for `[start, start + pages)`, free space at the top of the usable
    /// part (no guard, no data): a memory space gives its commit back. False when refused
    /// (the arena keeps the range usable).
    fn shrink(&self, _start: u64, _pages: u64) -> bool {
        false
    }
}

/// What became of one move of [`Backing::move_pages`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moved {
    /// Refused: `from` is as it was, `to` reads as zero.
    No,
    /// Moved, and the target is a mapping of its own until [`Backing::heal`] runs over it
    /// once it is free space again (`mremap`).
    Remapped,
    /// Moved within the mapping: nothing to heal (`UFFDIO_MOVE`).
    InPlace,
}

/// No memory behind the pages.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoBacking;

impl Backing for NoBacking {
    fn prepare(&self, _: u64, _: u64) {}
    fn release(&self, _: &[Span]) -> usize {
        0
    }
    fn retire(&self, _: &[Span]) -> usize {
        0
    }
    fn zeroes_on_release(&self) -> bool {
        false
    }
}
