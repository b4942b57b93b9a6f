//! Size classes for the malloc-style front ends (the preload shim and [`VmAlloc`](crate::VmAlloc)).
//!
//! The pools reuse a freed area only for a request of exactly its size (DESIGN.md, section 3).
//! A program that asks for many different large sizes, as `malloc` callers do, would leave
//! freed areas of as many sizes behind, most of which no later request matches: their memory
//! is released by a purge and the next requests fault fresh pages. Rounding each request up to
//! one of four sizes per doubling of pages makes freed areas match later requests far more
//! often. The cost is address space, at most a quarter more per area; pages past the requested
//! size take memory only if a user of the area writes them. Above 4 MiB requests are not
//! rounded (see [`SIZE_CLASS_MAX_PAGES`]).
//!
//! The vmalloc family itself (`vmalloc`, the C ABI) does not round: like the kernel's, it
//! allocates the pages asked for.

/// Requests of at most this many pages are not rounded (their classes are already one page
/// apart).
pub const SIZE_CLASS_EXACT_PAGES: usize = 8;

/// Requests of more than this many pages (4 MiB of 4 KiB pages) are not rounded either. A
/// freed area that large is reused by splitting, joining and growing (DESIGN.md, section 3),
/// which serve any size, while a rounded area reused for a smaller request keeps its tail
/// pages resident: on malloc-large through the shim, rounding these sizes cost 25-30 MiB of
/// peak RSS and no time (`docs/decisions/005-size-classes.md` has the runs).
pub const SIZE_CLASS_MAX_PAGES: usize = 1024;

/// The size a malloc-style front end asks the space for when the program asks for `bytes`:
/// `bytes` up to [`SIZE_CLASS_EXACT_PAGES`] pages and above [`SIZE_CLASS_MAX_PAGES`], else
/// the pages rounded up to a multiple of a quarter of the largest power of two not above them
/// (at most `SIZE_CLASS_MAX_PAGES`). `bytes` itself when rounding would overflow.
pub fn size_class_bytes(bytes: usize, page_bytes: usize) -> usize {
    debug_assert!(page_bytes.is_power_of_two());
    let pages = bytes.div_ceil(page_bytes);
    if pages <= SIZE_CLASS_EXACT_PAGES || pages > SIZE_CLASS_MAX_PAGES {
        return bytes;
    }
    let step = 1usize << (pages.ilog2() - 2);
    pages.checked_next_multiple_of(step).and_then(|p| p.checked_mul(page_bytes)).unwrap_or(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    #[test]
    fn small_requests_are_not_rounded() {
        for bytes in [1, 4095, 4096, 8 * PAGE] {
            assert_eq!(size_class_bytes(bytes, PAGE), bytes);
        }
    }

    #[test]
    fn four_classes_per_doubling() {
        let classes: Vec<usize> = (9..=64).map(|p| size_class_bytes(p * PAGE, PAGE) / PAGE).collect();
        let mut distinct = classes.clone();
        distinct.dedup();
        assert_eq!(distinct, vec![10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64]);
        // A byte over a class boundary goes to the next class.
        assert_eq!(size_class_bytes(16 * PAGE + 1, PAGE), 20 * PAGE);
        assert_eq!(size_class_bytes(3 * 1024 * 1024 + 1, PAGE), 3584 * 1024);
        assert_eq!(size_class_bytes(4 * 1024 * 1024 - 1, PAGE), 4 * 1024 * 1024);
    }

    #[test]
    fn requests_above_the_largest_class_are_not_rounded() {
        for bytes in [4 * 1024 * 1024 + 1, 5 * 1024 * 1024 + 1, 25 << 20, 1 << 40] {
            assert_eq!(size_class_bytes(bytes, PAGE), bytes);
        }
    }

    #[test]
    fn rounding_adds_at_most_a_quarter_and_never_shrinks() {
        let mut bytes = 8 * PAGE + 1;
        while bytes < 1 << 40 {
            let c = size_class_bytes(bytes, PAGE);
            if bytes > SIZE_CLASS_MAX_PAGES * PAGE {
                assert_eq!(c, bytes, "not rounded above the largest class");
                bytes = bytes * 9 / 7 + 13;
                continue;
            }
            assert!(c >= bytes && c % PAGE == 0, "{bytes} -> {c}");
            assert!((c - bytes) as f64 <= bytes as f64 / 4.0 + PAGE as f64, "{bytes} -> {c}");
            bytes = bytes * 9 / 7 + 13;
        }
    }

    #[test]
    fn overflow_keeps_the_request() {
        assert_eq!(size_class_bytes(usize::MAX - 5, PAGE), usize::MAX - 5);
    }
}
