//! `FixedPool`: preallocated ranges of one fixed size with a per-CPU cache (FreeBSD's exec-args
//! KVA cache, "Opportunistically cache KVA for execve arguments").
//!
//! Owns: `slots` areas of `slot_bytes` each, allocated from a [`VmSpace`] when the pool is made
//! and returned to it only when the pool is dropped; the [`FixedCache`] that hands them out;
//! the release policy. Free slots keep their memory (a reused slot costs no syscall and no page
//! fault) until a low-memory event, when the pool releases the memory of every free slot in
//! one batch (with the space's `release` advice); a slot held during the event is released
//! when it is put back (the generation scheme). Optionally every `put` releases the slot's
//! memory (`put_release = free | dontneed`), which is what FreeBSD did before it moved to
//! releasing on low memory only; both policies can be measured (`vmarena fixed`).
//!
//! The slots are areas of kind `FixedSlot`: `vfree`, `vrealloc` and `vunmap` refuse them
//! (`WrongKind`), so no slot can have a second owner.
//!
//! Slot `i` is the `i`-th area in address order, so a pointer maps to its slot by binary search.
//! A `put` of anything that is not the start of a slot held by a caller is refused and nothing
//! changes.
//!
//! Dropping the pool returns every free slot to the space. A slot still held then stays
//! allocated in the space (the pool cannot know when its holder is done with it); the C ABI's
//! destroy call refuses instead.

use crate::space::{VmError, VmSpace};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use vmarena_engine::table::OptionValue;
use vmarena_engine::{options_table, stats_table, FixedCache, FixedStats};
use vmarena_platform::Advice;

/// When a fixed pool releases the memory of a slot: the table's `put_release` option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutRelease {
    /// Only on a low-memory event (FreeBSD since 2017).
    Pressure,
    /// On every put, with `MADV_FREE` (FreeBSD's first version).
    Free,
    /// On every put, with `MADV_DONTNEED`.
    DontNeed,
}

impl OptionValue for PutRelease {
    fn parse_option(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "pressure" => Ok(PutRelease::Pressure),
            "free" | "madv_free" => Ok(PutRelease::Free),
            "dontneed" | "madv_dontneed" => Ok(PutRelease::DontNeed),
            o => Err(format!("'{o}' is not a put release policy (pressure, free or dontneed)")),
        }
    }
}

options_table! {
    /// How a [`FixedPool`] is built.
    pub struct FixedOptions {
        /// Size of every slot (rounded up to pages).
        slot_bytes: u64 = 256 << 10, "bytes", "VMARENA_FIXED_SLOT_BYTES";
        /// Number of slots; 0 means 8 per CPU, as FreeBSD sizes its exec map on 64-bit.
        slots: u64 = 0, "slots", "VMARENA_FIXED_SLOTS";
        /// When slot memory is released: pressure (low-memory events only), free or dontneed (every put).
        put_release: PutRelease = PutRelease::Pressure, "pressure|free|dontneed", "VMARENA_FIXED_PUT_RELEASE";
    }
}

impl FixedOptions {
    /// The slot count `slots` stands for: itself, or 8 per online CPU when 0.
    pub fn slot_count(&self) -> u64 {
        match self.slots {
            0 => 8 * vmarena_platform::cpu::count() as u64,
            n => n,
        }
    }
}

stats_table! {
    /// Figures of a fixed pool beyond its cache's.
    pub struct FixedPoolStats {
        /// Bytes of one slot.
        slot_bytes, "bytes";
        /// madvise/process_madvise calls the pool made.
        release_calls, "calls";
        /// Resident bytes of all slots (mincore), when asked for.
        resident_bytes, "bytes";
    }
}

struct Inner {
    name: String,
    cache: FixedCache,
    /// Slot addresses in increasing order.
    addrs: Box<[usize]>,
    slot_bytes: usize,
    put_release: PutRelease,
    pressure_advice: Advice,
    release_calls: AtomicU64,
}

impl Inner {
    fn release(&self, slots: &[u32], advice: Advice) {
        let ranges: Vec<_> = slots.iter().map(|&s| (self.addrs[s as usize], self.slot_bytes)).collect();
        let calls = vmarena_platform::release::release(&ranges, advice);
        self.release_calls.fetch_add(calls as u64, Relaxed);
    }

    fn slot_of(&self, p: usize) -> Option<u32> {
        self.addrs.binary_search(&p).ok().map(|i| i as u32)
    }
}

impl vmarena_engine::ForkLocks for Inner {
    fn lock_for_fork(&self) -> Vec<Box<dyn vmarena_engine::sync::fork::Held + '_>> {
        vmarena_engine::ForkLocks::lock_for_fork(&self.cache)
    }
}

impl vmarena_engine::pressure::Reclaim for Inner {
    fn reclaim_name(&self) -> String {
        format!("fixed pool {}", self.name)
    }

    fn reclaim(&self) -> u64 {
        let page = vmarena_platform::page_size();
        let n = self.cache.reclaim(|slots| self.release(slots, self.pressure_advice));
        (n * self.slot_bytes / page) as u64
    }
}

/// A pool of preallocated fixed-size slots. All methods take `&self` and are thread safe.
pub struct FixedPool<'s> {
    space: &'s VmSpace,
    inner: Arc<Inner>,
}

impl<'s> FixedPool<'s> {
    /// A pool of `opts.slots` slots of `opts.slot_bytes` each, allocated from `space` now.
    /// Fails (allocating nothing) on a slot size of 0 or one that overflows, on more than
    /// 2^32 - 2 slots, or when the space has no room.
    pub fn new(space: &'s VmSpace, name: &str, opts: &FixedOptions) -> Result<FixedPool<'s>, VmError> {
        crate::fork::register();
        let slot_bytes = usize::try_from(opts.slot_bytes).map_err(|_| VmError::Overflow(usize::MAX))?;
        let page = vmarena_platform::page_size();
        if slot_bytes == 0 {
            return Err(VmError::ZeroSize);
        }
        let rounded = slot_bytes.checked_next_multiple_of(page).ok_or(VmError::Overflow(slot_bytes))?;
        let slots = opts.slot_count();
        let (lo, hi) = space.bounds();
        let guard_bytes = space.options().guard_pages as u128 * page as u128;
        if slots as u128 * (rounded as u128 + guard_bytes) > (hi - lo) as u128 {
            return Err(VmError::NoSpace(format!(
                "fixed pool {name}: {slots} slots of {rounded} bytes (and their guards) exceed the {} space ({} MiB)",
                space.name(),
                (hi - lo) >> 20
            )));
        }
        let cache =
            FixedCache::new(u32::try_from(slots).unwrap_or(u32::MAX), vmarena_platform::cpu::possible())
                .map_err(VmError::Invalid)?;
        let mut addrs = Vec::new();
        addrs.try_reserve_exact(slots as usize).map_err(|_| {
            VmError::NoSpace(format!("fixed pool {name}: cannot allocate the addresses of {slots} slots"))
        })?;
        for _ in 0..slots {
            match space.alloc_fixed_slot(rounded) {
                Ok(p) => addrs.push(p.as_ptr() as usize),
                Err(e) => {
                    for a in addrs {
                        space.free_fixed_slot(a as *mut u8).expect("allocated above");
                    }
                    return Err(e);
                }
            }
        }
        addrs.sort_unstable();
        let inner = Arc::new(Inner {
            name: name.to_string(),
            cache,
            addrs: addrs.into(),
            slot_bytes: rounded,
            put_release: opts.put_release,
            pressure_advice: space.options().release.0,
            release_calls: AtomicU64::new(0),
        });
        let r: Arc<dyn vmarena_engine::pressure::Reclaim> = inner.clone();
        vmarena_engine::pressure::register(Arc::downgrade(&r));
        let f: Arc<dyn vmarena_engine::ForkLocks> = inner.clone();
        vmarena_engine::sync::fork::register(
            vmarena_engine::sync::fork::Rank::FixedCache,
            Arc::downgrade(&f),
        );
        crate::pressure::start_monitor();
        Ok(FixedPool { space, inner })
    }

    fn ptr(&self, slot: u32) -> NonNull<u8> {
        NonNull::new(self.inner.addrs[slot as usize] as *mut u8).expect("slots are areas of a space")
    }

    /// Bytes of every slot (a whole number of pages).
    pub fn slot_bytes(&self) -> usize {
        self.inner.slot_bytes
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.inner.addrs.len()
    }

    /// Take a slot: this CPU's cached one (one atomic swap), else one from the global list,
    /// else sleep until one is put back. Contents are what the last holder left, or zero.
    pub fn get(&self) -> NonNull<u8> {
        self.ptr(self.inner.cache.get().0)
    }

    /// Take a slot if one is free now.
    pub fn try_get(&self) -> Option<NonNull<u8>> {
        self.inner.cache.try_get().map(|s| self.ptr(s.0))
    }

    /// Take a slot, waiting at most `timeout`.
    pub fn get_timeout(&self, timeout: Duration) -> Option<NonNull<u8>> {
        self.inner.cache.get_timeout(timeout).map(|s| self.ptr(s.0))
    }

    /// Give back a slot taken from this pool. Anything else (a foreign or interior pointer, a
    /// slot put twice) is refused and nothing changes.
    pub fn put(&self, p: *mut u8) -> Result<(), VmError> {
        let i = &*self.inner;
        let slot = i.slot_of(p as usize).ok_or(VmError::NotHeld(p as usize))?;
        let (always, advice) = match i.put_release {
            PutRelease::Pressure => (false, i.pressure_advice),
            PutRelease::Free => (true, Advice::Free),
            PutRelease::DontNeed => (true, Advice::DontNeed),
        };
        i.cache.put(slot, always, |s| i.release(&[s], advice)).map_err(|_| VmError::NotHeld(p as usize))
    }

    /// Release the memory of every free slot now (what a low-memory event does to this pool).
    /// Returns the pages released.
    pub fn reclaim(&self) -> u64 {
        vmarena_engine::pressure::Reclaim::reclaim(&*self.inner)
    }

    /// The cache's figures.
    pub fn cache_stats(&self) -> FixedStats {
        self.inner.cache.stats()
    }

    /// The pool's own figures; `resident` adds a `mincore` walk of the slots.
    pub fn stats(&self, resident: bool) -> FixedPoolStats {
        FixedPoolStats {
            slot_bytes: self.inner.slot_bytes as u64,
            release_calls: self.inner.release_calls.load(Relaxed),
            resident_bytes: if resident { self.resident_bytes() } else { 0 },
        }
    }

    /// Resident bytes of all slots (`mincore`).
    pub fn resident_bytes(&self) -> u64 {
        self.inner
            .addrs
            .iter()
            .map(|&a| vmarena_platform::process::resident_bytes(a, self.inner.slot_bytes))
            .sum()
    }

    /// Check that every slot is exactly one of held, cached or listed.
    pub fn check(&self) -> Result<(), String> {
        self.inner.cache.check()
    }
}

impl Drop for FixedPool<'_> {
    fn drop(&mut self) {
        let (free, _held) = self.inner.cache.close();
        for s in free {
            let _ = self.space.free_fixed_slot(self.inner.addrs[s as usize] as *mut u8);
        }
    }
}
