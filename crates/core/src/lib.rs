//! vmarena layer 2: the allocation algorithms, on integers only.
//!
//! Nothing here touches memory, takes a lock or calls the OS; every structure is a plain value
//! that the concurrent engine (`vmarena-engine`) wraps in its locks. That is what lets the same
//! code serve a JIT's code range, a device heap or an id space, and what lets the tests check
//! every operation against a linear-scan oracle and a shadow model.
//!
//! # Glossary (used with exactly these meanings across the project)
//!
//! | word | meaning |
//! |---|---|
//! | page | the arena's unit of address space: 4 KiB for a `VmSpace`, any granule for an integer arena |
//! | range | half-open `[start, end)` in pages (a bare pair of page numbers is always a range) |
//! | span | `start` and `pages` ([`Span`]): what lists of areas carry |
//! | area | a range handed out by `alloc`; it includes its guard pages |
//! | busy | an area that is live: allocated and not yet freed |
//! | lazy | an area that was freed but whose memory has not been released yet |
//! | pool | exact-size lists (1..=256 pages) of freed areas kept outside the free tree |
//! | purge | the batch step that releases the memory of lazy areas and returns areas to pools or the tree |
//! | decay | the share of each pool that a purge gives back to the free tree (25%, or all of it) |
//! | fit | how a request sits in a free block: full, left edge, right edge, no edge |
//! | node | a lock shard of the engine: one per CPU, at most 128 |
//! | frame | a 4 KiB unit of a frame pool's memory file, named by its index (pfn) |
//! | order | a buddy block of `2^order` frames |
//! | zone | one buddy allocator and its lock (frames); in the Nodes strategy also the 16-page unit of the address stripes (the kernel's `vmap_zone_size`, `ZONE_PAGES`) |
//!
//! # Modules
//!
//! - [`fit`]: requests (size, alignment, window), the search length rule, the four fit types.
//! - [`free_tree`]: the augmented tree of free ranges, lowest-address fit, eager merging.
//! - [`pool`]: exact-size pools of freed areas, split into resident (dirty) and released (clean).
//! - [`busy`]: the map from area start to the live area's record.
//! - [`seg_fit`]: segregated free lists with boundary tags (instant fit in constant time), the
//!   integer arenas' other index.
//! - [`oracle`]: a linear-scan model of the free space that the tests check the tree against.
//! - [`buddy`]: the buddy frame allocator of one zone (orders 0..=10, watermarks).
//! - [`pcp`]: the policy of one CPU's page lists in front of the buddy (batch, auto-tuned high).
//! - [`batch_queue`]: per-CPU batches of items for a shared structure (FreeBSD's rule).
//! - [`lazy_list`]: a node's lazily freed areas, by free order, size and address.
//! - [`span`]: pages as `(start, pages)`, apart from ranges.
//! - [`page_map`]: an open-addressing map from page numbers to slots (the lazy list's address
//!   indexes).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod batch_queue;
pub mod buddy;
pub mod busy;
pub mod fit;
pub mod free_tree;
pub mod lazy_list;
pub mod oracle;
pub mod page_map;
pub mod pcp;
pub mod pool;
pub mod seg_fit;
pub mod span;

pub use batch_queue::{BatchQueue, BatchRule, Flush, Insert};
pub use buddy::{Buddy, BuddyError, Watermarks, MAX_ORDER, NR_ORDERS};
pub use busy::{BusyArea, BusyMap};
pub use fit::{crosses, FitType, Request, RequestError};
pub use free_tree::{FreeTree, TreeError};
pub use lazy_list::{LazyArea, LazyList};
pub use pcp::{FreeOutcome, Pcp, PcpConfig, PCP_ORDERS, THP_ORDER};
pub use pool::{PoolSide, SizePools, POOL_MAX_PAGES};
pub use seg_fit::SegFit;
pub use span::Span;

/// Integer log2 rounded down plus one (`fls`): 0 for 0, 1 for 1, 2 for 2..=3, ...
///
/// The kernel sizes `lazy_max_pages` as `fls(CPUs) x 32 MiB`; the lab's `full_fit` case uses the
/// same log scale.
pub fn fls(x: u64) -> u32 {
    64 - x.leading_zeros()
}

#[cfg(test)]
mod tests {
    use super::fls;

    #[test]
    fn fls_matches_kernel_definition() {
        assert_eq!(fls(0), 0);
        assert_eq!(fls(1), 1);
        assert_eq!(fls(2), 2);
        assert_eq!(fls(3), 2);
        assert_eq!(fls(8), 4);
        assert_eq!(fls(448), 9);
        assert_eq!(fls(u64::MAX), 64);
    }
}
