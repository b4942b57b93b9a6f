//! `BlockStack`: a stack of area starts held in fixed blocks, for the depot's stacks, which
//! grow to hundreds of thousands of entries in a bulk free.
//!
//! A `Vec` grows by reallocation: at each doubling the system allocator hands back a larger
//! block, and for these sizes glibc's thread arenas take it from fresh heap pages (which fault
//! and are zeroed) and trim them again when the old one is freed. The depot's `Vec` stacks
//! spent a quarter of a 64-thread bulk free in those page faults
//! (docs/bench-log/many-workers.md, "the depot's stacks in blocks"). Here the entries live in
//! blocks of [`BLOCK_STARTS`] starts (512 bytes, the system allocator's small sizes, reused
//! through its caches); a block is never moved or grown, and only the list of blocks, a
//! pointer per 64 entries, is reallocated.
//!
//! Owns: its blocks. Not synchronised: the depot holds it under a shard's mutex.
//!
//! Invariants: every block in `blocks` holds at least one entry and at most
//! [`BLOCK_STARTS`], and every block but the front (bottom) one and the back (top) one is
//! full; `len` is the sum of their lengths; every block in `spare` is empty, with room for
//! [`BLOCK_STARTS`] entries. Entries are in push order from the bottom of the front block to
//! the top of the back one.

use std::collections::VecDeque;

/// Entries per block: two full spills of one size (`magazine::SPILL_MAX`).
pub(crate) const BLOCK_STARTS: usize = 64;

/// See the module documentation.
#[derive(Default)]
pub(crate) struct BlockStack {
    blocks: VecDeque<Vec<u64>>,
    /// Empty blocks that [`BlockStack::try_reserve`] made ready for the pushes that follow.
    spare: Vec<Vec<u64>>,
    len: usize,
}

impl BlockStack {
    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Make room for `n` more pushes: true, or false with nothing held changed when the
    /// memory for their blocks cannot be had (no allocation here can abort the process).
    pub(crate) fn try_reserve(&mut self, n: usize) -> bool {
        let room_on_top = self.blocks.back().map_or(0, |b| BLOCK_STARTS - b.len());
        let want = n.saturating_sub(room_on_top).div_ceil(BLOCK_STARTS);
        if want <= self.spare.len() {
            return true;
        }
        let more = want - self.spare.len();
        if self.blocks.try_reserve(want).is_err() || self.spare.try_reserve(more).is_err() {
            return false;
        }
        for _ in 0..more {
            let mut b = Vec::new();
            if b.try_reserve_exact(BLOCK_STARTS).is_err() {
                return false;
            }
            self.spare.push(b);
        }
        true
    }

    /// Push `start` on top. Needs room made by [`BlockStack::try_reserve`]; without it, a new
    /// block is allocated as a `Vec` would be.
    pub(crate) fn push(&mut self, start: u64) {
        let full = self.blocks.back().map_or(true, |b| b.len() == BLOCK_STARTS);
        if full {
            let b = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(BLOCK_STARTS));
            self.blocks.push_back(b);
        }
        if let Some(top) = self.blocks.back_mut() {
            top.push(start);
            self.len += 1;
        }
    }

    /// Pop the newest entry.
    pub(crate) fn pop(&mut self) -> Option<u64> {
        let top = self.blocks.back_mut()?;
        let s = top.pop()?;
        if top.is_empty() {
            if let Some(b) = self.blocks.pop_back() {
                self.keep_spare(b);
            }
        }
        self.len -= 1;
        Some(s)
    }

    /// Remove the `n` oldest entries (all of them when `n` is more), oldest first, into `f`.
    pub(crate) fn drain_bottom(&mut self, n: usize, mut f: impl FnMut(u64)) {
        let mut left = n.min(self.len);
        self.len -= left;
        while left > 0 {
            let Some(front) = self.blocks.front_mut() else { break };
            if front.len() <= left {
                left -= front.len();
                front.iter().for_each(|&s| f(s));
                if let Some(b) = self.blocks.pop_front() {
                    self.keep_spare(b);
                }
            } else {
                front.drain(..left).for_each(&mut f);
                left = 0;
            }
        }
    }

    /// Every entry, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.blocks.iter().flatten().copied()
    }

    /// Blocks in use, and spare.
    #[cfg(test)]
    fn blocks(&self) -> (usize, usize) {
        (self.blocks.len(), self.spare.len())
    }

    /// Keep one emptied block for the next push, so that a stack going up and down across a
    /// block's edge does not allocate and free a block each time; free the rest.
    fn keep_spare(&mut self, mut b: Vec<u64>) {
        if self.spare.is_empty() {
            b.clear();
            self.spare.push(b);
        }
    }

    /// Check the invariants of the module documentation.
    pub(crate) fn check(&self) -> Result<(), String> {
        let n = self.blocks.len();
        for (i, b) in self.blocks.iter().enumerate() {
            let inner = i > 0 && i + 1 < n;
            if b.is_empty() || b.len() > BLOCK_STARTS || (inner && b.len() != BLOCK_STARTS) {
                return Err(format!("block {i} of {n} holds {} starts", b.len()));
            }
        }
        let sum: usize = self.blocks.iter().map(Vec::len).sum();
        if sum != self.len {
            return Err(format!("{sum} starts in the blocks, {} counted", self.len));
        }
        if let Some(b) = self.spare.iter().find(|b| !b.is_empty() || b.capacity() < BLOCK_STARTS) {
            return Err(format!("a spare block holds {} of {}", b.len(), b.capacity()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a `Vec` model: pushes, pops from the top and drains from the bottom in a
    /// pseudo-random mix, across many block edges, hold the same entries in the same order.
    #[test]
    fn it_holds_what_a_vec_would() {
        let mut s = BlockStack::default();
        let mut model: Vec<u64> = Vec::new();
        let mut r = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = 0u64;
        for step in 0..20_000 {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            match r % 8 {
                0..=3 => {
                    let n = (r >> 8) as usize % 100;
                    assert!(s.try_reserve(n));
                    for _ in 0..n {
                        s.push(next);
                        model.push(next);
                        next += 1;
                    }
                }
                4..=6 => {
                    for _ in 0..(r >> 8) % 90 {
                        assert_eq!(s.pop(), model.pop(), "step {step}");
                    }
                }
                _ => {
                    let n = (r >> 8) as usize % 150;
                    let mut got = Vec::new();
                    s.drain_bottom(n, |x| got.push(x));
                    let want: Vec<u64> = model.drain(..n.min(model.len())).collect();
                    assert_eq!(got, want, "step {step}");
                }
            }
            assert_eq!(s.len(), model.len());
            s.check().unwrap();
        }
        assert!(s.iter().eq(model.iter().copied()));
    }

    /// A reserve makes the blocks a put needs before it pushes, a pop that empties a block
    /// keeps one spare and frees the rest, and an empty stack holds no block in use.
    #[test]
    fn blocks_are_made_by_the_reserve_and_kept_one_spare() {
        let mut s = BlockStack::default();
        assert!(s.try_reserve(BLOCK_STARTS * 3 + 1));
        assert_eq!(s.blocks(), (0, 4));
        for i in 0..(BLOCK_STARTS * 3 + 1) as u64 {
            s.push(i);
        }
        assert_eq!(s.blocks(), (4, 0), "every push found its block made");
        assert!(s.try_reserve(BLOCK_STARTS - 1), "room on top: no block");
        assert_eq!(s.blocks(), (4, 0));
        while s.pop().is_some() {}
        assert_eq!(s.blocks(), (0, 1), "one emptied block kept");
        s.check().unwrap();
    }
}
