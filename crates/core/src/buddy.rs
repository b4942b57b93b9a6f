//! The buddy frame allocator of one zone: free blocks of 2^order frames, orders 0..=10.
//!
//! Owns: per-order free lists threaded through dense side arrays (one `u32` link pair and one
//! byte of state per frame, never inside the frames), the free-frame count and the watermarks.
//! The concurrent engine wraps one `Buddy` in its zone lock; nothing here locks.
//!
//! ```text
//!  alloc(order 0) from a free order-2 block at frame 8:
//!    [8 9 10 11]  ->  keep [8], free [9] at order 0, free [10 11] at order 1
//!  free(9, 0) with 8 free at order 0:   buddy = 9 ^ 1 = 8  ->  [8 9] at order 1, and so on up
//! ```
//!
//! Invariants (checked by [`Buddy::check`]):
//! - a free block of order `o` starts at a multiple of 2^o and lies inside the zone;
//! - free blocks never overlap, and no free block has a free buddy of the same order (merges
//!   are complete) unless the pair would reach past the zone's end or above `MAX_ORDER`;
//! - `free_frames` is the sum of the free blocks' sizes, and `nr_free[o]` their count per order;
//! - an allocated block is known by its head only (state `ALLOCATED | order`), so a free of an
//!   interior frame, of a wrong order or of a block freed already is refused and changes nothing.
//!
//! Allocation takes the first block of the smallest order that fits and splits it, keeping the
//! lowest half each time (as the kernel's `expand`); free merges upward through the buddy index
//! `pfn ^ 2^order`. Free lists take freed blocks at the head, so reuse is LIFO.

/// Largest order: blocks of 2^10 frames (4 MiB with 4 KiB frames), the kernel's default.
pub const MAX_ORDER: u32 = 10;
/// Number of orders, 0..=MAX_ORDER.
pub const NR_ORDERS: usize = MAX_ORDER as usize + 1;

const NONE: u32 = u32::MAX;
/// State byte: not the head of any block known to the buddy (a tail, or inside a block).
const NOT_HEAD: u8 = 0xff;
/// State byte flag: the head of an allocated block (low bits: its order).
const ALLOCATED: u8 = 0x80;
/// State byte flag: the head of a free block (low bits: its order).
const FREE: u8 = 0x40;
const ORDER_BITS: u8 = 0x0f;

/// Why a buddy call was refused. Nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuddyError {
    /// Order above `MAX_ORDER`.
    BadOrder(u32),
    /// The frame is outside the zone or not aligned to the order.
    OutOfRange(u32),
    /// The frame is not the head of an allocated block of that order (never allocated,
    /// an interior frame, freed already, or freed with another order).
    NotAllocated(u32),
}

/// Watermarks in frames, as the kernel sizes them from the zone size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermarks {
    /// The kernel's reserve for atomic allocations. Nothing is held back here: it is the base
    /// that `low` and `high` are measured from.
    pub min: u64,
    /// Below this the zone is short: per-CPU lists stop growing.
    pub low: u64,
    /// At or above this the zone is healthy again.
    pub high: u64,
}

impl Watermarks {
    /// The kernel's rule scaled to a zone of `frames` 4 KiB frames: `min_free_kbytes =
    /// sqrt(16 x KiB)` clamped to [128 KiB, 256 MiB] but at most 1/32 of the zone; then
    /// `tmp = max(min / 4, frames / 1000)`, low = min + tmp, high = low + tmp.
    pub fn for_frames(frames: u64) -> Watermarks {
        let kib = frames * 4;
        let min_kib = isqrt(16 * kib).clamp(128, 256 << 10);
        let min = (min_kib / 4).min(frames / 32);
        let tmp = (min / 4).max(frames / 1000);
        Watermarks { min, low: min + tmp, high: min + 2 * tmp }
    }
}

fn isqrt(x: u64) -> u64 {
    if x < 2 {
        return x;
    }
    let mut r = (x as f64).sqrt() as u64;
    while r * r > x {
        r -= 1;
    }
    while (r + 1) * (r + 1) <= x {
        r += 1;
    }
    r
}

/// One zone of `frames` frames. See the module documentation.
#[derive(Clone, Debug)]
pub struct Buddy {
    frames: u32,
    next: Vec<u32>,
    prev: Vec<u32>,
    state: Vec<u8>,
    heads: [u32; NR_ORDERS],
    nr_free: [u32; NR_ORDERS],
    free_frames: u64,
    marks: Watermarks,
}

impl Buddy {
    /// A zone of `frames` frames (at most 2^32 - 2), all free.
    pub fn new(frames: u32) -> Buddy {
        Self::try_new(frames).expect("memory for the zone's frame lists")
    }

    /// [`Buddy::new`], or an error when the per-frame lists cannot be allocated (the size comes
    /// from a caller; nothing is allocated then).
    pub fn try_new(frames: u32) -> Result<Buddy, std::collections::TryReserveError> {
        assert!(frames < NONE, "a zone holds at most 2^32 - 2 frames");
        let n = frames as usize;
        fn filled<T: Clone>(n: usize, v: T) -> Result<Vec<T>, std::collections::TryReserveError> {
            let mut x = Vec::new();
            x.try_reserve_exact(n)?;
            x.resize(n, v);
            Ok(x)
        }
        let mut b = Buddy {
            frames,
            next: filled(n, NONE)?,
            prev: filled(n, NONE)?,
            state: filled(n, NOT_HEAD)?,
            heads: [NONE; NR_ORDERS],
            nr_free: [0; NR_ORDERS],
            free_frames: 0,
            marks: Watermarks::for_frames(frames as u64),
        };
        // Carve the zone into the largest aligned blocks, lowest address first; push in reverse
        // so the lists hand out low addresses first.
        let mut blocks = Vec::new();
        let mut pfn = 0u32;
        while pfn < frames {
            let mut o = MAX_ORDER.min(pfn.trailing_zeros());
            while pfn as u64 + (1u64 << o) > frames as u64 {
                o -= 1;
            }
            blocks.push((pfn, o));
            pfn += 1 << o;
        }
        for &(pfn, o) in blocks.iter().rev() {
            b.push_free(pfn, o);
        }
        Ok(b)
    }

    /// Frames in the zone.
    pub fn frames(&self) -> u32 {
        self.frames
    }

    /// Frames in free blocks (frames held on per-CPU lists are not counted: they were taken
    /// out of the zone).
    pub fn free_frames(&self) -> u64 {
        self.free_frames
    }

    /// Free blocks per order.
    pub fn nr_free(&self) -> [u32; NR_ORDERS] {
        self.nr_free
    }

    /// The zone's watermarks.
    pub fn watermarks(&self) -> Watermarks {
        self.marks
    }

    /// The kernel's watermark test: after taking a block of `order`, free frames stay above
    /// `mark`, and a free block of at least `order` exists.
    pub fn watermark_ok(&self, order: u32, mark: u64) -> bool {
        let usable = self.free_frames.saturating_sub((1u64 << order) - 1);
        usable > mark && (order as usize..NR_ORDERS).any(|o| self.heads[o] != NONE)
    }

    fn push_free(&mut self, pfn: u32, order: u32) {
        let h = self.heads[order as usize];
        self.next[pfn as usize] = h;
        self.prev[pfn as usize] = NONE;
        if h != NONE {
            self.prev[h as usize] = pfn;
        }
        self.heads[order as usize] = pfn;
        self.state[pfn as usize] = FREE | order as u8;
        self.nr_free[order as usize] += 1;
        self.free_frames += 1 << order;
    }

    fn unlink_free(&mut self, pfn: u32, order: u32) {
        let (p, n) = (self.prev[pfn as usize], self.next[pfn as usize]);
        if p == NONE {
            self.heads[order as usize] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n != NONE {
            self.prev[n as usize] = p;
        }
        self.state[pfn as usize] = NOT_HEAD;
        self.nr_free[order as usize] -= 1;
        self.free_frames -= 1 << order;
    }

    /// Take a block of 2^order frames: the first block of the smallest order that fits,
    /// split down keeping the low half. `None` when no block is large enough.
    pub fn alloc(&mut self, order: u32) -> Result<Option<u32>, BuddyError> {
        if order > MAX_ORDER {
            return Err(BuddyError::BadOrder(order));
        }
        let Some(found) = (order..=MAX_ORDER).find(|&o| self.heads[o as usize] != NONE) else {
            return Ok(None);
        };
        let pfn = self.heads[found as usize];
        self.unlink_free(pfn, found);
        let mut o = found;
        while o > order {
            o -= 1;
            self.push_free(pfn + (1 << o), o);
        }
        self.state[pfn as usize] = ALLOCATED | order as u8;
        Ok(Some(pfn))
    }

    /// Give back a block that `alloc(order)` returned, merging with free buddies.
    pub fn free(&mut self, pfn: u32, order: u32) -> Result<(), BuddyError> {
        if order > MAX_ORDER {
            return Err(BuddyError::BadOrder(order));
        }
        if pfn >= self.frames || pfn & ((1 << order) - 1) != 0 {
            return Err(BuddyError::OutOfRange(pfn));
        }
        if self.state[pfn as usize] != ALLOCATED | order as u8 {
            return Err(BuddyError::NotAllocated(pfn));
        }
        self.state[pfn as usize] = NOT_HEAD;
        let (mut pfn, mut o) = (pfn, order);
        while o < MAX_ORDER {
            let buddy = pfn ^ (1 << o);
            if buddy >= self.frames || self.state[buddy as usize] != FREE | o as u8 {
                break;
            }
            self.unlink_free(buddy, o);
            pfn &= buddy;
            o += 1;
        }
        self.push_free(pfn, o);
        Ok(())
    }

    /// The order of the allocated block whose head is `pfn`, if it is one.
    pub fn allocated_order(&self, pfn: u32) -> Option<u32> {
        let s = *self.state.get(pfn as usize)?;
        (s != NOT_HEAD && s & ALLOCATED != 0).then_some((s & ORDER_BITS) as u32)
    }

    /// Free blocks as `(pfn, order)`, in list order per order (for checks and reports).
    pub fn free_blocks(&self) -> Vec<(u32, u32)> {
        let mut v = Vec::new();
        for o in 0..NR_ORDERS {
            let mut p = self.heads[o];
            while p != NONE {
                v.push((p, o as u32));
                p = self.next[p as usize];
            }
        }
        v
    }

    /// Check every invariant of the module documentation.
    pub fn check(&self) -> Result<(), String> {
        let mut blocks = self.free_blocks();
        let mut per_order = [0u32; NR_ORDERS];
        let mut sum = 0u64;
        for &(p, o) in &blocks {
            per_order[o as usize] += 1;
            sum += 1 << o;
            if p & ((1 << o) - 1) != 0 || p as u64 + (1u64 << o) > self.frames as u64 {
                return Err(format!("free block {p} order {o} misaligned or outside the zone"));
            }
            if self.state[p as usize] != FREE | o as u8 {
                return Err(format!("free block {p} order {o} has state {:#x}", self.state[p as usize]));
            }
            if o < MAX_ORDER {
                let b = p ^ (1 << o);
                if b < self.frames && self.state[b as usize] == FREE | o as u8 {
                    return Err(format!("free block {p} and its buddy {b} at order {o} were not merged"));
                }
            }
        }
        if per_order != self.nr_free {
            return Err(format!("nr_free {:?} but lists hold {per_order:?}", self.nr_free));
        }
        if sum != self.free_frames {
            return Err(format!("free_frames {} but lists hold {sum}", self.free_frames));
        }
        blocks.sort_unstable();
        for w in blocks.windows(2) {
            if w[0].0 as u64 + (1u64 << w[0].1) > w[1].0 as u64 {
                return Err(format!("free blocks {:?} and {:?} overlap", w[0], w[1]));
            }
        }
        let free_heads = self.state.iter().filter(|&&s| s != NOT_HEAD && s & FREE != 0).count();
        if free_heads != blocks.len() {
            return Err(format!("{free_heads} frames marked free heads, {} on the lists", blocks.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_zone_is_carved_into_the_largest_aligned_blocks() {
        let b = Buddy::new(1024 + 512 + 3);
        assert_eq!(b.free_blocks(), vec![(1538, 0), (1536, 1), (1024, 9), (0, 10)]);
        assert_eq!(b.free_frames(), 1539);
        b.check().unwrap();
    }

    #[test]
    fn allocation_splits_and_keeps_the_low_half() {
        let mut b = Buddy::new(4);
        assert_eq!(b.alloc(0).unwrap(), Some(0));
        assert_eq!(b.free_blocks(), vec![(1, 0), (2, 1)]);
        assert_eq!(b.alloc(0).unwrap(), Some(1));
        assert_eq!(b.alloc(1).unwrap(), Some(2));
        assert_eq!(b.alloc(0).unwrap(), None);
        b.check().unwrap();
    }

    #[test]
    fn frees_merge_all_the_way_up() {
        let mut b = Buddy::new(2048);
        let got: Vec<u32> = (0..2048).map(|_| b.alloc(0).unwrap().unwrap()).collect();
        assert_eq!(b.free_frames(), 0);
        for p in got.into_iter().rev() {
            b.free(p, 0).unwrap();
            b.check().unwrap();
        }
        assert_eq!(b.nr_free()[MAX_ORDER as usize], 2);
        assert_eq!(b.free_frames(), 2048);
    }

    #[test]
    fn bad_frees_are_refused_and_change_nothing() {
        let mut b = Buddy::new(64);
        let p = b.alloc(2).unwrap().unwrap();
        let before = b.free_blocks();
        assert_eq!(b.free(p + 1, 0), Err(BuddyError::NotAllocated(p + 1)));
        assert_eq!(b.free(p, 1), Err(BuddyError::NotAllocated(p)));
        assert_eq!(b.free(p + 1, 2), Err(BuddyError::OutOfRange(p + 1)));
        assert_eq!(b.free(64, 0), Err(BuddyError::OutOfRange(64)));
        assert_eq!(b.free(p, 11), Err(BuddyError::BadOrder(11)));
        assert_eq!(b.alloc(11), Err(BuddyError::BadOrder(11)));
        assert_eq!(b.free_blocks(), before);
        b.free(p, 2).unwrap();
        assert_eq!(b.free(p, 2), Err(BuddyError::NotAllocated(p)));
        b.check().unwrap();
        assert_eq!(b.free_frames(), 64);
    }

    #[test]
    fn watermarks_follow_the_kernel_shape() {
        // 4 GiB of frames: sqrt(16 x 4 Mi KiB) = 8192 KiB = 2048 frames.
        let m = Watermarks::for_frames(1 << 20);
        assert_eq!(m.min, 2048);
        assert_eq!(m.low - m.min, 1048);
        assert_eq!(m.high - m.low, 1048);
        // A small zone keeps at most 1/32 in reserve.
        assert_eq!(Watermarks::for_frames(256).min, 8);
        let mut b = Buddy::new(256);
        assert!(b.watermark_ok(0, b.watermarks().low));
        while b.free_frames() > 8 {
            b.alloc(0).unwrap();
        }
        assert!(!b.watermark_ok(0, b.watermarks().min));
    }
}
