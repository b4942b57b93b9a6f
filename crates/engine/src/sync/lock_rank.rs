//! `LockRank`: the one lock order of the engine, and (debug builds) its check on every
//! acquisition.
//!
//! Owns: the ranks' order (written once, on [`LockRank`]), the creation numbers of lock owners
//! ([`next_owner`]) and, in debug builds, each thread's list of the ranks it holds, which
//! `note_acquired` checks before a blocking acquisition and `note_released` updates.

/// Where a `StatLock` stands in the one lock order of the engine. Ranks compare field by
/// field; a thread may block on a lock only while every `StatLock` it holds ranks lower:
///
/// | field | order |
/// |---|---|
/// | owner kind | arenas, then frame allocators (the order in which `fork()` takes them) |
/// | owner | creation order ([`next_owner`]) |
/// | class | arena: `global` or `node`, then `free`, then Split's `busy`; frame allocator: `pcp`, then `queue`, then `zone` |
/// | group | among the locks of one class, a node's or a CPU's index, in index order |
///
/// So an arena's invariant checker and `fork()` take node locks in index order and then the
/// free lock (Split: free, then busy); a frame allocator nests a CPU's list or queue lock over
/// its zone lock, as the kernel nests the pcp lock over the zone lock, and `fork()` takes every
/// CPU's list, every CPU's queue, then the zone; `fork()` takes arena after arena, then frame
/// allocator after frame allocator. Fast paths hold one at a time. Unranked locks (outside
/// the engine's structures) may not be held with any other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LockRank {
    owner_kind: u8,
    owner: u64,
    class: u8,
    group: u32,
}

const OWNER_ARENA: u8 = 1;
const OWNER_FRAMES: u8 = 2;

/// A creation number for an owner of ranked locks (an arena or a frame allocator): later
/// owners rank higher.
pub fn next_owner() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl LockRank {
    /// A lock outside the engine's structures: never held with another `StatLock`.
    pub const UNRANKED: LockRank = LockRank { owner_kind: 0, owner: 0, class: 0, group: 0 };

    /// The Global strategy's one lock of arena `owner`.
    pub fn arena_global(owner: u64) -> LockRank {
        LockRank { owner_kind: OWNER_ARENA, owner, class: 0, group: 0 }
    }

    /// Node `index`'s lock of arena `owner`.
    pub fn arena_node(owner: u64, index: usize) -> LockRank {
        LockRank { owner_kind: OWNER_ARENA, owner, class: 0, group: index as u32 }
    }

    /// The free-tree lock of arena `owner` (Split and Nodes).
    pub fn arena_free(owner: u64) -> LockRank {
        LockRank { owner_kind: OWNER_ARENA, owner, class: 1, group: 0 }
    }

    /// The Split strategy's busy-and-lazy lock of arena `owner`.
    pub fn arena_busy(owner: u64) -> LockRank {
        LockRank { owner_kind: OWNER_ARENA, owner, class: 2, group: 0 }
    }

    /// CPU `cpu`'s page-list lock of frame allocator `owner`.
    pub fn frames_pcp(owner: u64, cpu: usize) -> LockRank {
        LockRank { owner_kind: OWNER_FRAMES, owner, class: 0, group: cpu as u32 }
    }

    /// CPU `cpu`'s batch-queue lock of frame allocator `owner`.
    pub fn frames_queue(owner: u64, cpu: usize) -> LockRank {
        LockRank { owner_kind: OWNER_FRAMES, owner, class: 1, group: cpu as u32 }
    }

    /// The zone (buddy) lock of frame allocator `owner`.
    pub fn frames_zone(owner: u64) -> LockRank {
        LockRank { owner_kind: OWNER_FRAMES, owner, class: 2, group: 0 }
    }
}

#[cfg(all(debug_assertions, not(loom)))]
thread_local! {
    /// The ranks of the `StatLock`s this thread holds, in acquisition order.
    static HELD: std::cell::RefCell<Vec<LockRank>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Debug builds: record that this thread took a lock of rank `rank`; when `blocking`, first
/// assert the order (every held lock ranks below, and unranked locks are held alone).
#[cfg(all(debug_assertions, not(loom)))]
pub(crate) fn note_acquired(rank: LockRank, blocking: bool) {
    let _ = HELD.try_with(|h| {
        let mut h = h.borrow_mut();
        if blocking {
            if let Some(worst) =
                h.iter().find(|&&r| r >= rank || r == LockRank::UNRANKED || rank == LockRank::UNRANKED)
            {
                panic!("lock order: taking {rank:?} while holding {worst:?} (LockRank documents the order)");
            }
        }
        h.push(rank);
    });
}

#[cfg(all(debug_assertions, not(loom)))]
pub(crate) fn note_released(rank: LockRank) {
    let _ = HELD.try_with(|h| {
        let mut h = h.borrow_mut();
        if let Some(i) = h.iter().rposition(|&r| r == rank) {
            h.remove(i);
        }
    });
}
