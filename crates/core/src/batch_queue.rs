//! A batch queue: items headed for a shared structure, collected per CPU so that one lock
//! acquisition applies many of them (FreeBSD's `struct vm_batchqueue`).
//!
//! Owns: at most `capacity` items. `insert` returns the free slots before the insert, as
//! FreeBSD's `vm_batchqueue_insert` does since D37305; [`BatchRule`] turns that number into what
//! the caller does next:
//! - `HalfFullTrylock` (FreeBSD after D37305): under half full, nothing; at half full or more,
//!   try the shared lock and flush on success, keep queuing on failure; block only when full;
//! - `FullBlock` (before): queue until full, then block on the lock and flush.
//!
//! The engine keeps one queue per CPU under that CPU's lock; this module does not lock.

/// What `insert` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Insert<T> {
    /// Appended; the number is the free slots before the insert (1 means now full).
    Queued(usize),
    /// The queue was full; the item is handed back and must be applied directly.
    Full(T),
}

/// When to flush. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchRule {
    /// Try the lock from half full on; block only when full.
    HalfFullTrylock,
    /// Block on the lock when full.
    FullBlock,
}

/// What the caller should do after an insert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flush {
    /// Nothing now.
    No,
    /// Try the lock; on success flush, on failure leave the items queued.
    Try,
    /// Take the lock (blocking) and flush.
    Must,
}

impl BatchRule {
    /// The step after an insert that found `slots_before` free slots in a queue of `capacity`.
    pub fn after_insert(self, slots_before: usize, capacity: usize) -> Flush {
        match self {
            BatchRule::HalfFullTrylock if slots_before > capacity / 2 => Flush::No,
            BatchRule::HalfFullTrylock if slots_before > 0 => Flush::Try,
            BatchRule::FullBlock if slots_before > 1 => Flush::No,
            _ => Flush::Must,
        }
    }
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct BatchQueue<T> {
    items: Vec<T>,
    capacity: usize,
}

impl<T> BatchQueue<T> {
    /// An empty queue of `capacity` slots (FreeBSD uses 2^k - 1: 63 on 64-bit).
    pub fn new(capacity: usize) -> BatchQueue<T> {
        assert!(capacity > 0, "a batch queue needs a slot");
        BatchQueue { items: Vec::with_capacity(capacity), capacity }
    }

    /// Slots in all.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Items queued.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Append `x` unless the queue is full.
    pub fn insert(&mut self, x: T) -> Insert<T> {
        let slots = self.capacity - self.items.len();
        if slots == 0 {
            return Insert::Full(x);
        }
        self.items.push(x);
        Insert::Queued(slots)
    }

    /// The queued items, oldest first.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    /// Take every queued item, oldest first.
    pub fn drain(&mut self) -> std::vec::Drain<'_, T> {
        self.items.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_reports_the_slots_before_and_refuses_when_full() {
        let mut q = BatchQueue::new(3);
        assert_eq!(q.insert(1), Insert::Queued(3));
        assert_eq!(q.insert(2), Insert::Queued(2));
        assert_eq!(q.insert(3), Insert::Queued(1));
        assert_eq!(q.insert(4), Insert::Full(4));
        assert_eq!(q.drain().collect::<Vec<_>>(), vec![1, 2, 3]);
        assert!(q.is_empty());
    }

    #[test]
    fn the_half_full_rule_tries_from_half_and_blocks_only_when_full() {
        // 63 slots: the first try comes on the insert that finds 32 queued (31 free before).
        let r = BatchRule::HalfFullTrylock;
        assert_eq!(r.after_insert(63, 63), Flush::No);
        assert_eq!(r.after_insert(32, 63), Flush::No);
        assert_eq!(r.after_insert(31, 63), Flush::Try);
        assert_eq!(r.after_insert(1, 63), Flush::Try);
        assert_eq!(r.after_insert(0, 63), Flush::Must);
        let old = BatchRule::FullBlock;
        assert_eq!(old.after_insert(2, 63), Flush::No);
        assert_eq!(old.after_insert(1, 63), Flush::Must);
    }

    #[test]
    fn without_contention_the_half_full_rule_flushes_33_of_63() {
        let mut q = BatchQueue::new(63);
        let mut flushed_at = None;
        for i in 0..63 {
            let Insert::Queued(s) = q.insert(i) else { panic!("full") };
            if BatchRule::HalfFullTrylock.after_insert(s, 63) == Flush::Try {
                flushed_at = Some(q.len());
                break;
            }
        }
        assert_eq!(flushed_at, Some(33));
    }
}
