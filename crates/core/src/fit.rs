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
        Ok(Request { size_pages, align_pages, phase_pages: 0, lo, hi })
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

    /// The block length the conservative search requires (see the module doc).
    pub fn search_length(&self) -> u64 {
        if self.align_pages <= 1 || self.hi - self.lo == self.size_pages {
            self.size_pages
        } else {
            self.size_pages.saturating_add(self.align_pages - 1)
        }
    }

    /// Where the request would start inside the free block `[start, end)`, if it fits there.
    pub fn candidate_in(&self, start: u64, end: u64) -> Option<u64> {
        let base = start.max(self.lo);
        let cand = if self.align_pages == 1 {
            base
        } else if base <= self.phase_pages {
            self.phase_pages
        } else if self.align_pages.is_power_of_two() {
            align_up(base - self.phase_pages, self.align_pages)?.checked_add(self.phase_pages)?
        } else {
            let off = (base - self.phase_pages) % self.align_pages;
            if off == 0 {
                base
            } else {
                base.checked_add(self.align_pages - off)?
            }
        };
        let last = cand.checked_add(self.size_pages)?;
        (last <= end.min(self.hi)).then_some(cand)
    }
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
    fn four_fit_types() {
        assert_eq!(classify(10, 20, 10, 10), Some(FitType::Full));
        assert_eq!(classify(10, 20, 10, 3), Some(FitType::LeftEdge));
        assert_eq!(classify(10, 20, 17, 3), Some(FitType::RightEdge));
        assert_eq!(classify(10, 20, 12, 3), Some(FitType::NoEdge));
        assert_eq!(classify(10, 20, 9, 3), None);
        assert_eq!(classify(10, 20, 18, 3), None);
    }
}
