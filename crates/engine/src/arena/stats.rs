//! Arena statistics: one table (see [`crate::table`]).

use crate::stats_table;

stats_table! {
    /// A snapshot of an arena's figures. Counters only grow; levels are as of the snapshot.
    pub struct ArenaStats {
        /// Live (busy) areas.
        live_areas, "areas";
        /// Pages of live areas, guard pages included.
        live_pages, "pages";
        /// Pages of freed areas whose memory is still resident (pooled dirty or awaiting purge).
        lazy_pages, "pages";
        /// Lazy pages above which a free starts a purge: lazy_max_pages plus the headroom (Nodes).
        lazy_limit, "pages";
        /// The most lazy pages beyond the limit a free has seen (0: never past it): how far purges fell behind.
        lazy_over_limit_peak, "pages";
        /// Areas sitting in the size pools.
        pooled_areas, "areas";
        /// Pages of areas sitting in the size pools.
        pooled_pages, "pages";
        /// Free pages in the free tree.
        free_pages, "pages";
        /// Free ranges in the free tree.
        free_ranges, "ranges";
        /// Allocations served from a size pool.
        pool_hits, "allocs";
        /// Pages of pool hits on the clean side (released memory: it faults in when written).
        clean_hit_pages, "pages";
        /// Poolable allocations that missed their pool.
        pool_misses, "allocs";
        /// Allocations served by reusing a large lazily freed area before any purge.
        lazy_reuses, "allocs";
        /// Of those, reuses that split a larger lazy area (the rest stays lazy).
        lazy_splits, "allocs";
        /// Of those, reuses that joined address-adjacent lazy areas (none fitted alone).
        lazy_joins, "allocs";
        /// Of those, reuses that grew a run of lazy areas into the free space around it.
        lazy_extends, "allocs";
        /// Pages that reuses by growing took from the free tree (the growth only).
        extend_pages, "pages";
        /// Pages that reuses handed out beyond their requests: lazy areas taken whole within lazy_slack_percent.
        slack_pages, "pages";
        /// Allocations served by another node's resident freed area (pool or lazy list).
        node_steals, "allocs";
        /// Freed small areas held in thread caches (counted neither live nor lazy).
        cached_areas, "areas";
        /// Pages of the areas held in thread caches.
        cached_pages, "pages";
        /// Allocations served from the thread's own cache (no lock).
        cache_hits, "allocs";
        /// Of cache_hits, allocations served by the CPU's stack of their size (a restartable sequence).
        cache_cpu_hits, "allocs";
        /// Cache hits served whole by a larger cached area within `lazy_slack_percent` (the request's size had none).
        cache_slack_hits, "allocs";
        /// Cacheable allocations that found the thread's cache empty for their size.
        cache_misses, "allocs";
        /// Areas a thread's frees sent to the nodes: a full stack's oldest half (one batch), a free over the budget, or in a crowd a larger area its CPU's stack did not take.
        cache_flushes, "areas";
        /// Cached areas given back to the nodes by drains, evictions and thread exits.
        cache_drained, "areas";
        /// Times a magazine's budget grew (a miss of a size it had turned away).
        cache_grows, "grows";
        /// The largest budget of a thread's magazine now.
        cache_budget_pages, "pages";
        /// Allocations carved from the free tree directly.
        tree_allocs, "allocs";
        /// Pages of the allocations carved from the free tree directly (moved pages among them).
        tree_pages, "pages";
        /// Moves of resident memory from lazy areas into areas carved from the tree (step Move).
        page_moves, "moves";
        /// Data pages those moves brought in (pages that did not fault in fresh).
        moved_pages, "pages";
        /// Moves the kernel refused (the donor was released as a purge would release it).
        move_failures, "moves";
        /// Mappings that moves added to the process and no heal has removed yet (two per move).
        moved_maps, "mappings";
        /// Ranges that moves had left in several mappings and a purge mapped afresh once free.
        heals, "ranges";
        /// Allocations carved from a node's chunk (a zone of its stripe taken from the tree).
        chunk_allocs, "allocs";
        /// Pages held in node chunks, not yet carved.
        chunk_pages, "pages";
        /// Successful frees.
        frees, "frees";
        /// Purges run (normal and full).
        purges, "purges";
        /// Full purges (allocation failure, shrink).
        full_purges, "purges";
        /// Failed allocations with few possible starts that reclaimed only what lay over them.
        range_reclaims, "reclaims";
        /// Areas whose memory a purge released.
        areas_released, "areas";
        /// Pages of the areas whose memory a purge released, guard pages included.
        pages_released, "pages";
        /// Syscalls made to release memory.
        release_calls, "calls";
        /// Frees that released their area's memory and returned it to the free tree at once, because lazy pages stood past twice their limit (Nodes).
        released_on_free, "frees";
        /// Allocations refused for lack of space (after the full purge).
        alloc_failures, "allocs";
        /// Times the usable part of the range grew (step Grow: a backing that commits in steps).
        grows, "grows";
        /// Pages those growths added.
        grown_pages, "pages";
        /// Times a full purge gave the free top of the usable part back to the backing.
        shrinks, "shrinks";
        /// Pages those gave back.
        shrunk_pages, "pages";
        /// Frees refused: not the start of a live area.
        bad_frees, "frees";
        /// Resizes that grew a live area above the pools in place, into the lazy area or the free space right after it.
        grown_in_place, "resizes";
        /// Pages those growths added to their areas.
        grown_in_place_pages, "pages";
        /// Frees of areas whose every data page a resize had moved to its new area: returned to the free tree at once, nothing to release.
        emptied_on_free, "frees";
        /// Times a thread emptied its magazine because more threads had come to share the magazines' total (thread_cache_cpu_pages); its areas count as drained.
        cache_sheds, "sheds";
        /// Ticks a decay purge keeps freed memory now (1 to 8), learned from refaults (Nodes).
        decay_keep_ticks, "ticks";
        /// Pages counted as asked for again after a decay purge released them: fresh pages carved in the tick after a release, up to what was released.
        decay_refault_pages, "pages";
        /// Pages of the areas in the thread caches' depot now: full magazines' spills and frees their budgets refused, kept, busy records and all, for magazines that miss (counted in cached_pages too).
        depot_pages, "pages";
        /// Areas full magazines spilled, or whose push a magazine's budget refused, put in the depot instead of freeing them through the busy map.
        depot_puts, "areas";
        /// Areas magazines that missed took back from the depot, with no busy-map update.
        depot_takes, "areas";
        /// Of cache_cpu_hits, allocations served by the per-CPU stacks of areas of 9 pages and more, in use while more than twice as many threads hold magazines as there are CPUs (cpu_cache_grown_pages).
        cache_cpu_grown_hits, "allocs";
        /// Pages those stacks hold now (counted in cached_pages too).
        cache_cpu_grown_pages, "pages";
        /// Pages of the thread caches' state table that purges dropped: each holds the words of 512 pages of the arena, and is dropped when a purge left all 512 in the free tree (its words all zero).
        table_pages_dropped, "pages";
        /// Blocks of 512 pages (2 MiB of 4 KiB pages) that purges left free and made fresh memory again (a new mapping in place, which has no page tables; memory spaces outside strict overcommit).
        blocks_renewed, "blocks";
    }
}
