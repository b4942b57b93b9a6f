//! `MemoryBacking`: what the engine's pages mean in a `VmSpace`, real memory of a reservation.
//!
//! Page `p` of the arena is the 4 KiB at address `p * PAGE`; an area of `n` pages is `n - g`
//! data pages followed by `g` guard pages (g = `guard_pages`). Guards are installed when an
//! area is carved from the free tree and stay while the area sits in a pool (a pool hit makes
//! no syscall); they are removed, in one batch, when a purge returns areas to the tree.
//! Releasing memory covers data pages only; `MADV_DONTNEED` leaves guard markers in place.
//! Moves cover data pages only too. Where the space registered its reservation with a
//! userfaultfd (`uffd`), a move is a `UFFDIO_MOVE`: no mmap write lock, and the mapping stays
//! whole. Otherwise, and for whatever that refuses, it is an `mremap`, which leaves the moved
//! range a mapping of its own until `heal` maps its range afresh once it is free space again;
//! `heal` registers what it maps.
//!
//! The reservation starts inaccessible and is committed (made readable and writable) in steps
//! as the arena's usable part grows (`grow`, the engine's step Grow): [`COMMIT_STEP_BYTES`]
//! at first, then at least half of what is committed, so that the space stays a handful of
//! mappings and strict overcommit charges about what the program has used, not the whole
//! reservation. After a full purge (the shrinker, a low-memory event), free space at the top
//! of the committed part beyond one step goes back (`shrink`: a fresh inaccessible mapping
//! over it, which ends its commit charge and drops its pages).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use vmarena_core::Span;
use vmarena_engine::{Backing, Moved};
use vmarena_platform::uffd::LazyUffd;
use vmarena_platform::{guard, page_move, release, Advice};

/// The first part of a reservation committed, and the least a growth commits.
pub const COMMIT_STEP_BYTES: usize = 64 << 20;

pub(crate) struct MemoryBacking {
    /// The reservation, committed in steps by [`Backing::grow`].
    pub reservation: Arc<vmarena_platform::Reservation>,
    pub page_bytes: usize,
    /// Pages per huge page when the reservation takes huge pages, else 1.
    pub granule_pages: u64,
    pub guard_pages: u64,
    pub enforce_guards: bool,
    pub advice: Advice,
    pub guard_calls: Arc<AtomicU64>,
    /// The userfaultfd the whole reservation is registered with, opened by the first move, when
    /// moves may use it (shared with the space, which registers what `vunmap` maps back).
    pub uffd: Option<Arc<LazyUffd>>,
}

impl MemoryBacking {
    fn data_range(&self, start: u64, pages: u64) -> Option<(usize, usize)> {
        let data = pages.checked_sub(self.guard_pages)?;
        (data > 0).then(|| (start as usize * self.page_bytes, data as usize * self.page_bytes))
    }

    /// `(address, bytes)` of each span.
    fn byte_ranges(&self, spans: &[Span]) -> Vec<(usize, usize)> {
        spans
            .iter()
            .map(|s| (s.start as usize * self.page_bytes, s.pages as usize * self.page_bytes))
            .collect()
    }

    /// The reservation takes transparent huge pages (a fresh mapping must ask for them again).
    fn huge(&self) -> bool {
        self.granule_pages > 1
    }

    /// One move of `len` bytes (see [`Backing::move_pages`]): by the userfaultfd where it takes
    /// it, the rest by `mremap`. If the `mremap` is refused after part moved, that part is
    /// released, so that the target reads as zero as a refused move must leave it.
    fn move_one(&self, from: usize, to: usize, len: usize) -> Moved {
        let done = self.uffd.as_ref().and_then(|u| u.get()).map_or(0, |u| u.move_pages(from, to, len));
        if done == len {
            return Moved::InPlace;
        }
        if page_move::move_pages(from + done, to + done, len - done, self.huge()) {
            return Moved::Remapped;
        }
        // The refused mremap mapped the target afresh: register it again.
        if let Some(u) = self.uffd.as_ref().and_then(|u| u.opened()) {
            u.register(to + done, len - done);
        }
        if done > 0 {
            release::release(&[(to, done)], Advice::DontNeed);
        }
        Moved::No
    }

    fn guard_range(&self, start: u64, pages: u64) -> (usize, usize) {
        let g = start + pages - self.guard_pages;
        (g as usize * self.page_bytes, self.guard_pages as usize * self.page_bytes)
    }

    /// `(offset in the reservation, bytes)` of pages `[start, start + pages)`.
    fn reservation_part(&self, start: u64, pages: u64) -> (usize, usize) {
        (
            (start as usize * self.page_bytes).wrapping_sub(self.reservation.base()),
            pages as usize * self.page_bytes,
        )
    }
}

impl Backing for MemoryBacking {
    fn grow_step_pages(&self) -> Option<u64> {
        Some((COMMIT_STEP_BYTES / self.page_bytes) as u64)
    }

    fn grow(&self, start: u64, pages: u64) -> bool {
        let (offset, len) = self.reservation_part(start, pages);
        if self.reservation.commit(offset, len).is_err() {
            return false;
        }
        // A range given back by `shrink` is a fresh mapping: it needs the reservation's huge
        // page advice and userfaultfd registration again (both no-ops where they hold).
        let (addr, len) = (start as usize * self.page_bytes, pages as usize * self.page_bytes);
        if self.huge() {
            release::advise(&[(addr, len)], libc::MADV_HUGEPAGE);
        }
        if let Some(u) = self.uffd.as_ref().and_then(|u| u.opened()) {
            u.register(addr, len);
        }
        true
    }

    fn shrink(&self, start: u64, pages: u64) -> bool {
        let (offset, len) = self.reservation_part(start, pages);
        self.reservation.decommit(offset, len).is_ok()
    }

    fn prepare(&self, start: u64, pages: u64) {
        if self.enforce_guards && self.guard_pages > 0 {
            let (a, l) = self.guard_range(start, pages);
            // A refusal leaves a plain gap: still reserved, just not enforced.
            guard::install(a, l);
            self.guard_calls.fetch_add(1, Relaxed);
        }
    }

    fn release(&self, areas: &[Span]) -> usize {
        let ranges: Vec<_> = areas.iter().filter_map(|a| self.data_range(a.start, a.pages)).collect();
        release::release(&ranges, self.advice)
    }

    fn retire(&self, areas: &[Span]) -> usize {
        if !self.enforce_guards || self.guard_pages == 0 {
            return 0;
        }
        let ranges: Vec<_> = areas.iter().map(|a| self.guard_range(a.start, a.pages)).collect();
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

    fn release_free(&self, spans: &[Span]) -> usize {
        release::release(&self.byte_ranges(spans), self.advice)
    }

    fn guard_pages(&self) -> u64 {
        self.guard_pages
    }

    fn moves_pages(&self) -> bool {
        true
    }

    fn move_pages(&self, moves: &[(u64, u64, u64)]) -> Vec<Moved> {
        let b = |p: u64| p as usize * self.page_bytes;
        moves.iter().map(|&(from, to, pages)| self.move_one(b(from), b(to), b(pages))).collect()
    }

    /// By the userfaultfd alone, which says how far it got: a refused `mremap` of a range
    /// that spans several mappings may have moved part of it first (Linux 6.17 moves such
    /// ranges mapping by mapping) without saying which, and here every byte must be kept. The
    /// target's pages (step Move may have given the fresh area lazy memory) are dropped first:
    /// `UFFDIO_MOVE` moves only into holes.
    fn move_prefix(&self, from: u64, to: u64, pages: u64) -> (u64, Moved) {
        let Some(u) = self.uffd.as_ref().and_then(|u| u.get()) else {
            return (0, Moved::No);
        };
        let (from, to, len) = (
            from as usize * self.page_bytes,
            to as usize * self.page_bytes,
            pages as usize * self.page_bytes,
        );
        release::release(&[(to, len)], Advice::DontNeed);
        let done = u.move_pages(from, to, len);
        ((done / self.page_bytes) as u64, if done > 0 { Moved::InPlace } else { Moved::No })
    }

    /// Outside strict overcommit: there a remap uncharges the old range before it charges the
    /// new one, and on kernels before the gather-then-unmap rework (5.x and older) a charge
    /// that loses a race with another process would leave a hole in the reservation.
    fn heals_free_blocks(&self) -> bool {
        vmarena_platform::limits::overcommit_mode() != 2
    }

    fn heal(&self, spans: &[Span]) -> usize {
        let bytes = self.byte_ranges(spans);
        let mut calls = page_move::remap_fresh(&bytes, self.huge());
        if let Some(u) = self.uffd.as_ref().and_then(|u| u.opened()) {
            // A fresh mapping is not registered: register it, so moves may land there again.
            for &(a, l) in &bytes {
                u.register(a, l);
            }
            calls += bytes.len();
        }
        calls
    }
}
