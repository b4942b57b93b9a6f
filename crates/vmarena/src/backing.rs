//! `MemoryBacking`: what the engine's pages mean in a `VmSpace`, real memory of a reservation.
//!
//! Page `p` of the arena is the 4 KiB at address `p * PAGE`; an area of `n` pages is `n - g`
//! data pages followed by `g` guard pages (g = `guard_pages`). Guards are installed when an
//! area is carved from the free tree and stay while the area sits in a pool (a pool hit makes
//! no syscall); they are removed, in one batch, when a purge returns areas to the tree.
//! Releasing memory covers data pages only; `MADV_DONTNEED` leaves guard markers in place.
//! Moves (`mremap`) cover data pages only too; each leaves the moved range a mapping of its own
//! until `heal` maps its range afresh once it is free space again.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use vmarena_engine::Backing;
use vmarena_platform::{guard, page_move, release, Advice};

pub(crate) struct MemoryBacking {
    pub page_bytes: usize,
    /// Pages per huge page when the reservation takes huge pages, else 1.
    pub granule_pages: u64,
    pub guard_pages: u64,
    pub enforce_guards: bool,
    pub advice: Advice,
    pub guard_calls: Arc<AtomicU64>,
}

impl MemoryBacking {
    fn data_range(&self, start: u64, pages: u64) -> Option<(usize, usize)> {
        let data = pages.checked_sub(self.guard_pages)?;
        (data > 0).then(|| (start as usize * self.page_bytes, data as usize * self.page_bytes))
    }

    fn byte_ranges(&self, ranges: &[(u64, u64)]) -> Vec<(usize, usize)> {
        ranges.iter().map(|&(s, p)| (s as usize * self.page_bytes, p as usize * self.page_bytes)).collect()
    }

    /// The reservation takes transparent huge pages (a fresh mapping must ask for them again).
    fn huge(&self) -> bool {
        self.granule_pages > 1
    }

    fn guard_range(&self, start: u64, pages: u64) -> (usize, usize) {
        let g = start + pages - self.guard_pages;
        (g as usize * self.page_bytes, self.guard_pages as usize * self.page_bytes)
    }
}

impl Backing for MemoryBacking {
    fn prepare(&self, start: u64, pages: u64) {
        if self.enforce_guards && self.guard_pages > 0 {
            let (a, l) = self.guard_range(start, pages);
            // A refusal leaves a plain gap: still reserved, just not enforced.
            guard::install(a, l);
            self.guard_calls.fetch_add(1, Relaxed);
        }
    }

    fn release(&self, areas: &[(u64, u64)]) -> usize {
        let ranges: Vec<_> = areas.iter().filter_map(|&(s, p)| self.data_range(s, p)).collect();
        release::release(&ranges, self.advice)
    }

    fn retire(&self, areas: &[(u64, u64)]) -> usize {
        if !self.enforce_guards || self.guard_pages == 0 {
            return 0;
        }
        let ranges: Vec<_> = areas.iter().map(|&(s, p)| self.guard_range(s, p)).collect();
        let n = guard::remove_many(&ranges);
        self.guard_calls.fetch_add(n as u64, Relaxed);
        n
    }

    fn zeroes_on_release(&self) -> bool {
        self.advice.zeroes()
    }

    fn release_granule_pages(&self) -> u64 {
        self.granule_pages
    }

    fn release_free(&self, ranges: &[(u64, u64)]) -> usize {
        release::release(&self.byte_ranges(ranges), self.advice)
    }

    fn guard_pages(&self) -> u64 {
        self.guard_pages
    }

    fn moves_pages(&self) -> bool {
        true
    }

    fn move_pages(&self, moves: &[(u64, u64, u64)]) -> Vec<bool> {
        let b = |p: u64| p as usize * self.page_bytes;
        moves
            .iter()
            .map(|&(from, to, pages)| page_move::move_pages(b(from), b(to), b(pages), self.huge()))
            .collect()
    }

    fn heal(&self, ranges: &[(u64, u64)]) -> usize {
        page_move::remap_fresh(&self.byte_ranges(ranges), self.huge())
    }
}
