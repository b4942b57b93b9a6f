//! `Rcu`: deferred freeing with grace periods (the kernel's `kvfree_rcu`).
//!
//! Owns: the areas retired by `kvfree_rcu*` until a grace period has passed, and the readers
//! registered with the domain. Does not own: the memory; a domain frees through the function it
//! was built with (`Rcu::new` for a `VmSpace`, `Rcu::with_free` for any allocator, which the
//! lab uses to give the peers the same mechanism).
//!
//! A reader that may still hold pointers to areas other threads retire brackets its accesses
//! with [`Reader::read_lock`]. An area retired with [`Rcu::kvfree_rcu`] is freed only after every
//! reader that was inside a read-side section when it was retired has left it. Epochs implement
//! this (epoch-based reclamation):
//!
//! ```text
//!  epoch:        2          3            4
//!  reader A:   [pin@2 ............ unpin]
//!  retire x:        tag 2
//!  reader B:                 [pin@3 .. unpin]
//!  x is freed once no reader is pinned at an epoch <= 2 (A has left): B cannot have seen x,
//!  it pinned after x was retired (and so unlinked by the caller).
//! ```
//!
//! - `read_lock` stores the current epoch in the reader's slot (sequentially consistent, so
//!   that a reclaimer either sees the pin or the reader sees the unlink);
//! - `poll` advances the epoch when every pinned reader has seen the current one, then frees
//!   every retired area whose tag is below the oldest pinned epoch (all of them when nobody is
//!   pinned);
//! - retired areas wait in per-CPU shards (the kernel's per-CPU `kfree_rcu_cpu`): a thread
//!   retires into the shard of the CPU it runs on, and every [`POLL_EVERY`] retirements into a
//!   shard it polls that shard alone, so the areas a thread retires are mostly freed by that
//!   thread, into its own thread cache, and threads on different CPUs share no lock;
//!   [`Rcu::poll`] polls every shard;
//! - the one-argument form waits for a grace period (`synchronize`) when [`BACKLOG_MAX`] areas
//!   are pending in its shard, as `kvfree_rcu_mightsleep` may sleep.
//!
//! The two-argument form (`kvfree_rcu_embedded`) needs no memory of its own: like the kernel's
//! `rcu_head` inside the object, it links the area through its first 16 bytes.
//!
//! Locks: each shard's mutex guards its retired lists (one at a time, never nested); the
//! `readers` mutex guards the reader list and is never held with a shard's; reader slots are
//! atomics.
//!
//! Unsafe: the two-argument form's link written into a retired area's first 16 bytes.
#![allow(unsafe_code)]

use crate::space::VmSpace;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use vmarena_engine::sync::fork::{ForkLocks, Held, Rank};

/// Retirements between two polls.
pub const POLL_EVERY: usize = 64;
/// Pending areas at which the one-argument form waits for a grace period.
pub const BACKLOG_MAX: usize = 1 << 16;

struct ReaderSlot {
    /// Epoch at pin time; 0 when not in a read-side section.
    pinned: AtomicU64,
    /// The pinning thread ([`thread_mark`]), so that a child of `fork()` can unpin the slots of
    /// threads it does not have.
    owner: AtomicUsize,
}

/// An identity of the calling thread that a child of `fork()` shares with the thread that
/// forked: the address of a thread-local (no allocation, no destructor).
fn thread_mark() -> usize {
    thread_local! { static MARK: u8 = const { 0 }; }
    MARK.with(|m| m as *const u8 as usize)
}

#[derive(Default)]
struct State {
    /// One-argument retirements: `(address, epoch)`.
    queued: Vec<(usize, u64)>,
    /// Two-argument retirements: head of the list linked through the areas, and its length.
    embedded_head: usize,
    embedded_len: usize,
    since_poll: usize,
}

/// One CPU's retired areas, on a cache line of its own.
#[repr(align(128))]
#[derive(Default)]
struct Shard(Mutex<State>);

/// Frees an area.
pub type FreeFn = Box<dyn Fn(NonNull<u8>) + Send + Sync>;
/// Usable bytes of a live area, `None` for anything else.
pub type SizeFn = Box<dyn Fn(NonNull<u8>) -> Option<usize> + Send + Sync>;
/// Takes an area for the domain when it is retired: false when the domain must refuse it (not
/// a live area, or retired already), with nothing changed.
pub type ClaimFn = Box<dyn Fn(NonNull<u8>) -> bool + Send + Sync>;

/// A grace-period domain. See the module documentation.
pub struct Rcu {
    free: FreeFn,
    size: SizeFn,
    claim: Option<ClaimFn>,
    epoch: AtomicU64,
    readers: Mutex<Vec<Arc<ReaderSlot>>>,
    shards: Box<[Shard]>,
    freed: AtomicU64,
}

/// A registered reader (one per thread that reads).
pub struct Reader {
    slot: Arc<ReaderSlot>,
    rcu: Arc<Rcu>,
}

/// A read-side critical section; dropping it leaves the section.
pub struct ReadGuard<'a> {
    reader: &'a Reader,
}

impl Rcu {
    /// A domain whose retired areas go back to `space`. A retired area is marked in the space
    /// ([`VmSpace`]'s retired state): `vfree`, `vrealloc` and a second retirement refuse it
    /// until its grace period has passed.
    pub fn new(space: Arc<VmSpace>) -> Arc<Rcu> {
        Self::over_space(space)
    }

    /// [`Rcu::new`] for any handle of a space (the C ABI's domain holds a `&'static`).
    pub(crate) fn over_space<S>(space: S) -> Arc<Rcu>
    where
        S: std::ops::Deref<Target = VmSpace> + Clone + Send + Sync + 'static,
    {
        let (s2, s3) = (space.clone(), space.clone());
        Self::build(
            Box::new(move |p| {
                // Retired areas were live, and nothing else frees them while retired.
                let freed = space.unretire(p.as_ptr()).and_then(|()| space.vfree(p.as_ptr()));
                debug_assert!(freed.is_ok(), "retired area {p:?} could not be freed: {freed:?}");
            }),
            Box::new(move |p| s2.size(p.as_ptr())),
            Some(Box::new(move |p| s3.retire(p.as_ptr()).is_ok())),
        )
    }

    /// A domain that frees with `free` and checks areas with `size` (it takes whatever it is
    /// given: a second retirement of an area is the caller's bug, as a double `free` is).
    pub fn with_free(free: FreeFn, size: SizeFn) -> Arc<Rcu> {
        Self::build(free, size, None)
    }

    fn build(free: FreeFn, size: SizeFn, claim: Option<ClaimFn>) -> Arc<Rcu> {
        crate::fork::register();
        let rcu = Arc::new(Rcu {
            free,
            size,
            claim,
            epoch: AtomicU64::new(2),
            readers: Mutex::new(Vec::new()),
            shards: (0..vmarena_platform::cpu::possible().max(1)).map(|_| Shard::default()).collect(),
            freed: AtomicU64::new(0),
        });
        let weak: std::sync::Weak<dyn ForkLocks> = Arc::downgrade(&rcu) as std::sync::Weak<dyn ForkLocks>;
        vmarena_engine::sync::fork::register(Rank::DeferredFree, weak);
        rcu
    }

    /// Register a reader.
    pub fn register_reader(self: &Arc<Self>) -> Reader {
        let slot = Arc::new(ReaderSlot { pinned: AtomicU64::new(0), owner: AtomicUsize::new(0) });
        self.readers.lock().unwrap_or_else(|e| e.into_inner()).push(slot.clone());
        Reader { slot, rcu: self.clone() }
    }

    /// Retire the area at `p` (the kernel's one-argument `kvfree_rcu`): freed after a grace
    /// period. May wait for one when many areas are pending. `p` must be unreachable for
    /// readers that start from now on. False, nothing retired, when the domain refuses `p`: a
    /// domain over a space refuses anything that is not a live `vmalloc` area start, and an
    /// area retired already.
    #[must_use = "false means the area was refused and is not retired"]
    pub fn kvfree_rcu(&self, p: NonNull<u8>) -> bool {
        self.retire(p, true)
    }

    /// [`Rcu::kvfree_rcu`], waiting for a grace period at a large backlog only when `may_wait`
    /// (a caller inside a read-side section of this domain must not wait: it would wait for
    /// itself).
    pub(crate) fn retire(&self, p: NonNull<u8>, may_wait: bool) -> bool {
        if self.claim.as_ref().is_some_and(|c| !c(p)) {
            return false;
        }
        let i = self.my_shard();
        let backlog = {
            let mut st = self.lock(i);
            st.queued.push((p.as_ptr() as usize, self.epoch.load(SeqCst)));
            st.since_poll += 1;
            (st.since_poll >= POLL_EVERY).then(|| st.queued.len() + st.embedded_len)
        };
        if let Some(pending) = backlog {
            self.poll_shard(i);
            if pending >= BACKLOG_MAX && may_wait {
                self.synchronize();
            }
        }
        true
    }

    /// Retire the area at `p` without allocating (the kernel's two-argument `kvfree_rcu` with
    /// the `rcu_head` inside the object): its first 16 bytes are overwritten with the link.
    /// Returns false (and retires nothing) if `p` is not a live area of at least 16 bytes, or
    /// the domain refuses it as [`Rcu::kvfree_rcu`] does.
    #[must_use = "false means the area was refused and is not retired"]
    pub fn kvfree_rcu_embedded(&self, p: NonNull<u8>) -> bool {
        if (self.size)(p).map_or(true, |s| s < 16) || self.claim.as_ref().is_some_and(|c| !c(p)) {
            return false;
        }
        let i = self.my_shard();
        let poll = {
            let mut st = self.lock(i);
            let link = p.as_ptr().cast::<u64>();
            // SAFETY: `p` is a live area of at least 16 bytes, page aligned, that the caller
            // gives up; readers may read it but nobody writes it any more, and its first 16
            // bytes become the retire link (next, epoch) under the shard's lock.
            unsafe {
                link.write(st.embedded_head as u64);
                link.add(1).write(self.epoch.load(SeqCst));
            }
            st.embedded_head = p.as_ptr() as usize;
            st.embedded_len += 1;
            st.since_poll += 1;
            st.since_poll >= POLL_EVERY
        };
        if poll {
            self.poll_shard(i);
        }
        true
    }

    /// The shard of the CPU this thread runs on.
    #[inline]
    fn my_shard(&self) -> usize {
        vmarena_platform::cpu::current() % self.shards.len()
    }

    fn lock(&self, i: usize) -> std::sync::MutexGuard<'_, State> {
        self.shards[i].0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The oldest epoch a pinned reader holds, and whether every pinned reader has seen `now`.
    fn readers_view(&self, now: u64) -> (u64, bool) {
        let readers = self.readers.lock().unwrap_or_else(|e| e.into_inner());
        let mut oldest = u64::MAX;
        let mut all_current = true;
        for r in readers.iter() {
            let e = r.pinned.load(SeqCst);
            if e != 0 {
                oldest = oldest.min(e);
                all_current &= e == now;
            }
        }
        (oldest, all_current)
    }

    /// Advance the epoch if it can, and free every area, of every shard, whose grace period has
    /// passed. Returns the number of areas freed.
    pub fn poll(&self) -> usize {
        let oldest = self.advance();
        (0..self.shards.len()).map(|i| self.reap(i, oldest)).sum()
    }

    /// [`Rcu::poll`] for shard `i` only.
    fn poll_shard(&self, i: usize) -> usize {
        self.reap(i, self.advance())
    }

    /// Advance the epoch if every pinned reader has seen it; returns the oldest pinned epoch
    /// after that (areas retired before it are safe to free).
    fn advance(&self) -> u64 {
        let now = self.epoch.load(SeqCst);
        let (_, all_current) = self.readers_view(now);
        if all_current {
            let _ = self.epoch.compare_exchange(now, now + 1, SeqCst, SeqCst);
        }
        self.readers_view(self.epoch.load(SeqCst)).0
    }

    /// Free the areas of shard `i` retired before epoch `oldest`. Returns how many.
    fn reap(&self, i: usize, oldest: u64) -> usize {
        let mut ready: Vec<usize> = Vec::new();
        {
            let mut st = self.lock(i);
            st.since_poll = 0;
            st.queued.retain(|&(p, tag)| {
                let safe = tag < oldest;
                if safe {
                    ready.push(p);
                }
                !safe
            });
            // Walk the embedded list, keeping the areas still in their grace period.
            let (mut cur, mut keep_head, mut keep_tail, mut kept) =
                (st.embedded_head, 0usize, 0usize, 0usize);
            while cur != 0 {
                let link = cur as *mut u64;
                // SAFETY: every entry of the list is a retired area whose first 16 bytes hold
                // (next, epoch), written under the shard's lock, which is held here.
                let (next, tag) = unsafe { (link.read() as usize, link.add(1).read()) };
                if tag < oldest {
                    ready.push(cur);
                } else {
                    if keep_tail == 0 {
                        keep_head = cur;
                    } else {
                        // SAFETY: `keep_tail` is a kept entry of the list (see above).
                        unsafe { (keep_tail as *mut u64).write(cur as u64) };
                    }
                    keep_tail = cur;
                    kept += 1;
                }
                cur = next;
            }
            if keep_tail != 0 {
                // SAFETY: as above.
                unsafe { (keep_tail as *mut u64).write(0) };
            }
            st.embedded_head = keep_head;
            st.embedded_len = kept;
        }
        for &p in &ready {
            (self.free)(NonNull::new(p as *mut u8).expect("retired areas are not null"));
        }
        self.freed.fetch_add(ready.len() as u64, SeqCst);
        ready.len()
    }

    /// Areas waiting for their grace period.
    pub fn pending(&self) -> usize {
        (0..self.shards.len())
            .map(|i| {
                let st = self.lock(i);
                st.queued.len() + st.embedded_len
            })
            .sum()
    }

    /// Areas freed so far.
    pub fn freed(&self) -> u64 {
        self.freed.load(SeqCst)
    }

    /// Wait until every area retired before this call is freed (`synchronize_rcu` followed by
    /// the frees). Must not be called inside a read-side section of this domain.
    pub fn synchronize(&self) {
        let target = self.epoch.load(SeqCst);
        loop {
            self.poll();
            if (0..self.shards.len()).all(|i| self.shard_all_after(i, target)) {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// True when every area pending in shard `i` was retired after epoch `target`.
    fn shard_all_after(&self, i: usize, target: u64) -> bool {
        let st = self.lock(i);
        if st.queued.iter().any(|q| q.1 <= target) {
            return false;
        }
        let mut cur = st.embedded_head;
        while cur != 0 {
            // SAFETY: list entries are retired areas holding (next, epoch); the lock is held.
            let (next, tag) =
                unsafe { ((cur as *const u64).read() as usize, (cur as *const u64).add(1).read()) };
            if tag <= target {
                return false;
            }
            cur = next;
        }
        true
    }
}

/// `fork()` takes the reader list and every shard (no path nests them), so that the child finds
/// them free.
impl ForkLocks for Rcu {
    /// In the child: the threads that were inside read-side sections are gone, and their pins
    /// would hold every grace period back for ever; only the forking thread's stay.
    fn child_after_fork(&self) {
        let me = thread_mark();
        for r in self.readers.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if r.owner.load(Relaxed) != me {
                r.pinned.store(0, SeqCst);
            }
        }
    }

    fn lock_for_fork(&self) -> Vec<Box<dyn Held + '_>> {
        let mut held: Vec<Box<dyn Held + '_>> = Vec::with_capacity(1 + self.shards.len());
        held.push(Box::new(self.readers.lock().unwrap_or_else(|e| e.into_inner())));
        for i in 0..self.shards.len() {
            held.push(Box::new(self.lock(i)));
        }
        held
    }
}

impl Drop for Rcu {
    fn drop(&mut self) {
        // No reader can exist any more (each holds an Arc): everything pending is safe.
        for shard in self.shards.iter_mut() {
            let st = std::mem::take(shard.0.get_mut().unwrap_or_else(|e| e.into_inner()));
            for (p, _) in st.queued {
                (self.free)(NonNull::new(p as *mut u8).expect("retired areas are not null"));
            }
            let mut cur = st.embedded_head;
            while cur != 0 {
                // SAFETY: as in `poll`; the domain is being dropped, nobody else holds the list.
                let next = unsafe { (cur as *const u64).read() } as usize;
                (self.free)(NonNull::new(cur as *mut u8).expect("retired areas are not null"));
                cur = next;
            }
        }
    }
}

impl Reader {
    /// Enter a read-side section: areas retired from now on stay allocated until it ends.
    pub fn read_lock(&self) -> ReadGuard<'_> {
        self.slot.owner.store(thread_mark(), Relaxed);
        self.slot.pinned.store(self.rcu.epoch.load(SeqCst), SeqCst);
        ReadGuard { reader: self }
    }
}

impl Reader {
    /// Enter a read-side section without a guard; [`Reader::leave`] ends it (for the C ABI,
    /// which counts nesting itself).
    pub(crate) fn enter(&self) {
        self.slot.owner.store(thread_mark(), Relaxed);
        self.slot.pinned.store(self.rcu.epoch.load(SeqCst), SeqCst);
    }

    /// End the section [`Reader::enter`] began.
    pub(crate) fn leave(&self) {
        self.slot.pinned.store(0, SeqCst);
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        self.reader.slot.pinned.store(0, SeqCst);
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let mut readers = self.rcu.readers.lock().unwrap_or_else(|e| e.into_inner());
        readers.retain(|r| !Arc::ptr_eq(r, &self.slot));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArenaOptions, SpaceOptions};

    fn space() -> Arc<VmSpace> {
        let so = SpaceOptions { space_bytes: 1 << 28, ..Default::default() };
        let ao = ArenaOptions { purge_thread: false, decay_interval_ms: 0, ..Default::default() };
        Arc::new(VmSpace::new("rcu", so, ao).unwrap())
    }

    #[test]
    fn a_pinned_reader_delays_the_free_until_it_leaves() {
        for embedded in [false, true] {
            let s = space();
            let rcu = Rcu::new(s.clone());
            let reader = rcu.register_reader();
            let p = s.vmalloc(4096).unwrap();
            let guard = reader.read_lock();
            if embedded {
                assert!(rcu.kvfree_rcu_embedded(p));
            } else {
                assert!(rcu.kvfree_rcu(p));
            }
            for _ in 0..5 {
                rcu.poll();
            }
            assert_eq!(rcu.pending(), 1, "still inside the reader's section");
            assert!(s.size(p.as_ptr()).is_some(), "not freed under a reader");
            drop(guard);
            rcu.poll();
            assert_eq!(rcu.pending(), 0);
            assert_eq!(s.size(p.as_ptr()), None, "freed after the grace period");
            // A reader that pins once the epoch has moved past a retirement does not hold it back.
            let q = s.vmalloc(4096).unwrap();
            assert!(rcu.kvfree_rcu(q));
            let before = rcu.epoch.load(SeqCst);
            while rcu.epoch.load(SeqCst) == before {
                rcu.poll();
            }
            let _late = reader.read_lock();
            rcu.poll();
            assert_eq!(s.size(q.as_ptr()), None, "freed although a later reader is pinned");
        }
    }

    /// Small (state word) and large (record kind) areas alike: once retired, `vfree`,
    /// `vrealloc` and a second retirement of either form are refused and change nothing; the
    /// area stays readable; after the grace period it is freed once.
    #[test]
    fn a_retired_area_is_refused_by_every_free_until_its_grace_period() {
        let s = space();
        let rcu = Rcu::new(s.clone());
        for bytes in [4096, 3 << 20] {
            let p = s.vmalloc(bytes).unwrap();
            // SAFETY: the area's first byte.
            unsafe { p.as_ptr().write(7) };
            let reader = rcu.register_reader();
            let guard = reader.read_lock();
            assert!(rcu.kvfree_rcu(p));
            assert!(!rcu.kvfree_rcu(p), "{bytes}: second retirement refused");
            assert!(!rcu.kvfree_rcu_embedded(p), "{bytes}: second retirement refused (embedded)");
            assert!(s.vfree(p.as_ptr()).is_err(), "{bytes}: vfree of a retired area refused");
            assert!(s.vrealloc(Some(p), bytes * 2).is_err(), "{bytes}: vrealloc refused");
            assert!(s.vrealloc(Some(p), 1).is_err(), "{bytes}: vrealloc in place refused");
            assert!(!s.is_vmalloc_area(p.as_ptr()));
            assert_eq!(s.size(p.as_ptr()), Some(bytes), "{bytes}: readable while retired");
            // SAFETY: still mapped and not reused: the reader may read it.
            assert_eq!(unsafe { p.as_ptr().read() }, 7);
            rcu.poll();
            assert_eq!(rcu.pending(), 1);
            drop(guard);
            rcu.synchronize();
            assert_eq!(rcu.pending(), 0);
            assert_eq!(s.size(p.as_ptr()), None, "{bytes}: freed after the grace period");
            assert!(s.vfree(p.as_ptr()).is_err(), "{bytes}: and freed once");
            s.check().unwrap();
        }
        assert_eq!(s.stats(false).arena.live_areas, 0);
    }

    #[test]
    fn bad_embedded_retire_is_refused() {
        let s = space();
        let rcu = Rcu::new(s.clone());
        let p = s.vmalloc(4096).unwrap();
        let interior = NonNull::new(unsafe { p.as_ptr().add(4096 - 8) }).unwrap();
        assert!(!rcu.kvfree_rcu_embedded(interior));
        assert_eq!(rcu.pending(), 0);
        s.vfree(p.as_ptr()).unwrap();
    }

    #[test]
    fn each_cpu_polls_only_its_own_retirements() {
        if vmarena_platform::cpu::count() < 2 {
            eprintln!("skipped: one CPU");
            return;
        }
        let s = space();
        let rcu = Rcu::new(s.clone());
        let retire_on = |cpu: usize, n: usize| {
            let (rcu, s) = (rcu.clone(), s.clone());
            std::thread::spawn(move || {
                assert!(vmarena_platform::cpu::pin_current_thread(cpu));
                for i in 0..n {
                    let p = s.vmalloc(4096).unwrap();
                    if i % 2 == 0 {
                        assert!(rcu.kvfree_rcu(p));
                    } else {
                        assert!(rcu.kvfree_rcu_embedded(p));
                    }
                }
            })
            .join()
            .unwrap();
        };
        retire_on(0, POLL_EVERY - 1);
        retire_on(1, 1);
        assert_eq!((rcu.freed(), rcu.pending()), (0, POLL_EVERY), "no shard has reached its poll");
        retire_on(0, 1);
        assert_eq!(rcu.freed(), POLL_EVERY as u64, "CPU 0's poll freed CPU 0's areas (no reader)");
        assert_eq!(rcu.pending(), 1, "CPU 1's area waits for CPU 1's poll");
        rcu.poll();
        assert_eq!((rcu.freed(), rcu.pending()), (POLL_EVERY as u64 + 1, 0));
    }

    #[test]
    fn many_retirements_from_threads_all_come_back() {
        let s = space();
        let rcu = Rcu::new(s.clone());
        std::thread::scope(|sc| {
            for t in 0..4 {
                let (rcu, s) = (rcu.clone(), s.clone());
                sc.spawn(move || {
                    let reader = rcu.register_reader();
                    for i in 0..2000 {
                        let p = s.vmalloc(4096).unwrap();
                        let _g = (i % 7 == 0).then(|| reader.read_lock());
                        if (i + t) % 2 == 0 {
                            assert!(rcu.kvfree_rcu(p));
                        } else {
                            assert!(rcu.kvfree_rcu_embedded(p));
                        }
                    }
                });
            }
        });
        rcu.synchronize();
        assert_eq!(rcu.pending(), 0);
        assert_eq!(rcu.freed(), 8000);
        // `scope` returns when the threads' closures have, before their thread-exit hooks
        // have given their cached areas back: a snapshot in between can count those as live.
        // They must be back in a moment.
        let mut live = s.stats(false).arena.live_areas;
        for _ in 0..200 {
            if live == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            live = s.stats(false).arena.live_areas;
        }
        assert_eq!(live, 0);
    }
}
