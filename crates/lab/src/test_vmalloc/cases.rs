//! The 13 cases of the kernel's `lib/test_vmalloc.c`, in its order (bit `i` of
//! `run_test_mask` selects case `i`), each doing what the kernel case does, against a
//! [`Contender`]. A case returns 0 (passed), -1 (failed; counted as xfailed for the cases the
//! kernel marks `xfail`) or [`UNSUPPORTED`] (the contender has no such operation).

use super::contender::Contender;
use std::ptr::NonNull;

/// 4 KiB, the page the kernel cases count in.
pub const PAGE: usize = 4096;
/// x86_64 `THREAD_ALIGN` (= `THREAD_SIZE`, 16 KiB); `fix_align_alloc_test` asks for twice it.
pub const THREAD_ALIGN: usize = 16 << 10;
/// Live one-page areas `long_busy_list_alloc_test` keeps.
pub const LONG_BUSY_LIST: usize = 15_000;

/// What a case runs with.
pub struct CaseEnv<'a> {
    pub c: &'a dyn Contender,
    /// `nr_pcpu_objects`: the objects `pcpu_alloc_test` holds at once.
    pub nr_pcpu_objects: usize,
    /// `test_loop_count`.
    pub loops: u64,
    /// `max(nr_pages, 1)`.
    pub nr_pages: usize,
    /// `use_huge`: fix_size allocates with `vmalloc_huge`, as the kernel's does.
    pub use_huge: bool,
    /// Online CPUs, for `full_fit_alloc_test`'s junk length (the kernel's lazy_max_pages).
    pub cpus: usize,
    pub rng: Rng,
}

/// One case of the table.
pub struct Case {
    pub name: &'static str,
    pub run: Option<fn(&mut CaseEnv) -> i32>,
    /// The kernel marks the case as expected to fail.
    pub xfail: bool,
    /// Why the case does not run yet (its machinery belongs to another part of vmarena).
    pub skip: Option<&'static str>,
}

/// The cases, in the kernel's order.
pub const CASES: [Case; 13] = [
    Case { name: "fix_size_alloc_test", run: Some(fix_size_alloc_test), xfail: false, skip: None },
    Case { name: "full_fit_alloc_test", run: Some(full_fit_alloc_test), xfail: false, skip: None },
    Case {
        name: "long_busy_list_alloc_test",
        run: Some(long_busy_list_alloc_test),
        xfail: false,
        skip: None,
    },
    Case { name: "random_size_alloc_test", run: Some(random_size_alloc_test), xfail: false, skip: None },
    Case { name: "fix_align_alloc_test", run: Some(fix_align_alloc_test), xfail: false, skip: None },
    Case {
        name: "random_size_align_alloc_test",
        run: Some(random_size_align_alloc_test),
        xfail: false,
        skip: None,
    },
    Case { name: "align_shift_alloc_test", run: Some(align_shift_alloc_test), xfail: true, skip: None },
    Case { name: "pcpu_alloc_test", run: Some(pcpu_alloc_test), xfail: false, skip: None },
    Case {
        name: "kvfree_rcu_1_arg_vmalloc_test",
        run: Some(kvfree_rcu_1_arg_vmalloc_test),
        xfail: false,
        skip: None,
    },
    Case {
        name: "kvfree_rcu_2_arg_vmalloc_test",
        run: Some(kvfree_rcu_2_arg_vmalloc_test),
        xfail: false,
        skip: None,
    },
    Case { name: "vm_map_ram_test", run: Some(vm_map_ram_test), xfail: false, skip: None },
    Case { name: "no_block_alloc_test", run: Some(no_block_alloc_test), xfail: true, skip: None },
    Case { name: "vrealloc_test", run: Some(vrealloc_test), xfail: false, skip: None },
];

/// xorshift64*: the cases' `get_random_*`, seeded per worker so runs replay.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn touch(p: NonNull<u8>, v: u8) {
    // SAFETY: every area the cases touch has at least one usable byte.
    unsafe { p.as_ptr().write_volatile(v) };
}

/// Every page of the area is written: the kernel's vmalloc maps every page when it allocates
/// (its case writes one byte), and here pages are mapped by the writes, so writing each one is
/// what costs the same; with `use_huge` they are mapped as huge pages where the advice took.
/// With the default `nr_pages=1` that is the one byte the kernel writes.
fn fix_size_alloc_test(e: &mut CaseEnv) -> i32 {
    for _ in 0..e.loops {
        let bytes = e.nr_pages * PAGE;
        let p = if e.use_huge { e.c.alloc_huge(bytes) } else { e.c.alloc(bytes, 1, false) };
        let Some(p) = p else { return -1 };
        for off in (0..bytes).step_by(PAGE) {
            // SAFETY: `p` holds `bytes` bytes.
            touch(unsafe { NonNull::new_unchecked(p.as_ptr().add(off)) }, 1);
        }
        e.c.free(p);
    }
    0
}

/// Leaves lazy_max_pages one-page holes (two pages with the guard) in the space, then loops on
/// one-page allocations meant to land in them (full fits).
fn full_fit_alloc_test(e: &mut CaseEnv) -> i32 {
    let junk_length = vmarena_core_fls(e.cpus) * ((32 << 20) / PAGE);
    let Some(ptr) = e.c.alloc(junk_length * 8, 1, false) else { return -1 };
    let Some(ptr_1) = e.c.alloc(junk_length * 8, 1, false) else {
        e.c.free(ptr);
        return -1;
    };
    // SAFETY: both arrays hold junk_length pointers; they are only used by this case.
    let (keep, junk) = unsafe {
        (
            std::slice::from_raw_parts_mut(ptr.as_ptr().cast::<Option<NonNull<u8>>>(), junk_length),
            std::slice::from_raw_parts_mut(ptr_1.as_ptr().cast::<Option<NonNull<u8>>>(), junk_length),
        )
    };
    let mut rv = 0;
    for i in 0..junk_length {
        junk[i] = e.c.alloc(PAGE, 1, false);
        keep[i] = e.c.alloc(PAGE, 1, false);
        if junk[i].is_none() || keep[i].is_none() {
            rv = -1;
        }
    }
    for j in junk.iter_mut() {
        if let Some(p) = j.take() {
            e.c.free(p);
        }
    }
    if rv == 0 {
        for _ in 0..e.loops {
            let Some(p) = e.c.alloc(PAGE, 1, false) else {
                rv = -1;
                break;
            };
            touch(p, 1);
            e.c.free(p);
        }
    }
    for k in keep.iter_mut() {
        if let Some(p) = k.take() {
            e.c.free(p);
        }
    }
    e.c.free(ptr);
    e.c.free(ptr_1);
    rv
}

fn vmarena_core_fls(x: usize) -> usize {
    (usize::BITS - x.leading_zeros()) as usize
}

/// Keeps 15,000 one-page areas live while it loops on a 100-page and a 1-page allocation.
fn long_busy_list_alloc_test(e: &mut CaseEnv) -> i32 {
    let Some(ptr) = e.c.alloc(LONG_BUSY_LIST * 8, 1, false) else { return -1 };
    // SAFETY: the array holds LONG_BUSY_LIST pointers; only this case uses it.
    let list =
        unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr().cast::<Option<NonNull<u8>>>(), LONG_BUSY_LIST) };
    let mut rv = 0;
    for slot in list.iter_mut() {
        *slot = e.c.alloc(PAGE, 1, false);
        if slot.is_none() {
            rv = -1;
        }
    }
    if rv == 0 {
        for _ in 0..e.loops {
            let p1 = e.c.alloc(100 * PAGE, 1, false);
            let p2 = e.c.alloc(PAGE, 1, false);
            match (p1, p2) {
                (Some(a), Some(b)) => {
                    touch(a, b'a');
                    touch(b, b'a');
                    e.c.free(a);
                    e.c.free(b);
                }
                (a, b) => {
                    a.into_iter().chain(b).for_each(|p| e.c.free(p));
                    rv = -1;
                    break;
                }
            }
        }
    }
    for slot in list.iter_mut() {
        if let Some(p) = slot.take() {
            e.c.free(p);
        }
    }
    e.c.free(ptr);
    rv
}

fn random_size_alloc_test(e: &mut CaseEnv) -> i32 {
    for _ in 0..e.loops {
        let n = 1 + e.rng.below(100) as usize;
        let Some(p) = e.c.alloc(n * PAGE, 1, false) else { return -1 };
        touch(p, 1);
        e.c.free(p);
    }
    0
}

fn fix_align_alloc_test(e: &mut CaseEnv) -> i32 {
    for _ in 0..e.loops {
        let Some(p) = e.c.alloc(5 * PAGE, THREAD_ALIGN << 1, true) else { return -1 };
        e.c.free(p);
    }
    0
}

fn random_size_align_alloc_test(e: &mut CaseEnv) -> i32 {
    for _ in 0..e.loops {
        let r = e.rng.next() as u8;
        // Maximum alignment 1 << 22 = 4 MiB.
        let align = 1usize << (r % 23);
        let size = ((r % 10) as usize + 1) * PAGE;
        let Some(p) = e.c.alloc(size, align, true) else { return -1 };
        e.c.free(p);
    }
    0
}

/// Expected to fail: alignments up to 2^63 cannot all be met. Ignores `test_loop_count`.
fn align_shift_alloc_test(e: &mut CaseEnv) -> i32 {
    for i in 0..usize::BITS {
        let Some(p) = e.c.alloc(PAGE, 1usize << i, true) else { return -1 };
        e.c.free(p);
    }
    0
}

/// A one-page object with an `rcu_head` and a 20-byte array, freed with the one-argument
/// `kvfree_rcu` (which may wait for a grace period).
fn kvfree_rcu_1_arg_vmalloc_test(e: &mut CaseEnv) -> i32 {
    for _ in 0..e.loops {
        let Some(p) = e.c.alloc(PAGE, 1, false) else { return -1 };
        // The array follows the 16-byte rcu_head.
        // SAFETY: the page is ours until the kvfree_rcu below.
        unsafe { p.as_ptr().add(16).write_volatile(b'a') };
        e.c.kvfree_rcu(p, false);
    }
    0
}

/// The same object freed with the two-argument form (the head inside the object).
fn kvfree_rcu_2_arg_vmalloc_test(e: &mut CaseEnv) -> i32 {
    for _ in 0..e.loops {
        let Some(p) = e.c.alloc(PAGE, 1, false) else { return -1 };
        // SAFETY: as above.
        unsafe { p.as_ptr().add(16).write_volatile(b'a') };
        e.c.kvfree_rcu(p, true);
    }
    0
}

/// Expected to fail at times: allocations that may not wait (GFP_ATOMIC or GFP_NOWAIT, chosen
/// at random; both are the non-blocking path here).
fn no_block_alloc_test(e: &mut CaseEnv) -> i32 {
    let mut rv = 0;
    for _ in 0..e.loops {
        let _atomic = e.rng.below(2) == 0;
        match e.c.alloc_nonblocking(e.nr_pages * PAGE) {
            Some(p) => {
                touch(p, 1);
                e.c.free(p);
            }
            None => rv = -1,
        }
    }
    rv
}

/// Returned by a case the contender cannot run (vm_map_ram_test on a malloc peer).
pub const UNSUPPORTED: i32 = 1;

/// The kernel's case: `nr_pcpu_objects` per-CPU objects of 1 to PAGE_SIZE / 4 bytes, each
/// aligned to 2^1 to 2^11 (2^(PAGE_SHIFT - 1)), every failure recorded, then all freed; it
/// ignores `test_loop_count`, as the kernel's does. An object that comes back misaligned
/// counts as a failure too.
fn pcpu_alloc_test(e: &mut CaseEnv) -> i32 {
    let Some(pool) = e.c.percpu() else { return UNSUPPORTED };
    let mut rv = 0;
    let mut objs: Vec<NonNull<u8>> = Vec::with_capacity(e.nr_pcpu_objects);
    for _ in 0..e.nr_pcpu_objects {
        let size = 1 + e.rng.below((PAGE / 4) as u64) as usize;
        let align = 1usize << (1 + e.rng.below(11));
        match pool.alloc(size, align) {
            Some(p) => {
                if (p.as_ptr() as usize) % align != 0 {
                    rv = -1;
                }
                objs.push(p);
            }
            None => rv = -1,
        }
    }
    for p in objs {
        pool.free(p);
    }
    rv
}

/// The kernel's case: bulk-allocate `nr_pages` pages once (the case fails if the allocation is
/// short), then map them, write them and unmap them `loops` times.
fn vm_map_ram_test(e: &mut CaseEnv) -> i32 {
    let n = e.nr_pages;
    let mut session = match e.c.map_ram_session(n) {
        None => return UNSUPPORTED,
        Some(Err(_)) => return -1,
        Some(Ok(s)) => s,
    };
    for i in 0..e.loops {
        let Some(p) = session.map() else { return -1 };
        // SAFETY: `n` pages are mapped at `p` until the unmap below.
        unsafe { std::ptr::write_bytes(p.as_ptr(), i as u8, n * PAGE) };
        session.unmap(p);
    }
    0
}

/// The 2026 case: grow and shrink through vrealloc, checking the first byte at each step.
fn vrealloc_test(e: &mut CaseEnv) -> i32 {
    let check = |p: NonNull<u8>| -> bool {
        // SAFETY: the area has at least one byte.
        unsafe { p.as_ptr().read_volatile() == b'a' }
    };
    for _ in 0..e.loops {
        let Some(p) = e.c.realloc(None, PAGE) else { return -1 };
        touch(p, b'a');
        let steps = [4 * PAGE, PAGE, PAGE / 2, PAGE];
        let mut cur = p;
        for bytes in steps {
            match e.c.realloc(Some(cur), bytes) {
                Some(q) if check(q) => cur = q,
                Some(q) => {
                    e.c.free(q);
                    return -1;
                }
                None => {
                    e.c.free(cur);
                    return -1;
                }
            }
        }
        e.c.free(cur);
    }
    0
}
