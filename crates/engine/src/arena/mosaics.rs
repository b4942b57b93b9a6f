//! Step Move's record: the areas whose ranges page moves split into several mappings, the
//! mappings those add, and the limits that bound the moves.
//!
//! Owns: [`Mosaics`], under its own mutex (taken with no other lock held, or under the purge
//! mutex alone). The moves themselves and the heal are the Nodes strategy's
//! (`nodes/mover.rs`); this record sits in the arena's [`Context`](super::context::Context)
//! because the statistics and `fork()` read it whatever the strategy.
//!
//! Invariant: every range a move created a mapping in lies inside an area recorded here until
//! a purge finds that area's whole range free and heals it; `maps` is the sum of the recorded
//! areas' mappings.

use crate::sync::Ordering::Relaxed;
use crate::sync::{AtomicU64, Mutex};

/// Fewest pages one `mremap` moves (so also the fewest data pages that take moved memory). Alone, a
/// move costs about as much as faulting in a few fresh pages; with another thread of the process
/// running it is a TLB shootdown and a wait for the mmap lock, the cost of many faults
/// (docs/bench-log/design-notes.md, section 4, gives both figures and `crates/bench/c/page_cost.c`
/// measures them), and a small lazy area is the likeliest to be reused in place before a purge
/// would take it.
pub const MOVE_MIN_PAGES: u64 = 256;

/// Most donors one allocation takes (bounds its syscalls and node-lock hold time).
pub const MOVE_MAX_DONORS: usize = 16;

/// Mappings that moves may add to the process before moves stop until purges heal some, at
/// most: well below the kernel's default limit of 65,530 mappings, which the program shares.
/// Where the process's limit is lower, moves stop at an eighth of it
/// ([`vmarena_platform::limits::map_budget`]).
pub const MOVE_MAX_MAPS: u64 = 8192;

/// Mappings that moves may add in this process: [`MOVE_MAX_MAPS`], or an eighth of
/// `vm.max_map_count` where that is lower.
pub fn move_max_maps() -> u64 {
    vmarena_platform::limits::map_budget(MOVE_MAX_MAPS)
}

/// Areas whose ranges moves split into several mappings: `(start, pages, mappings added)`.
#[derive(Default)]
pub(crate) struct Mosaics {
    pub(crate) areas: Mutex<Vec<(u64, u64, u64)>>,
    pub(crate) maps: AtomicU64,
}

/// Step Move's part of the arena.
#[derive(Default)]
pub(crate) struct Moves {
    /// Step Move is on: `page_moves`, Nodes, and a backing that can move memory.
    pub(crate) on: bool,
    /// Areas whose ranges moves split into several mappings.
    pub(crate) mosaics: Mosaics,
}

impl Mosaics {
    /// Mappings that moves added and no heal has removed yet (an estimate: two per move).
    pub(crate) fn maps(&self) -> u64 {
        self.maps.load(Relaxed)
    }

    /// The list's mutex, for `fork()` (nothing is taken under it).
    #[cfg(not(loom))]
    pub(crate) fn lock_for_fork(&self) -> Box<dyn crate::sync::fork::Held + '_> {
        Box::new(self.areas.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Record the area at `start` of `pages`, into which moves added `maps` mappings.
    pub(crate) fn add(&self, start: u64, pages: u64, maps: u64) {
        self.areas.lock().unwrap_or_else(|e| e.into_inner()).push((start, pages, maps));
        self.maps.fetch_add(maps, Relaxed);
    }
}
