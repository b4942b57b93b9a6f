//! Frame allocator options and statistics: one table each (see [`crate::table`]).

use crate::{options_table, stats_table};

options_table! {
    /// How a [`FrameAllocator`](crate::FrameAllocator) is built. `FrameOptions::default().with_env()`
    /// applies the environment variables of the table.
    pub struct FrameOptions {
        /// Per-CPU page lists in front of the zone (off: every block comes from and goes to the zone).
        pcp: bool = true, "bool", "VMARENA_FRAMES_PCP";
        /// Frames per refill and drain step; 0 means the kernel's formula (63 for zones of 1 GiB or more).
        pcp_batch: u64 = 0, "frames", "VMARENA_FRAMES_PCP_BATCH";
        /// Floor of each list's auto-tuned `high`; 0 means max(low watermark / CPUs, 4 x batch).
        pcp_high_min: u64 = 0, "frames", "VMARENA_FRAMES_PCP_HIGH_MIN";
        /// Ceiling of `high`; 0 means max(frames / 8 / CPUs, 4 x batch). Equal to the floor: no tuning.
        pcp_high_max: u64 = 0, "frames", "VMARENA_FRAMES_PCP_HIGH_MAX";
        /// Period of the 1/8 decay of `high`, applied by the next refill or drain after it elapses (no timer).
        pcp_decay_ms: u64 = 1000, "ms", "VMARENA_FRAMES_PCP_DECAY_MS";
        /// Slots of each CPU's batch queue for frees that go to the zone; 0 turns the queues off.
        batch_queue: usize = 63, "slots", "VMARENA_FRAMES_BATCH_QUEUE";
        /// Try the zone lock from half full on (FreeBSD after D37305); off: block when full.
        batch_half_full: bool = true, "bool", "VMARENA_FRAMES_BATCH_HALF_FULL";
        /// Blocks of more than one frame keep their compound descriptors while on the per-CPU lists.
        compound_retention: bool = false, "bool", "VMARENA_FRAMES_COMPOUND_RETENTION";
        /// Per-CPU lists and queues; 0 means the online CPUs.
        cpus: usize = 0, "count", "VMARENA_FRAMES_CPUS";
    }
}

stats_table! {
    /// A snapshot of a frame allocator's figures. Counters only grow; levels are as of the snapshot.
    pub struct FrameStats {
        /// Frames in the zone.
        frames, "frames";
        /// Frames in free buddy blocks (not counting per-CPU lists and queues).
        free_frames, "frames";
        /// Frames cached on per-CPU lists.
        pcp_frames, "frames";
        /// Frames waiting in batch queues for the zone.
        queued_frames, "frames";
        /// Frames held by callers.
        user_frames, "frames";
        /// Blocks handed out from a per-CPU list.
        pcp_hits, "blocks";
        /// Refills of a per-CPU list from the zone (one zone lock hold each).
        pcp_refills, "refills";
        /// Blocks moved by refills.
        refill_blocks, "blocks";
        /// Drains of a per-CPU list to the zone (one zone lock hold each).
        pcp_drains, "drains";
        /// Blocks moved by drains.
        drain_blocks, "blocks";
        /// Drains started by free_high (a producer CPU freeing order 1..3 blocks).
        free_high, "drains";
        /// Per-CPU list trylocks that failed (the call went to the zone).
        trylock_failures, "calls";
        /// Blocks allocated from the zone directly, one lock hold each.
        zone_allocs, "blocks";
        /// Blocks freed to the zone directly, one lock hold each.
        zone_frees, "blocks";
        /// Frees put in a batch queue.
        queue_inserts, "frees";
        /// Batch queue flushes (one zone lock hold each).
        queue_flushes, "flushes";
        /// Half-full trylocks of the zone that failed (the frees stayed queued).
        queue_try_failures, "calls";
        /// Flushes that blocked on the zone lock (queue full).
        queue_blocking_flushes, "flushes";
        /// Compound descriptors written (blocks of more than one frame made whole).
        compound_preps, "blocks";
        /// Compound descriptors cleared.
        compound_dismantles, "blocks";
        /// Nanoseconds preparing and dismantling compound blocks (measured while lock timing is on).
        compound_ns, "ns";
        /// Decay ticks applied to per-CPU lists.
        pcp_decays, "ticks";
        /// Allocations that found no frames, after draining every list and queue.
        alloc_failures, "allocs";
        /// Frees refused: not the head of a block held by a caller, or of another order.
        bad_frees, "frees";
    }
}
