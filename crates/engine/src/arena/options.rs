//! Arena options: one table (see [`crate::table`]).

use crate::arena::strategy::Strategy;
use crate::options_table;

options_table! {
    /// How an [`Arena`](crate::Arena) is built. `ArenaOptions::default().with_env()` applies the
    /// environment variables of the table.
    pub struct ArenaOptions {
        /// Lock design: global (one lock), split (free lock + busy lock), nodes (per-CPU nodes).
        strategy: Strategy = Strategy::Nodes, "global|split|nodes", "VMARENA_STRATEGY";
        /// Number of nodes for the nodes strategy; 0 means min(online CPUs, 128).
        nodes: usize = 0, "count", "VMARENA_NODES";
        /// Lazy pages above which a purge runs; 0 means fls(CPUs) x 8192 (32 MiB of 4 KiB pages).
        lazy_max_pages: u64 = 0, "pages", "VMARENA_LAZY_MAX_PAGES";
        /// Run purges on a background thread (otherwise the freeing thread purges inline).
        purge_thread: bool = true, "bool", "VMARENA_PURGE_THREAD";
        /// Memory freed and not reused for this long goes back to the OS: the background thread purges every half interval (a tick) what was freed before its previous purge, or before more ticks where released memory was asked for again soon after (up to 8 ticks; decay_keep_ticks); 0 = never.
        decay_interval_ms: u64 = 500, "ms", "VMARENA_DECAY_INTERVAL_MS";
        /// The most ticks a decay purge keeps freed memory once released memory was asked for again soon after (1 to 8; 1: always one tick, what was freed before the previous purge).
        decay_keep_ticks_max: u64 = 8, "ticks", "VMARENA_DECAY_KEEP_TICKS_MAX";
        /// Share of each pool a normal purge gives back to the free tree (the kernel's 25%).
        pool_decay_percent: u64 = 25, "percent", "VMARENA_POOL_DECAY_PERCENT";
        /// Share of the lazy limit (lazy_max_pages plus any headroom) a threshold purge leaves resident, newest frees first (Nodes; 0 = release all, as the kernel).
        purge_keep_percent: u64 = 75, "percent", "VMARENA_PURGE_KEEP_PERCENT", experiment;
        /// Raise the lazy threshold by the live pages below their high-water mark since the last purge not started by the threshold (Nodes).
        lazy_headroom: bool = true, "bool", "VMARENA_LAZY_HEADROOM", experiment;
        /// Freed areas wait in pools and on lazy lists until a purge, as the kernel's do; off: every free the thread caches do not take goes back to the free tree at once (for arenas with no memory behind their pages, such as an integer arena's spans, where waiting saves nothing).
        lazy_free: bool = true, "bool", "VMARENA_LAZY_FREE";
        /// Serve a request from a larger lazily freed area by splitting it (off: equal sizes only).
        lazy_split: bool = true, "bool", "VMARENA_LAZY_SPLIT";
        /// A freed area at most this share larger than a request is handed out whole: a lazy one instead of split, and one in the thread's cache when the request's size has none there (0: exact sizes and splits, as the kernel; Nodes).
        lazy_slack_percent: u64 = 0, "percent", "VMARENA_LAZY_SLACK_PERCENT", experiment;
        /// A lazy area at most this many pages larger than a request, and at most twice the request larger, is handed out whole too (Nodes).
        lazy_slack_pages: u64 = 0, "pages", "VMARENA_LAZY_SLACK_PAGES", experiment;
        /// Largest area, in pages, that goes to the size pools of freed areas (at most 256, the kernel's; Nodes). Larger areas go to the lazy lists, where they can be split and joined.
        pool_max_pages: u64 = 256, "pages", "VMARENA_POOL_MAX_PAGES";
        /// Areas above pool_max_pages are allocated and freed through node 0 whatever the CPU, so that their freed memory is one lazy list that reuse, joins and extensions see whole (Nodes).
        shared_lazy: bool = true, "bool", "VMARENA_SHARED_LAZY", experiment;
        /// On a miss, take a resident freed area from another node before fresh pages (Nodes; areas above pool_max_pages, when shared_lazy is off).
        node_steal: bool = true, "bool", "VMARENA_NODE_STEAL", experiment;
        /// Fill an area carved from the free tree, or the growth of a lazy run, with the resident memory of the oldest lazy areas, moved (UFFDIO_MOVE or mremap), instead of fresh pages (Nodes; 256 pages and more a call).
        page_moves: bool = true, "bool", "VMARENA_PAGE_MOVES", experiment;
        /// Per-thread magazines of freed small areas in front of the node pools (Nodes only).
        thread_cache: bool = true, "bool", "VMARENA_THREAD_CACHE";
        /// Largest area a thread cache holds, in pages, guard pages included (at most 8191).
        thread_cache_max_pages: u64 = 128, "pages", "VMARENA_THREAD_CACHE_MAX_PAGES";
        /// Pages one thread's magazine of one arena may hold at first, and again after each drain.
        thread_cache_pages: u64 = 512, "pages", "VMARENA_THREAD_CACHE_PAGES";
        /// Pages a magazine may grow to, by the size of each miss of a size it had turned away for want of room (at most thread_cache_pages: no growth).
        thread_cache_pages_max: u64 = 2048, "pages", "VMARENA_THREAD_CACHE_PAGES_MAX";
        /// Pages the magazines of one arena may hold together, per CPU: a magazine's budget is at most this times the CPUs, shared out among the threads that have one (at least 8 pages; 0: no such bound).
        thread_cache_cpu_pages: u64 = 16384, "pages", "VMARENA_THREAD_CACHE_CPU_PAGES";
        /// Keep the areas a full magazine spills or its budget refuses, busy records and all, in a depot (one part per CPU) for magazines that miss (of their size, else within the slack), within what the lazy limit leaves; every purge empties it, each decay tick takes what the previous tick saw there (off: they are freed through the busy map at once).
        thread_cache_depot: bool = true, "bool", "VMARENA_THREAD_CACHE_DEPOT";
        /// Per-CPU stacks of freed areas (1 to 8 pages, guard included; larger ones with cpu_cache_grown_pages) in front of the magazines, pushed and popped in restartable sequences (Nodes, with thread_cache; x86-64 with glibc's rseq).
        cpu_cache: bool = true, "bool", "VMARENA_CPU_CACHE";
        /// Pages each CPU's stacks of areas of 1 to 8 pages may hold, split evenly between those 8 sizes.
        cpu_cache_pages: u64 = 512, "pages", "VMARENA_CPU_CACHE_PAGES";
        /// Pages each CPU's stacks of areas of 9 pages and more (up to thread_cache_max_pages, at most 257) may hold together: while more than twice as many threads hold magazines as there are CPUs, a free that finds its size's stack full grows it by one area within this; every drain sets them back to empty (0: stacks of 1 to 8 pages only).
        cpu_cache_grown_pages: u64 = 1024, "pages", "VMARENA_CPU_CACHE_GROWN_PAGES";
    }
}

impl ArenaOptions {
    /// The node count these options give on this machine.
    pub fn node_count(&self) -> usize {
        // Only Nodes has nodes; Global and Split count as one for the per-node figures.
        match self.strategy {
            Strategy::Nodes => {
                if self.nodes == 0 {
                    vmarena_platform::cpu::count().clamp(1, 128)
                } else {
                    self.nodes.clamp(1, u16::MAX as usize - 1)
                }
            }
            _ => 1,
        }
    }

    /// Step Move is asked for and the strategy has it (Nodes); the arena also needs a backing
    /// that can move memory.
    pub fn moves_pages(&self) -> bool {
        // Step Move takes donors off node lazy lists, which only Nodes has.
        self.page_moves && self.strategy == Strategy::Nodes
    }

    /// The lazy threshold these options give on this machine.
    pub fn lazy_max(&self) -> u64 {
        if self.lazy_max_pages == 0 {
            vmarena_core::fls(vmarena_platform::cpu::count() as u64) as u64 * 8192
        } else {
            self.lazy_max_pages
        }
    }
}
