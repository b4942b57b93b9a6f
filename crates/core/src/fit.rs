//! Requests and fits: how an allocation request sits inside one free block.
//!
//! A request asks for `size_pages` pages whose start is a multiple of `align_pages` (a power of
//! two) and that lie entirely inside the window `[lo, hi)`. Inside a free block `[start, end)`
//! the candidate start is `align_up(max(start, lo), align)`; the request fits when
//! `candidate + size <= min(end, hi)`.
//!
//! Taking the request out of the block leaves one of four shapes (the kernel's fit types):
//!
//! ```text
//!  full fit (FL)     |<------- block ------->|      block removed
//!                    |<------ request ------>|
//!
//!  left edge (LE)    |<------- block ------->|      block.start += size
//!                    |<- request ->|
//!
//!  right edge (RE)   |<------- block ------->|      block.end = candidate
//!                              |<- request ->|
//!
//!  no edge (NE)      |<------- block ------->|      block split in two
//!                         |<- req ->|
//! ```
//!
//! The search length rule: when the alignment is more than one page and the window is wider than
//! the request, a block is considered only if it is at least `size + align - 1` pages long. Such
//! a block, if it lies inside the window, always fits whatever its start, so the tree can prune
//! on its subtree maxima and stay O(log n). The price is that a shorter block that happens to be
//! favourably aligned is skipped; the engine falls back to an exact search before it gives up.

/// An allocation request in pages. Build it with [`Request::new`], which validates it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Pages wanted (non-zero).
    pub size_pages: u64,
    /// Alignment of the start in pages: a power of two for requests built with
    /// [`Request::new`]; any modulus for [`Request::striped`].
    pub align_pages: u64,
    /// The start must be `phase_pages` past a multiple of `align_pages` (`< align_pages`; 0 for
    /// requests built with [`Request::new`]).
    pub phase_pages: u64,
    /// The area must not cross a multiple of `nocross_pages` (vmem's nocross; a power of two at
    /// least `size_pages`), or 0 for no such boundary.
    pub nocross_pages: u64,
    /// Lowest page the area may start at.
    pub lo: u64,
    /// One past the highest page the area may cover.
    pub hi: u64,
}

/// Why a request is malformed. Nothing is searched or changed for a malformed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// `size_pages` is 0.
    ZeroSize,
    /// `align_pages` is not a power of two.
    BadAlignment,
    /// The window `[lo, hi)` is empty or shorter than the request.
    BadWindow,
    /// `nocross_pages` is not a power of two, or is smaller than the request.
    BadNocross,
}

impl Request {
    /// Validate and build a request.
    pub fn new(size_pages: u64, align_pages: u64, lo: u64, hi: u64) -> Result<Self, RequestError> {
        if size_pages == 0 {
            return Err(RequestError::ZeroSize);
        }
        if !align_pages.is_power_of_two() {
            return Err(RequestError::BadAlignment);
        }
        if hi <= lo || hi - lo < size_pages {
            return Err(RequestError::BadWindow);
        }
        Ok(Request { size_pages, align_pages, phase_pages: 0, nocross_pages: 0, lo, hi })
    }

    /// A request with vmem's constraints: the start is `phase_pages` past a multiple of
    /// `align_pages` (a power of two, `phase_pages < align_pages`), and the area crosses no
    /// multiple of `nocross_pages` (0, or a power of two at least `size_pages`).
    pub fn constrained(
        size_pages: u64,
        align_pages: u64,
        phase_pages: u64,
        nocross_pages: u64,
        lo: u64,
        hi: u64,
    ) -> Result<Self, RequestError> {
        let mut r = Request::new(size_pages, align_pages, lo, hi)?;
        if phase_pages >= align_pages {
            return Err(RequestError::BadAlignment);
        }
        if nocross_pages != 0 && (!nocross_pages.is_power_of_two() || nocross_pages < size_pages) {
            return Err(RequestError::BadNocross);
        }
        r.phase_pages = phase_pages;
        r.nocross_pages = nocross_pages;
        Ok(r)
    }

    /// A request whose start must be `phase` past a multiple of `modulus` (any modulus of at
    /// least 1, `phase < modulus`): the start of a zone of one node's stripe, where the stripe
    /// period (`16 x nodes` pages) need not be a power of two.
    pub fn striped(
        size_pages: u64,
        modulus: u64,
        phase: u64,
        lo: u64,
        hi: u64,
    ) -> Result<Self, RequestError> {
        if modulus == 0 || phase >= modulus {
            return Err(RequestError::BadAlignment);
        }
        let mut r = Request::new(size_pages, 1, lo, hi)?;
        r.align_pages = modulus;
        r.phase_pages = phase;
        Ok(r)
    }

    /// The ranges `[start, start + size)` at every start this request may take inside
    /// `[lo, hi)`, lowest first, or `None` when there are more than `max` of them.
    pub fn start_ranges(&self, lo: u64, hi: u64, max: usize) -> Option<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        let mut at = lo;
        while let Some(c) = self.candidate_in(at, hi) {
            if out.len() == max {
                return None;
            }
            out.push((c, c + self.size_pages));
            at = c + 1;
        }
        Some(out)
    }

    /// The block length the conservative search requires (see the module doc). With a nocross
    /// boundary the first aligned start may cross it and the next boundary's start is taken,
    /// so a block of twice the size and alignment always holds the request.
    pub fn search_length(&self) -> u64 {
        if self.hi - self.lo == self.size_pages {
            self.size_pages
        } else if self.nocross_pages != 0 {
            self.size_pages.saturating_add(self.align_pages).saturating_mul(2)
        } else if self.align_pages <= 1 {
            self.size_pages
        } else {
            self.size_pages.saturating_add(self.align_pages - 1)
        }
    }

    /// The lowest start at or above `base` that the alignment and phase allow.
    fn aligned_at(&self, base: u64) -> Option<u64> {
        if self.align_pages == 1 {
            Some(base)
        } else if base <= self.phase_pages {
            Some(self.phase_pages)
        } else if self.align_pages.is_power_of_two() {
            align_up(base - self.phase_pages, self.align_pages)?.checked_add(self.phase_pages)
        } else {
            let off = (base - self.phase_pages) % self.align_pages;
            if off == 0 {
                Some(base)
            } else {
                base.checked_add(self.align_pages - off)
            }
        }
    }

    /// Where the request would start inside the free block `[start, end)`, if it fits there.
    pub fn candidate_in(&self, start: u64, end: u64) -> Option<u64> {
        let mut cand = self.aligned_at(start.max(self.lo))?;
        let n = self.nocross_pages;
        if n != 0 {
            cand.checked_add(self.size_pages)?;
            if crosses(cand, self.size_pages, n) {
                // Every start the alignment allows sits at the same offset from the boundary
                // after this one (the alignment is a power of two): one more try decides.
                cand = self.aligned_at((cand & !(n - 1)).checked_add(n)?)?;
                cand.checked_add(self.size_pages)?;
                if crosses(cand, self.size_pages, n) {
                    return None;
                }
            }
        }
        let last = cand.checked_add(self.size_pages)?;
        (last <= end.min(self.hi)).then_some(cand)
    }

    /// The highest start `s <= x` that the alignment and phase allow.
    fn aligned_below(&self, x: u64) -> Option<u64> {
        if self.align_pages == 1 {
            return Some(x);
        }
        let off = x.checked_sub(self.phase_pages)? % self.align_pages;
        Some(x - off)
    }

    /// Where the request would start inside the free block `[start, end)` if placed as high
    /// as it can go (a stripe that grows downwards), if it fits there.
    pub fn candidate_last_in(&self, start: u64, end: u64) -> Option<u64> {
        let lo = start.max(self.lo);
        let top = end.min(self.hi).checked_sub(self.size_pages)?;
        let mut cand = self.aligned_below(top)?;
        let n = self.nocross_pages;
        if crosses(cand, self.size_pages, n) {
            // The boundary inside the area: end at it, the next start down the alignment allows
            // (one move decides, as for the lowest start).
            let boundary = (cand + self.size_pages - 1) & !(n - 1);
            cand = self.aligned_below(boundary.checked_sub(self.size_pages)?)?;
            if crosses(cand, self.size_pages, n) {
                return None;
            }
        }
        (cand >= lo).then_some(cand)
    }
}

/// `[start, start + size)` (`size >= 1`, not wrapping) crosses a multiple of `nocross`, a
/// power of two (0: no boundary).
pub fn crosses(start: u64, size: u64, nocross: u64) -> bool {
    if nocross == 0 {
        return false;
    }
    let shift = nocross.trailing_zeros();
    start >> shift != (start + (size - 1)) >> shift
}

/// Round `x` up to a multiple of the power of two `align`; `None` on overflow.
pub fn align_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    x.checked_add(align - 1).map(|v| v & !(align - 1))
}

/// The shape a free block takes when `[cand, cand + size)` is taken out of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FitType {
    /// The request covers the block exactly: the block disappears.
    Full,
    /// The request starts at the block start: the block shrinks from the left.
    LeftEdge,
    /// The request ends at the block end: the block shrinks from the right.
    RightEdge,
    /// The request is strictly inside: the block splits in two.
    NoEdge,
}

/// Classify `[cand, cand + size)` against the block `[start, end)`; `None` if it is not inside.
pub fn classify(start: u64, end: u64, cand: u64, size: u64) -> Option<FitType> {
    let last = cand.checked_add(size)?;
    if cand < start || last > end || size == 0 {
        return None;
    }
    Some(match (cand == start, last == end) {
        (true, true) => FitType::Full,
        (true, false) => FitType::LeftEdge,
        (false, true) => FitType::RightEdge,
        (false, false) => FitType::NoEdge,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_validation_rejects_bad_input() {
        assert_eq!(Request::new(0, 1, 0, 10), Err(RequestError::ZeroSize));
        assert_eq!(Request::new(1, 3, 0, 10), Err(RequestError::BadAlignment));
        assert_eq!(Request::new(1, 0, 0, 10), Err(RequestError::BadAlignment));
        assert_eq!(Request::new(1, 1, 10, 10), Err(RequestError::BadWindow));
        assert_eq!(Request::new(11, 1, 0, 10), Err(RequestError::BadWindow));
        assert!(Request::new(10, 1, 0, 10).is_ok());
    }

    #[test]
    fn search_length_is_conservative_only_for_real_alignment() {
        assert_eq!(Request::new(4, 1, 0, 100).unwrap().search_length(), 4);
        assert_eq!(Request::new(4, 8, 0, 100).unwrap().search_length(), 11);
        // An exact window needs no slack.
        assert_eq!(Request::new(4, 8, 8, 12).unwrap().search_length(), 4);
        // No overflow on absurd alignments.
        let huge = (1u64 << 63) + 5;
        assert_eq!(Request::new(huge, 1 << 63, 0, u64::MAX).unwrap().search_length(), u64::MAX);
    }

    #[test]
    fn start_ranges_lists_every_aligned_start_up_to_a_bound() {
        let r = Request::new(2, 16, 0, 1000).unwrap();
        assert_eq!(r.start_ranges(10, 60, 8), Some(vec![(16, 18), (32, 34), (48, 50)]));
        assert_eq!(r.start_ranges(10, 49, 8), Some(vec![(16, 18), (32, 34)]), "48 + 2 > 49");
        assert_eq!(r.start_ranges(10, 60, 2), None, "three starts, bound two");
        assert_eq!(r.start_ranges(17, 31, 8), Some(vec![]));
    }

    #[test]
    fn candidate_respects_alignment_and_window() {
        let r = Request::new(2, 4, 5, 100).unwrap();
        assert_eq!(r.candidate_in(0, 20), Some(8));
        assert_eq!(r.candidate_in(0, 9), None);
        assert_eq!(r.candidate_in(8, 10), Some(8));
        let w = Request::new(2, 1, 0, 9).unwrap();
        assert_eq!(w.candidate_in(8, 20), None, "window end cuts the block");
        let far = Request::new(1, 1 << 62, 0, u64::MAX).unwrap();
        assert_eq!(far.candidate_in(u64::MAX - 3, u64::MAX), None, "align_up overflow is a miss");
    }

    #[test]
    fn phase_shifts_the_candidate() {
        let r = Request::striped(2, 8, 3, 0, 100).unwrap();
        assert_eq!(r.candidate_in(0, 20), Some(3));
        assert_eq!(r.candidate_in(4, 20), Some(11));
        assert_eq!(r.candidate_in(11, 13), Some(11));
        assert_eq!(r.candidate_in(12, 40), Some(19));
        assert!(Request::striped(1, 8, 8, 0, 100).is_err());
    }

    #[test]
    fn striped_requests_take_any_modulus() {
        let r = Request::striped(4, 48, 16, 0, 1000).unwrap();
        assert_eq!(r.candidate_in(0, 100), Some(16));
        assert_eq!(r.candidate_in(17, 100), Some(64));
        assert_eq!(r.candidate_in(64, 67), None);
        assert_eq!(r.search_length(), 4 + 47);
        assert!(Request::striped(4, 0, 0, 0, 10).is_err());
        assert!(Request::striped(4, 3, 3, 0, 10).is_err());
    }

    #[test]
    fn nocross_moves_the_start_past_the_boundary() {
        // 8 pages, aligned to 4, never across a multiple of 16.
        let r = Request::constrained(8, 4, 0, 16, 0, 1000).unwrap();
        assert_eq!(r.candidate_in(0, 100), Some(0));
        assert_eq!(r.candidate_in(9, 100), Some(16), "12..20 would cross 16");
        assert_eq!(r.candidate_in(9, 23), None, "16..24 ends past the block");
        // With a phase, the offset from every boundary is the same: 14 + 4 > 16 never fits.
        let never = Request::constrained(4, 16, 14, 16, 0, 1000).unwrap();
        assert_eq!(never.candidate_in(0, 1000), None);
        let phased = Request::constrained(4, 8, 3, 16, 0, 1000).unwrap();
        assert_eq!(phased.candidate_in(12, 100), Some(19));
        assert_eq!(phased.candidate_in(20, 100), Some(27), "27..31 stays below 32");
        assert_eq!(Request::constrained(8, 4, 0, 4, 0, 100), Err(RequestError::BadNocross));
        assert_eq!(Request::constrained(8, 4, 0, 24, 0, 100), Err(RequestError::BadNocross));
        assert_eq!(Request::constrained(8, 4, 4, 0, 0, 100), Err(RequestError::BadAlignment));
        assert_eq!(r.search_length(), 24);
    }

    #[test]
    fn lowest_and_highest_starts_match_a_brute_force_search() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..20_000 {
            let size = 1 + rnd(40);
            let align = 1 << rnd(6);
            let phase = rnd(align);
            let nocross = if rnd(2) == 0 { 0 } else { size.next_power_of_two() << rnd(3) };
            let (wlo, whi) = if rnd(3) == 0 { (rnd(100), 100 + rnd(200)) } else { (0, 1000) };
            let Ok(r) = Request::constrained(size, align, phase, nocross, wlo, whi) else { continue };
            let (a, b) = (rnd(300), 300 + rnd(300));
            let valid: Vec<u64> = (a..b)
                .filter(|&s| {
                    s + size <= b
                        && s >= wlo
                        && s + size <= whi
                        && s % align == phase
                        && (nocross == 0 || s / nocross == (s + size - 1) / nocross)
                })
                .collect();
            assert_eq!(r.candidate_in(a, b), valid.first().copied(), "{r:?} in {a}..{b}");
            assert_eq!(r.candidate_last_in(a, b), valid.last().copied(), "{r:?} in {a}..{b}");
        }
    }

    #[test]
    fn four_fit_types() {
        assert_eq!(classify(10, 20, 10, 10), Some(FitType::Full));
        assert_eq!(classify(10, 20, 10, 3), Some(FitType::LeftEdge));
        assert_eq!(classify(10, 20, 17, 3), Some(FitType::RightEdge));
        assert_eq!(classify(10, 20, 12, 3), Some(FitType::NoEdge));
        assert_eq!(classify(10, 20, 9, 3), None);
        assert_eq!(classify(10, 20, 18, 3), None);
    }
}
