//! `FrameAllocator`: the buddy zone with per-CPU page lists and per-CPU batch queues in front,
//! as Linux runs its page allocator (per-CPU page lists) and FreeBSD its page-queue batches
//! ("vm: reduce lock contention when processing vm batchqueues").
//!
//! Owns: one zone (a [`Buddy`] under the zone lock), one [`Pcp`] per CPU under that CPU's list
//! lock, one [`BatchQueue`] of frees per CPU under that CPU's queue lock, and one 64-byte frame
//! descriptor per frame (the kernel's `struct page`: the head records who holds the block, the
//! tails of a multi-frame block point at their head while it is compound).
//!
//! Frames are integers (pfn); what they stand for (pages of a memfd) is the caller's business.
//!
//! Locks, in the only order they nest: CPU list lock, then CPU queue lock, then zone lock.
//! - Allocation of a cached order (0..=3, 9) trylocks this CPU's list; a hit pops its head; a
//!   miss refills `nr_pcp_alloc` blocks under one zone lock hold, nested. A failed trylock (the
//!   thread moved, or another thread on this CPU holds it) goes to the zone directly.
//! - Free trylocks this CPU's list and pushes at the head; a drain moves blocks from list tails
//!   to the zone under one zone lock hold. Frees that reach the zone one block at a time (lists
//!   off, trylock failed, uncached order) go through this CPU's batch queue when queues are on.
//! - Remote drains (`drain_all`, the reclaim path of a failed allocation) lock each CPU's list
//!   and queue normally.
//!
//! Descriptor state of a block's head: `USER | order` while a caller holds it, `KERNEL` while it
//! sits in the zone, on a list or in a queue. Free swaps `USER | order` for `KERNEL` with one
//! compare-and-swap, so a double free, a free of a tail or a free with the wrong order is refused
//! and changes nothing, even when the block sits on a list the buddy cannot see.
//!
//! Compound blocks: every block of more than one frame is made compound when handed out (each
//! tail descriptor written: 2^order - 1 of them) and dismantled when freed. With
//! `compound_retention` a block stays compound while on a per-CPU list and is dismantled only
//! when it drains to the zone; a list hit then skips the preparation (the seed's experiment).

mod figures;
pub mod options;

pub use crate::error::FrameError;
use crate::frames::options::FrameOptions;
use crate::sync::lock::{StatGuard, StatLock};
use crate::sync::lock_rank::{next_owner, LockRank};
use crate::sync::lock_stats::LockSite;
use crate::sync::padded::Padded;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use vmarena_core::pcp::pindex;
use vmarena_core::{BatchQueue, BatchRule, Buddy, Flush, Insert, Pcp, PcpConfig, MAX_ORDER};
use vmarena_platform::process::monotonic_ns;

/// Zone lock: refill of a per-CPU list.
pub static ZONE_REFILL: LockSite = LockSite::new("frames: refill");
/// Zone lock: drain of a per-CPU list.
pub static ZONE_DRAIN: LockSite = LockSite::new("frames: drain");
/// Zone lock: one block allocated directly.
pub static ZONE_ALLOC: LockSite = LockSite::new("frames: zone alloc");
/// Zone lock: one block freed directly.
pub static ZONE_FREE: LockSite = LockSite::new("frames: zone free");
/// Zone lock: a batch queue flush.
pub static ZONE_FLUSH: LockSite = LockSite::new("frames: queue flush");
/// Every frame site, for reports.
pub static SITES: [&LockSite; 5] = [&ZONE_REFILL, &ZONE_DRAIN, &ZONE_ALLOC, &ZONE_FREE, &ZONE_FLUSH];

const KERNEL: u64 = 0;
const USER: u64 = 1 << 8;
const TAIL: u64 = 1 << 9;
const COMPOUND: u64 = 1 << 10;

/// The kernel's `struct page`, reduced: 64 bytes per frame, in one dense array.
#[repr(C, align(64))]
struct FrameDesc {
    /// Head: `USER | order` or `KERNEL`, plus `COMPOUND`; tail of a compound block: `TAIL`.
    state: AtomicU64,
    /// Tail of a compound block: the head's pfn.
    head: AtomicU64,
    _rest: [u64; 6],
}

struct CpuLists {
    pcp: StatLock<PcpSlot>,
    queue: StatLock<QueueSlot>,
    last_decay_ns: AtomicU64,
}

/// A CPU's lists and the counters of their hits, kept under the list lock so a hit touches no
/// shared cache line.
struct PcpSlot {
    pcp: Pcp,
    hits: u64,
}

/// A CPU's batch queue and the count of its inserts, under the queue lock.
struct QueueSlot {
    queue: BatchQueue<(u32, u32)>,
    inserts: u64,
}

impl Deref for PcpSlot {
    type Target = Pcp;
    fn deref(&self) -> &Pcp {
        &self.pcp
    }
}

impl DerefMut for PcpSlot {
    fn deref_mut(&mut self) -> &mut Pcp {
        &mut self.pcp
    }
}

impl Deref for QueueSlot {
    type Target = BatchQueue<(u32, u32)>;
    fn deref(&self) -> &Self::Target {
        &self.queue
    }
}

impl DerefMut for QueueSlot {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.queue
    }
}

/// Counters of the slower paths (refills, drains, the zone, failures), shared by all CPUs.
#[derive(Default)]
struct Counters {
    pcp_refills: AtomicU64,
    refill_blocks: AtomicU64,
    pcp_drains: AtomicU64,
    drain_blocks: AtomicU64,
    free_high: AtomicU64,
    trylock_failures: AtomicU64,
    zone_allocs: AtomicU64,
    zone_frees: AtomicU64,
    queue_flushes: AtomicU64,
    queue_try_failures: AtomicU64,
    queue_blocking_flushes: AtomicU64,
    compound_preps: AtomicU64,
    compound_dismantles: AtomicU64,
    compound_ns: AtomicU64,
    pcp_decays: AtomicU64,
    alloc_failures: AtomicU64,
    bad_frees: AtomicU64,
}

/// See the module documentation.
pub struct FrameAllocator {
    name: String,
    opts: FrameOptions,
    zone: StatLock<Buddy>,
    below_high: AtomicBool,
    cpus: Box<[Padded<CpuLists>]>,
    desc: Box<[FrameDesc]>,
    rule: BatchRule,
    decay_ns: u64,
    c: Counters,
}

#[cfg(not(loom))]
impl crate::sync::fork::ForkLocks for FrameAllocator {
    /// Every CPU's page list, every CPU's batch queue, then the zone (the order of `fork`).
    fn lock_for_fork(&self) -> Vec<Box<dyn crate::sync::fork::Held + '_>> {
        let mut held: Vec<Box<dyn crate::sync::fork::Held + '_>> =
            Vec::with_capacity(2 * self.cpus.len() + 1);
        for c in self.cpus.iter() {
            held.push(Box::new(c.pcp.lock()));
        }
        for c in self.cpus.iter() {
            held.push(Box::new(c.queue.lock()));
        }
        held.push(Box::new(self.zone.lock()));
        held
    }
}

impl FrameAllocator {
    /// An allocator of `frames` frames (1 to 2^31), all free.
    pub fn new(name: &str, frames: u64, opts: FrameOptions) -> Result<FrameAllocator, String> {
        if frames == 0 || frames > 1 << 31 {
            return Err(format!("{name}: {frames} frames is out of range (1 to 2^31)"));
        }
        // The sizes come from the caller: every per-frame table is allocated fallibly.
        let no_memory = |what: &str| format!("{name}: cannot allocate the {what} of {frames} frames");
        // The largest table first, before anything is written: a size that cannot be had fails
        // at once, without touching the smaller tables.
        let mut desc = Vec::new();
        desc.try_reserve_exact(frames as usize).map_err(|_| no_memory("descriptors"))?;
        let buddy = Buddy::try_new(frames as u32).map_err(|_| no_memory("buddy lists"))?;
        let ncpu = if opts.cpus == 0 { vmarena_platform::cpu::count().max(1) } else { opts.cpus };
        let mut cfg = PcpConfig::for_zone(frames, buddy.watermarks().low, ncpu as u64);
        if opts.pcp_batch > 0 {
            cfg.batch = opts.pcp_batch;
            cfg.high_min = cfg.high_min.max(4 * cfg.batch);
            cfg.high_max = cfg.high_max.max(cfg.high_min);
        }
        if opts.pcp_high_min > 0 {
            cfg.high_min = opts.pcp_high_min;
        }
        if opts.pcp_high_max > 0 {
            cfg.high_max = opts.pcp_high_max;
        }
        if cfg.high_min > cfg.high_max {
            return Err(format!(
                "{name}: pcp_high_min {} is above pcp_high_max {}",
                cfg.high_min, cfg.high_max
            ));
        }
        let qcap = opts.batch_queue.max(1);
        let owner = next_owner();
        let cpus = (0..ncpu)
            .map(|cpu| {
                Padded(CpuLists {
                    pcp: StatLock::ranked(
                        LockRank::frames_pcp(owner, cpu),
                        PcpSlot { pcp: Pcp::new(cfg), hits: 0 },
                    ),
                    queue: StatLock::ranked(
                        LockRank::frames_queue(owner, cpu),
                        QueueSlot { queue: BatchQueue::new(qcap), inserts: 0 },
                    ),
                    last_decay_ns: AtomicU64::new(monotonic_ns()),
                })
            })
            .collect();
        desc.extend((0..frames).map(|_| FrameDesc {
            state: AtomicU64::new(KERNEL),
            head: AtomicU64::new(0),
            _rest: [0; 6],
        }));
        let desc = desc.into_boxed_slice();
        Ok(FrameAllocator {
            name: name.to_string(),
            rule: if opts.batch_half_full { BatchRule::HalfFullTrylock } else { BatchRule::FullBlock },
            decay_ns: opts.pcp_decay_ms.saturating_mul(1_000_000),
            opts,
            zone: StatLock::ranked(LockRank::frames_zone(owner), buddy),
            below_high: AtomicBool::new(false),
            cpus,
            desc,
            c: Counters::default(),
        })
    }

    /// The allocator's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Frames in the zone.
    pub fn frames(&self) -> u64 {
        self.desc.len() as u64
    }

    /// The options it was built with.
    pub fn options(&self) -> &FrameOptions {
        &self.opts
    }

    fn cpu(&self) -> &CpuLists {
        &self.cpus[crate::sync::current_cpu() % self.cpus.len()]
    }

    fn check_order(&self, order: u32) -> Result<(), FrameError> {
        if order > MAX_ORDER {
            return Err(FrameError::BadRequest(format!("{}: order {order} is above {MAX_ORDER}", self.name)));
        }
        Ok(())
    }

    /// Take a block of `2^order` frames; returns its first frame.
    pub fn alloc(&self, order: u32) -> Result<u32, FrameError> {
        self.check_order(order)?;
        let pfn = match self.alloc_fast(order) {
            Some(p) => p,
            None => self.alloc_slow(order)?,
        };
        self.hand_out(pfn, order);
        Ok(pfn)
    }

    /// Fill `out` with `n` single frames under one list lock hold (the kernel's bulk array
    /// allocator). Returns how many were added; fewer than `n` only when the zone ran dry.
    pub fn alloc_bulk(&self, n: usize, out: &mut Vec<u32>) -> usize {
        let before = out.len();
        if self.opts.pcp {
            if let Some(mut p) = self.cpu().pcp.try_lock() {
                while out.len() - before < n {
                    match p.pop(0) {
                        Some(pfn) => {
                            p.hits += 1;
                            out.push(pfn);
                        }
                        None => {
                            if self.refill(&mut p, 0) == 0 {
                                break;
                            }
                        }
                    }
                }
            } else {
                self.c.trylock_failures.fetch_add(1, Relaxed);
            }
        }
        while out.len() - before < n {
            match self.alloc_slow(0) {
                Ok(p) => out.push(p),
                Err(_) => break,
            }
        }
        for &pfn in &out[before..] {
            self.hand_out(pfn, 0);
        }
        out.len() - before
    }

    fn hand_out(&self, pfn: u32, order: u32) {
        let d = &self.desc[pfn as usize];
        let retained = d.state.load(Relaxed) & COMPOUND;
        if order > 0 && retained == 0 {
            self.prep_compound(pfn, order);
        }
        d.state.store(USER | order as u64 | if order > 0 { COMPOUND } else { 0 }, Relaxed);
    }

    fn alloc_fast(&self, order: u32) -> Option<u32> {
        if !self.opts.pcp || pindex(order).is_none() {
            return None;
        }
        let cpu = self.cpu();
        let Some(mut p) = cpu.pcp.try_lock() else {
            self.c.trylock_failures.fetch_add(1, Relaxed);
            return None;
        };
        if p.is_empty_at(order) {
            self.refill(&mut p, order);
            self.maybe_decay(cpu, &mut p);
        }
        let got = p.pop(order);
        p.hits += got.is_some() as u64;
        got
    }

    /// Refill a list from the zone under one zone lock hold. Returns the blocks moved.
    fn refill(&self, p: &mut StatGuard<'_, PcpSlot>, order: u32) -> usize {
        let n = p.refill_blocks(order, self.below_high.load(Relaxed));
        let mut blocks = Vec::with_capacity(n as usize);
        {
            let mut z = self.zone.lock_at(&ZONE_REFILL);
            for _ in 0..n {
                match z.alloc(order).expect("order checked") {
                    Some(pfn) => blocks.push(pfn),
                    None => break,
                }
            }
            let marks = z.watermarks();
            if !z.watermark_ok(0, marks.high) {
                self.below_high.store(true, Relaxed);
            }
        }
        self.c.pcp_refills.fetch_add(1, Relaxed);
        self.c.refill_blocks.fetch_add(blocks.len() as u64, Relaxed);
        p.add_refilled(order, &blocks);
        blocks.len()
    }

    fn alloc_slow(&self, order: u32) -> Result<u32, FrameError> {
        for attempt in 0..2 {
            let got = {
                let mut z = self.zone.lock_at(&ZONE_ALLOC);
                let got = z.alloc(order).expect("order checked");
                if !z.watermark_ok(0, z.watermarks().high) {
                    self.below_high.store(true, Relaxed);
                }
                got
            };
            if let Some(pfn) = got {
                self.c.zone_allocs.fetch_add(1, Relaxed);
                return Ok(pfn);
            }
            if attempt == 0 {
                // Reclaim: everything cached on lists and in queues goes back to the zone.
                self.drain_all();
            }
        }
        self.c.alloc_failures.fetch_add(1, Relaxed);
        let held = self.stats().user_frames;
        let z = self.zone.lock();
        Err(FrameError::NoFrames(format!(
            "{}: no block of order {order} ({} frames, {} free in the zone, largest free order {:?}, {} held by callers)",
            self.name,
            self.frames(),
            z.free_frames(),
            (0..=MAX_ORDER).rev().find(|&o| z.nr_free()[o as usize] > 0),
            held
        )))
    }

    /// Give back a block that `alloc(order)` returned.
    pub fn free(&self, pfn: u32, order: u32) -> Result<(), FrameError> {
        self.check_order(order)?;
        let Some(d) = self.desc.get(pfn as usize) else {
            self.c.bad_frees.fetch_add(1, Relaxed);
            return Err(FrameError::NotHeld(pfn));
        };
        let want = USER | order as u64 | if order > 0 { COMPOUND } else { 0 };
        if d.state.compare_exchange(want, KERNEL | (want & COMPOUND), Relaxed, Relaxed).is_err() {
            self.c.bad_frees.fetch_add(1, Relaxed);
            return Err(FrameError::NotHeld(pfn));
        }
        if self.opts.pcp && pindex(order).is_some() {
            let cpu = self.cpu();
            if let Some(mut p) = cpu.pcp.try_lock() {
                if !self.opts.compound_retention {
                    self.dismantle(pfn, order);
                }
                let out = p.push(pfn, order, self.below_high.load(Relaxed));
                if out.free_high {
                    self.c.free_high.fetch_add(1, Relaxed);
                }
                if out.drain_frames > 0 {
                    let blocks = p.take_drain(out.drain_frames, order);
                    self.drain_to_zone(&blocks, &ZONE_DRAIN);
                    self.maybe_decay(cpu, &mut p);
                }
                return Ok(());
            }
            self.c.trylock_failures.fetch_add(1, Relaxed);
        }
        self.dismantle(pfn, order);
        self.free_to_zone(pfn, order);
        Ok(())
    }

    /// Blocks leaving the per-CPU lists for the zone: one zone lock hold.
    fn drain_to_zone(&self, blocks: &[(u32, u32)], site: &'static LockSite) {
        for &(pfn, o) in blocks {
            self.dismantle(pfn, o);
        }
        {
            let mut z = self.zone.lock_at(site);
            for &(pfn, o) in blocks {
                z.free(pfn, o).expect("a cached block is allocated in the buddy");
            }
            if z.watermark_ok(0, z.watermarks().high) {
                self.below_high.store(false, Relaxed);
            }
        }
        self.c.pcp_drains.fetch_add(1, Relaxed);
        self.c.drain_blocks.fetch_add(blocks.len() as u64, Relaxed);
    }

    /// One block for the zone, through this CPU's batch queue when queues are on.
    fn free_to_zone(&self, pfn: u32, order: u32) {
        if self.opts.batch_queue == 0 {
            self.zone.lock_at(&ZONE_FREE).free(pfn, order).expect("a held block is allocated in the buddy");
            self.c.zone_frees.fetch_add(1, Relaxed);
            return;
        }
        let mut q = self.cpu().queue.lock();
        let (slots, item) = match q.insert((pfn, order)) {
            Insert::Queued(s) => (s, None),
            Insert::Full(x) => (0, Some(x)),
        };
        q.inserts += item.is_none() as u64;
        match self.rule.after_insert(slots, q.capacity()) {
            Flush::No => {}
            Flush::Try => match self.zone.try_lock() {
                Some(z) => self.flush(&mut q, z, None),
                None => {
                    self.c.queue_try_failures.fetch_add(1, Relaxed);
                }
            },
            Flush::Must => {
                self.c.queue_blocking_flushes.fetch_add(1, Relaxed);
                let z = self.zone.lock_at(&ZONE_FLUSH);
                self.flush(&mut q, z, item);
            }
        }
    }

    fn flush(&self, q: &mut BatchQueue<(u32, u32)>, mut z: StatGuard<'_, Buddy>, extra: Option<(u32, u32)>) {
        {
            for (pfn, o) in q.drain().chain(extra) {
                z.free(pfn, o).expect("a queued block is allocated in the buddy");
            }
            if z.watermark_ok(0, z.watermarks().high) {
                self.below_high.store(false, Relaxed);
            }
            drop(z);
        }
        self.c.queue_flushes.fetch_add(1, Relaxed);
    }

    fn maybe_decay(&self, cpu: &CpuLists, p: &mut StatGuard<'_, PcpSlot>) {
        if self.decay_ns == 0 {
            return;
        }
        let last = cpu.last_decay_ns.load(Relaxed);
        let now = monotonic_ns();
        if now.saturating_sub(last) < self.decay_ns {
            return;
        }
        cpu.last_decay_ns.store(now, Relaxed);
        self.c.pcp_decays.fetch_add(1, Relaxed);
        let n = p.decay();
        if n > 0 {
            let blocks = p.take_drain(n, 0);
            self.drain_to_zone(&blocks, &ZONE_DRAIN);
        }
    }

    /// Return everything on every CPU's list and queue to the zone (remote drain).
    pub fn drain_all(&self) {
        for cpu in self.cpus.iter() {
            {
                let mut p = cpu.pcp.lock();
                let blocks = p.take_all();
                if !blocks.is_empty() {
                    self.drain_to_zone(&blocks, &ZONE_DRAIN);
                }
            }
            let mut q = cpu.queue.lock();
            if !q.is_empty() {
                let z = self.zone.lock_at(&ZONE_FLUSH);
                self.flush(&mut q, z, None);
            }
        }
    }

    /// Memory is short: every list drops `high` to its floor and drains the excess.
    pub fn shrink_lists(&self) {
        for cpu in self.cpus.iter() {
            let mut p = cpu.pcp.lock();
            let n = p.shrink();
            if n > 0 {
                let blocks = p.take_drain(n, 0);
                self.drain_to_zone(&blocks, &ZONE_DRAIN);
            }
        }
    }

    fn timed<R>(&self, f: impl FnOnce() -> R) -> R {
        if !crate::sync::lock_stats::timing() {
            return f();
        }
        let t0 = monotonic_ns();
        let r = f();
        self.c.compound_ns.fetch_add(monotonic_ns().saturating_sub(t0), Relaxed);
        r
    }

    fn prep_compound(&self, pfn: u32, order: u32) {
        self.timed(|| {
            for t in &self.desc[pfn as usize + 1..pfn as usize + (1 << order)] {
                t.head.store(pfn as u64, Relaxed);
                t.state.store(TAIL, Relaxed);
            }
        });
        self.c.compound_preps.fetch_add(1, Relaxed);
    }

    fn dismantle(&self, pfn: u32, order: u32) {
        let d = &self.desc[pfn as usize];
        if order == 0 || d.state.load(Relaxed) & COMPOUND == 0 {
            return;
        }
        self.timed(|| {
            for t in &self.desc[pfn as usize + 1..pfn as usize + (1 << order)] {
                t.head.store(0, Relaxed);
                t.state.store(KERNEL, Relaxed);
            }
        });
        d.state.store(KERNEL, Relaxed);
        self.c.compound_dismantles.fetch_add(1, Relaxed);
    }
}

fn queued(q: &BatchQueue<(u32, u32)>) -> u64 {
    q.iter().map(|&(_, o)| 1u64 << o).sum()
}
