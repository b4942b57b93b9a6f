//! Per-CPU page lists: the policy of one CPU's cache of frame blocks in front of the buddy, as
//! Linux 6.7+ runs it (batch refill and drain, `high` auto-tuned between `high_min` and
//! `high_max`, free_high for producer CPUs, 1/8 decay per tick).
//!
//! Owns: one list per cached order (0, 1, 2, 3 and the 2 MiB order 9), the count of cached
//! frames (in base frames, `2^order` per block) and the tuning state. No migratetypes: one list
//! per order. The engine keeps one `Pcp` per CPU under that CPU's lock and performs the zone
//! side (refill from and drain to the buddy) under the zone lock; this module only decides how
//! much to move and which blocks. Lock order in the engine: pcp lock, then zone lock.
//!
//! Invariants: `count` is the sum of `2^order` over the blocks on the lists; `high_min <= high
//! <= high_max` after every call that reads `high`; lists hand out their head (most recently
//! freed, cache-hot) and drain from their tail (oldest).
//!
//! The rules, with the kernel's names:
//! - refill (`nr_pcp_alloc`): `batch << alloc_factor` frames for order 0 (the factor doubles
//!   refills while they fit under `high`, up to `scale_max`), `batch` for higher orders, at least
//!   two blocks; each refill from the zone also grows `high` by that amount unless the zone is
//!   below its high watermark;
//! - free (`free_unref_page_commit`): an allocation halves `free_count`, a free halves
//!   `alloc_factor` and adds to `free_count`; a drain starts when `count` reaches the threshold
//!   of `nr_pcp_high` and moves `clamp(free_count, batch, high - batch)` frames;
//! - free_high: a second consecutive free of order 1..=3 after `batch` frames freed without
//!   allocations drains the list (a producer CPU hands blocks back while they are cache-hot);
//! - decay: `high = max(count - (batch << scale_max), high - high / 8, high_min)` per tick, and
//!   the excess is drained.

use std::collections::VecDeque;

/// The cached orders: 0..=3 (cheap orders) and 9, the 2 MiB block of the kernel's THP list.
pub const PCP_ORDERS: [u32; 5] = [0, 1, 2, 3, 9];
/// The 2 MiB order with 4 KiB frames.
pub const THP_ORDER: u32 = 9;
/// Orders above this are "costly" and never count for free_high.
pub const COSTLY_ORDER: u32 = 3;

/// The list index of a cached order, or `None` when the order bypasses the lists.
pub fn pindex(order: u32) -> Option<usize> {
    match order {
        0..=3 => Some(order as usize),
        THP_ORDER => Some(4),
        _ => None,
    }
}

/// Sizes of one CPU's lists. `high_min == high_max` turns auto-tuning off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcpConfig {
    /// Frames moved per refill or drain step.
    pub batch: u64,
    /// The floor of `high`.
    pub high_min: u64,
    /// The ceiling of `high`.
    pub high_max: u64,
    /// `CONFIG_PCP_BATCH_SCALE_MAX`: caps refill doubling, free_count and drains at
    /// `batch << scale_max`.
    pub scale_max: u32,
    /// The kernel's PCPF_FREE_HIGH_BATCH: free_high waits until `batch` frames are cached
    /// (set on CPUs whose data cache slice exceeds 3 x batch pages).
    pub free_high_batch: bool,
}

impl PcpConfig {
    /// The kernel's sizes for a zone of `frames` frames with low watermark `low` shared by
    /// `cpus` CPUs: `batch = rounddown_pow2(b + b/2) - 1` with `b = min(frames >> 10, 256) / 4`
    /// (63 for a zone of 1 GiB or more), `high_min = max(low / cpus, 4 batch)`,
    /// `high_max = max(frames / 8 / cpus, 4 batch)`.
    pub fn for_zone(frames: u64, low: u64, cpus: u64) -> PcpConfig {
        let b = ((frames >> 10).min(256) / 4).max(1);
        let b = b + b / 2;
        let batch = ((1u64 << (63 - b.leading_zeros())) - 1).max(1);
        let cpus = cpus.max(1);
        PcpConfig {
            batch,
            high_min: (low / cpus).max(4 * batch),
            high_max: (frames / 8 / cpus).max(4 * batch),
            scale_max: 5,
            free_high_batch: true,
        }
    }
}

/// One CPU's lists. See the module documentation.
#[derive(Clone, Debug)]
pub struct Pcp {
    lists: [VecDeque<u32>; PCP_ORDERS.len()],
    count: u64,
    high: u64,
    cfg: PcpConfig,
    free_count: u64,
    alloc_factor: u32,
    prev_free_high_order: bool,
}

/// What a free asks of the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeOutcome {
    /// Frames to drain to the zone now (0: none).
    pub drain_frames: u64,
    /// The drain was triggered by free_high.
    pub free_high: bool,
}

impl Pcp {
    /// Empty lists with `high = high_min`.
    pub fn new(cfg: PcpConfig) -> Pcp {
        Pcp {
            lists: Default::default(),
            count: 0,
            high: cfg.high_min,
            cfg,
            free_count: 0,
            alloc_factor: 0,
            prev_free_high_order: false,
        }
    }

    /// Cached frames (base frames).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The current drain threshold.
    pub fn high(&self) -> u64 {
        self.high
    }

    /// The sizes.
    pub fn config(&self) -> PcpConfig {
        self.cfg
    }

    /// Blocks cached per list, in `PCP_ORDERS` order.
    pub fn lengths(&self) -> [usize; PCP_ORDERS.len()] {
        std::array::from_fn(|i| self.lists[i].len())
    }

    fn clamp_high(&mut self) {
        self.high = self.high.clamp(self.cfg.high_min, self.cfg.high_max);
    }

    /// True when `order`'s list holds no block. `order` must be a cached order.
    pub fn is_empty_at(&self, order: u32) -> bool {
        self.lists[pindex(order).expect("an uncached order")].is_empty()
    }

    /// Take the head block of `order`'s list. `order` must be a cached order.
    pub fn pop(&mut self, order: u32) -> Option<u32> {
        let i = pindex(order).expect("pop of an uncached order");
        self.free_count >>= 1;
        let pfn = self.lists[i].pop_front()?;
        self.count -= 1 << order;
        Some(pfn)
    }

    /// Blocks of `order` to take from the zone on a miss (`nr_pcp_alloc`). Grows `high` unless
    /// `zone_below_high`.
    pub fn refill_blocks(&mut self, order: u32, zone_below_high: bool) -> u64 {
        let batch = self.cfg.batch;
        self.clamp_high();
        if self.high < batch {
            return 1;
        }
        let mut b = if order > 0 { batch } else { batch << self.alloc_factor };
        if self.cfg.high_min != self.cfg.high_max && !zone_below_high {
            self.high = (self.high + b).min(self.cfg.high_max);
        }
        if order == 0 {
            let cap = self.high.saturating_sub(self.count + batch).max(batch);
            if b <= cap && self.alloc_factor < self.cfg.scale_max {
                self.alloc_factor += 1;
            }
            b = b.min(cap);
        }
        if b > 1 {
            (b >> order).max(2)
        } else {
            1
        }
    }

    /// Append blocks taken from the zone by a refill (ascending frame order: tail insertion).
    pub fn add_refilled(&mut self, order: u32, blocks: &[u32]) {
        let i = pindex(order).expect("refill of an uncached order");
        self.lists[i].extend(blocks.iter().copied());
        self.count += (blocks.len() as u64) << order;
    }

    /// Cache a freed block at the head of its list and say how much to drain
    /// (`free_unref_page_commit`, `nr_pcp_high`, `nr_pcp_free`).
    pub fn push(&mut self, pfn: u32, order: u32, zone_below_high: bool) -> FreeOutcome {
        let i = pindex(order).expect("push of an uncached order");
        let batch = self.cfg.batch;
        let cap = batch << self.cfg.scale_max;
        self.alloc_factor >>= 1;
        self.lists[i].push_front(pfn);
        self.count += 1 << order;
        let mut free_high = false;
        if order > 0 && order <= COSTLY_ORDER {
            free_high = self.free_count >= batch
                && self.prev_free_high_order
                && (!self.cfg.free_high_batch || self.count >= batch);
            self.prev_free_high_order = true;
        } else {
            self.prev_free_high_order = false;
        }
        if self.free_count < cap {
            self.free_count += 1 << order;
        }
        let threshold = self.threshold(free_high, zone_below_high);
        if self.count < threshold {
            return FreeOutcome { drain_frames: 0, free_high: false };
        }
        let n = if free_high {
            self.count.min(cap)
        } else if self.high < batch {
            1
        } else {
            self.free_count.min(self.high - batch).max(batch)
        };
        FreeOutcome { drain_frames: n.min(self.count), free_high }
    }

    /// `nr_pcp_high`: the count at which a free drains. Adjusts `high`.
    fn threshold(&mut self, free_high: bool, zone_below_high: bool) -> u64 {
        let batch = self.cfg.batch;
        self.clamp_high();
        if self.high == 0 {
            return 0;
        }
        if free_high {
            self.high = self.high.saturating_sub(batch << self.cfg.scale_max).max(self.cfg.high_min);
            return 0;
        }
        if self.cfg.high_min == self.cfg.high_max {
            return self.high;
        }
        if zone_below_high {
            self.high = self.high.saturating_sub(self.free_count.max(batch)).max(self.cfg.high_min);
            return self.count.max(self.cfg.high_min);
        }
        if self.count >= self.high {
            let need = self.free_count + batch;
            if self.high < need {
                self.high = need.clamp(self.cfg.high_min, self.cfg.high_max);
            }
        }
        self.high
    }

    /// Remove up to `frames` base frames for a drain to the zone: whole lists from their tails,
    /// round robin starting after `order`'s list (`free_pcppages_bulk`). Returns `(pfn, order)`.
    pub fn take_drain(&mut self, frames: u64, order: u32) -> Vec<(u32, u32)> {
        let mut left = frames.min(self.count) as i64;
        let mut out = Vec::new();
        let mut i = pindex(order).unwrap_or(0);
        while left > 0 {
            loop {
                i = (i + 1) % PCP_ORDERS.len();
                if !self.lists[i].is_empty() {
                    break;
                }
            }
            let o = PCP_ORDERS[i];
            while left > 0 {
                let Some(pfn) = self.lists[i].pop_back() else { break };
                left -= 1 << o;
                self.count -= 1 << o;
                out.push((pfn, o));
            }
        }
        out
    }

    /// Every cached block (a full drain).
    pub fn take_all(&mut self) -> Vec<(u32, u32)> {
        let mut out = Vec::with_capacity(self.lists.iter().map(|l| l.len()).sum());
        for (i, l) in self.lists.iter_mut().enumerate() {
            out.extend(l.drain(..).map(|p| (p, PCP_ORDERS[i])));
        }
        self.count = 0;
        out
    }

    /// One decay tick (`decay_pcp_high`): lower `high` and return the frames to drain.
    pub fn decay(&mut self) -> u64 {
        let cap = self.cfg.batch << self.cfg.scale_max;
        if self.high > self.cfg.high_min {
            self.high = self.count.saturating_sub(cap).max(self.high - self.high / 8).max(self.cfg.high_min);
        }
        self.count.saturating_sub(self.high).min(cap)
    }

    /// Memory is short: drop `high` to its floor and return the frames above it.
    pub fn shrink(&mut self) -> u64 {
        self.high = self.cfg.high_min;
        self.count.saturating_sub(self.high)
    }

    /// Check the count and the bounds of `high`.
    pub fn check(&self) -> Result<(), String> {
        let sum: u64 = self.lists.iter().enumerate().map(|(i, l)| (l.len() as u64) << PCP_ORDERS[i]).sum();
        if sum != self.count {
            return Err(format!("pcp count {} but lists hold {sum}", self.count));
        }
        if self.high > self.cfg.high_max.max(self.cfg.high_min) {
            return Err(format!("pcp high {} above high_max {}", self.high, self.cfg.high_max));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> PcpConfig {
        PcpConfig { batch: 63, high_min: 252, high_max: 4096, scale_max: 5, free_high_batch: true }
    }

    #[test]
    fn sizes_follow_the_kernel_formulas() {
        // A zone of 1 GiB or more: batch 63.
        let c = PcpConfig::for_zone(1 << 18, 1000, 2);
        assert_eq!(c.batch, 63);
        assert_eq!(c.high_min, 500);
        assert_eq!(c.high_max, (1 << 18) / 16);
        // 512 MiB: batch 31.
        assert_eq!(PcpConfig::for_zone(1 << 17, 0, 1).batch, 31);
        assert_eq!(PcpConfig::for_zone(16, 0, 1).batch, 1);
    }

    #[test]
    fn refills_double_while_they_fit_and_grow_high() {
        let mut p = Pcp::new(cfg());
        assert_eq!(p.refill_blocks(0, false), 63);
        assert_eq!(p.high(), 252 + 63);
        p.add_refilled(0, &(0..63).collect::<Vec<_>>());
        // factor 1 now: 126 asked, capped at high - count - batch.
        let n = p.refill_blocks(0, false);
        // high grew to 441; the cap 441 - 63 cached - 63 leaves room for all 126.
        assert_eq!(n, 126);
        // Below high watermark: no growth.
        let h = p.high();
        p.refill_blocks(0, true);
        assert_eq!(p.high(), h);
        // Higher orders: batch >> order blocks, at least 2.
        assert_eq!(p.refill_blocks(3, false), 7);
        assert_eq!(p.refill_blocks(9, false), 2);
    }

    #[test]
    fn lists_are_lifo_and_drain_from_the_tail() {
        let mut p = Pcp::new(cfg());
        p.add_refilled(0, &[10, 11, 12]);
        assert_eq!(p.push(5, 0, false).drain_frames, 0);
        assert_eq!(p.pop(0), Some(5));
        assert_eq!(p.pop(0), Some(10));
        p.add_refilled(1, &[20, 22]);
        // Drain starting after order 0's list takes order 1's tail first.
        assert_eq!(p.take_drain(2, 0), vec![(22, 1)]);
        assert_eq!(p.count(), 2 + 2);
        p.check().unwrap();
        let all = p.take_all();
        assert_eq!(all.len(), 3);
        assert_eq!(p.count(), 0);
    }

    #[test]
    fn a_full_list_drains_on_free_and_high_grows_to_absorb_batched_frees() {
        let mut p = Pcp::new(cfg());
        let mut drained = 0;
        for pfn in 0..3000 {
            let o = p.push(pfn, 0, false);
            if o.drain_frames > 0 {
                drained += p.take_drain(o.drain_frames, 0).len();
            }
            p.check().unwrap();
        }
        assert!(drained > 0, "a list above high must drain");
        assert!(p.count() <= p.high() + 1);
        // Under a short zone, every free above high_min drains.
        let o = p.push(1000, 0, true);
        assert!(o.drain_frames >= 63);
        assert_eq!(p.high(), 252);
    }

    #[test]
    fn free_high_needs_two_consecutive_high_order_frees() {
        let mut p = Pcp::new(cfg());
        // Fill free_count with order-0 frees first (no drains below high).
        for pfn in 0..100 {
            p.push(pfn, 0, false);
        }
        let first = p.push(1000, 2, false);
        assert!(!first.free_high);
        let second = p.push(1004, 2, false);
        assert!(second.free_high);
        assert_eq!(second.drain_frames, p.count());
        // An allocation halves free_count; enough of them stop free_high.
        for _ in 0..10 {
            p.pop(0);
        }
        assert!(!p.push(1008, 2, false).free_high);
    }

    #[test]
    fn decay_lowers_high_by_an_eighth_down_to_the_floor() {
        let mut p = Pcp::new(cfg());
        for _ in 0..20 {
            p.refill_blocks(0, false);
        }
        let h = p.high();
        assert!(h > 252);
        assert_eq!(p.decay(), 0);
        assert_eq!(p.high(), h - h / 8);
        for _ in 0..100 {
            p.decay();
        }
        assert_eq!(p.high(), 252);
        p.add_refilled(0, &(0..300).collect::<Vec<_>>());
        assert_eq!(p.decay(), 300 - 252);
        assert_eq!(p.shrink(), 300 - 252);
    }

    #[test]
    fn fixed_high_disables_tuning() {
        let mut p = Pcp::new(PcpConfig { high_min: 100, high_max: 100, ..cfg() });
        p.refill_blocks(0, false);
        assert_eq!(p.high(), 100);
        for pfn in 0..99 {
            assert_eq!(p.push(pfn, 0, false).drain_frames, 0);
        }
        assert!(p.push(99, 0, false).drain_frames > 0);
    }
}
