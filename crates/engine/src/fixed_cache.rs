//! `FixedCache`: the hand-off of preallocated fixed-size slots between threads, as FreeBSD's
//! exec-args KVA cache does it (one entry per CPU, a global free list, sleeping when empty).
//!
//! Slots are integers `0..slots`; what they stand for (ranges of a space) is the front end's
//! business. The cache only decides who owns which slot and when a slot's memory must be
//! released before it is handed out again.
//!
//! Owns:
//! - one entry per CPU (`Padded`, one line each): the id of a parked slot or [`EMPTY`], and
//!   that CPU's hit and park counters;
//! - the global free list and its counters, under one mutex, with a condition variable that
//!   blocked getters sleep on;
//! - per slot, whether a caller holds it and the release generation it was last released in.
//!
//! Paths:
//! - `get`: swap this CPU's entry with `EMPTY` (one atomic swap). Else, under the list lock,
//!   pop the list. Else register as a waiter, look at every CPU entry (steal), and sleep until
//!   a `put` wakes us.
//! - `put`: compare-and-swap the slot into this CPU's entry if it is empty, then wake waiters
//!   if there are any. Else push it on the list under the lock and wake one waiter.
//!
//! The waiter count closes a gap FreeBSD leaves open (a getter asleep while free slots sit in
//! other CPUs' entries): a getter increments `waiters` and then scans the entries; a putter
//! parks and then reads `waiters`. Both sides use sequentially consistent operations, so one
//! of them sees the other: the scan finds the slot, or the putter wakes the sleeper (it takes
//! the list lock to do so, and the getter holds that lock from its increment until it sleeps).
//! The loom model checks this hand-off (`tests/loom.rs`).
//!
//! Release generations (FreeBSD's `exec_args_gen`): [`FixedCache::reclaim`] bumps the global
//! generation, takes every free slot (list and CPU entries), has the front end release their
//! memory in one batch, and puts them back. A slot held by a caller during a reclaim is released
//! when it is next put, because its generation is then stale. Ownership makes this safe: only
//! the owner of a slot (its holder, or the reclaim that took it) reads or writes its generation
//! and its memory.

use crate::stats_table;
use crate::sync::padded::Padded;
use crate::sync::{
    current_cpu, store_load_fence, AtomicBool, AtomicU32, AtomicU64, Condvar, Mutex, Ordering,
};
use std::fmt;
use std::time::{Duration, Instant};

/// The value of an empty CPU entry.
pub const EMPTY: u32 = u32::MAX;

/// Why a `put` was refused. Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FixedError {
    /// The slot id is not below the slot count.
    NoSuchSlot(u32),
    /// The slot is not held by a caller (never taken, or put twice).
    NotHeld(u32),
}

impl fmt::Display for FixedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FixedError::NoSuchSlot(s) => write!(f, "slot {s} does not exist"),
            FixedError::NotHeld(s) => write!(f, "slot {s} is not held (never taken, or put twice)"),
        }
    }
}

impl std::error::Error for FixedError {}

struct CpuEntry {
    slot: AtomicU32,
    hits: AtomicU64,
    parks: AtomicU64,
}

#[derive(Default)]
struct ListState {
    free: Vec<u32>,
    waiters: u32,
    closed: bool,
    pops: u64,
    pushes: u64,
    steals: u64,
    sleeps: u64,
    timeouts: u64,
    empty_tries: u64,
}

/// Which way a `get` found its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetPath {
    /// This CPU's entry (one atomic swap).
    Cache,
    /// The global list.
    List,
    /// Another CPU's entry, taken by a getter that found the list empty.
    Steal,
}

stats_table! {
    /// Figures of a fixed cache. CPU-entry counters are exact (atomic adds on the CPU's line).
    pub struct FixedStats {
        /// Slots in the cache.
        slots, "slots";
        /// Slots held by callers now.
        held, "slots";
        /// Gets served from this CPU's entry.
        cache_hits, "gets";
        /// Gets served from the global list.
        list_pops, "gets";
        /// Gets that took a slot parked in another CPU's entry.
        steals, "gets";
        /// Times a getter went to sleep on an empty list.
        sleeps, "sleeps";
        /// Timed gets that gave up.
        timeouts, "gets";
        /// Non-blocking gets that found nothing.
        empty_tries, "gets";
        /// Puts parked in this CPU's entry.
        cache_parks, "puts";
        /// Puts pushed on the global list.
        list_pushes, "puts";
        /// Slots whose memory was released (on put or by a reclaim).
        releases, "slots";
        /// Reclaims (low-memory events) handled.
        reclaims, "events";
    }
}

/// The slot hand-off. All methods take `&self` and are thread safe.
pub struct FixedCache {
    cpus: Box<[Padded<CpuEntry>]>,
    list: Mutex<ListState>,
    wake: Condvar,
    /// Getters registered as waiting; read by putters that parked (see the module doc).
    waiters: AtomicU32,
    held: Box<[AtomicBool]>,
    gen: Box<[AtomicU64]>,
    global_gen: AtomicU64,
    releases: AtomicU64,
    reclaims: AtomicU64,
    /// Serialises reclaims with each other and with `close`.
    reclaim_lock: Mutex<()>,
}

#[cfg(not(loom))]
impl crate::sync::fork::ForkLocks for FixedCache {
    /// The reclaim mutex, then the list mutex (the order of `fork`).
    fn lock_for_fork(&self) -> Vec<Box<dyn crate::sync::fork::Held + '_>> {
        let r = self.reclaim_lock.lock().unwrap_or_else(|p| p.into_inner());
        let l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        vec![Box::new(r), Box::new(l)]
    }
}

impl FixedCache {
    /// A cache of `slots` slots (all free, on the list) with `cpus` CPU entries.
    pub fn new(slots: u32, cpus: usize) -> Result<FixedCache, String> {
        if slots == 0 || slots == EMPTY {
            return Err(format!("slot count {slots} is out of range (1 to {})", EMPTY - 1));
        }
        let cpus = cpus.max(1);
        // The slot count comes from a caller: the per-slot tables are allocated fallibly.
        let n = slots as usize;
        let nomem = |_| format!("cannot allocate the tables of {slots} slots");
        let mut free = Vec::new();
        free.try_reserve_exact(n).map_err(nomem)?;
        free.extend((0..slots).rev());
        let mut held = Vec::new();
        held.try_reserve_exact(n).map_err(nomem)?;
        held.extend((0..slots).map(|_| AtomicBool::new(false)));
        let mut gen = Vec::new();
        gen.try_reserve_exact(n).map_err(nomem)?;
        gen.extend((0..slots).map(|_| AtomicU64::new(0)));
        Ok(FixedCache {
            cpus: (0..cpus)
                .map(|_| {
                    Padded(CpuEntry {
                        slot: AtomicU32::new(EMPTY),
                        hits: AtomicU64::new(0),
                        parks: AtomicU64::new(0),
                    })
                })
                .collect(),
            // Popped from the end: slot 0 first.
            list: Mutex::new(ListState { free, ..Default::default() }),
            wake: Condvar::new(),
            waiters: AtomicU32::new(0),
            held: held.into(),
            gen: gen.into(),
            global_gen: AtomicU64::new(0),
            releases: AtomicU64::new(0),
            reclaims: AtomicU64::new(0),
            reclaim_lock: Mutex::new(()),
        })
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.held.len() as u32
    }

    #[inline]
    fn entry(&self) -> &CpuEntry {
        &self.cpus[current_cpu() % self.cpus.len()]
    }

    #[inline]
    fn take(&self, slot: u32, path: GetPath) -> (u32, GetPath) {
        let was = self.held[slot as usize].swap(true, Ordering::Relaxed);
        debug_assert!(!was, "slot {slot} handed out twice");
        (slot, path)
    }

    /// Take a free slot without blocking, or `None` when every slot is held.
    pub fn try_get(&self) -> Option<(u32, GetPath)> {
        self.get_inner(Wait::Never)
    }

    /// Take a free slot, sleeping until one is put back if all are held.
    pub fn get(&self) -> (u32, GetPath) {
        self.get_inner(Wait::Forever).expect("an unbounded wait returns a slot")
    }

    /// Take a free slot, waiting at most `timeout` for one.
    pub fn get_timeout(&self, timeout: Duration) -> Option<(u32, GetPath)> {
        self.get_inner(Wait::Until(Instant::now() + timeout))
    }

    fn get_inner(&self, wait: Wait) -> Option<(u32, GetPath)> {
        let e = self.entry();
        let s = e.slot.swap(EMPTY, Ordering::Acquire);
        if s != EMPTY {
            e.hits.fetch_add(1, Ordering::Relaxed);
            return Some(self.take(s, GetPath::Cache));
        }
        let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(s) = l.free.pop() {
                l.pops += 1;
                return Some(self.take(s, GetPath::List));
            }
            self.waiters.fetch_add(1, Ordering::SeqCst);
            l.waiters += 1;
            store_load_fence();
            if let Some(s) = self.steal() {
                self.waiters.fetch_sub(1, Ordering::SeqCst);
                l.waiters -= 1;
                l.steals += 1;
                return Some(self.take(s, GetPath::Steal));
            }
            let deadline = match wait {
                Wait::Never => None,
                Wait::Forever => Some(None),
                Wait::Until(t) => {
                    let now = Instant::now();
                    (now < t).then(|| Some(t - now))
                }
            };
            let Some(timeout) = deadline else {
                self.waiters.fetch_sub(1, Ordering::SeqCst);
                l.waiters -= 1;
                if matches!(wait, Wait::Never) {
                    l.empty_tries += 1;
                } else {
                    l.timeouts += 1;
                }
                return None;
            };
            l.sleeps += 1;
            l = match timeout {
                None => self.wake.wait(l).unwrap_or_else(|p| p.into_inner()),
                Some(d) => self.wake.wait_timeout(l, d).unwrap_or_else(|p| p.into_inner()).0,
            };
            self.waiters.fetch_sub(1, Ordering::SeqCst);
            l.waiters -= 1;
        }
    }

    /// Take a slot parked in any CPU entry (the caller is a registered waiter).
    fn steal(&self) -> Option<u32> {
        self.cpus.iter().find_map(|e| {
            if e.slot.load(Ordering::SeqCst) == EMPTY {
                return None;
            }
            let s = e.slot.swap(EMPTY, Ordering::SeqCst);
            (s != EMPTY).then_some(s)
        })
    }

    /// Give a held slot back. Before the slot becomes visible to other threads, `release` is
    /// called with it if `always` is set or a reclaim happened since its memory was last
    /// released; the caller releases the slot's memory there.
    pub fn put(&self, slot: u32, always: bool, release: impl FnOnce(u32)) -> Result<(), FixedError> {
        let held = self.held.get(slot as usize).ok_or(FixedError::NoSuchSlot(slot))?;
        if !held.swap(false, Ordering::Relaxed) {
            return Err(FixedError::NotHeld(slot));
        }
        let g = self.global_gen.load(Ordering::Acquire);
        if always || self.gen[slot as usize].load(Ordering::Relaxed) != g {
            release(slot);
            self.gen[slot as usize].store(g, Ordering::Relaxed);
            self.releases.fetch_add(1, Ordering::Relaxed);
        }
        let e = self.entry();
        if e.slot.compare_exchange(EMPTY, slot, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
            e.parks.fetch_add(1, Ordering::Relaxed);
            store_load_fence();
            if self.waiters.load(Ordering::SeqCst) > 0 {
                let _l = self.list.lock().unwrap_or_else(|p| p.into_inner());
                self.wake.notify_all();
            }
            return Ok(());
        }
        let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        l.free.push(slot);
        l.pushes += 1;
        if l.waiters > 0 {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// A low-memory event: take every free slot, call `release` once with all of them (the
    /// caller releases their memory in one batch), put them back on the list. Held slots are
    /// released at their next put. Returns the number of slots released now.
    pub fn reclaim(&self, release: impl FnOnce(&[u32])) -> usize {
        let _r = self.reclaim_lock.lock().unwrap_or_else(|p| p.into_inner());
        let g = self.global_gen.fetch_add(1, Ordering::AcqRel) + 1;
        let mut taken = {
            let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
            if l.closed {
                return 0;
            }
            std::mem::take(&mut l.free)
        };
        taken.extend(self.cpus.iter().map(|e| e.slot.swap(EMPTY, Ordering::SeqCst)).filter(|&s| s != EMPTY));
        self.reclaims.fetch_add(1, Ordering::Relaxed);
        if taken.is_empty() {
            return 0;
        }
        release(&taken);
        for &s in &taken {
            self.gen[s as usize].store(g, Ordering::Relaxed);
        }
        self.releases.fetch_add(taken.len() as u64, Ordering::Relaxed);
        let n = taken.len();
        let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        l.free.extend(taken);
        l.pushes += n as u64;
        if l.waiters > 0 {
            self.wake.notify_all();
        }
        n
    }

    /// Shut the cache: take every free slot for good and return them, with the ids of the
    /// slots still held by callers. Later gets find nothing (or block), reclaims do nothing.
    pub fn close(&self) -> (Vec<u32>, Vec<u32>) {
        let _r = self.reclaim_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut free = {
            let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
            l.closed = true;
            std::mem::take(&mut l.free)
        };
        free.extend(self.cpus.iter().map(|e| e.slot.swap(EMPTY, Ordering::SeqCst)).filter(|&s| s != EMPTY));
        let held = (0..self.slots()).filter(|&s| self.held[s as usize].load(Ordering::Relaxed)).collect();
        (free, held)
    }

    /// Figures as of now.
    pub fn stats(&self) -> FixedStats {
        let l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        FixedStats {
            slots: self.slots() as u64,
            held: self.held.iter().filter(|h| h.load(Ordering::Relaxed)).count() as u64,
            cache_hits: self.cpus.iter().map(|e| e.hits.load(Ordering::Relaxed)).sum(),
            list_pops: l.pops,
            steals: l.steals,
            sleeps: l.sleeps,
            timeouts: l.timeouts,
            empty_tries: l.empty_tries,
            cache_parks: self.cpus.iter().map(|e| e.parks.load(Ordering::Relaxed)).sum(),
            list_pushes: l.pushes,
            releases: self.releases.load(Ordering::Relaxed),
            reclaims: self.reclaims.load(Ordering::Relaxed),
        }
    }

    /// Check that every slot is exactly one of: held, on the list, in one CPU entry. Call it
    /// when no other thread uses the cache.
    pub fn check(&self) -> Result<(), String> {
        let l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = vec![0u32; self.held.len()];
        for &s in &l.free {
            *seen.get_mut(s as usize).ok_or(format!("list holds slot {s} out of range"))? += 1;
        }
        for e in self.cpus.iter() {
            let s = e.slot.load(Ordering::Relaxed);
            if s != EMPTY {
                *seen.get_mut(s as usize).ok_or(format!("a CPU entry holds slot {s} out of range"))? += 1;
            }
        }
        for (s, n) in seen.iter().enumerate() {
            let held = self.held[s].load(Ordering::Relaxed) as u32;
            if n + held != 1 && !(l.closed && n + held == 0) {
                return Err(format!("slot {s}: {n} free copies, held {held}"));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Wait {
    Never,
    Forever,
    Until(Instant),
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn cache_then_list_then_empty() {
        let c = FixedCache::new(3, 1).unwrap();
        let (a, pa) = c.try_get().unwrap();
        let (b, _) = c.try_get().unwrap();
        let (d, _) = c.try_get().unwrap();
        assert_eq!((a, pa), (0, GetPath::List));
        assert_eq!(c.try_get(), None);
        c.put(b, false, |_| panic!("no reclaim happened")).unwrap();
        assert_eq!(c.try_get(), Some((b, GetPath::Cache)), "a put parks in the CPU entry");
        c.put(a, false, |_| {}).unwrap();
        c.put(d, false, |_| {}).unwrap();
        assert_eq!(c.put(d, false, |_| {}), Err(FixedError::NotHeld(d)));
        assert_eq!(c.put(7, false, |_| {}), Err(FixedError::NoSuchSlot(7)));
        c.check().unwrap();
        let st = c.stats();
        assert_eq!(
            (st.cache_hits, st.list_pops, st.empty_tries, st.cache_parks, st.list_pushes),
            (1, 3, 1, 2, 1)
        );
        assert!(FixedCache::new(0, 1).is_err());
    }

    #[test]
    fn reclaim_releases_free_slots_now_and_held_slots_at_put() {
        let c = FixedCache::new(4, 2).unwrap();
        let (held, _) = c.get();
        let mut released = Vec::new();
        assert_eq!(c.reclaim(|s| released.extend_from_slice(s)), 3);
        released.sort();
        assert_eq!(released, vec![1, 2, 3]);
        let mut at_put = None;
        c.put(held, false, |s| at_put = Some(s)).unwrap();
        assert_eq!(at_put, Some(held), "a slot held during the reclaim is released when put");
        let (again, _) = c.get();
        c.put(again, false, |_| panic!("generation is current")).unwrap();
        let mut n = 0;
        c.put(c.get().0, true, |_| n += 1).unwrap();
        assert_eq!(n, 1, "always releases on every put");
        c.check().unwrap();
        assert_eq!(c.stats().releases, 5);
    }

    #[test]
    fn timed_get_gives_up_and_blocked_get_is_woken() {
        let c = Arc::new(FixedCache::new(1, 1).unwrap());
        let (s, _) = c.get();
        let t0 = Instant::now();
        assert_eq!(c.get_timeout(Duration::from_millis(50)), None);
        assert!(t0.elapsed() >= Duration::from_millis(50));
        let c2 = c.clone();
        let waiter = std::thread::spawn(move || c2.get().0);
        while c.stats().sleeps < 2 {
            std::thread::yield_now();
        }
        c.put(s, false, |_| {}).unwrap();
        assert_eq!(waiter.join().unwrap(), s);
        let st = c.stats();
        assert_eq!(st.timeouts, 1);
        assert!(st.steals + st.list_pops >= 2, "{st:?}");
    }

    #[test]
    fn close_reports_held_slots() {
        let c = FixedCache::new(3, 2).unwrap();
        let (h, _) = c.get();
        let (mut free, held) = c.close();
        free.sort();
        assert_eq!((free, held), (vec![1, 2], vec![h]));
        assert_eq!(c.reclaim(|_| panic!("closed")), 0);
        assert_eq!(c.try_get(), None);
    }
}
