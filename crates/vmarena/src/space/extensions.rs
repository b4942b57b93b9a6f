//! Further reservations of a space that grows (the default space): when its own reservation
//! has no room for a `vmalloc`-family request, the request goes to a further reservation, a
//! space of its own built with the same options (vmem's spans, here whole spaces), and a new
//! one is reserved when none has room, until the address space or `RLIMIT_AS` refuses.
//!
//! ```text
//!  the space's own reservation   [ state table | areas ..................... ]  (fast paths)
//!  extension 1                   [ state table | areas ..................... ]  vmalloc+1
//!  extension 2                   [ ...                                       ]  vmalloc+2
//! ```
//!
//! The fast paths (thread caches, state words, the shim's one-compare routing) see only the
//! space's own reservation, unchanged; a pointer outside it is looked up here (a load of the
//! count, then one range compare per extension), and an extension serves it with its own fast
//! paths. Once the own reservation has refused a request for lack of room, requests try the
//! extensions before its slow path, until a free in the own reservation frees room again.
//!
//! Owns: up to [`MAX_EXTENSIONS`] spaces, each leaked when built (they live as long as the
//! process, as the default space does). `slots[..count]` are set; a slot is written before
//! `count` is raised past it (release), and never again.
//!
//! Locks: `growing`, a word that holds the process id of the one thread building the next
//! extension (no other lock is held while it does). A fork while a thread of the parent held
//! it leaves the child's word naming the parent: the child takes it over. Waiters yield.
//! Nothing here is taken on a fast path or at load.

use crate::error::VmError;
use crate::options::SpaceOptions;
use std::panic::Location;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use vmarena_engine::ArenaOptions;

/// Further reservations a space may make: with the first, 128 of the default 1 TiB, x86-64's
/// whole user address space (the mmap that the address space refuses ends the growth sooner).
pub const MAX_EXTENSIONS: usize = 127;

/// Called with `[lo, hi)` of each extension before it serves its first request (the shim
/// lowers its pass-through bound with it). Set once, before the first growth.
static GROWTH_HOOK: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// Have `hook` called with the bounds of every further reservation of a growing space before
/// it hands out its first area (the shim's routing).
pub fn set_growth_hook(hook: fn(usize, usize)) {
    GROWTH_HOOK.store(hook as *mut (), Ordering::SeqCst);
}

fn call_growth_hook(lo: usize, hi: usize) {
    let h = GROWTH_HOOK.load(Ordering::SeqCst);
    if !h.is_null() {
        // SAFETY: the only value stored is a `fn(usize, usize)` (`set_growth_hook`).
        let f: fn(usize, usize) = unsafe { std::mem::transmute::<*mut (), fn(usize, usize)>(h) };
        f(lo, hi);
    }
}

/// What a growing space needs of each further reservation (`VmSpace` implements it in
/// `mod.rs`).
pub(crate) trait Part: Sized {
    /// A reservation of `opts.space_bytes` named `name`.
    fn build(name: &str, opts: SpaceOptions, arena_opts: ArenaOptions) -> Result<Self, String>;
    /// True when `addr` lies in its reservation.
    fn holds(&self, addr: usize) -> bool;
    /// `[start, end)` of its reservation.
    fn bounds(&self) -> (usize, usize);
    /// A `vmalloc`-family area from it alone.
    fn alloc_vmalloc(
        &self,
        bytes: usize,
        align_bytes: usize,
        zeroed: bool,
        nonblocking: bool,
        caller: &'static Location<'static>,
    ) -> Result<NonNull<u8>, VmError>;
}

/// How a growing space makes its further reservations, and those it has made.
pub(crate) struct Extensions<S> {
    name: String,
    opts: SpaceOptions,
    arena_opts: ArenaOptions,
    /// Fits a reservation size to the process (the default space: a share of what
    /// `RLIMIT_AS` leaves), applied at each growth.
    fit: fn(u64) -> u64,
    /// The smallest reservation tried when larger ones are refused.
    min_bytes: u64,
    slots: [AtomicPtr<S>; MAX_EXTENSIONS],
    count: AtomicUsize,
    growing: AtomicU64,
    /// The space's own reservation refused a request for lack of room since its last free
    /// there: requests try the extensions first.
    own_full: AtomicBool,
}

impl<S: Part> Extensions<S> {
    pub(crate) fn new(
        name: &str,
        opts: SpaceOptions,
        arena_opts: ArenaOptions,
        fit: fn(u64) -> u64,
        min_bytes: u64,
    ) -> Extensions<S> {
        Extensions {
            name: name.to_string(),
            opts,
            arena_opts,
            fit,
            min_bytes,
            slots: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            count: AtomicUsize::new(0),
            growing: AtomicU64::new(0),
            own_full: AtomicBool::new(false),
        }
    }

    /// The extensions built so far, oldest first.
    pub(crate) fn all(&self) -> impl Iterator<Item = &S> {
        let n = self.count.load(Ordering::Acquire);
        // SAFETY: slots below `count` hold leaked spaces, written before `count` was raised
        // past them (release, paired with the acquire above) and never freed.
        self.slots[..n].iter().map(|s| unsafe { &*s.load(Ordering::Relaxed) })
    }

    /// The extension whose reservation holds `addr`.
    pub(crate) fn holding(&self, addr: usize) -> Option<&S> {
        self.all().find(|x| x.holds(addr))
    }

    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    pub(crate) fn own_full(&self) -> bool {
        self.own_full.load(Ordering::Relaxed)
    }

    pub(crate) fn set_own_full(&self, full: bool) {
        if self.own_full.load(Ordering::Relaxed) != full {
            self.own_full.store(full, Ordering::Relaxed);
        }
    }

    /// Serve a `vmalloc`-family request from the extensions, newest first, reserving a new one
    /// when none has room and `may_grow`; `None` when none can (with `may_grow`: the address
    /// space or its limit refused a new one).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn alloc(
        &self,
        may_grow: bool,
        own_bytes: u64,
        bytes: usize,
        align_bytes: usize,
        zeroed: bool,
        nonblocking: bool,
        caller: &'static Location<'static>,
    ) -> Option<Result<NonNull<u8>, VmError>> {
        let (mut tried, mut grew) = (0, false);
        loop {
            let n = self.count.load(Ordering::Acquire);
            for i in (tried..n).rev() {
                // SAFETY: as in `all`: below `count`, a leaked space, never freed.
                let x = unsafe { &*self.slots[i].load(Ordering::Relaxed) };
                match x.alloc_vmalloc(bytes, align_bytes, zeroed, nonblocking, caller) {
                    Err(VmError::NoSpace(_)) => {}
                    r => return Some(r),
                }
            }
            tried = n;
            // One growth a call: a request the new reservation refused (an alignment no start
            // of it meets) would refuse the next one too.
            let need = Self::need_bytes(bytes, align_bytes);
            if grew || !may_grow || nonblocking || n == MAX_EXTENSIONS || need > own_bytes {
                return None;
            }
            // One thread grows; the others wait for it and try what it built. The word is
            // released when `held` goes, also if building panicked.
            let Some(held) = self.lock_growth() else { continue };
            if self.count.load(Ordering::Acquire) != n {
                continue;
            }
            grew = self.grow(n, own_bytes, need);
            drop(held);
            if !grew {
                return None;
            }
        }
    }

    /// What a reservation needs for a request of `bytes` aligned to `align_bytes`: its pages, a
    /// guard page, the alignment and a page table's worth of slack (2 MiB), saturating (a
    /// request near `usize::MAX` needs more than any reservation).
    fn need_bytes(bytes: usize, align_bytes: usize) -> u64 {
        let page = vmarena_platform::page_size() as u64;
        (bytes as u64)
            .div_ceil(page)
            .saturating_add(2)
            .saturating_mul(page)
            .saturating_add(align_bytes as u64)
            .saturating_add(2 << 20)
    }

    /// Reserve extension `n`: the own reservation's size fitted to the process, halved while
    /// refused down to `need` bytes. False when nothing could be reserved.
    fn grow(&self, n: usize, own_bytes: u64, need: u64) -> bool {
        let mut size = (self.fit)(own_bytes).max(self.min_bytes);
        if size < need {
            return false;
        }
        loop {
            let opts = SpaceOptions { space_bytes: size, ..self.opts.clone() };
            let name = format!("{}+{}", self.name, n + 1);
            if let Ok(x) = S::build(&name, opts, self.arena_opts.clone()) {
                let (lo, hi) = x.bounds();
                call_growth_hook(lo, hi);
                self.slots[n].store(Box::into_raw(Box::new(x)), Ordering::Relaxed);
                self.count.store(n + 1, Ordering::Release);
                return true;
            }
            if size / 2 < need.max(self.min_bytes) {
                return false;
            }
            size /= 2;
        }
    }

    /// Take the growth word: `Some` while this thread holds it, `None` after waiting for
    /// another thread of this process to release it (the caller looks again).
    fn lock_growth(&self) -> Option<Growing<'_>> {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() } as u64;
        let mut spins = 0u32;
        loop {
            let cur = self.growing.load(Ordering::Acquire);
            if cur != me {
                // Free, or held by the process this one was forked from: take it.
                if self.growing.compare_exchange(cur, me, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    return Some(Growing(&self.growing));
                }
                continue;
            }
            // Held by a thread of this process: wait until it is released, then look again.
            while self.growing.load(Ordering::Acquire) == me {
                spins += 1;
                if spins < 100 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
            }
            return None;
        }
    }
}

/// The growth word, held: released when dropped.
struct Growing<'a>(&'a AtomicU64);

impl Drop for Growing<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::VmSpace;

    /// A space of 64 MiB that grows by 64 MiB reservations.
    fn small_growing() -> VmSpace {
        let opts = SpaceOptions { space_bytes: 64 << 20, ..SpaceOptions::default() };
        VmSpace::new("grows", opts, ArenaOptions::default()).unwrap().growing(|b| b, 64 << 20)
    }

    /// Four threads keep up to 24 areas of 64 KiB to 4 MiB live each (far more than one
    /// reservation holds), stamp every page with their own pattern, and check every stamp
    /// before each free: an overlap between reservations, a pointer routed to the wrong one or
    /// a lost area would show.
    #[test]
    fn threads_fill_several_reservations_without_overlap() {
        let space = small_growing();
        let page = vmarena_platform::page_size();
        let stamp = |p: usize, len: usize, v: u64| {
            for off in (0..len).step_by(page) {
                // SAFETY: `[p, p + len)` is a live area this thread owns.
                unsafe { ((p + off) as *mut u64).write(v) };
            }
        };
        let check = |p: usize, len: usize, v: u64| {
            // SAFETY: as for `stamp`.
            (0..len).step_by(page).all(|off| unsafe { ((p + off) as *const u64).read() } == v)
        };
        std::thread::scope(|s| {
            // Joined one by one: a join waits for the thread's exit, where its magazines are
            // drained (the scope's own end may return before that).
            let workers: Vec<_> = (0..4u64)
                .map(|t| {
                    let space = &space;
                    s.spawn(move || {
                        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                        let mut live: Vec<(usize, usize, u64)> = Vec::new();
                        for i in 0..600u64 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            if live.len() >= 24 || (!live.is_empty() && x % 3 == 0) {
                                let (p, len, v) = live.swap_remove((x % live.len() as u64) as usize);
                                assert!(check(p, len, v), "thread {t}: area {p:#x} was overwritten");
                                assert_eq!(space.size(p as *const u8), Some(len.next_multiple_of(page)));
                                // (No second free here: another thread may own the address now.)
                                space.vfree(p as *mut u8).unwrap();
                                continue;
                            }
                            let len = (64 << 10) + (x >> 8) as usize % (4 << 20);
                            let p = space.vmalloc(len).expect("a growing space has room").as_ptr() as usize;
                            let v = t << 32 | i;
                            stamp(p, len, v);
                            live.push((p, len, v));
                        }
                        for (p, len, v) in live {
                            assert!(check(p, len, v), "thread {t}: area {p:#x} was overwritten");
                            space.vfree(p as *mut u8).unwrap();
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
        });
        let st = space.stats(false);
        assert!(st.extensions >= 1, "96 areas of up to 4 MiB grew the space: {st:?}");
        assert_eq!((st.arena.live_areas, st.extension_live_areas), (0, 0));
        space.check().unwrap();
    }

    /// A fork while a thread of the parent was building a reservation leaves the child's growth
    /// word naming the parent: the child's next growth takes it over instead of waiting for a
    /// thread it does not have.
    #[test]
    fn a_growth_word_left_by_the_parent_is_taken_over() {
        let space = small_growing();
        let first: Vec<_> = (0..3).map(|_| space.vmalloc(20 << 20).unwrap().as_ptr() as usize).collect();
        let ext = space.extensions.as_deref().unwrap();
        assert_eq!(ext.len(), 0, "three areas of 20 MiB fit in the first 64 MiB");
        // SAFETY: getppid has no preconditions; any process id other than ours stands for it.
        ext.growing.store(unsafe { libc::getppid() } as u64, Ordering::Release);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| tx.send(space.vmalloc(20 << 20).map(|p| p.as_ptr() as usize)).unwrap());
            let got = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("the growth did not wait");
            let p = got.expect("grown");
            assert!(!space.reservation.contains(p) && space.contains(p as *const u8));
            space.vfree(p as *mut u8).unwrap();
        });
        assert_eq!(ext.growing.load(Ordering::Acquire), 0, "released after the growth");
        for p in first {
            space.vfree(p as *mut u8).unwrap();
        }
    }

    /// A request near `usize::MAX` is refused without growing (it needs more than any
    /// reservation), and the next one that needs a growth gets it: the fuzz program once
    /// left the growth word held by a panic in the size arithmetic, and every later growth
    /// waited for ever.
    #[test]
    fn a_huge_request_is_refused_and_growth_goes_on() {
        let space = small_growing();
        let first: Vec<_> = (0..3).map(|_| space.vmalloc(20 << 20).unwrap().as_ptr()).collect();
        for bytes in [usize::MAX - 7196, usize::MAX / 2, 1 << 40] {
            assert!(space.vmalloc(bytes).is_err(), "{bytes} refused");
        }
        // An alignment larger than any reservation: refused, nothing reserved for it.
        assert!(space.vmalloc_aligned(4096, 1 << 40).is_err());
        assert_eq!(space.stats(false).extensions, 0, "no reservation for requests none can hold");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| tx.send(space.vmalloc(20 << 20).map(|p| p.as_ptr() as usize)).unwrap());
            let p = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("the growth did not wait");
            space.vfree(p.expect("grown") as *mut u8).unwrap();
        });
        assert_eq!(space.extensions.as_deref().unwrap().growing.load(Ordering::Acquire), 0);
        for p in first {
            space.vfree(p).unwrap();
        }
    }

    /// A pointer in a further reservation is answered there; one in none of them is refused
    /// and changes nothing.
    #[test]
    fn pointers_are_routed_to_their_reservation() {
        let space = small_growing();
        let a: Vec<_> = (0..5).map(|_| space.vmalloc(20 << 20).unwrap().as_ptr()).collect();
        let grown = a.iter().find(|&&p| !space.reservation.contains(p as usize)).copied().unwrap();
        assert!(space.contains(grown) && space.is_vmalloc_area(grown));
        assert_eq!(space.size(grown), Some(20 << 20));
        let q = space.vrealloc(NonNull::new(grown), 30 << 20).unwrap();
        assert_eq!(space.size(q.as_ptr()), Some(30 << 20));
        assert!(space.vfree(grown.wrapping_add(4096)).is_err());
        assert!(space.vfree(grown).is_err(), "moved by vrealloc: its old start is freed");
        let foreign = Box::into_raw(Box::new([0u8; 4096])) as *mut u8;
        assert!(!space.contains(foreign) && space.vfree(foreign).is_err());
        // SAFETY: made by Box::into_raw above.
        drop(unsafe { Box::from_raw(foreign as *mut [u8; 4096]) });
        for p in a.into_iter().filter(|&p| p != grown).chain([q.as_ptr()]) {
            space.vfree(p).unwrap();
        }
        assert!(space.stats(false).extensions >= 1);
        space.check().unwrap();
    }
}
