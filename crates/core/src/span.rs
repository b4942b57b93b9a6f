//! `Span`: pages given by their first page and their count.
//!
//! Two pairs of page numbers travel through the project, and they mean different things: a
//! range is `[start, end)` (the glossary's meaning of the word, and of a bare pair of page numbers:
//! the free tree's ranges, a request's possible starts, a node's chunk), a span is `start` and
//! `pages` (lists of areas: lazy lists, what a purge releases or returns to the tree, what a
//! backing prepares, releases or retires). A span is this type, never a bare pair.

/// `pages` pages from page `start`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    /// First page.
    pub start: u64,
    /// Number of pages.
    pub pages: u64,
}

impl Span {
    /// `pages` pages from page `start`.
    #[inline]
    pub const fn new(start: u64, pages: u64) -> Span {
        Span { start, pages }
    }

    /// The span of the range `[start, end)`.
    #[inline]
    pub const fn of_range(start: u64, end: u64) -> Span {
        Span { start, pages: end - start }
    }

    /// One past the last page.
    #[inline]
    pub const fn end(self) -> u64 {
        self.start + self.pages
    }

    /// True when the span overlaps one of `ranges` (`[start, end)` pairs).
    pub fn overlaps_any(self, ranges: &[(u64, u64)]) -> bool {
        ranges.iter().any(|&(rs, re)| self.start < re && rs < self.end())
    }

    /// Pages of all `spans`.
    pub fn total_pages(spans: &[Span]) -> u64 {
        spans.iter().map(|s| s.pages).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_ends_after_its_pages_and_overlaps_ranges_it_shares_a_page_with() {
        let s = Span::new(10, 4);
        assert_eq!(s.end(), 14);
        assert_eq!(Span::of_range(10, 14), s);
        assert!(s.overlaps_any(&[(0, 11)]));
        assert!(s.overlaps_any(&[(13, 20)]));
        assert!(!s.overlaps_any(&[(0, 10), (14, 20)]), "ranges that only touch it");
        assert_eq!(Span::total_pages(&[s, Span::new(100, 6)]), 10);
    }
}
